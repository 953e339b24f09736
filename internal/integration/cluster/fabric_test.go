package cluster

import (
	crand "crypto/rand"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/airlockhq/airlock/internal/testenv"
)

// fabric is the network the nodes of a test share, as if each were a host of its own on
// one LAN: a bridge in a network namespace of its own (the switch), a veth from it into
// the test's namespace (the host's address, where PostgreSQL and S3 listen and from
// where the test calls the nodes), and one namespace per node with a veth to the
// bridge. Every namespace is held by an open file of the test process (never a name
// in /run/netns): when the test process and the nodes' daemons are gone, the
// namespaces go, and with them every link, address and nftables table in them; the
// test's end of its veth goes with the switch.
type fabric struct {
	prefix   netip.Prefix // a /24 no interface of the host has an address in
	host     netip.Addr   // .1, in the test's namespace
	hostLink string       // the test's end of its veth to the switch
	sw       netns.NsHandle
	nodes    []netns.NsHandle
}

// fabricPlane is the /16 the fabric's /24 comes from: apart from the sandbox subnets
// (10.203.0.0/16 by default, 10.211 and 10.213 in the other tests).
const fabricPlane = 216

// newFabric makes the switch and the link to it from the test's namespace; its cleanup,
// registered on t, removes both and every node namespace added.
func newFabric(t testing.TB) *fabric {
	t.Helper()
	f := &fabric{sw: netns.None()}
	t.Cleanup(f.close)
	var tag [2]byte
	crand.Read(tag[:])
	f.hostLink = fmt.Sprintf("alk%02x%02x", tag[0], tag[1])
	f.prefix = testenv.FreeSubnet(t, fabricPlane)
	f.host = f.prefix.Addr().Next()
	var err error
	if f.sw, err = newNamespace(); err != nil {
		t.Fatalf("make the switch's network namespace: %v", err)
	}
	sw := f.handle(t, f.sw)
	defer sw.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "br0"}}
	if err := sw.LinkAdd(br); err != nil {
		t.Fatalf("make the bridge: %v", err)
	}
	if err := sw.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	up := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: f.hostLink}, PeerName: "uplink", PeerNamespace: netlink.NsFd(int(f.sw))}
	if err := netlink.LinkAdd(up); err != nil {
		t.Fatalf("make the veth to the switch: %v", err)
	}
	f.attach(t, sw, "uplink", br)
	link, err := netlink.LinkByName(f.hostLink)
	if err == nil {
		err = netlink.AddrAdd(link, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(f.host, f.prefix.Bits()))})
	}
	if err == nil {
		err = netlink.LinkSetUp(link)
	}
	if err != nil {
		t.Fatalf("address the test's end of the veth to the switch: %v", err)
	}
	return f
}

// addNode makes the namespace of node i (from 0), with lo up and eth0 on the bridge at
// the node's address, and returns it and the address.
func (f *fabric) addNode(t testing.TB, i int) (netns.NsHandle, netip.Addr) {
	t.Helper()
	ns, err := newNamespace()
	if err != nil {
		t.Fatalf("make node %d's network namespace: %v", i, err)
	}
	f.nodes = append(f.nodes, ns)
	addr := f.prefix.Addr()
	for range 11 + i {
		addr = addr.Next()
	}
	sw := f.handle(t, f.sw)
	defer sw.Close()
	br, err := sw.LinkByName("br0")
	if err != nil {
		t.Fatal(err)
	}
	port := fmt.Sprintf("n%d", i)
	if err := sw.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: port}, PeerName: "eth0", PeerNamespace: netlink.NsFd(int(ns))}); err != nil {
		t.Fatalf("make node %d's veth: %v", i, err)
	}
	f.attach(t, sw, port, br)
	h := f.handle(t, ns)
	defer h.Close()
	for _, name := range []string{"lo", "eth0"} {
		link, err := h.LinkByName(name)
		if err == nil && name == "eth0" {
			err = h.AddrAdd(link, &netlink.Addr{IPNet: ipNet(netip.PrefixFrom(addr, f.prefix.Bits()))})
		}
		if err == nil {
			err = h.LinkSetUp(link)
		}
		if err != nil {
			t.Fatalf("set up %s in node %d's namespace: %v", name, i, err)
		}
	}
	return ns, addr
}

// attach puts the switch's link name on the bridge and up.
func (f *fabric) attach(t testing.TB, sw *netlink.Handle, name string, br netlink.Link) {
	t.Helper()
	l, err := sw.LinkByName(name)
	if err == nil {
		err = sw.LinkSetMaster(l, br)
	}
	if err == nil {
		err = sw.LinkSetUp(l)
	}
	if err != nil {
		t.Fatalf("attach %s to the bridge: %v", name, err)
	}
}

func (f *fabric) handle(t testing.TB, ns netns.NsHandle) *netlink.Handle {
	t.Helper()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatalf("netlink in a test namespace: %v", err)
	}
	return h
}

// nsPath is a path that names namespace ns for as long as the test process holds it
// (nsenter --net=PATH).
func nsPath(ns netns.NsHandle) string {
	return fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns))
}

// close removes the test's veth (its peer in the switch goes with it) and lets go of
// every namespace: each goes once no process is left in it.
func (f *fabric) close() {
	if l, err := netlink.LinkByName(f.hostLink); err == nil {
		netlink.LinkDel(l)
	}
	for _, ns := range append(f.nodes, f.sw) {
		if ns.IsOpen() {
			ns.Close()
		}
	}
}

// newNamespace makes a network namespace and returns a handle on it. The thread that
// makes it goes back to its own namespace afterwards; one that cannot is never used
// again (it stays locked and ends with its goroutine). It must not end otherwise: a
// child started from a thread (PostgreSQL, weed) gets its parent-death signal when
// that thread ends.
func newNamespace() (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		home, err := netns.Get()
		if err != nil {
			done <- result{netns.None(), err}
			return
		}
		defer home.Close()
		ns, err := netns.New()
		if netns.Set(home) == nil {
			runtime.UnlockOSThread()
		}
		done <- result{ns, err}
	}()
	r := <-done
	return r.ns, r.err
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}
