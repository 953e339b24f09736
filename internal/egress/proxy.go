package egress

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/httpedge"
	"github.com/airlockhq/airlock/internal/httpstatus"
)

// APIHost is the fixed name under which a sandbox reaches the Airlock API through the proxy,
// in every network mode but none (deny_all included).
const APIHost = "airlock.internal"

// SandboxInfo is what the proxy knows of the sandbox behind a source address.
type SandboxInfo struct {
	ID         string
	Generation int64
	Policy     Policy
	// SessionPlaceholder is what the sandbox's /run/airlock/session/token holds; in a request
	// to APIHost the proxy replaces it (in the Authorization header) with SessionToken's token.
	SessionPlaceholder string
	// Secrets are the sandbox's secrets delivered through the proxy.
	Secrets []Substitution
}

// Substitution is one bound secret as the proxy sees it.
type Substitution struct {
	Secret      string   // the secret's name, for records and errors (never its value)
	Placeholder string   // what the sandbox holds in place of the value
	Hosts       []string // "api.example.com" or "*.example.com" (subdomains): the only hosts it is substituted for
	Query       bool     // also substitute in the URL's query string
	// Headers are the request headers it is substituted in (any case); none means
	// Authorization, Basic credentials included. A placeholder in any other header
	// refuses the request.
	Headers []string
	// Value opens the real value at each request; an error (revoked, expired) means no
	// substitution, and the request is refused and audited.
	Value func() ([]byte, error)
}

// apiRule is the Decision.Rule (and Record.Rule) of a request to APIHost.
const apiRule = "airlock-api"

// Decide is Policy.Decide widened by what the proxy brokers itself, in every mode but
// none: APIHost, served in-process, and the hosts of the sandbox's secrets (rule
// "secret:NAME"), each on ports 80 and 443 (or port 0: any) with every method. Like
// Policy.Decide it decides on names only: a secret's host that resolves to a protected
// address is still refused by the dialer.
func (sb SandboxInfo) Decide(host string, port int, method string) Decision {
	if sb.Policy.Mode == ModeNone || !slices.Contains(modes, sb.Policy.Mode) ||
		len(sb.Secrets) == 0 && !strings.EqualFold(strings.TrimSuffix(host, "."), APIHost) {
		return sb.Policy.Decide(host, port, method)
	}
	h, err := canonicalHost(host)
	if err != nil {
		return Decision{Reason: err.Error()}
	}
	web := port == 0 || port == 80 || port == 443
	if h == APIHost {
		if !web {
			return Decision{Reason: fmt.Sprintf("the Airlock API (%s) is served on ports 80 and 443 only", APIHost)}
		}
		return Decision{Allowed: true, Rule: apiRule}
	}
	if web {
		for i := range sb.Secrets {
			if s := &sb.Secrets[i]; s.forHost(h) {
				return Decision{Allowed: true, Rule: "secret:" + s.Secret}
			}
		}
	}
	return sb.Policy.Decide(h, port, method)
}

// passesTLS says whether TLS to host on port 443 passes through the proxy as it is,
// without being terminated: only when there is nothing to enforce inside it, that is
// in mode unrestricted (every method to every public host, so neither a method nor a
// Host header that names another host than the connection is refused), for a sandbox
// with no secret delivered through the proxy (no placeholder to substitute or refuse,
// no answer to redact), and never for APIHost (served in-process). The address is
// checked as for any connection; the record is the connection's.
func (sb SandboxInfo) passesTLS(host string) bool {
	return sb.Policy.Mode == ModeUnrestricted && len(sb.Secrets) == 0 && host != APIHost
}

// Record is one egress decision, for the audit trail. A refused request, an HTTP
// request (plain or inside a tunnel) and a tunnel as a whole each make one record;
// a tunnel's record is made when it closes, with the bytes it carried on the wire.
type Record struct {
	Sandbox    string
	Generation int64
	Host       string // canonical: lower case, IP literals in standard form
	Addr       string // the address connected to (or checked, for a tunnel); "" if none
	Port       int
	Method     string // the HTTP method, "CONNECT" for a tunnel, "TLS" for a transparent TLS connection
	BytesUp    int64  // request body bytes (wire bytes for a tunnel)
	BytesDown  int64  // response body bytes (wire bytes for a tunnel)
	Allowed    bool
	// Decision is "allow", "deny" (the policy, or a protected address, refused it) or
	// "error" (allowed, but it failed: the name did not resolve, the server did not
	// answer). Allowed is true only for "allow".
	Decision string
	Rule     string // the rule that allowed it
	Reason   string // why it was refused or failed
	// Secrets names the secrets substituted into the request, or whose placeholder was
	// refused; never their values.
	Secrets []string
	Time    time.Time
	// Mode is the sandbox's egress mode when it was decided (for the node's metrics;
	// not stored: the policy's own events say it).
	Mode string `json:"-"`
}

// about makes rec a record of sb's.
func (rec *Record) about(sb SandboxInfo) {
	rec.Sandbox, rec.Generation, rec.Mode = sb.ID, sb.Generation, string(sb.Policy.Mode)
}

// Config configures a Proxy.
type Config struct {
	// CA mints the certificates the proxy presents to sandboxes; required.
	CA *CA
	// Lookup maps a connection's source address to its sandbox; required. It is called
	// for every new connection and every request, so a policy change applies at once.
	// A source it does not know is refused.
	Lookup func(remote netip.AddrPort) (SandboxInfo, bool)
	// Audit receives every decision; it must be safe for concurrent use and quick.
	Audit func(Record)
	// NamesOf, if set, returns the names a sandbox resolved to an address through the
	// node's DNS (ResolvedNames.Names); plain TCP to the address may be decided by them.
	NamesOf func(sandbox string, addr netip.Addr) []string
	// Dialer resolves, checks and dials upstream hosts; nil means one with
	// net.DefaultResolver and no node addresses.
	Dialer *Dialer
	// UpstreamRoots verifies upstream servers; nil means the system pool (see RootPool).
	UpstreamRoots *x509.CertPool
	// API serves a request a sandbox sent to APIHost (after the session placeholder was
	// swapped); nil: requests to APIHost are refused.
	API func(w http.ResponseWriter, r *http.Request, sb SandboxInfo)
	// SessionToken returns a short-lived API token for the sandbox (its owner and role);
	// it is called per request and caches and refreshes on its own side.
	SessionToken func(sb SandboxInfo) (string, error)
	// Logger is the parent logger; nil means slog.Default().
	Logger *slog.Logger
}

// Proxy is the egress proxy: an HTTP forward proxy (absolute URIs and CONNECT) on the
// listeners given to Serve, and a transparent one for connections given to
// ServeTransparent. It terminates TLS with the node CA so that it can decide on every
// request's host, port and method; it never follows redirects itself.
type Proxy struct {
	cfg    Config
	dialer *Dialer
	log    *slog.Logger
	srv    *http.Server
	inner  *connListener // tunnels and transparent connections, once past their handshake
	rp     *httputil.ReverseProxy
	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu         sync.Mutex
	closed     bool
	conns      map[net.Conn]struct{} // connections the proxy holds outside srv
	transports map[string]*sandboxTransport
}

const (
	handshakeTimeout = 10 * time.Second
	maxTransports    = 256
	// maxIdleUpstream bounds the idle upstream connections kept for one sandbox;
	// with maxTransports it bounds what idle connections cost the node (1024 descriptors).
	maxIdleUpstream = 4
)

// NewProxy returns a proxy that serves nothing until Serve or ServeTransparent is called.
func NewProxy(cfg Config) (*Proxy, error) {
	if cfg.CA == nil || cfg.Lookup == nil {
		return nil, errdefs.Invalid("egress proxy: CA and Lookup are required")
	}
	if cfg.Audit == nil {
		cfg.Audit = func(Record) {}
	}
	sink := cfg.Audit
	cfg.Audit = func(r Record) {
		switch {
		case r.Decision == DecisionError:
			r.Allowed = false
		case r.Allowed:
			r.Decision = DecisionAllow
		default:
			r.Decision = DecisionDeny
		}
		sink(r)
	}
	if cfg.Dialer == nil {
		cfg.Dialer = &Dialer{}
	}
	if cfg.UpstreamRoots == nil {
		pool, err := RootPool()
		if err != nil {
			return nil, err
		}
		cfg.UpstreamRoots = pool
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		ctx:        ctx,
		cancel:     cancel,
		cfg:        cfg,
		dialer:     cfg.Dialer,
		log:        cfg.Logger.With("component", "egress"),
		inner:      newConnListener(),
		conns:      make(map[net.Conn]struct{}),
		transports: make(map[string]*sandboxTransport),
	}
	p.rp = &httputil.ReverseProxy{
		Rewrite:        p.rewrite,
		ModifyResponse: p.modifyResponse,
		Transport:      roundTripFunc(p.roundTrip),
		ErrorHandler:   p.upstreamError,
		ErrorLog:       slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
		BufferPool:     copyBuffers{},
	}
	p.srv = &http.Server{
		Handler:           p,
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ConnContext:       connContext,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.srv.Serve(p.inner) // returns when Close closes the server
	}()
	return p, nil
}

// Serve serves explicit proxy clients (HTTP_PROXY, HTTPS_PROXY) on l until Close.
func (p *Proxy) Serve(l net.Listener) error {
	err := p.srv.Serve(l)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeTransparent takes over conn, a connection redirected to the proxy whose
// original destination was origDst. A TLS connection is decided by its SNI, plain
// HTTP by each request's Host header; the port is origDst's, and the address is the
// one the proxy resolves itself (origDst's address is not trusted). It returns at once;
// the proxy owns conn from then on and closes it, at the latest on Close.
func (p *Proxy) ServeTransparent(conn net.Conn, origDst netip.AddrPort) {
	if !p.hold(conn) {
		conn.Close()
		return
	}
	go func() {
		defer p.wg.Done()
		p.serveTransparent(conn, origDst)
	}()
}

// Close stops serving, closes every connection and waits for the proxy's goroutines.
func (p *Proxy) Close() error {
	p.cancel()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	err := p.srv.Close()
	p.wg.Wait()
	p.mu.Lock()
	for _, st := range p.transports {
		st.tr.CloseIdleConnections()
	}
	p.mu.Unlock()
	return err
}

// hold takes conn and one goroutine into the proxy's keeping (see track and enter);
// false once the proxy is closed.
func (p *Proxy) hold(conn net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[conn] = struct{}{}
	p.wg.Add(1)
	return true
}

// track registers conn, held outside the http.Server, to be closed by Close.
func (p *Proxy) track(conn net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[conn] = struct{}{}
	return true
}

// enter adds one running handler to the WaitGroup Close waits on; false once closed.
func (p *Proxy) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.wg.Add(1)
	return true
}

// release forgets conn (handed to srv, or closed).
func (p *Proxy) release(conn net.Conn) {
	p.mu.Lock()
	delete(p.conns, conn)
	p.mu.Unlock()
}

// ServeHTTP serves one request: an explicit proxy request (absolute URI or CONNECT),
// or a request inside a tunnel or transparent connection.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !p.enter() {
		p.writeError(w, errdefs.Unavailable("the egress proxy is shutting down"))
		return
	}
	defer p.wg.Done()
	remote, _ := netip.ParseAddrPort(r.RemoteAddr)
	t, _ := r.Context().Value(tunnelKey{}).(*tunnel)
	rec := Record{Host: r.Host, Method: r.Method, Time: time.Now()}
	sb, known := p.cfg.Lookup(remote)
	switch {
	case !known:
		rec.Reason = "unknown source " + remote.String()
		p.refuse(w, rec, denied("egress refused: %s is not a sandbox", remote.Addr()))
		return
	case t != nil && (t.sandbox != sb.ID || t.generation != sb.Generation):
		rec.about(sb)
		rec.Reason = "the sandbox behind this connection changed"
		p.refuse(w, rec, denied("egress refused: %s", rec.Reason))
		return
	}
	rec.about(sb)
	switch {
	case t != nil && r.Method == http.MethodConnect:
		rec.Reason = "CONNECT inside a tunnel"
		p.refuse(w, rec, denied("egress refused: no CONNECT inside a tunnel"))
	case t != nil:
		host, port, err := t.target(r)
		if err != nil {
			rec.Reason = errdefs.Message(err)
			p.refuse(w, rec, err)
			return
		}
		p.forward(w, r, sb, rec, host, port, t.scheme)
	case r.Method == http.MethodConnect:
		p.connect(w, r, sb, rec)
	case r.URL.IsAbs() && r.URL.Scheme == "http":
		port := 80
		if ps := r.URL.Port(); ps != "" {
			n, err := strconv.Atoi(ps)
			if err != nil || n < 1 || n > 65535 {
				p.refuse(w, rec, errdefs.Invalid("bad port %q", ps))
				return
			}
			port = n
		}
		host, err := canonicalHost(r.URL.Hostname())
		if err != nil {
			rec.Reason = err.Error()
			p.refuse(w, rec, denied("egress refused: %s", err))
			return
		}
		p.forward(w, r, sb, rec, host, port, "http")
	default:
		p.refuse(w, rec, errdefs.Invalid("this is Airlock's egress proxy: send an absolute http:// URI, or CONNECT for https"))
	}
}

// The decisions of a Record.
const (
	DecisionAllow = "allow"
	DecisionDeny  = "deny"
	DecisionError = "error"
)

// decisionOf is the decision for a request that ended with err: a failure to reach
// the server (unavailable: the name did not resolve, the server did not answer) is an
// error, anything else a refusal.
func decisionOf(err error) string {
	if errors.Is(err, errdefs.ErrUnavailable) {
		return DecisionError
	}
	return DecisionDeny
}

// refuse audits rec as refused or failed (when it concerns a sandbox's egress) and
// answers err. A CONNECT is answered with the reason in its status line too, where
// the client's error message shows it ("Tunnel connection failed: 403 egress to …").
func (p *Proxy) refuse(w http.ResponseWriter, rec Record, err error) {
	if rec.Reason != "" {
		rec.Allowed, rec.Decision = false, decisionOf(err)
		p.cfg.Audit(rec)
	}
	if rec.Method == http.MethodConnect && p.refuseConnect(w, err) {
		return
	}
	p.writeError(w, err)
}

// Headers of a refusal: why, and whether the policy refused or the request failed.
const (
	ReasonHeader   = "Airlock-Egress-Reason"
	DecisionHeader = "Airlock-Egress-Decision"
)

// refuseConnect answers a refused CONNECT on the raw connection, so the status line
// can carry the reason; false if the connection cannot be taken over.
func (p *Proxy) refuseConnect(w http.ResponseWriter, err error) bool {
	raw, brw, herr := http.NewResponseController(w).Hijack()
	if herr != nil {
		return false
	}
	defer raw.Close()
	status := proxyStatus(err)
	body := p.errorBody(err)
	reason := headerSafe(errdefs.Message(err))
	raw.SetWriteDeadline(time.Now().Add(5 * time.Second))
	// "403 Forbidden (egress to x:443 refused: …)": clients that show only the status
	// text (Go's, Python's) show the reason with it.
	fmt.Fprintf(brw, "HTTP/1.1 %d %s (%s)\r\n%s: %s\r\n%s: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		status, http.StatusText(status), reason, ReasonHeader, reason, DecisionHeader, decisionOf(err), len(body))
	brw.Write(body)
	brw.Flush()
	return true
}

// headerSafe makes s fit a status line or header: printable ASCII on one line, at most
// 300 bytes. The reason names hosts a sandbox chose, so nothing in it may end the line.
func headerSafe(s string) string {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s) && len(b) < 300; i++ {
		if c := s[i]; c >= 0x20 && c < 0x7f {
			b = append(b, c)
		} else {
			b = append(b, '?')
		}
	}
	return string(b)
}

// proxyStatus is err's status on the shared edge (httpstatus), but for a failure to
// reach the upstream server: 502, as proxies answer it.
func proxyStatus(err error) int {
	if errors.Is(err, errdefs.ErrUnavailable) {
		return http.StatusBadGateway
	}
	return httpstatus.Status(err)
}

// writeError answers err in the API's error shape with its status (proxyStatus).
func (p *Proxy) writeError(w http.ResponseWriter, err error) {
	p.writeErrorStatus(w, err, proxyStatus(err))
}

// writeErrorStatus answers err in the API's error shape with status, and its reason
// and decision in headers.
func (p *Proxy) writeErrorStatus(w http.ResponseWriter, err error, status int) {
	body := p.errorBody(err)
	w.Header().Set(ReasonHeader, headerSafe(errdefs.Message(err)))
	w.Header().Set(DecisionHeader, decisionOf(err))
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Connection", "close")
	w.WriteHeader(status)
	w.Write(body)
}

// errorBody is err in the native API's error shape, {"error": {"code", "message",
// "details"}}, ending in a newline: the proxy's refusals read as the API's errors do.
// As the API does, it answers an internal failure with a request id and logs the cause
// under it (httpedge.InternalAnswer).
func (p *Proxy) errorBody(err error) []byte {
	e := api.Error{Code: errdefs.Code(err), Message: errdefs.Message(err), Details: errdefs.Details(err)}
	if e.Code == "internal" {
		e.Message, e.Details = httpedge.InternalAnswer(p.log, "egress proxy failed", err)
	}
	return httpedge.EncodeJSON(api.ErrorBody{Error: e})
}

// denyDecision turns a refusing Decision into a client-facing error.
func denyDecision(host string, port int, d Decision) error {
	return denied("egress to %s refused: %s", net.JoinHostPort(host, strconv.Itoa(port)), d.Reason)
}

// copyBuffers lends the reverse proxy 256 KiB body buffers: fewer, larger TLS writes.
type copyBuffers struct{}

var copyBufferPool = sync.Pool{New: func() any { b := make([]byte, 256<<10); return &b }}

func (copyBuffers) Get() []byte  { return *copyBufferPool.Get().(*[]byte) }
func (copyBuffers) Put(b []byte) { copyBufferPool.Put(&b) }
