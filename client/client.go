// Package client is Airlock's public Go SDK: a typed, context-aware wrapper over the HTTP
// API listed in api/ROUTES.md, reached over the daemon's unix socket or over TCP with a
// bearer token. It owns the transport (dialing, auth, the PTY upgrade), request encoding
// and the decoding of answers and errors into api types and *Error. It keeps no sandbox
// state of its own — every call goes to the daemon — and must not import the daemon's
// packages (server, manager, store, runtime, image); it shares only api, errdefs, the
// edge's status table (internal/httpstatus) and the frame protocol of internal/agent.
package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// DefaultSocket is where the daemon listens when neither Options.Socket nor
// $AIRLOCK_SOCKET says otherwise.
const DefaultSocket = api.DefaultSocket

// socketHost is the URL host of every request sent over the unix socket.
const socketHost = api.SocketHost

// Options says how to reach the daemon.
type Options struct {
	// Socket is the daemon's unix socket: default $AIRLOCK_SOCKET, then DefaultSocket.
	// It is ignored when Addr is set.
	Socket string
	// Addr is the "host:port" of a daemon listening on TCP: plain HTTP, or HTTPS written
	// "https://host:port" (a daemon with tls_cert).
	Addr string
	// CAFile is a PEM file of the certificates to trust for an HTTPS Addr, instead of the
	// system's: default $AIRLOCK_CA_FILE.
	CAFile string
	// Token is sent as "Authorization: Bearer <token>"; a TCP listener requires one.
	Token string
	// HTTPClient, if set, carries every request except the PTY upgrade, which dials
	// Socket or Addr itself; its transport must reach the daemon.
	HTTPClient *http.Client
}

// Client calls one daemon. It is safe for concurrent use.
type Client struct {
	base    string // URL prefix: "http://airlock" or "http://host:port"
	token   string
	hc      *http.Client
	network string // "unix" or "tcp", for raw dials
	address string
	tls     *tls.Config // for an HTTPS address
}

// tlsConfig trusts the certificates in caFile (default $AIRLOCK_CA_FILE), or the
// system's when there is none.
func tlsConfig(caFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile == "" {
		caFile = os.Getenv("AIRLOCK_CA_FILE")
	}
	if caFile == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("%w: CA file: %w", errdefs.ErrInvalidArgument, err)
	}
	cfg.RootCAs = x509.NewCertPool()
	if !cfg.RootCAs.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%w: CA file %s holds no PEM certificate", errdefs.ErrInvalidArgument, caFile)
	}
	return cfg, nil
}

// Local says whether the client reaches the daemon over its unix socket, as a process
// of the same machine, which the daemon then knows by its uid (what a host workspace
// needs).
func (c *Client) Local() bool { return c.network == "unix" }

// New returns a client for the daemon opts describe. It does not connect.
//
// Inside an Airlock sandbox (where $AIRLOCK_API and $AIRLOCK_SESSION_TOKEN_FILE are
// set), a client given neither a socket nor an address reaches the API through the
// sandbox's egress proxy with the sandbox's session credential.
func New(opts Options) (*Client, error) {
	if opts.Socket == "" && opts.Addr == "" && os.Getenv("AIRLOCK_SOCKET") == "" {
		if u, err := url.Parse(os.Getenv("AIRLOCK_API")); err == nil && u.Scheme == "http" && u.Host != "" {
			opts.Addr = u.Host
			if u.Port() == "" {
				opts.Addr = net.JoinHostPort(u.Host, "80")
			}
			if opts.Token == "" {
				if b, err := os.ReadFile(os.Getenv("AIRLOCK_SESSION_TOKEN_FILE")); err == nil {
					opts.Token = strings.TrimSpace(string(b))
				}
			}
		}
	}
	c := &Client{token: opts.Token, hc: opts.HTTPClient}
	if opts.Addr != "" {
		scheme := "http"
		addr := strings.TrimPrefix(opts.Addr, "http://")
		if a, ok := strings.CutPrefix(opts.Addr, "https://"); ok {
			scheme, addr = "https", a
		}
		if _, _, err := net.SplitHostPort(addr); err != nil || strings.Contains(addr, "/") {
			return nil, fmt.Errorf("%w: addr %q is not host:port (or http://host:port, https://host:port)", errdefs.ErrInvalidArgument, opts.Addr)
		}
		c.network, c.address, c.base = "tcp", addr, scheme+"://"+addr
		if scheme == "https" {
			cfg, err := tlsConfig(opts.CAFile)
			if err != nil {
				return nil, err
			}
			c.tls = cfg
		}
	} else {
		sock := opts.Socket
		if sock == "" {
			sock = os.Getenv("AIRLOCK_SOCKET")
		}
		if sock == "" {
			sock = DefaultSocket
		}
		c.network, c.address, c.base = "unix", sock, "http://"+socketHost
	}
	if c.hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil // the daemon is local or named explicitly; never go through a proxy
		tr.TLSClientConfig = c.tls
		if c.network == "unix" {
			sock := c.address
			tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", sock)
			}
		}
		c.hc = &http.Client{Transport: tr}
	}
	return c, nil
}

// Target names the daemon this client reaches: a socket path or host:port.
func (c *Client) Target() string { return c.address }

// CallOption adjusts one mutating call.
type CallOption func(*callOptions)

type callOptions struct {
	idempotencyKey string
	ifMatch        *int64
	pullProgress   func(api.PullEvent)
}

// WithIdempotencyKey makes the call safe to retry: the daemon answers a repeated key with
// the first call's operation, and a key reused with another body with idempotency_conflict.
func WithIdempotencyKey(key string) CallOption {
	return func(o *callOptions) { o.idempotencyKey = key }
}

// WithIfMatch makes the call apply only while the sandbox is at this version; otherwise it
// fails with version_conflict.
func WithIfMatch(version int64) CallOption {
	return func(o *callOptions) { o.ifMatch = &version }
}

// WithPullProgress hands fn each step of the image's pull, should a create pull its
// image from the registry first (from the caller's goroutine, one at a time).
func WithPullProgress(fn func(api.PullEvent)) CallOption {
	return func(o *callOptions) { o.pullProgress = fn }
}

// request is one HTTP call.
type request struct {
	method string
	path   string // escaped, starting with /v1/
	query  url.Values
	in     any       // encoded as the JSON body, if set
	body   io.Reader // raw body, if in is nil
	size   int64     // length of body, or -1 (unknown); ignored for in
	header http.Header
	opts   []CallOption
}

// sandboxPath is /v1/sandboxes/{ref} followed by the escaped elements of rest.
func sandboxPath(ref string, rest ...string) string {
	p := "/v1/sandboxes/" + url.PathEscape(ref)
	for _, r := range rest {
		p += "/" + url.PathEscape(r)
	}
	return p
}

// send performs r and returns the response of a 2xx answer; any other answer is an
// *Error, and a transport failure wraps errdefs.ErrUnavailable (the result is unknown).
func (c *Client) send(ctx context.Context, r request) (*http.Response, error) {
	u := c.base + r.path
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	body, size := r.body, r.size
	if r.in != nil {
		b, err := json.Marshal(r.in)
		if err != nil {
			return nil, fmt.Errorf("encode request: %w", err)
		}
		body, size = bytes.NewReader(b), int64(len(b))
	}
	req, err := http.NewRequestWithContext(ctx, r.method, u, body)
	if err != nil {
		return nil, err
	}
	if body != nil && size >= 0 {
		req.ContentLength = size
		if size == 0 {
			req.Body = http.NoBody
		}
	}
	if r.in != nil {
		req.Header.Set("Content-Type", "application/json")
	} else if body != nil {
		req.Header.Set("Content-Type", "application/octet-stream")
	}
	for k, vs := range r.header {
		req.Header[k] = vs
	}
	c.authorize(req.Header)
	var o callOptions
	for _, opt := range r.opts {
		opt(&o)
	}
	if o.idempotencyKey != "" {
		req.Header.Set("Idempotency-Key", o.idempotencyKey)
	}
	if o.ifMatch != nil {
		req.Header.Set("If-Match", strconv.Quote(strconv.FormatInt(*o.ifMatch, 10)))
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportError(ctx, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		defer resp.Body.Close()
		return nil, decodeError(resp)
	}
	return resp, nil
}

func (c *Client) authorize(h http.Header) {
	if c.token != "" {
		h.Set("Authorization", "Bearer "+c.token)
	}
}

// transportError turns a failed round trip into the context's error when the caller gave
// up, or into an unavailable error that names the daemon.
func (c *Client) transportError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	var cv *tls.CertificateVerificationError
	if errors.As(err, &cv) {
		// Not worth a retry: the daemon is there, and its certificate is not trusted.
		return fmt.Errorf("%w: airlock at %s: its certificate is not trusted (give its CA in $AIRLOCK_CA_FILE or Options.CAFile): %w",
			errdefs.ErrFailedPrecondition, c.address, err)
	}
	return fmt.Errorf("%w: airlock at %s: %w", errdefs.ErrUnavailable, c.address, err)
}

// do performs r and decodes a JSON answer into out (when out is not nil).
func (c *Client) do(ctx context.Context, r request, out any) error {
	resp, err := c.send(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		return nil
	}
	return decodeAnswer(ctx, resp.Body, r, out)
}

// decodeAnswer decodes the JSON answer to r from body into out.
func decodeAnswer(ctx context.Context, body io.Reader, r request, out any) error {
	if err := json.NewDecoder(body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("decode %s %s answer: %w", r.method, r.path, err)
	}
	return nil
}

// Status reports the daemon's version and health checks.
func (c *Client) Status(ctx context.Context) (*api.Status, error) {
	var st api.Status
	if err := c.do(ctx, request{method: http.MethodGet, path: "/v1/status"}, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Operation returns the durable record of a mutating call, to learn how a call whose
// answer was lost ended.
func (c *Client) Operation(ctx context.Context, id string) (*api.Operation, error) {
	var op api.Operation
	r := request{method: http.MethodGet, path: "/v1/operations/" + url.PathEscape(id)}
	if err := c.do(ctx, r, &op); err != nil {
		return nil, err
	}
	return &op, nil
}
