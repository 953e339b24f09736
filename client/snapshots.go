package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockhq/airlock/api"
)

// Snapshot takes a snapshot of a running (frozen for a crash-consistent copy) or
// suspended sandbox.
func (c *Client) Snapshot(ctx context.Context, ref string, labels map[string]string, opts ...CallOption) (*api.OperationResponse, error) {
	return c.SnapshotWith(ctx, ref, api.SnapshotRequest{Labels: labels}, opts...)
}

// SnapshotWith snapshots a sandbox as req says; with req.Memory, a running runsc
// sandbox's memory and processes too, so a fork of the snapshot runs on from that
// point (refused, with the reason, where they cannot be kept).
func (c *Client) SnapshotWith(ctx context.Context, ref string, req api.SnapshotRequest, opts ...CallOption) (*api.OperationResponse, error) {
	var out api.OperationResponse
	r := request{method: http.MethodPost, path: sandboxPath(ref, "snapshots"), in: req, opts: opts}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Snapshots lists snapshots, of one sandbox when ref is not empty.
func (c *Client) Snapshots(ctx context.Context, ref string) ([]api.Snapshot, error) {
	var out api.SnapshotList
	q := url.Values{}
	if ref != "" {
		q.Set("sandbox", ref)
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/snapshots", query: q}, &out); err != nil {
		return nil, err
	}
	return out.Snapshots, nil
}

// GetSnapshot returns one snapshot's manifest summary with its chunk checksums.
func (c *Client) GetSnapshot(ctx context.Context, id string) (*api.Snapshot, error) {
	var out api.Snapshot
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/snapshots/" + url.PathEscape(id)}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteSnapshot removes a snapshot (refused while a sandbox depends on it).
func (c *Client) DeleteSnapshot(ctx context.Context, id string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/snapshots/" + url.PathEscape(id)}, nil)
}

// Restore replaces a suspended sandbox's writable layer with a snapshot's.
func (c *Client) Restore(ctx context.Context, ref string, req api.RestoreRequest, opts ...CallOption) (*api.OperationResponse, error) {
	var out api.OperationResponse
	r := request{method: http.MethodPost, path: sandboxPath(ref, "restore"), in: req, opts: opts}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Fork makes a new sandbox from src: a sandbox name or id, or a snapshot id ("snap_…").
func (c *Client) Fork(ctx context.Context, src string, req api.ForkRequest, opts ...CallOption) (*api.OperationResponse, error) {
	path := sandboxPath(src, "fork")
	if len(src) > 5 && src[:5] == "snap_" {
		path = "/v1/snapshots/" + url.PathEscape(src) + "/fork"
	}
	var out api.OperationResponse
	if err := c.do(ctx, request{method: http.MethodPost, path: path, in: req, opts: opts}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
