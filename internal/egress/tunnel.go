package egress

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// tunnelKey carries a terminated connection's *tunnel in its requests' context.
type tunnelKey struct{}

// tunnel is a connection the proxy terminated: a CONNECT tunnel or a transparent
// connection. Its requests are served by the proxy's http.Server like any other, and
// each is decided on its own.
type tunnel struct {
	p          *Proxy
	raw        net.Conn // the client's connection, held by the proxy until finish
	wire       *countConn
	sandbox    string
	generation int64
	host       string // canonical; "" for transparent plain HTTP, where each Host header decides
	port       int
	scheme     string // "https" once TLS is terminated, else "http"
	rec        Record // the connection's own record; none when rec.Method is ""
	once       sync.Once
}

// target returns the host and port a request inside the tunnel goes to, refusing a
// Host header that names another host or port than the tunnel (or TLS server name).
func (t *tunnel) target(r *http.Request) (string, int, error) {
	h, port, err := splitHost(r.Host)
	if err != nil {
		return "", 0, denied("egress refused: bad Host header %q", r.Host)
	}
	if port != 0 && port != t.port {
		return "", 0, denied("egress refused: Host header %q names another port than the connection's %d", r.Host, t.port)
	}
	if t.host == "" {
		host, err := canonicalHost(h)
		if err != nil {
			return "", 0, denied("egress refused: %s", err)
		}
		return host, t.port, nil
	}
	if h != "" {
		if host, err := canonicalHost(h); err != nil || host != t.host {
			return "", 0, denied("egress refused: Host header %q does not match the connection's host %s", r.Host, t.host)
		}
	}
	return t.host, t.port, nil
}

// finish makes the tunnel's record with its wire bytes and lets go of its connection.
func (t *tunnel) finish() {
	t.once.Do(func() {
		if t.rec.Method != "" {
			t.rec.Allowed = true
			t.rec.BytesUp, t.rec.BytesDown = t.wire.in.Load(), t.wire.out.Load()
			t.p.cfg.Audit(t.rec)
		}
		t.raw.Close()
		t.p.release(t.raw)
	})
}

// refuse audits the tunnel as refused for reason and closes it.
func (t *tunnel) refuse(reason string) {
	t.once.Do(func() {
		if t.rec.Method != "" {
			t.rec.Allowed, t.rec.Reason = false, reason
			t.p.cfg.Audit(t.rec)
		}
		t.raw.Close()
		t.p.release(t.raw)
	})
}

func splitHost(hostport string) (string, int, error) {
	h, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return hostport, 0, nil // no port: "a.com", "[::1]", "::1"
	}
	n, err := strconv.Atoi(ps)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", ps)
	}
	return h, n, nil
}

func connContext(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tunnelConn); ok {
		return context.WithValue(ctx, tunnelKey{}, tc.t)
	}
	return ctx
}

// decideTunnel decides on a tunnel's host and port before any request inside it, and
// checks the addresses the host resolves to, so a refused destination is refused up
// front; every request and every dial is checked again on its own. A tunnel to APIHost
// reaches no address: its requests are served in-process.
func (p *Proxy) decideTunnel(ctx context.Context, sb SandboxInfo, rec *Record) error {
	d := sb.Decide(rec.Host, rec.Port, "")
	if !d.Allowed {
		rec.Reason = d.Reason
		return denyDecision(rec.Host, rec.Port, d)
	}
	rec.Rule = d.Rule
	if rec.Host == APIHost {
		return nil // served in-process: nothing to resolve
	}
	addrs, err := p.dialer.Resolve(ctx, rec.Host, sb.Policy.AllowPrivate)
	if err != nil {
		rec.Reason = errdefs.Message(err)
		return err
	}
	rec.Addr = addrs[0].String()
	return nil
}

// connect serves a CONNECT request: decide, answer 200, and terminate the tunnel. A
// tunnel to a port other than 80 and 443 that a rule without methods allows (see
// Policy.DecideTCP) is relayed as it is instead, since it may carry any protocol
// (SSH, a database's) and there is no method to enforce; so is one to port 443 that
// has nothing to enforce inside its TLS (see SandboxInfo.passesTLS).
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request, sb SandboxInfo, rec Record) {
	rec.Method = http.MethodConnect
	h, port, err := splitHost(r.Host)
	if err != nil || port == 0 {
		rec.Reason = "bad CONNECT target"
		p.refuse(w, rec, errdefs.Invalid("CONNECT needs HOST:PORT, not %q", r.Host))
		return
	}
	rec.Port = port
	if rec.Host, err = canonicalHost(h); err != nil {
		rec.Host, rec.Reason = h, err.Error()
		p.refuse(w, rec, denied("egress refused: %s", err))
		return
	}
	if err := p.decideTunnel(r.Context(), sb, &rec); err != nil {
		p.refuse(w, rec, err)
		return
	}
	if rec.Port != 80 && (rec.Port != 443 || sb.passesTLS(rec.Host)) {
		if d := sb.Policy.DecideTCP(rec.Host, rec.Port); d.Allowed {
			rec.Rule = d.Rule
			p.connectRaw(w, sb, rec)
			return
		}
	}
	conn, c, ok := p.takeOver(w)
	if !ok {
		return
	}
	t := &tunnel{p: p, raw: conn, sandbox: sb.ID, generation: sb.Generation,
		host: rec.Host, port: rec.Port, scheme: "http", rec: rec}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		t.finish()
		return
	}
	p.terminate(c, t, sb)
}

// takeOver hijacks a CONNECT request's connection into the proxy's keeping (Close ends
// it) and returns it twice: raw, and as the tunnel reads it, with whatever the client
// sent without waiting for the answer in front. ok is false when there is nothing to
// serve (the client has had its answer, or the proxy is closing).
func (p *Proxy) takeOver(w http.ResponseWriter) (raw, c net.Conn, ok bool) {
	raw, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		p.refuse(w, Record{}, &errdefs.Error{Class: errdefs.ErrInternal, Msg: "cannot take over the connection", Cause: err})
		return nil, nil, false
	}
	if !p.track(raw) {
		raw.Close()
		return nil, nil, false
	}
	c = raw
	if n := brw.Reader.Buffered(); n > 0 { // the client did not wait for our answer
		early, _ := brw.Reader.Peek(n)
		c = &bufConn{Conn: raw, r: io.MultiReader(bytes.NewReader(bytes.Clone(early)), raw)}
	}
	return raw, c, true
}

// serveTransparent serves a redirected connection (see ServeTransparent).
func (p *Proxy) serveTransparent(conn net.Conn, origDst netip.AddrPort) {
	remote, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	rec := Record{Port: int(origDst.Port()), Time: time.Now()}
	sb, ok := p.cfg.Lookup(remote)
	if !ok {
		rec.Method, rec.Reason = "TLS", "unknown source "+remote.String()
		p.cfg.Audit(rec)
		conn.Close()
		p.release(conn)
		return
	}
	rec.about(sb)
	t := &tunnel{p: p, raw: conn, sandbox: sb.ID, generation: sb.Generation,
		port: int(origDst.Port()), scheme: "http", rec: rec}
	conn.SetDeadline(time.Now().Add(handshakeTimeout))
	p.terminate(conn, t, sb)
}

const (
	recordTypeHandshake = 0x16
	maxTLSRecord        = 16384 + 2048 // plaintext plus the most expansion a record may have
)

// terminate looks at what the client sends first: TLS is checked against the tunnel's
// host (or, transparently, decided by its SNI) and terminated with a leaf from the node
// CA; anything else is served as plain HTTP. The connection then goes to the proxy's
// http.Server, and the tunnel finishes when that closes it.
func (p *Proxy) terminate(c net.Conn, t *tunnel, sb SandboxInfo) {
	t.wire = &countConn{Conn: c}
	br := bufio.NewReaderSize(t.wire, 5+maxTLSRecord)
	var served net.Conn = &bufConn{Conn: t.wire, r: br}
	first, err := br.Peek(1)
	if err != nil {
		t.finish() // the client closed without a word
		return
	}
	if first[0] == recordTypeHandshake {
		sni, err := clientHelloSNI(br)
		if err != nil {
			t.rec.Method = cmp.Or(t.rec.Method, "TLS")
			t.refuse(err.Error())
			return
		}
		switch {
		case t.host == "": // transparent TLS: the server name decides
			t.rec.Method = "TLS"
			if sni == "" {
				t.refuse("a TLS connection without a server name (SNI) cannot be decided")
				return
			}
			host, err := canonicalHost(sni)
			if err != nil {
				t.refuse("TLS server name (SNI) " + strconv.Quote(sni) + ": " + err.Error())
				return
			}
			t.host, t.rec.Host = host, host
			ctx, cancel := context.WithTimeout(p.ctx, handshakeTimeout)
			err = p.decideTunnel(ctx, sb, &t.rec)
			cancel()
			if err != nil {
				t.refuse(t.rec.Reason)
				return
			}
			if t.port == 443 && sb.passesTLS(host) {
				p.passTLS(br, t, sb)
				return
			}
		case sni != "":
			if host, err := canonicalHost(sni); err != nil || host != t.host {
				t.refuse(fmt.Sprintf("TLS server name %q does not match the tunnel's host %s", sni, t.host))
				return
			}
		}
		host := t.host
		// Each write of a response reaches the sandbox in one piece, not one per record.
		tc := tlsServerGathered(served, &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"http/1.1"},
			GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
				return p.cfg.CA.Leaf(host)
			},
		})
		if err := tc.Handshake(); err != nil {
			t.refuse("TLS handshake with the sandbox failed: " + err.Error())
			return
		}
		served, t.scheme = tc, "https"
	}
	t.raw.SetDeadline(time.Time{})
	if !p.inner.push(&tunnelConn{Conn: served, t: t}) {
		t.finish()
	}
}

// passTLS relays a transparent TLS connection as it is (see SandboxInfo.passesTLS):
// what br read ahead of the client goes first, then the bytes go both ways (relay),
// and the tunnel's record counts them.
func (p *Proxy) passTLS(br *bufio.Reader, t *tunnel, sb SandboxInfo) {
	ctx, cancel := context.WithTimeout(p.ctx, handshakeTimeout)
	up, ap, err := p.dialer.DialChecked(ctx, t.host, t.port, sb.Policy.AllowPrivate)
	cancel()
	if err != nil {
		t.rec.Decision = decisionOf(err)
		t.refuse(errdefs.Message(err))
		return
	}
	defer up.Close()
	if !p.track(up) {
		t.finish()
		return
	}
	defer p.release(up)
	t.rec.Addr = ap.Addr().String()
	early, _ := br.Peek(br.Buffered())
	if _, err := up.Write(early); err != nil {
		t.finish()
		return
	}
	t.raw.SetDeadline(time.Time{})
	stop := p.keepPassing(t.raw, sb, t.host, up)
	sent, received := relay(t.raw, up)
	stop()
	t.wire.in.Add(sent)
	t.wire.out.Add(received)
	t.finish()
}

var errPeeked = errors.New("ClientHello peeked")

// clientHelloSNI returns the server name in the TLS ClientHello at the head of br
// without consuming it: the handshake that follows reads the same bytes.
func clientHelloSNI(br *bufio.Reader) (string, error) {
	hdr, err := br.Peek(5)
	if err != nil {
		return "", fmt.Errorf("the client closed before its TLS ClientHello")
	}
	n := int(hdr[3])<<8 | int(hdr[4])
	if n > maxTLSRecord {
		return "", fmt.Errorf("the TLS record is too long (%d bytes)", n)
	}
	record, err := br.Peek(5 + n)
	if err != nil {
		return "", fmt.Errorf("the client closed inside its TLS ClientHello")
	}
	var sni string
	seen := false
	tls.Server(readOnlyConn{bytes.NewReader(record)}, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			sni, seen = h.ServerName, true
			return nil, errPeeked
		},
	}).Handshake()
	if !seen {
		return "", fmt.Errorf("no TLS ClientHello in the first record")
	}
	return sni, nil
}

// connListener hands connections the proxy terminated to its http.Server.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *connListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *connListener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4zero} }

// tunnelConn is a terminated connection as the http.Server sees it; closing it
// finishes the tunnel.
type tunnelConn struct {
	net.Conn
	t *tunnel
}

func (c *tunnelConn) Close() error {
	err := c.Conn.Close()
	c.t.finish()
	return err
}

// bufConn reads through r (a buffer in front of the connection).
type bufConn struct {
	net.Conn
	r io.Reader
}

func (c *bufConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// CloseWrite half-closes the connection underneath, or closes it if it cannot.
func (c *bufConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}

// countConn counts the bytes read (up) and written (down).
type countConn struct {
	net.Conn
	in, out atomic.Int64
}

func (c *countConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.in.Add(int64(n))
	return n, err
}

func (c *countConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.out.Add(int64(n))
	return n, err
}

// readOnlyConn feeds recorded bytes to a TLS server that must not answer.
type readOnlyConn struct{ r io.Reader }

func (c readOnlyConn) Read(b []byte) (int, error)     { return c.r.Read(b) }
func (readOnlyConn) Write(b []byte) (int, error)      { return 0, io.ErrClosedPipe }
func (readOnlyConn) Close() error                     { return nil }
func (readOnlyConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (readOnlyConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (readOnlyConn) SetDeadline(time.Time) error      { return nil }
func (readOnlyConn) SetReadDeadline(time.Time) error  { return nil }
func (readOnlyConn) SetWriteDeadline(time.Time) error { return nil }
