package sandboxlink

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"go.uber.org/goleak"
)

// The tests build everything inside namespaces they make: a "node" namespace plays the
// host (it has no uplink, so no packet can leave it), and every sandbox namespace hangs
// off it. The addresses below exist only there.

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const (
	proxyPort     = 3128
	dnsPort       = 5353
	httpPort      = 8080
	tlsPort       = 8443
	tcpPort       = 8444
	forbiddenPort = 9999 // a TCP and a UDP listener that no sandbox may reach
	sandboxPort   = 8000 // a listener inside a sandbox that nobody may reach
	dialTimeout   = 300 * time.Millisecond
)

var (
	testSubnet = netip.MustParsePrefix("10.203.0.0/16")
	otherAddr  = netip.MustParseAddr("192.168.77.1") // another address of the node
	remoteAddr = netip.MustParseAddr("198.51.100.7") // "the internet" (TEST-NET-2); routed nowhere
	nodeUp     = netip.MustParseAddr("172.31.255.1") // the node's end of its link to the world
	worldUp    = netip.MustParseAddr("172.31.255.2")
)

// requireHost skips unless the tests run as root, and fails instead in CI.
func requireHost(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("needs root (network namespaces, veth, nftables)")
	}
	t.Skip("needs root (network namespaces, veth, nftables)")
}

// inNetns runs fn on a throwaway thread inside the namespace at path; sockets fn opens
// stay in that namespace for their whole life.
func inNetns(path string, fn func() error) error {
	return onThread(func() error {
		ns, err := vnetns.GetFromPath(path)
		if err != nil {
			return err
		}
		defer ns.Close()
		if err := vnetns.Set(ns); err != nil {
			return err
		}
		return fn()
	})
}

type testNode struct{ dir, path, world string }

// newTestNode makes the namespace that plays the node, with forwarding on (so that the
// forward chain, not a sysctl, is what keeps sandboxes apart) and otherAddr on lo, and
// a "world" namespace behind it that holds remoteAddr, routed from the node by a veth
// pair on private addresses. Neither has any other interface.
func newTestNode(t testing.TB) *testNode {
	t.Helper()
	n := &testNode{dir: t.TempDir()}
	n.path, n.world = filepath.Join(n.dir, "node"), filepath.Join(n.dir, "world")
	for _, p := range []string{n.path, n.world} {
		if err := newNamed(p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := removeNamed(p); err != nil {
				t.Error(err)
			}
		})
	}
	err := inNetns(n.path, func() error {
		if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0); err != nil {
			return err
		}
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.AddrAdd(lo, ipNet(otherAddr, 32)); err != nil {
			return err
		}
		world, err := vnetns.GetFromPath(n.world)
		if err != nil {
			return err
		}
		defer world.Close()
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "up0"
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "up0", PeerNamespace: netlink.NsFd(world)}); err != nil {
			return err
		}
		return upWithRoute("up0", nodeUp, worldUp, netip.PrefixFrom(remoteAddr, 32))
	})
	if err == nil {
		err = inNetns(n.world, func() error {
			lo, err := netlink.LinkByName("lo")
			if err == nil {
				err = netlink.AddrAdd(lo, ipNet(remoteAddr, 32))
			}
			if err != nil {
				return err
			}
			return upWithRoute("up0", worldUp, nodeUp, testSubnet)
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// upWithRoute gives the interface name the address self/30, brings it up and routes dst
// via gw.
func upWithRoute(name string, self, gw netip.Addr, dst netip.Prefix) error {
	l, err := netlink.LinkByName(name)
	if err == nil {
		err = netlink.AddrAdd(l, ipNet(self, 30))
	}
	if err == nil {
		err = netlink.LinkSetUp(l)
	}
	if err == nil {
		err = netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw.AsSlice(),
			Dst: &net.IPNet{IP: dst.Addr().AsSlice(), Mask: net.CIDRMask(dst.Bits(), 32)}})
	}
	return err
}

func (n *testNode) config() Config {
	return Config{Subnet: testSubnet, HostPrefix: "alt", RunDir: filepath.Join(n.dir, "netns"),
		ProxyPort: proxyPort, TransparentHTTPPort: httpPort, TransparentTLSPort: tlsPort,
		TransparentTCPPort: tcpPort, DNSPort: dnsPort, HostNetns: n.path, ListenerMark: testMark}
}

// testMark is the test node's listener mark: its namespace has no other table.
const testMark = markBase | 0x42

// newTestManager returns a Manager on node. At cleanup a fresh Manager deletes whatever
// any Manager of the test left, and the test fails unless that leaves nothing.
func newTestManager(t testing.TB, n *testNode) *Manager {
	t.Helper()
	t.Cleanup(func() { sweep(t, n.config()) })
	return openManager(t, n.config())
}

func openManager(t testing.TB, cfg Config) *Manager {
	t.Helper()
	m, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

func sweep(t testing.TB, cfg Config) {
	m, err := New(cfg)
	if err != nil {
		t.Errorf("cleanup: %v", err)
	} else {
		defer m.Close()
		ids, err := m.List()
		if err != nil {
			t.Errorf("cleanup: %v", err)
		}
		for _, id := range ids {
			if err := m.Delete(context.Background(), id); err != nil {
				t.Errorf("cleanup: delete %s: %v", id, err)
			}
		}
		if left, err := m.List(); err != nil || len(left) > 0 {
			t.Errorf("cleanup: left after Delete: %v (%v)", left, err)
		}
	}
	// Whatever happened above, leave no bind mount behind.
	entries, _ := os.ReadDir(cfg.RunDir)
	for _, e := range entries {
		t.Errorf("cleanup: %s left in the run directory", e.Name())
		if err := removeNamed(filepath.Join(cfg.RunDir, e.Name())); err != nil {
			t.Error(err)
		}
	}
}

func create(t testing.TB, m *Manager, id, mode string) *Sandbox {
	t.Helper()
	sb, err := m.Create(t.Context(), id, mode)
	if err != nil {
		t.Fatalf("Create(%s, %s): %v", id, mode, err)
	}
	return sb
}

// services are the node's listeners, on every address of the node namespace: each TCP
// one answers with its name (the transparent ones add the original destination), the
// DNS one echoes, and the forbidden ones count what reaches them; so do the world's
// listeners on remoteAddr (TCP 22, 53, 80, 443 and UDP 53), which no sandbox may reach.
type services struct {
	wg        sync.WaitGroup
	closers   []io.Closer
	forbidden atomic.Int32 // connections and datagrams that reached a forbidden port or the world
}

func startServices(t testing.TB, n *testNode) *services {
	t.Helper()
	s := &services{}
	t.Cleanup(func() {
		for _, c := range s.closers {
			c.Close()
		}
		s.wg.Wait()
	})
	err := inNetns(n.path, func() error {
		// The node's own sockets carry the mark, as the daemon's do; the others do not.
		lc := func(name string) net.ListenConfig {
			if name == "forbidden" {
				return net.ListenConfig{}
			}
			return net.ListenConfig{Control: MarkSocket(testMark)}
		}
		for port, name := range map[int]string{proxyPort: "proxy", dnsPort: "dns", httpPort: "http", tlsPort: "tls", tcpPort: "tcp", forbiddenPort: "forbidden"} {
			lc := lc(name)
			l, err := lc.Listen(context.Background(), "tcp4", fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			s.serveTCP(l.(*net.TCPListener), name)
		}
		for port, name := range map[int]string{dnsPort: "dns", forbiddenPort: "forbidden"} {
			lc := lc(name)
			c, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf(":%d", port))
			if err != nil {
				return err
			}
			s.serveUDP(c.(*net.UDPConn), name)
		}
		return nil
	})
	if err == nil {
		err = inNetns(n.world, func() error {
			for _, port := range []int{22, 53, 80, 443} {
				l, err := net.ListenTCP("tcp4", &net.TCPAddr{Port: port})
				if err != nil {
					return err
				}
				s.serveTCP(l, "forbidden")
			}
			c, err := net.ListenUDP("udp4", &net.UDPAddr{Port: 53})
			if err == nil {
				s.serveUDP(c, "forbidden")
			}
			return err
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func (s *services) serveTCP(l *net.TCPListener, name string) {
	s.closers = append(s.closers, l)
	s.wg.Go(func() {
		for {
			c, err := l.AcceptTCP()
			if err != nil {
				return
			}
			reply := name
			switch name {
			case "forbidden":
				s.forbidden.Add(1)
			case "http", "tls", "tcp":
				dst, err := OriginalDst(c)
				reply = fmt.Sprintf("%s %v %v", name, dst, err)
			}
			c.Write([]byte(reply))
			c.Close()
		}
	})
}

func (s *services) serveUDP(c *net.UDPConn, name string) {
	s.closers = append(s.closers, c)
	s.wg.Go(func() {
		buf := make([]byte, 512)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if name == "forbidden" {
				s.forbidden.Add(1)
				continue
			}
			c.WriteToUDPAddrPort(append([]byte(name+":"), buf[:n]...), from)
		}
	})
}

// listenIn starts a TCP listener inside the namespace at path that answers "inside".
func (s *services) listenIn(t testing.TB, path string) {
	t.Helper()
	err := inNetns(path, func() error {
		l, err := net.ListenTCP("tcp4", &net.TCPAddr{Port: sandboxPort})
		if err == nil {
			s.serveTCP(l, "inside")
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
}

// tcpFrom dials dst from inside the namespace at path and returns what the server said.
func tcpFrom(path string, dst netip.AddrPort) (reply string, err error) {
	err = inNetns(path, func() error {
		d := net.Dialer{Timeout: dialTimeout}
		c, err := d.Dial("tcp4", dst.String())
		if err != nil {
			return err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		b, err := io.ReadAll(c)
		reply = string(b)
		return err
	})
	return reply, err
}

// udpFrom sends one datagram to dst from inside the namespace at path and returns the
// answer, if one comes within dialTimeout.
func udpFrom(path string, dst netip.AddrPort) (reply string, err error) {
	err = inNetns(path, func() error {
		c, err := net.Dial("udp4", dst.String())
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("q")); err != nil {
			return err
		}
		c.SetDeadline(time.Now().Add(dialTimeout))
		b := make([]byte, 512)
		n, err := c.Read(b)
		reply = string(b[:n])
		return err
	})
	return reply, err
}

// pingFrom sends one ICMP echo request to dst from inside the namespace at path and
// reports whether an echo reply came back within dialTimeout.
func pingFrom(path string, dst netip.Addr) (replied bool, err error) {
	err = inNetns(path, func() error {
		c, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		defer c.Close()
		req := []byte{8, 0, 0, 0, 0, 0, 0, 1, 'a', 'l'} // echo request, seq 1
		// A new id each time, so that no earlier ping's conntrack entry lets this one by.
		binary.BigEndian.PutUint16(req[4:], uint16(pingID.Add(1)))
		binary.BigEndian.PutUint16(req[2:], icmpChecksum(req))
		if _, err := c.WriteTo(req, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		c.SetReadDeadline(time.Now().Add(dialTimeout))
		b := make([]byte, 512)
		for {
			n, from, err := c.ReadFrom(b)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil
			}
			if err != nil {
				return err
			}
			if n >= 8 && b[0] == 0 && from.(*net.IPAddr).IP.Equal(dst.AsSlice()) {
				replied = true
				return nil
			}
		}
	})
	return replied, err
}

var pingID atomic.Uint32

func icmpChecksum(b []byte) uint16 {
	var sum uint32
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}
