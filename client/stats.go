package client

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/airlockhq/airlock/api"
)

// Stats returns a sandbox's resource use as the node last sampled it; with history, its
// recent samples too, oldest first. A sandbox that is not running answers zeros.
func (c *Client) Stats(ctx context.Context, ref string, history bool) (*api.SandboxStats, error) {
	var out api.SandboxStats
	r := request{method: http.MethodGet, path: sandboxPath(ref, "stats"), query: statsQuery(history, false)}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// FollowStats calls fn with a sandbox's usage once per sampling interval until ctx
// ends, fn returns an error, or the sandbox is terminated.
func (c *Client) FollowStats(ctx context.Context, ref string, history bool, fn func(api.SandboxStats) error) error {
	r := request{method: http.MethodGet, path: sandboxPath(ref, "stats"), query: statsQuery(history, true)}
	return followLines(ctx, c, r, fn)
}

// AllStats returns the usage of every sandbox the caller sees that is not terminated
// (allOwners: every owner's, for an administrator).
func (c *Client) AllStats(ctx context.Context, allOwners bool) ([]api.SandboxStats, error) {
	var out api.StatsList
	q := url.Values{}
	if allOwners {
		q.Set("all_owners", "true")
	}
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/stats", query: q}, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

func statsQuery(history, follow bool) url.Values {
	q := url.Values{}
	if history {
		q.Set("history", "1")
	}
	if follow {
		q.Set("follow", "1")
	}
	return q
}

// followLines reads an NDJSON answer to r, calling fn with each line, until ctx ends,
// fn returns an error or the stream ends.
func followLines[T any](ctx context.Context, c *Client, r request, fn func(T) error) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return sc.Err()
}
