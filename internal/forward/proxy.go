package forward

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Peer is a node of the cluster as the membership list shows it.
type Peer struct {
	Name    string
	Address string // the HOST:PORT it advertises ("": it serves no other node)
	State   string // ready, draining, lost, stopped
}

// Options configure a Forwarder.
type Options struct {
	TLS ClusterTLS
	// Peers lists the cluster's nodes (the membership list).
	Peers func(context.Context) ([]Peer, error)
	// TTL is how long a read of Peers is used (default DefaultTTL); a node not in it is
	// looked up again at once.
	TTL time.Duration
	Log *slog.Logger
}

// DefaultTTL is how long the peers' list is kept.
const DefaultTTL = 2 * time.Second

// Forwarder proxies calls to the cluster's other nodes.
type Forwarder struct {
	opts Options
	log  *slog.Logger

	mu         sync.Mutex
	peers      map[string]Peer
	read       time.Time
	transports map[string]*http.Transport
}

// New returns a forwarder.
func New(opts Options) *Forwarder {
	if opts.TTL <= 0 {
		opts.TTL = DefaultTTL
	}
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	return &Forwarder{opts: opts, log: opts.Log.With("component", "forward"), transports: map[string]*http.Transport{}}
}

// Peer returns the node name as the membership list has it (read again when the kept
// list is older than the TTL, lacks it, or keeps it as one that cannot answer: a node
// that is back answers at once, not a TTL later).
func (f *Forwarder) Peer(ctx context.Context, name string) (Peer, error) {
	f.mu.Lock()
	p, ok := f.peers[name]
	fresh := time.Since(f.read) < f.opts.TTL
	f.mu.Unlock()
	if ok && fresh && Reachable(p) == nil {
		return p, nil
	}
	list, err := f.opts.Peers(ctx)
	if err != nil {
		return Peer{}, err
	}
	m := make(map[string]Peer, len(list))
	for _, p := range list {
		m[p.Name] = p
	}
	f.mu.Lock()
	f.peers, f.read = m, time.Now()
	f.mu.Unlock()
	if p, ok = m[name]; !ok {
		return Peer{}, errdefs.Unavailable("node %q is not a member of the cluster", name).
			WithDetails(map[string]any{"node": name, "reason": "node_unknown"})
	}
	return p, nil
}

// Reachable refuses a peer that cannot answer: one lost or stopped, or one that
// advertises no address.
func Reachable(p Peer) error {
	details := map[string]any{"node": p.Name, "state": p.State, "reason": "node_" + p.State}
	switch {
	case p.State == "lost" || p.State == "stopped":
		return errdefs.Unavailable("the sandbox is on node %q, which is %s: it answers for its sandboxes again once it is back", p.Name, p.State).
			WithDetails(details)
	case p.Address == "":
		details["reason"] = "node_no_address"
		return errdefs.Unavailable("the sandbox is on node %q, which serves no other node (its node.listen is not set)", p.Name).
			WithDetails(details)
	}
	return nil
}

// transport is the connection pool to node, with node's client configuration.
func (f *Forwarder) transport(node string) *http.Transport {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t, ok := f.transports[node]; ok {
		return t
	}
	d := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{DialContext: d.DialContext, TLSClientConfig: f.opts.TLS.ClientConfig(node),
		TLSHandshakeTimeout: 5 * time.Second, MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}
	f.transports[node] = t
	return t
}

// Close drops the idle connections to every peer.
func (f *Forwarder) Close() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, t := range f.transports {
		t.CloseIdleConnections()
	}
}

// Call is one call to forward.
type Call struct {
	Node   string
	Caller Caller
	// Decline, if set, sees the node's answer before any of it is written: an error it
	// returns is Proxy's, and nothing is written (a placement's next candidate may take
	// the call).
	Decline func(*http.Response) error
	// Plane is the plane the call is for on the node (PlaneHeader; "": Airlock's API).
	Plane string
	// KeepAuthorization sends the Authorization header on, for a plane whose header is
	// no credential (E2B's envd plane: the user a call acts as). Otherwise it is
	// dropped: the caller goes as the forwarding header says.
	KeepAuthorization bool
}

// Proxy sends r to c.Node, as c.Caller, and writes the node's answer to w as it
// comes. The body is streamed, never read first; an upgrade (a PTY) passes through. An
// error means nothing was written: the node is lost, stopped or unreachable (a clear
// unavailable error naming it and its state), or Decline refused the answer.
func (f *Forwarder) Proxy(w http.ResponseWriter, r *http.Request, c Call) error {
	p, err := f.Peer(r.Context(), c.Node)
	if err != nil {
		return err
	}
	if err := Reachable(p); err != nil {
		return err
	}
	var failed error
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			// The Host the caller addressed goes on (an E2B port's server sees it); the
			// connection is to the node's address, its certificate checked by name.
			pr.Out.URL.Scheme, pr.Out.URL.Host = "https", p.Address
			if !c.KeepAuthorization {
				pr.Out.Header.Del("Authorization") // the caller goes as the header says, never its credential
			}
			pr.Out.Header.Set(Header, c.Caller.Encode())
			pr.Out.Header.Del(PlaneHeader)
			if c.Plane != "" {
				pr.Out.Header.Set(PlaneHeader, c.Plane)
			}
		},
		Transport:     f.transport(p.Name),
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(f.log.Handler(), slog.LevelWarn),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			failed = err
		},
	}
	if c.Decline != nil {
		rp.ModifyResponse = c.Decline
	}
	rp.ServeHTTP(w, r)
	if failed == nil {
		return nil
	}
	var d *Declined
	if errors.As(failed, &d) {
		return d
	}
	if r.Context().Err() != nil {
		return r.Context().Err()
	}
	f.mu.Lock()
	f.read = time.Time{} // the node's state now, not the kept one's, says why
	f.mu.Unlock()
	if now, err := f.Peer(r.Context(), p.Name); err == nil {
		if err := Reachable(now); err != nil {
			return err
		}
		p.State = now.State
	}
	f.log.Warn("forward failed", "node", p.Name, "address", p.Address, "method", r.Method, "path", r.URL.Path, "err", failed)
	return errdefs.Unavailable("the sandbox is on node %q (%s), which cannot be reached now", p.Name, p.State).
		WithDetails(map[string]any{"node": p.Name, "state": p.State, "reason": "node_unreachable"})
}

// Declined is a node's refusal of a call that Call.Decline turned down: its answer, kept
// whole (it is short) so that it can still be given to the caller.
type Declined struct {
	Node   string
	Status int
	Header http.Header
	Body   []byte
}

func (d *Declined) Error() string {
	return fmt.Sprintf("node %q declined the call (status %d)", d.Node, d.Status)
}

// Write gives the refusal to the caller as the node gave it.
func (d *Declined) Write(w http.ResponseWriter) {
	for k, v := range d.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(d.Status)
	w.Write(d.Body)
}

// maxRefusal bounds the part of a refusal's body Decline reads.
const maxRefusal = 64 << 10

// DeclineForCapacity is a Call.Decline for a placed create: node's refusal that is its
// own and not the caller's (the node is unavailable, or its refusal names it in
// details.node or RefusingNodeHeader: draining, full) is turned down, so that another node may take the
// create; every other answer passes.
func DeclineForCapacity(node string) func(*http.Response) error {
	return func(resp *http.Response) error {
		if resp.StatusCode < 400 {
			return nil
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, maxRefusal))
		if err != nil {
			return err
		}
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(b), resp.Body), resp.Body}
		var e struct {
			Error struct {
				Code    string         `json:"code"`
				Details map[string]any `json:"details"`
			} `json:"error"`
		}
		json.Unmarshal(b, &e)
		if resp.StatusCode == http.StatusServiceUnavailable || e.Error.Details["node"] == node || resp.Header.Get(RefusingNodeHeader) == node {
			resp.Body.Close()
			h := resp.Header.Clone()
			h.Del(RefusingNodeHeader)
			return &Declined{Node: node, Status: resp.StatusCode, Header: h, Body: b}
		}
		return nil
	}
}
