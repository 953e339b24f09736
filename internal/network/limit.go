package network

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/egress"
	"golang.org/x/sys/unix"
)

// DefaultMaxConns is how many connections to the proxy, its relay and DNS over TCP one
// sandbox may hold open at once unless configured otherwise.
const DefaultMaxConns = 4096

// connLimit caps the connections the node's listeners hold for sandboxes: per sandbox,
// per owner and node-wide, so that no sandbox and no owner can take the daemon's file
// descriptors from the others, and the node's share leaves descriptors for the API,
// the agents and the store. A connection over a cap is reset at once and audited.
type connLimit struct {
	max, perOwner, node int
	// lookup gives a source address's sandbox and its owner.
	lookup func(netip.Addr) (id, owner string, ok bool)
	audit  func(egress.Record)

	mu      sync.Mutex
	open    map[string]int // by sandbox
	byOwner map[string]int
	total   int
}

func newConnLimit(max, perOwner, node int, lookup func(netip.Addr) (string, string, bool), audit func(egress.Record)) *connLimit {
	return &connLimit{max: max, perOwner: perOwner, node: node, lookup: lookup, audit: audit,
		open: map[string]int{}, byOwner: map[string]int{}}
}

// admit counts c against its sandbox's, its owner's and the node's caps and returns it
// wrapped so that closing it gives the slots back; nil (with c reset) when any cap is
// reached. Connections from sources that are no sandbox pass uncounted: the proxy
// refuses them itself.
func (l *connLimit) admit(c *net.TCPConn, port int) net.Conn {
	remote, _ := netip.ParseAddrPort(c.RemoteAddr().String())
	id, owner, ok := l.lookup(remote.Addr().Unmap())
	if !ok {
		return c
	}
	l.mu.Lock()
	reason := ""
	switch {
	case l.open[id] >= l.max:
		reason = fmt.Sprintf("the sandbox has %d connections open, the most it may", l.max)
	case l.perOwner > 0 && l.byOwner[owner] >= l.perOwner:
		reason = fmt.Sprintf("the sandbox's owner has %d connections open across its sandboxes, the most an owner may", l.perOwner)
	case l.node > 0 && l.total >= l.node:
		reason = fmt.Sprintf("the node has %d sandbox connections open, the most it keeps descriptors for", l.node)
	}
	if reason != "" {
		l.mu.Unlock()
		l.audit(egress.Record{Sandbox: id, Port: port, Method: "TCP", Time: time.Now(), Reason: reason})
		c.SetLinger(0)
		c.Close()
		return nil
	}
	l.open[id]++
	l.byOwner[owner]++
	l.total++
	l.mu.Unlock()
	return &limitedConn{TCPConn: c, release: func() { l.release(id, owner) }}
}

func (l *connLimit) release(id, owner string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open[id]--; l.open[id] <= 0 {
		delete(l.open, id)
	}
	if l.byOwner[owner]--; l.byOwner[owner] <= 0 {
		delete(l.byOwner, owner)
	}
	l.total--
}

// openConns is how many connections sandbox id holds.
func (l *connLimit) openConns(id string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.open[id]
}

// connBudget derives the node's connection caps from the daemon's open-files limit
// (soft, which Go raises to the hard limit at start). A quarter of the descriptors, at
// least 1024, is kept for the API, the agents, the store and the driver; every admitted
// connection is counted at two descriptors (the sandbox's side and the upstream's).
// One owner may hold half of the node's connections.
func connBudget() (node, perOwner int) {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY {
		rl.Cur = 1 << 20
	}
	limit := int(min(rl.Cur, 1<<24))
	reserve := max(1024, limit/4)
	node = max((limit-reserve)/2, 64)
	return node, max(node/2, 32)
}

// limitedConn is an admitted connection. It embeds the *net.TCPConn, so the proxy's
// relay still reaches its descriptor (SyscallConn), its half-close and its linger.
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
		c, err := acceptRetry(l.Listener)
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

// acceptRetry accepts from l until it gets a connection or l is closed. Any other
// error of a live listener (EMFILE, ENFILE, ENOBUFS, ENOMEM: descriptors or memory
// short for a moment, which sandboxes opening connections can bring about) is waited
// out with a backoff of up to a second, rather than ending the listener's service for
// every sandbox until the daemon restarts.
func acceptRetry(l net.Listener) (net.Conn, error) {
	var delay time.Duration
	for {
		c, err := l.Accept()
		if err == nil || errors.Is(err, net.ErrClosed) {
			return c, err
		}
		delay = min(max(2*delay, acceptBackoff), time.Second)
		time.Sleep(delay)
	}
}

// acceptBackoff is acceptRetry's first wait.
const acceptBackoff = 5 * time.Millisecond
