package egress

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// ServeTCP takes over conn, a plain TCP connection redirected to the proxy whose
// original destination origDst is neither port 80 nor 443 (those are HTTP and TLS,
// see ServeTransparent). With no method to go on, it is decided on the address and
// port (Policy.DecideTCP), or on a name the sandbox resolved to the address through
// the node's DNS (Config.NamesOf), and the address is checked like any other
// (Guard.Check, at connect time too), and the bytes are relayed as they are. A refused
// connection is reset. It returns at once; the proxy owns conn from then on.
func (p *Proxy) ServeTCP(conn net.Conn, origDst netip.AddrPort) {
	if !p.hold(conn) {
		conn.Close()
		return
	}
	go func() {
		defer p.wg.Done()
		p.serveTCP(conn, origDst)
	}()
}

func (p *Proxy) serveTCP(conn net.Conn, dst netip.AddrPort) {
	defer func() {
		conn.Close()
		p.release(conn)
	}()
	remote, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
	addr, port := dst.Addr().Unmap().WithZone(""), int(dst.Port())
	rec := Record{Host: addr.String(), Port: port, Method: "TCP", Time: time.Now()}
	reset := func(reason string) {
		rec.Reason = reason
		p.cfg.Audit(rec)
		if tc, ok := conn.(interface{ SetLinger(int) error }); ok {
			tc.SetLinger(0) // close with a reset: the client sees the refusal at once
		}
	}
	sb, ok := p.cfg.Lookup(remote)
	if !ok {
		reset("unknown source " + remote.String())
		return
	}
	rec.about(sb)
	d := sb.Policy.DecideTCP(addr.String(), port)
	if !d.Allowed && p.cfg.NamesOf != nil {
		// No rule names the address: perhaps one names a host the sandbox resolved to it.
		for _, name := range p.cfg.NamesOf(sb.ID, addr) {
			if nd := sb.Policy.DecideTCP(name, port); nd.Allowed {
				d, rec.Host = nd, name
				break
			}
		}
	}
	if !d.Allowed {
		reset(d.Reason)
		return
	}
	rec.Rule = d.Rule
	ctx, cancel := context.WithTimeout(p.ctx, handshakeTimeout)
	up, ap, err := p.dialer.DialChecked(ctx, addr.String(), port, sb.Policy.AllowPrivate)
	cancel()
	if err != nil {
		// A protected address is a refusal; an upstream that does not answer is an
		// allowed connection that failed (an error), as for HTTP.
		rec.Allowed, rec.Decision = false, decisionOf(err)
		reset(errdefs.Message(err))
		return
	}
	if !p.track(up) {
		up.Close()
		return
	}
	defer func() {
		up.Close()
		p.release(up)
	}()
	rec.Addr = ap.Addr().String()
	rec.BytesUp, rec.BytesDown = relay(conn, up)
	rec.Allowed = true
	p.cfg.Audit(rec)
}

// connectRaw serves an allowed CONNECT tunnel as a plain relay: dial (a failure is the
// client's 502), answer 200, copy bytes both ways, and make the tunnel's record.
func (p *Proxy) connectRaw(w http.ResponseWriter, sb SandboxInfo, rec Record) {
	ctx, cancel := context.WithTimeout(p.ctx, handshakeTimeout)
	up, ap, err := p.dialer.DialChecked(ctx, rec.Host, rec.Port, sb.Policy.AllowPrivate)
	cancel()
	if err != nil {
		rec.Reason = errdefs.Message(err)
		p.refuse(w, rec, err)
		return
	}
	defer up.Close()
	rec.Addr = ap.Addr().String()
	conn, client, ok := p.takeOver(w)
	if !ok {
		return
	}
	defer func() {
		conn.Close()
		p.release(conn)
	}()
	if !p.track(up) {
		return
	}
	defer p.release(up)
	if _, err := io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	if rec.Port == 443 {
		stop := p.keepPassing(conn, sb, rec.Host, up)
		defer stop()
	}
	rec.BytesUp, rec.BytesDown = relay(client, up)
	rec.Allowed = true
	p.cfg.Audit(rec)
}

// relay copies both ways between the client and the upstream connection, passing on a
// half-close, until both directions end; it returns the bytes sent up and down.
func relay(client, up net.Conn) (sent, received int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		received = pipe(client, up)
	}()
	sent = pipe(up, client)
	wg.Wait()
	return sent, received
}

// pipe copies src to dst until src ends, then half-closes dst (or, on an error,
// closes both so the other direction ends too).
func pipe(dst, src net.Conn) int64 {
	n, err := copyPooled(dst, src)
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && err == nil {
		cw.CloseWrite()
	} else {
		dst.Close()
		src.Close()
	}
	return n
}

// relayBufSize is the size of the buffers relayed bytes go through, and relayBigMax how
// many of them all relays hold at once (64 MiB): a relay holds its buffer for as long
// as its write waits, and a sandbox can hold thousands of connections whose other end
// reads nothing (its own, or a server's it sends to). Past relayBigMax a read goes
// through a buffer of relaySmallSize. (A variable for tests.)
const (
	relayBufSize   = 256 << 10
	relaySmallSize = 16 << 10
)

var relayBigMax int64 = 256

var (
	relayBigHeld   atomic.Int64
	relayBufs      = sync.Pool{New: func() any { b := make([]byte, relayBufSize); return &b }}
	relaySmallBufs = sync.Pool{New: func() any { b := make([]byte, relaySmallSize); return &b }}
)

// getRelayBuf returns a buffer of relayBufSize, or of relaySmallSize when relayBigMax
// of those are held; putRelayBuf gives it back.
func getRelayBuf() *[]byte {
	if relayBigHeld.Add(1) <= relayBigMax {
		return relayBufs.Get().(*[]byte)
	}
	relayBigHeld.Add(-1)
	return relaySmallBufs.Get().(*[]byte)
}

func putRelayBuf(b *[]byte) {
	if len(*b) == relaySmallSize {
		relaySmallBufs.Put(b)
		return
	}
	relayBufs.Put(b)
	relayBigHeld.Add(-1)
}

// copyPooled copies src to dst until src ends (a nil error, as io.Copy) and returns the
// bytes copied. The bytes go through a buffer (getRelayBuf) that it holds only while it
// has something to pass on, so an idle connection holds none.
//
// It is a copy, not splice(2) as io.Copy between two TCP connections would do: measured
// on a download through the proxy (BenchmarkEgressDownload512MiB), splice costs the
// receiving client about a fifth more CPU (the segments it gets are built on the pages
// of those the proxy received, in pieces) and the download 12–16% more time, for no less
// CPU in the proxy.
func copyPooled(dst io.Writer, src net.Conn) (int64, error) {
	sc, ok := src.(syscall.Conn)
	if !ok {
		return io.Copy(struct{ io.Writer }{dst}, src)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, err
	}
	var total int64
	for {
		var buf *[]byte // held from a read that got bytes until they are written
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			b := getRelayBuf()
			n, rerr = syscall.Read(int(fd), *b)
			if rerr == syscall.EAGAIN {
				putRelayBuf(b)
				return false // wait until there is something to read, holding no buffer
			}
			if n > 0 {
				buf = b
			} else {
				putRelayBuf(b)
			}
			return true
		})
		if err == nil {
			err = rerr
		}
		if buf != nil {
			m, werr := dst.Write((*buf)[:n])
			putRelayBuf(buf)
			total += int64(m)
			if werr == nil && m != n {
				werr = io.ErrShortWrite
			}
			if werr != nil {
				return total, werr
			}
			continue
		}
		switch {
		case err == syscall.EINTR:
		case err != nil:
			return total, err
		default:
			return total, nil // end of file
		}
	}
}

// passCheck is how often a connection that passes TLS through is checked against its
// sandbox's current policy.
const passCheck = 100 * time.Millisecond

// keepPassing watches a connection whose TLS passes through (see
// SandboxInfo.passesTLS): once its sandbox's policy or generation would no longer let
// it pass, both ends are closed, so a policy change reaches it within passCheck, as it
// reaches a terminated tunnel at its next request. stop ends the watch.
func (p *Proxy) keepPassing(client net.Conn, sb SandboxInfo, host string, up net.Conn) (stop func()) {
	remote, _ := netip.ParseAddrPort(client.RemoteAddr().String())
	done := make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		tick := time.NewTicker(passCheck)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			now, ok := p.cfg.Lookup(remote)
			if !ok || now.ID != sb.ID || now.Generation != sb.Generation || !now.passesTLS(host) ||
				!now.Decide(host, 443, "").Allowed {
				client.Close()
				up.Close()
				return
			}
		}
	}()
	return sync.OnceFunc(func() { close(done) })
}
