package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// forwardKey carries a request's *forwardState through the ReverseProxy.
type forwardKey struct{}

type forwardState struct {
	sb     SandboxInfo
	host   string
	port   int
	scheme string
	open   []openSecret // the secrets of the host, with their values
	redact *redactor    // what is taken out of the answer; nil: nothing

	mu   sync.Mutex
	addr string // the upstream address, from the connection the transport used
	err  error  // set when the upstream request failed
}

// forward decides a request on its host, port and method and, if allowed, sends it
// upstream as it is but for the sandbox's secrets (see openSecrets; no redirect is
// followed) and audits it with the body bytes. A request to APIHost is served in-process.
func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, sb SandboxInfo, rec Record, host string, port int, scheme string) {
	rec.Host, rec.Port = host, port
	d := sb.Decide(host, port, r.Method)
	if !d.Allowed {
		rec.Reason = d.Reason
		p.refuse(w, rec, denyDecision(host, port, d))
		return
	}
	rec.Rule = d.Rule
	if host == APIHost {
		p.serveAPI(w, r, sb, rec)
		return
	}
	open, names, refusal := openSecrets(r, sb.Secrets, host, scheme == "https")
	rec.Secrets = names
	if refusal != "" {
		rec.Reason = refusal
		p.refuse(w, rec, denyDecision(host, port, Decision{Reason: refusal}))
		return
	}
	st := &forwardState{sb: sb, host: host, port: port, scheme: scheme, open: open}
	ctx := context.WithValue(r.Context(), forwardKey{}, st)
	ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if ap, err := netip.ParseAddrPort(info.Conn.RemoteAddr().String()); err == nil {
				st.mu.Lock()
				st.addr = ap.Addr().Unmap().String()
				st.mu.Unlock()
			}
		},
	})
	up := &countReader{r: r.Body}
	out := r.WithContext(ctx)
	if r.Body != nil && r.Body != http.NoBody {
		out.Body = up
	}
	down := &countWriter{ResponseWriter: w}
	var rw http.ResponseWriter = down
	if len(open) > 0 {
		rw = informational{ResponseWriter: down, st: st}
	}
	p.rp.ServeHTTP(rw, out)

	st.mu.Lock()
	rec.Addr, rec.BytesUp, rec.BytesDown = st.addr, up.n.Load(), down.n
	err := st.err
	st.mu.Unlock()
	rec.Allowed = err == nil
	if !rec.Allowed {
		rec.Reason, rec.Decision = errdefs.Message(err), decisionOf(err)
	}
	p.cfg.Audit(rec)
}

// rewrite points the outgoing request at the decided host and port, and puts the
// secrets' values in it.
func (p *Proxy) rewrite(pr *httputil.ProxyRequest) {
	st := pr.In.Context().Value(forwardKey{}).(*forwardState)
	u := *pr.In.URL
	u.Scheme, u.Host, u.User, u.Opaque = st.scheme, urlHost(st.host, st.port, st.scheme), nil, ""
	pr.Out.URL = &u
	pr.Out.Host = ""
	if len(st.open) > 0 {
		st.redact = redactorFor(st.open, applySecrets(pr.Out, st.open))
	}
	if st.redact != nil {
		st.redact.prepare(pr.Out)
	}
}

// modifyResponse redacts an answer from a secret's host (see redact.go).
func (p *Proxy) modifyResponse(res *http.Response) error {
	st := res.Request.Context().Value(forwardKey{}).(*forwardState)
	if st.redact == nil {
		return nil
	}
	return st.redact.response(res)
}

// informational redacts the headers of the informational (1xx) answers the reverse
// proxy passes on as they come, before the final one reaches modifyResponse.
type informational struct {
	http.ResponseWriter
	st *forwardState
}

func (w informational) WriteHeader(code int) {
	if code < http.StatusOK && w.st.redact != nil {
		w.st.redact.header(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (w informational) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// urlHost is host:port for a URL, without a default port and with IPv6 in brackets.
func urlHost(host string, port int, scheme string) string {
	if port == 80 && scheme == "http" || port == 443 && scheme == "https" {
		if strings.Contains(host, ":") {
			return "[" + host + "]"
		}
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// upstreamError answers a request that could not be sent upstream: 403 when the
// dialer refused the address, 502 otherwise.
func (p *Proxy) upstreamError(w http.ResponseWriter, r *http.Request, err error) {
	st := r.Context().Value(forwardKey{}).(*forwardState)
	st.mu.Lock()
	st.err = err
	st.mu.Unlock()
	var e *errdefs.Error
	switch {
	case errors.As(err, &e):
	case errors.Is(err, context.Canceled):
		return // the client went away; there is no one to answer
	default:
		msg := err.Error()
		if st.redact != nil {
			msg = st.redact.String(msg)
		}
		p.log.Debug("upstream request failed", "sandbox", st.sb.ID, "host", st.host, "err", msg)
		e = &errdefs.Error{Class: errdefs.ErrUnavailable, Msg: "upstream " + urlHost(st.host, st.port, st.scheme) + " failed", Cause: err}
	}
	p.writeError(w, e)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// roundTrip sends a request through its sandbox's transport.
func (p *Proxy) roundTrip(r *http.Request) (*http.Response, error) {
	st := r.Context().Value(forwardKey{}).(*forwardState)
	return p.transportFor(st.sb).RoundTrip(r)
}

// sandboxTransport is one sandbox's upstream connection pool. Pools are per sandbox,
// generation and AllowPrivate, so a connection checked under one policy's address
// rules is never reused under another's.
type sandboxTransport struct {
	key string
	tr  *http.Transport
}

func (p *Proxy) transportFor(sb SandboxInfo) *http.Transport {
	var key strings.Builder
	key.WriteString(strconv.FormatInt(sb.Generation, 10))
	for _, pf := range sb.Policy.AllowPrivate {
		key.WriteString(" " + pf.String())
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.transports[sb.ID]; ok {
		if st.key == key.String() {
			return st.tr
		}
		st.tr.CloseIdleConnections()
	}
	if len(p.transports) >= maxTransports {
		for id, st := range p.transports {
			st.tr.CloseIdleConnections()
			delete(p.transports, id)
		}
	}
	allow := append([]netip.Prefix(nil), sb.Policy.AllowPrivate...)
	tr := &http.Transport{
		Proxy: nil, // never the environment's proxy
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			host, ps, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, _ := strconv.Atoi(ps)
			conn, _, err := p.dialer.DialChecked(ctx, host, port, allow)
			return conn, err
		},
		TLSClientConfig:    &tls.Config{RootCAs: p.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:  true,
		DisableCompression: true, // pass Accept-Encoding and bodies through untouched
		// Idle upstream connections outlive the sandbox's own connection, so they are
		// outside the listeners' connection caps: bound them per sandbox.
		MaxIdleConns:          maxIdleUpstream,
		MaxIdleConnsPerHost:   maxIdleUpstream,
		ReadBufferSize:        64 << 10,
		WriteBufferSize:       64 << 10,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   handshakeTimeout,
		ExpectContinueTimeout: time.Second,
	}
	p.transports[sb.ID] = &sandboxTransport{key: key.String(), tr: tr}
	return tr
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.ReadCloser
	n atomic.Int64 // the transport may still read after the response came back
}

func (c *countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n.Add(int64(n))
	return n, err
}

func (c *countReader) Close() error { return c.r.Close() }

// countWriter counts the body bytes written through it.
type countWriter struct {
	http.ResponseWriter
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.ResponseWriter.Write(b)
	c.n += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach Flush and Hijack.
func (c *countWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }
