package client

import (
	"context"
	"net/http"
	"net/url"

	"github.com/airlockhq/airlock/api"
)

// Nodes lists the nodes of the cluster, with their state, capacity and reservations
// (admin).
func (c *Client) Nodes(ctx context.Context) ([]api.Node, error) {
	var out api.NodeList
	return out.Nodes, c.do(ctx, request{method: http.MethodGet, path: "/v1/nodes"}, &out)
}

// DrainNode stops the placement of new sandboxes on node name; its sandboxes go on
// (admin).
func (c *Client) DrainNode(ctx context.Context, name string) (*api.Node, error) {
	return c.nodeState(ctx, name, "drain")
}

// ReadyNode lets node name take new sandboxes again after a drain (admin).
func (c *Client) ReadyNode(ctx context.Context, name string) (*api.Node, error) {
	return c.nodeState(ctx, name, "ready")
}

func (c *Client) nodeState(ctx context.Context, name, verb string) (*api.Node, error) {
	var out api.Node
	return &out, c.do(ctx, request{method: http.MethodPost, path: "/v1/nodes/" + url.PathEscape(name) + "/" + verb}, &out)
}
