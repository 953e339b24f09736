package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockhq/airlock/api"
)

// Pools lists the node's warm pools (admin).
func (c *Client) Pools(ctx context.Context) ([]api.Pool, error) {
	var out api.PoolList
	return out.Pools, c.do(ctx, request{method: http.MethodGet, path: "/v1/pools"}, &out)
}

// SetPool creates or changes a warm pool (admin).
func (c *Client) SetPool(ctx context.Context, name string, req api.PoolRequest) (*api.Pool, error) {
	var out api.Pool
	return &out, c.do(ctx, request{method: http.MethodPut, path: "/v1/pools/" + url.PathEscape(name), in: req}, &out)
}

// DeletePool removes a warm pool and terminates its members (admin).
func (c *Client) DeletePool(ctx context.Context, name string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: "/v1/pools/" + url.PathEscape(name)}, nil)
}
