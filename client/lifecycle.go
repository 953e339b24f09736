package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockhq/airlock/api"
)

// Suspend stops a sandbox's compute, keeping its handle and writable layer. Idempotent.
func (c *Client) Suspend(ctx context.Context, ref string, opts ...CallOption) (*api.OperationResponse, error) {
	var out api.OperationResponse
	r := request{method: http.MethodPost, path: sandboxPath(ref, "suspend"), opts: opts}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Resume starts a suspended sandbox in a fresh container (generation + 1).
func (c *Client) Resume(ctx context.Context, ref string, opts ...CallOption) (*api.OperationResponse, error) {
	var out api.OperationResponse
	r := request{method: http.MethodPost, path: sandboxPath(ref, "resume"), opts: opts}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Events lists events after seq, of one sandbox when ref is not empty.
func (c *Client) Events(ctx context.Context, ref string, after int64) ([]api.Event, error) {
	var out api.EventList
	r := request{method: http.MethodGet, path: "/v1/events", query: eventsQuery(ref, after, false)}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return out.Events, nil
}

// FollowEvents streams events after seq to fn until ctx ends or fn returns an error.
func (c *Client) FollowEvents(ctx context.Context, ref string, after int64, fn func(api.Event) error) error {
	return followLines(ctx, c, request{method: http.MethodGet, path: "/v1/events", query: eventsQuery(ref, after, true)}, fn)
}

func eventsQuery(ref string, after int64, follow bool) url.Values {
	q := url.Values{}
	if ref != "" {
		q.Set("sandbox", ref)
	}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if follow {
		q.Set("follow", "true")
	}
	return q
}

// GC removes (or with dryRun lists) host resources with Airlock's name and no live record.
func (c *Client) GC(ctx context.Context, dryRun bool) (*api.GCResult, error) {
	var out api.GCResult
	q := url.Values{}
	if dryRun {
		q.Set("dry_run", "true")
	}
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/gc", query: q}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
