package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockhq/airlock/api"
)

func volumePath(name string, verb ...string) string {
	p := "/v1/volumes/" + url.PathEscape(name)
	for _, v := range verb {
		p += "/" + v
	}
	return p
}

// volumeCall sends in to a volume route and decodes the answer into a new T.
func volumeCall[T any](ctx context.Context, c *Client, method, path string, in any) (*T, error) {
	out := new(T)
	if err := c.do(ctx, request{method: method, path: path, in: in}, out); err != nil {
		return nil, err
	}
	return out, nil
}

// CreateVolume makes a volume of req.Size bytes, empty or (req.From) a copy of a
// volume snapshot.
func (c *Client) CreateVolume(ctx context.Context, req api.CreateVolumeRequest) (*api.Volume, error) {
	return volumeCall[api.Volume](ctx, c, http.MethodPost, "/v1/volumes", req)
}

// Volumes lists the caller's volumes, or its volume snapshots (kind "snapshot").
func (c *Client) Volumes(ctx context.Context, kind string) ([]api.Volume, error) {
	var out api.VolumeList
	q := url.Values{}
	if kind != "" {
		q.Set("kind", kind)
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/volumes", query: q}, &out); err != nil {
		return nil, err
	}
	return out.Volumes, nil
}

// GetVolume returns one volume with its attachments.
func (c *Client) GetVolume(ctx context.Context, name string) (*api.Volume, error) {
	return volumeCall[api.Volume](ctx, c, http.MethodGet, volumePath(name), nil)
}

// DeleteVolume removes a volume (refused while attached) or a volume snapshot (by id).
func (c *Client) DeleteVolume(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: volumePath(name)}, nil)
}

// ResizeVolume grows a volume to size bytes; a smaller size is refused.
func (c *Client) ResizeVolume(ctx context.Context, name string, size int64) (*api.Volume, error) {
	return volumeCall[api.Volume](ctx, c, http.MethodPost, volumePath(name, "resize"), api.ResizeVolumeRequest{Size: size})
}

// SnapshotVolume copies a volume to a new checksummed volume snapshot.
func (c *Client) SnapshotVolume(ctx context.Context, name string) (*api.Volume, error) {
	return volumeCall[api.Volume](ctx, c, http.MethodPost, volumePath(name, "snapshot"), nil)
}

// AttachVolume attaches a volume to a suspended sandbox at path.
func (c *Client) AttachVolume(ctx context.Context, name string, req api.AttachVolumeRequest) (*api.Sandbox, error) {
	return volumeCall[api.Sandbox](ctx, c, http.MethodPost, volumePath(name, "attach"), req)
}

// DetachVolume detaches a volume from a suspended sandbox.
func (c *Client) DetachVolume(ctx context.Context, name, sandbox string) (*api.Sandbox, error) {
	return volumeCall[api.Sandbox](ctx, c, http.MethodPost, volumePath(name, "detach"), api.AttachVolumeRequest{Sandbox: sandbox})
}
