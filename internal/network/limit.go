package network

import (
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/egress"
)

// DefaultMaxConns is how many connections to the proxy, its relay and DNS over TCP one
// sandbox may hold open at once unless configured otherwise.
const DefaultMaxConns = 4096

// connLimit caps the connections each sandbox holds open to the node's listeners, so
// that no sandbox can take the daemon's file descriptors (each proxied connection
// holds two) from the others and from the API. A connection over the cap is reset at
// once and audited.
type connLimit struct {
	max    int
	lookup func(netip.Addr) (string, bool) // a source address's sandbox
	audit  func(egress.Record)

	mu   sync.Mutex
	open map[string]int
}

// admit counts c against its sandbox's cap and returns it wrapped so that closing it
// gives the slot back; nil (with c reset) when the sandbox is at its cap. Connections
// from sources that are no sandbox pass uncounted: the proxy refuses them itself.
func (l *connLimit) admit(c *net.TCPConn, port int) net.Conn {
	remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	id, ok := l.lookup(remote.Addr().Unmap())
	if !ok {
		return c
	}
	l.mu.Lock()
	if l.open[id] >= l.max {
		l.mu.Unlock()
		l.audit(egress.Record{Sandbox: id, Port: port, Method: "TCP", Time: time.Now(),
			Reason: fmt.Sprintf("the sandbox has %d connections open, the most it may", l.max)})
		c.SetLinger(0)
		c.Close()
		return nil
	}
	l.open[id]++
	l.mu.Unlock()
	return &limitedConn{TCPConn: c, release: func() { l.release(id) }}
}

func (l *connLimit) release(id string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[id]--; l.open[id] <= 0 {
		delete(l.open, id)
	}
}

// openConns is how many connections sandbox id holds.
func (l *connLimit) openConns(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[id]
}

// limitedConn is an admitted connection. It embeds the *net.TCPConn, so copying
// between it and another TCP connection still splices.
type limitedConn struct {
	*net.TCPConn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.TCPConn.Close()
	c.once.Do(c.release)
	return err
}

// limitedListener admits what l accepts through lim.
type limitedListener struct {
	net.Listener
	lim  *connLimit
	port int
}

func (l *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*net.TCPConn)
		if !ok {
			return c, nil
		}
		if admitted := l.lim.admit(tc, l.port); admitted != nil {
			return admitted, nil
		}
	}
}
