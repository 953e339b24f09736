package sandboxlink

import (
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"
)

func want(proto string) string {
	if proto == "tcp" {
		return "connection refused"
	}
	return "no answer"
}

func ap(a netip.Addr, port int) netip.AddrPort { return netip.AddrPortFrom(a, uint16(port)) }

// TestEgressRules checks, from inside a sandbox, everything it can and cannot reach.
func TestEgressRules(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	svc := startServices(t, node)
	a := create(t, m, "sb_a", "baseline")
	b := create(t, m, "sb_b", "allowlist")
	svc.listenIn(t, b.NetnsPath)

	for _, sb := range []*Sandbox{a, b} {
		if want := "alt" + hex.EncodeToString(sb.HostAddr.AsSlice()); sb.HostIf != want || sb.SandboxIf != "eth0" {
			t.Errorf("%s: interfaces %q / %q, want %s / eth0", sb.ID, sb.HostIf, sb.SandboxIf, want)
		}
		if !testSubnet.Contains(sb.HostAddr) || sb.SandboxAddr != sb.HostAddr.Next() {
			t.Errorf("%s: addresses %v / %v, want a pair in %v", sb.ID, sb.HostAddr, sb.SandboxAddr, testSubnet)
		}
		if id, ok := m.Lookup(sb.SandboxAddr); id != sb.ID || !ok {
			t.Errorf("Lookup(%v) = %q, %v; want %q", sb.SandboxAddr, id, ok, sb.ID)
		}
		mapped := netip.AddrFrom16(sb.SandboxAddr.As16())
		if id, _ := m.Lookup(mapped); id != sb.ID {
			t.Errorf("Lookup(%v) = %q, want %q", mapped, id, sb.ID)
		}
	}
	if id, ok := m.Lookup(a.HostAddr); ok {
		t.Errorf("Lookup(host address %v) = %q, want no sandbox", a.HostAddr, id)
	}

	allowed := []struct {
		name, proto string
		dst         netip.AddrPort
		want        string
	}{
		{"proxy", "tcp", ap(a.HostAddr, proxyPort), "proxy"},
		{"dns tcp", "tcp", ap(a.HostAddr, dnsPort), "dns"},
		{"dns tcp 53 redirected", "tcp", ap(a.HostAddr, 53), "dns"},
		{"dns udp", "udp", ap(a.HostAddr, dnsPort), "dns:q"},
		{"dns udp 53 redirected", "udp", ap(a.HostAddr, 53), "dns:q"},
		{"http anywhere redirected", "tcp", ap(remoteAddr, 80), "http 198.51.100.7:80 <nil>"},
		{"tls anywhere redirected", "tcp", ap(remoteAddr, 443), "tls 198.51.100.7:443 <nil>"},
		{"http to the other sandbox redirected", "tcp", ap(b.SandboxAddr, 80), fmt.Sprintf("http %v:80 <nil>", b.SandboxAddr)},
		// Every other TCP connection goes to the proxy's relay, which decides it.
		{"other tcp port anywhere to the relay", "tcp", ap(remoteAddr, 22), "tcp 198.51.100.7:22 <nil>"},
		{"tcp 53 anywhere to the relay", "tcp", ap(remoteAddr, 53), "tcp 198.51.100.7:53 <nil>"},
		{"another node address to the relay", "tcp", ap(otherAddr, forbiddenPort), fmt.Sprintf("tcp %v <nil>", ap(otherAddr, forbiddenPort))},
		{"proxy port of another node address to the relay", "tcp", ap(otherAddr, proxyPort), fmt.Sprintf("tcp %v <nil>", ap(otherAddr, proxyPort))},
		{"the other sandbox to the relay", "tcp", ap(b.SandboxAddr, sandboxPort), fmt.Sprintf("tcp %v <nil>", ap(b.SandboxAddr, sandboxPort))},
		{"the other sandbox's host address to the relay", "tcp", ap(b.HostAddr, proxyPort), fmt.Sprintf("tcp %v <nil>", ap(b.HostAddr, proxyPort))},
	}
	for _, c := range allowed {
		t.Run("allowed/"+c.name, func(t *testing.T) {
			var got string
			var err error
			if c.proto == "tcp" {
				got, err = tcpFrom(a.NetnsPath, c.dst)
			} else {
				got, err = udpFrom(a.NetnsPath, c.dst)
			}
			if err != nil || got != c.want {
				t.Errorf("%s %v from %s: got %q, %v; want %q", c.proto, c.dst, a.ID, got, err, c.want)
			}
		})
	}

	refused := []struct {
		name, proto string
		dst         netip.AddrPort
	}{
		{"other port of the host address", "tcp", ap(a.HostAddr, forbiddenPort)},
		{"transparent port without redirect", "tcp", ap(a.HostAddr, httpPort)},
		{"relay port without redirect", "tcp", ap(a.HostAddr, tcpPort)},
		{"udp other port of the host address", "udp", ap(a.HostAddr, forbiddenPort)},
		{"udp other port of another node address", "udp", ap(otherAddr, forbiddenPort)},
		{"udp dns port of another node address", "udp", ap(otherAddr, dnsPort)},
		{"udp 53 anywhere", "udp", ap(remoteAddr, 53)},
	}
	for _, c := range refused {
		t.Run("refused/"+c.name, func(t *testing.T) {
			var got string
			var err error
			if c.proto == "tcp" {
				got, err = tcpFrom(a.NetnsPath, c.dst)
			} else {
				got, err = udpFrom(a.NetnsPath, c.dst)
			}
			// A TCP refusal is the reject rule's reset, not a timeout or a missing route.
			if err == nil || got != "" || c.proto == "tcp" && !errors.Is(err, syscall.ECONNREFUSED) {
				t.Errorf("%s %v from %s: got %q, %v; want %s", c.proto, c.dst, a.ID, got, err, want(c.proto))
			}
		})
	}

	t.Run("refused/icmp", func(t *testing.T) {
		for _, dst := range []netip.Addr{a.HostAddr, otherAddr, b.SandboxAddr, remoteAddr} {
			if replied, err := pingFrom(a.NetnsPath, dst); replied || err != nil {
				t.Errorf("ping %v from %s: replied %v, %v; want no reply", dst, a.ID, replied, err)
			}
		}
	})
	t.Run("refused/into a sandbox", func(t *testing.T) {
		for _, from := range []string{node.path, node.world} {
			if got, err := tcpFrom(from, ap(b.SandboxAddr, sandboxPort)); err == nil || got != "" {
				t.Errorf("tcp %v from %s: got %q, %v; want an error", ap(b.SandboxAddr, sandboxPort), from, got, err)
			}
		}
	})
	t.Run("refused/the proxy and DNS from elsewhere", func(t *testing.T) {
		// Only sandboxes may open connections to the node's proxy and DNS ports.
		for _, port := range []int{proxyPort, httpPort, tlsPort, tcpPort, dnsPort} {
			for _, dst := range []netip.Addr{a.HostAddr, otherAddr} {
				if got, err := tcpFrom(node.path, ap(dst, port)); err == nil || got != "" {
					t.Errorf("tcp %v from the node: got %q, %v; want no connection", ap(dst, port), got, err)
				}
			}
			if got, err := tcpFrom(node.world, ap(nodeUp, port)); err == nil || got != "" {
				t.Errorf("tcp %v from the world: got %q, %v; want no connection", ap(nodeUp, port), got, err)
			}
		}
		if got, err := udpFrom(node.path, ap(otherAddr, dnsPort)); err == nil || got != "" {
			t.Errorf("udp dns from the node: got %q, %v; want no answer", got, err)
		}
	})
	t.Run("allowed/any other program's port", func(t *testing.T) {
		// The rules match the node's marked sockets, not port numbers: a port of another
		// program stays reachable, even one a rule would have named had the node had it
		// before (the table outlives the daemon).
		var port int
		err := inNetns(node.path, func() error {
			l, err := net.ListenTCP("tcp4", &net.TCPAddr{})
			if err == nil {
				port = l.Addr().(*net.TCPAddr).Port
				svc.serveTCP(l, "other")
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// A node that had that port as its proxy's rewrites the rules, as a daemon does
		// when it starts; then the first config's rules come back.
		stale := node.config()
		stale.ProxyPort = port
		openManager(t, stale).Close()
		defer func() { openManager(t, node.config()).Close() }()
		if got, err := tcpFrom(node.world, ap(nodeUp, port)); err != nil || got != "other" {
			t.Errorf("tcp %v from the world: got %q, %v; want the other program", ap(nodeUp, port), got, err)
		}
		if got, err := tcpFrom(node.path, ap(otherAddr, port)); err != nil || got != "other" {
			t.Errorf("tcp %v from the node: got %q, %v; want the other program", ap(otherAddr, port), got, err)
		}
	})
	t.Run("allowed/the other sandbox's own proxy", func(t *testing.T) {
		if got, err := tcpFrom(b.NetnsPath, ap(b.HostAddr, proxyPort)); err != nil || got != "proxy" {
			t.Errorf("tcp proxy from %s: got %q, %v", b.ID, got, err)
		}
	})
	if n := svc.forbidden.Load(); n != 0 {
		t.Errorf("the forbidden and world listeners were reached %d times, want 0", n)
	}

	t.Run("ipv6 off", func(t *testing.T) {
		err := inNetns(a.NetnsPath, func() error {
			b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
			if err != nil {
				return err
			}
			if strings.TrimSpace(string(b)) != "1" {
				t.Errorf("disable_ipv6 = %q, want 1", b)
			}
			addrs, err := netlink.AddrList(nil, netlink.FAMILY_V6)
			if len(addrs) > 0 {
				t.Errorf("IPv6 addresses in the sandbox: %v", addrs)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}

// TestRulesAreWhatBlocks removes the sandboxes' set elements and sees the forbidden
// destinations become reachable, then puts them back: the refusals above come from the
// rules (not from a quirk of the test's namespaces), and a sandbox's rules are only its
// elements. The forward chain guards both ends: a cannot reach b while b is listed.
func TestRulesAreWhatBlocks(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	svc := startServices(t, node)
	a := create(t, m, "sb_a", "baseline")
	b := create(t, m, "sb_b", "baseline")
	svc.listenIn(t, b.NetnsPath)

	type reached struct{ node, udp, ping, world, other bool }
	reach := func() (r reached) {
		got, _ := tcpFrom(a.NetnsPath, ap(otherAddr, forbiddenPort))
		r.node = got == "forbidden"
		before := svc.forbidden.Load()
		udpFrom(a.NetnsPath, ap(a.HostAddr, forbiddenPort))
		r.udp = svc.forbidden.Load() > before
		r.ping, _ = pingFrom(a.NetnsPath, a.HostAddr)
		got, _ = tcpFrom(a.NetnsPath, ap(remoteAddr, 22))
		r.world = got == "forbidden"
		got, _ = tcpFrom(a.NetnsPath, ap(b.SandboxAddr, sandboxPort))
		r.other = got == "inside"
		return r
	}
	steps := []struct {
		name string
		do   func() error
		want reached
	}{
		{"with rules", func() error { return nil }, reached{}},
		{"without a's elements", func() error { return m.deleteElements(a.ID, nil) },
			reached{node: true, udp: true, ping: true, world: true}},
		{"without a's and b's elements", func() error { return m.deleteElements(b.ID, nil) },
			reached{node: true, udp: true, ping: true, world: true, other: true}},
		{"with rules again", func() error { return errors.Join(m.addElements(a), m.addElements(b)) }, reached{}},
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := reach(); got != s.want {
			t.Errorf("%s: reached %+v, want %+v", s.name, got, s.want)
		}
	}
}
