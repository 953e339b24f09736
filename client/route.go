package client

import (
	"context"
	"net/http"

	"github.com/airlockhq/airlock/api"
)

// Route asks the daemon where a shell command or code snippet would run under an
// isolation profile (req.Profile, or the daemon's router.profile), and why. Nothing
// runs. The decision's Place is empty when no profile applies.
func (c *Client) Route(ctx context.Context, req api.RouteRequest) (*api.RouteDecision, error) {
	var out api.RouteDecision
	if err := c.do(ctx, request{method: http.MethodPost, path: "/v1/route", in: req}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
