package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockhq/airlock/api"
)

// Network returns a sandbox's egress policy.
func (c *Client) Network(ctx context.Context, ref string) (*api.NetworkPolicy, error) {
	var out api.NetworkPolicy
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "network")}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// SetNetwork changes a sandbox's egress policy; new connections follow it at once.
func (c *Client) SetNetwork(ctx context.Context, ref string, pol api.NetworkPolicy, opts ...CallOption) (*api.OperationResponse, error) {
	var out api.OperationResponse
	if err := c.do(ctx, request{method: http.MethodPut, path: sandboxPath(ref, "network"), in: pol, opts: opts}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EgressLog returns a sandbox's egress decisions after seq.
func (c *Client) EgressLog(ctx context.Context, ref string, after int64) ([]api.EgressRecord, error) {
	out, err := c.EgressLogPage(ctx, ref, after)
	if err != nil {
		return nil, err
	}
	return out.Records, nil
}

// EgressLogPage is EgressLog with the count of records that were not stored.
func (c *Client) EgressLogPage(ctx context.Context, ref string, after int64) (*api.EgressLog, error) {
	var out api.EgressLog
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "egress"), query: q}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ExposePort makes a sandbox port reachable through the daemon (token-protected unless public).
func (c *Client) ExposePort(ctx context.Context, ref string, port int, public bool) (*api.Port, error) {
	var out api.Port
	r := request{method: http.MethodPost, path: sandboxPath(ref, "ports"), in: api.PortRequest{Port: port, Public: public}}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Ports lists a sandbox's exposed ports.
func (c *Client) Ports(ctx context.Context, ref string) ([]api.Port, error) {
	var out api.PortList
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "ports")}, &out); err != nil {
		return nil, err
	}
	return out.Ports, nil
}

// ClosePort stops exposing a port and cuts its open connections.
func (c *Client) ClosePort(ctx context.Context, ref string, port int) error {
	return c.do(ctx, request{method: http.MethodDelete, path: sandboxPath(ref, "ports", strconv.Itoa(port))}, nil)
}

// HTTPClient returns the client's HTTP client, whose transport reaches the daemon (over
// its unix socket too): use it to call an exposed port's URL.
func (c *Client) HTTPClient() *http.Client { return c.hc }
