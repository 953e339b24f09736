package client

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
)

// Create makes a sandbox and answers once it is running (or has failed). The daemon
// pulls the image from its registry first as req.Pull says (by default when it is not
// here); WithPullProgress shows that pull's steps. Pass WithIdempotencyKey to make a
// retry after a lost answer safe.
func (c *Client) Create(ctx context.Context, req api.CreateSandboxRequest, opts ...CallOption) (*api.OperationResponse, error) {
	var o callOptions
	for _, opt := range opts {
		opt(&o)
	}
	r := request{method: http.MethodPost, path: "/v1/sandboxes", in: req, opts: opts}
	if o.pullProgress != nil {
		r.header = http.Header{"Accept": {"application/x-ndjson, application/json"}}
	}
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson") {
		// Nothing was pulled: the usual answer.
		var out api.OperationResponse
		if err := decodeAnswer(ctx, resp.Body, r, &out); err != nil {
			return nil, err
		}
		return &out, nil
	}
	return readResult(ctx, resp.Body, "create", func(ev api.CreateEvent) (*api.OperationResponse, *api.Error) { return ev.Result, ev.Error },
		func(ev api.CreateEvent) {
			if ev.Pull != nil && o.pullProgress != nil {
				o.pullProgress(*ev.Pull)
			}
		})
}

// Get returns a sandbox by name or id, from any process: this is how code reconnects
// to a sandbox it made earlier.
func (c *Client) Get(ctx context.Context, ref string) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(ref)}, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListOptions filters List. A sandbox matches when its state is one of States (any, if
// empty) and it carries every label in Labels.
type ListOptions struct {
	States []string
	Labels map[string]string
	// AllOwners lists every owner's sandboxes, not only the caller's; it needs the
	// admin permission. Another owner's sandbox is reached by its id.
	AllOwners bool
	// PageSize is how many sandboxes List asks for per request: 1 to 5000, 0 means
	// 1000.
	PageSize int
}

// List returns the sandboxes that match opts, reading page after page until the last.
// A sandbox that exists from the first page to the last is listed exactly once; one
// created or terminated meanwhile may or may not be.
func (c *Client) List(ctx context.Context, opts ListOptions) ([]api.Sandbox, error) {
	var pages [][]api.Sandbox // joined once at the end: no regrowth of a long list per page
	after := ""
	for {
		page, next, err := c.ListPage(ctx, opts, after)
		if err != nil {
			return nil, err
		}
		pages = append(pages, page)
		if next == "" {
			break
		}
		after = next
	}
	if all := slices.Concat(pages...); all != nil {
		return all, nil
	}
	return pages[0], nil // none: as decoded, [] rather than nil
}

// ListPage returns one page of the sandboxes that match opts, from after on (the
// start, if ""), and the after of the next page ("" after the last).
func (c *Client) ListPage(ctx context.Context, opts ListOptions, after string) ([]api.Sandbox, string, error) {
	q := url.Values{}
	for _, s := range opts.States {
		q.Add("state", s)
	}
	keys := make([]string, 0, len(opts.Labels))
	for k := range opts.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("label", k+"="+opts.Labels[k])
	}
	if opts.AllOwners {
		q.Set("all_owners", "true")
	}
	size := opts.PageSize
	if size == 0 {
		size = 1000
	}
	q.Set("limit", strconv.Itoa(size))
	if after != "" {
		q.Set("after", after)
	}
	r := request{method: http.MethodGet, path: "/v1/sandboxes", query: q}
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	// A page can hold thousands of records: read it whole and decode it with the
	// list's own codec (api.DecodeSandboxList), not encoding/json's reflection, into
	// room for a full page (no regrowth of the slice as it fills).
	var body bytes.Buffer
	if resp.ContentLength > 0 {
		// MinRead more: ReadFrom wants that much room to see the end, and would
		// otherwise grow the buffer once more when it is full
		body.Grow(int(min(resp.ContentLength, 64<<20)) + bytes.MinRead)
	}
	if _, err := body.ReadFrom(resp.Body); err != nil {
		return nil, "", c.transportError(ctx, err)
	}
	out := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, min(size, body.Len()/minSandboxJSON+1))}
	if err := api.DecodeSandboxList(body.Bytes(), &out); err != nil {
		return nil, "", fmt.Errorf("decode %s %s answer: %w", r.method, r.path, err)
	}
	return out.Sandboxes, out.Next, nil
}

// minSandboxJSON is at most the length of the shortest record a list can hold (every
// field empty; TestMinSandboxJSON checks it): a page of n bytes holds at most
// n/minSandboxJSON records. A constant, so that no process pays at start for encoding an
// empty record to learn it.
const minSandboxJSON = 269

// Terminate ends a sandbox and deletes what it owns; the handle remains as a tombstone.
// WithIfMatch guards against terminating a sandbox that changed since it was read.
func (c *Client) Terminate(ctx context.Context, ref string, opts ...CallOption) (*api.OperationResponse, error) {
	var out api.OperationResponse
	r := request{method: http.MethodDelete, path: sandboxPath(ref), opts: opts}
	if err := c.do(ctx, r, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
