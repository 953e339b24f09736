package network

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/sandboxlink"
)

// A health check that believes the configuration proves nothing: the rules of the
// node, or a table some other program (another node, one that stopped) left on the
// host, can keep every sandbox from its proxy and DNS while the daemon looks well.
// Probe builds a link exactly as a sandbox's (namespace, veth, set elements) and
// connects from inside it to the proxy and, through the redirect of port 53, to the
// DNS server: the path every sandbox's first packet takes.
const (
	probeEvery   = 30 * time.Second // a result is reused this long
	probeTimeout = 2 * time.Second  // per connection
)

type probeCache struct {
	mu   sync.Mutex // held while a probe runs: callers at once share it
	at   time.Time
	last runtime.Check
}

// Probe reports whether a sandbox's link reaches the node's proxy and DNS server
// through the node's own rules, from a probe at most probeEvery old.
func (n *Node) Probe(ctx context.Context) (runtime.Check, bool) {
	n.probe.mu.Lock()
	defer n.probe.mu.Unlock()
	if !n.probe.at.IsZero() && time.Since(n.probe.at) < probeEvery {
		return n.probe.last, true
	}
	c := n.ProbeNow(ctx)
	if ctx.Err() == nil { // a caller that gave up does not decide for the next one
		n.probe.at, n.probe.last = time.Now(), c
	}
	return c, true
}

// ProbeNow probes at once and keeps no result: the check at the node's start, which
// must not answer for the status calls of the next probeEvery.
func (n *Node) ProbeNow(ctx context.Context) runtime.Check {
	c := runtime.Check{Name: "network", OK: true}
	proxy, dns, err := n.probeLink(ctx)
	if err != nil {
		c.OK = false
		c.Detail = err.Error()
		c.Degrades = "sandboxes cannot reach the node's egress proxy or DNS server: no name resolves and no connection " +
			"leaves them" + n.otherTablesHint()
	} else {
		c.Detail = fmt.Sprintf("a probe link reached the proxy (%s) and DNS (%s) through nftables table inet %s",
			proxy, dns, n.nm.TableName())
	}
	return c
}

// probeLink makes a sandbox link, connects from it to the proxy and DNS ports of its
// host address, and removes it.
func (n *Node) probeLink(ctx context.Context) (proxy, dns netip.AddrPort, retErr error) {
	var b [6]byte
	rand.Read(b[:])
	id := "probe-" + hex.EncodeToString(b[:])
	sb, err := n.nm.Create(ctx, id, "deny_all")
	if err != nil {
		return proxy, dns, fmt.Errorf("make a probe link: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := n.nm.Delete(ctx, id); err != nil && retErr == nil {
			retErr = fmt.Errorf("remove the probe link: %w", err)
		}
	}()
	f, err := os.Open(sb.NetnsPath)
	if err != nil {
		return proxy, dns, err
	}
	defer f.Close()
	proxy = netip.AddrPortFrom(sb.HostAddr, uint16(n.ports.Proxy))
	dns = netip.AddrPortFrom(sb.HostAddr, 53)
	for _, to := range []struct {
		what string
		addr netip.AddrPort
	}{{"the egress proxy", proxy}, {"the DNS server (port 53, redirected to " + strconv.Itoa(n.ports.DNS) + ")", dns}} {
		dctx, cancel := context.WithTimeout(ctx, probeTimeout)
		c, err := sandboxlink.DialIn(dctx, int(f.Fd()), to.addr.String())
		cancel()
		if err != nil {
			return proxy, dns, fmt.Errorf("from a sandbox link, %s at %s: %w", to.what, to.addr, err)
		}
		c.Close()
	}
	return proxy, dns, nil
}

// ListenerMark is the mark of the node's listeners (sandboxlink.ReserveMark).
func (n *Node) ListenerMark() uint32 { return n.nm.ListenerMark() }

// otherTablesHint names the host's other nftables tables, where the cause often is.
func (n *Node) otherTablesHint() string {
	others, err := sandboxlink.OtherTables(n.nm.TableName())
	if err != nil || len(others) == 0 {
		return ""
	}
	return fmt.Sprintf("; other nftables tables on this host (`nft list table inet NAME`): %v", others)
}
