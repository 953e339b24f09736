package egress

import (
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
)

// gatherConn sits under the TLS the proxy terminates for a sandbox. While a write through
// gatherTLS is under way, the TLS records it makes (one per 16 KiB of plaintext) are
// gathered into one buffer and written to the connection together when it ends, or
// when the buffer is full: one write(2) and one TCP push for a response's write instead
// of one per record. What the TLS stack writes on its own (the handshake, alerts,
// close_notify) goes straight through. The buffer comes from the relays' pool
// (getRelayBuf, bounded node-wide) and is held only during the write; past the pool's
// bound it is a small one, and records go out about one per write, as without it.
type gatherConn struct {
	net.Conn
	mu      sync.Mutex
	on      bool    // a gatherTLS write is under way
	buf     *[]byte // held while on, from the first record
	n       int     // bytes gathered in buf
	closing atomic.Bool
}

func (g *gatherConn) Write(b []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.on {
		return g.Conn.Write(b) // nothing is gathered while off (end flushed it)
	}
	if g.buf == nil {
		g.buf = getRelayBuf()
	}
	if g.n+len(b) > len(*g.buf) {
		if err := g.flushLocked(); err != nil {
			return 0, err
		}
		if len(b) > len(*g.buf) {
			return g.Conn.Write(b)
		}
	}
	g.n += copy((*g.buf)[g.n:], b)
	return len(b), nil
}

func (g *gatherConn) flushLocked() error {
	if g.n == 0 {
		return nil
	}
	_, err := g.Conn.Write((*g.buf)[:g.n])
	g.n = 0
	return err
}

// begin starts gathering; end writes what was gathered, stops, and gives the buffer back.
func (g *gatherConn) begin() {
	g.mu.Lock()
	g.on = true
	g.mu.Unlock()
}

func (g *gatherConn) end() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.on = false
	err := net.ErrClosed
	if !g.closing.Load() {
		err = g.flushLocked()
	}
	g.n = 0
	if g.buf != nil {
		putRelayBuf(g.buf)
		g.buf = nil
	}
	return err
}

// gatherTLS is a TLS connection over a gatherConn whose writes each reach the
// connection underneath in one piece (see gatherConn).
type gatherTLS struct {
	*tls.Conn
	g       *gatherConn
	writing atomic.Int32 // Writes under way
}

// tlsServerGathered is tls.Server(conn, cfg) whose writes are gathered (see gatherConn).
func tlsServerGathered(conn net.Conn, cfg *tls.Config) *gatherTLS {
	g := &gatherConn{Conn: conn}
	return &gatherTLS{Conn: tls.Server(g, cfg), g: g}
}

func (c *gatherTLS) Write(b []byte) (int, error) {
	c.writing.Add(1)
	defer c.writing.Add(-1)
	c.g.begin()
	n, err := c.Conn.Write(b)
	if ferr := c.g.end(); err == nil {
		err = ferr
	}
	return n, err
}

// Close is tls.Conn's, but for a Write still writing what it gathered (its TLS part
// done): as tls.Conn does for a Write under way, it then closes the connection at once
// instead of sending close_notify behind it, which would wait on a sandbox that reads
// nothing.
func (c *gatherTLS) Close() error {
	c.g.closing.Store(true) // a Write from now on writes nothing more
	if c.writing.Load() != 0 {
		err := c.g.Conn.Close() // the write fails at once
		c.Conn.Close()          // and the TLS connection is marked closed
		return err
	}
	return c.Conn.Close()
}
