package agent

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// A Pool keeps the connections to one agent that a call has ended cleanly on, for the
// next call to that agent: an exec then costs no dial, no check of the peer and no
// accept in the agent. A runtime keeps one pool per running container and makes a new
// one whenever the container behind a sandbox changes (a restart, a resume, a restore),
// so a connection never crosses from one agent to another; every connection in it was
// made, and its peer checked, by the runtime's own dial.
//
// A kept connection is used again only if the agent has sent nothing on it since (a
// read that would block; an agent that hung up or wrote out of turn loses it), and
// only after a call that asked the agent to keep it (agentproto.Request.Keep) and that
// ended cleanly (see Client). Idle connections are closed after poolIdle, at most
// poolMax are kept (keptMax in all pools together), and Close closes them all.
type Pool struct {
	dial func(ctx context.Context) (net.Conn, error)

	mu      sync.Mutex
	idle    []*keptConn // most recently used last
	closed  bool
	refused bool // the agent does not keep connections (it predates them)
	timer   *time.Timer
}

// poolIdle is how long a connection is kept unused; well below the agent's keptIdle,
// so the agent never closes one the daemon is about to use.
const poolIdle = 20 * time.Second

// poolMax is how many idle connections a pool keeps: enough for a few concurrent calls.
const poolMax = 4

// keptMax bounds the idle connections of all pools together: each is a descriptor in
// the daemon and a waiting goroutine in an agent, and a node runs thousands of
// sandboxes. Past it a connection is closed after its call, as without a pool. (A
// variable for tests.)
var keptMax int64 = 1024

// keptTotal counts the idle connections of all pools.
var keptTotal atomic.Int64

// reserve counts one more idle connection, unless that would pass keptMax.
func reserve() bool {
	if keptTotal.Add(1) > keptMax {
		keptTotal.Add(-1)
		return false
	}
	return true
}

// NewPool returns a pool whose new connections come from dial.
func NewPool(dial func(ctx context.Context) (net.Conn, error)) *Pool {
	return &Pool{dial: dial}
}

// KeptConn is a connection from a Pool. Keep hands it back after a call that ended
// cleanly, in place of Close; Reused says it carried an earlier call; Keepable says
// whether the call may ask the agent to keep it at all; Refused notes an agent that
// does not know how.
type KeptConn interface {
	net.Conn
	Keep()
	Reused() bool
	Keepable() bool
	Refused()
}

// Dial returns an idle connection that is still good, or a new one.
func (p *Pool) Dial(ctx context.Context) (net.Conn, error) {
	now := time.Now()
	for {
		p.mu.Lock()
		n := len(p.idle)
		if n == 0 {
			p.mu.Unlock()
			break
		}
		c := p.idle[n-1]
		p.idle[n-1] = nil
		p.idle = p.idle[:n-1]
		keptTotal.Add(-1)
		p.mu.Unlock()
		if now.Sub(c.used) < poolIdle && quiet(c.Conn) {
			c.reused = true
			return c, nil
		}
		c.Conn.Close()
	}
	conn, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	return &keptConn{Conn: conn, pool: p}, nil
}

// Prime dials one connection ahead of any call and keeps it as an idle one, so that
// the first call finds it (a container's first exec is usually right after its start).
// It is used like a connection handed back: only while fresh and quiet, and a call that
// cannot send its request on it dials again. A pool that already holds one, is closed,
// or is at a bound keeps nothing, and dials nothing either.
func (p *Pool) Prime(ctx context.Context) error {
	p.mu.Lock()
	full := len(p.idle) > 0 || p.closed || p.refused || keptTotal.Load() >= keptMax
	p.mu.Unlock()
	if full {
		return nil
	}
	conn, err := p.dial(ctx)
	if err != nil {
		return err
	}
	p.put(&keptConn{Conn: conn, pool: p})
	return nil
}

// Close closes every idle connection; connections handed back later are closed too.
func (p *Pool) Close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	keptTotal.Add(-int64(len(idle)))
	if p.timer != nil {
		p.timer.Stop()
	}
	p.mu.Unlock()
	for _, c := range idle {
		c.Conn.Close()
	}
}

// Idle is how many connections the pool holds unused.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.idle)
}

func (p *Pool) put(c *keptConn) {
	// A call may have left a deadline on it; the next call sets its own.
	if c.Conn.SetDeadline(time.Time{}) != nil {
		c.Conn.Close()
		return
	}
	c.used = time.Now()
	p.mu.Lock()
	if p.closed || p.refused || len(p.idle) >= poolMax || !reserve() {
		p.mu.Unlock()
		c.Conn.Close()
		return
	}
	p.idle = append(p.idle, c)
	if p.timer == nil {
		p.timer = time.AfterFunc(poolIdle, p.expire)
	} else if len(p.idle) == 1 {
		p.timer.Reset(poolIdle)
	}
	p.mu.Unlock()
}

// expire closes the connections idle for poolIdle, and comes back for the rest.
func (p *Pool) expire() {
	now := time.Now()
	var old []*keptConn
	p.mu.Lock()
	keep := p.idle[:0]
	for _, c := range p.idle {
		if now.Sub(c.used) >= poolIdle {
			old = append(old, c)
		} else {
			keep = append(keep, c)
		}
	}
	clear(p.idle[len(keep):])
	p.idle = keep
	keptTotal.Add(-int64(len(old)))
	if len(keep) > 0 && !p.closed {
		p.timer.Reset(poolIdle - now.Sub(keep[0].used))
	}
	p.mu.Unlock()
	for _, c := range old {
		c.Conn.Close()
	}
}

// quiet reports whether nothing is waiting to be read on c and its peer has not hung
// up: between calls a real agent sends nothing.
func quiet(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	good := false
	var b [1]byte
	cerr := raw.Control(func(fd uintptr) {
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		good = err == unix.EAGAIN
	})
	return cerr == nil && good
}

// keptConn is a connection of a Pool.
type keptConn struct {
	net.Conn
	pool   *Pool
	used   time.Time // when it was last handed back
	reused bool
}

func (c *keptConn) Keep()        { c.pool.put(c) }
func (c *keptConn) Reused() bool { return c.reused }

func (c *keptConn) Keepable() bool {
	c.pool.mu.Lock()
	defer c.pool.mu.Unlock()
	return !c.pool.closed && !c.pool.refused
}

func (c *keptConn) Refused() {
	c.pool.mu.Lock()
	c.pool.refused = true
	c.pool.mu.Unlock()
}

// CloseWrite half-closes the connection where the connection underneath can (a
// port relayed by the agent), as the connection itself would.
func (c *keptConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
