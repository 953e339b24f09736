package network

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestCheckNotLocal: a public address the node has but did not have at start is
// refused; what the Guard already decided (its known node addresses, every non-public
// range) is left to it.
func TestCheckNotLocal(t *testing.T) {
	known := []netip.Prefix{netip.MustParsePrefix("93.184.215.14/32")}
	local := map[netip.Addr]bool{
		netip.MustParseAddr("93.184.215.14"): true, // known at start
		netip.MustParseAddr("93.184.215.99"): true, // gained later
		netip.MustParseAddr("2a01:4f8::1"):   true, // an IPv6 address gained later
		netip.MustParseAddr("10.1.2.3"):      true, // private: the Guard's and the policy's
		netip.MustParseAddr("127.0.0.1"):     true,
	}
	isLocal := func(a netip.Addr) (bool, error) {
		if a == netip.MustParseAddr("93.184.215.66") {
			return false, errors.New("netlink broke")
		}
		return local[a], nil
	}
	for _, c := range []struct {
		addr    string
		refused bool
	}{
		{"93.184.215.14:22", false},
		{"93.184.215.99:22", true},
		{"[::ffff:93.184.215.99]:22", true},
		{"[2a01:4f8::1]:443", true},
		{"10.1.2.3:80", false},
		{"127.0.0.1:80", false},
		{"93.184.215.1:443", false},
		{"93.184.215.66:443", true}, // cannot tell: refused
		{"not an address", true},
	} {
		err := checkNotLocal(c.addr, known, isLocal)
		if c.refused != (err != nil) || err != nil && !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("checkNotLocal(%s) = %v, want refused %v (permission denied)", c.addr, err, c.refused)
		}
	}
}

// inNewNetns runs fn on a thread in a network namespace of its own, which goes with
// the thread: the thread is never unlocked, so the runtime ends it.
func inNewNetns(t *testing.T, fn func() error) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces)")
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestGuardedDialAsksTheKernel: in a namespace of the test's own, an address added
// after "start" (and an AnyIP range) is found local by the kernel and the dial is
// refused before any packet leaves; the listener there sees nothing.
func TestGuardedDialAsksTheKernel(t *testing.T) {
	inNewNetns(t, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			return err
		}
		added := netip.MustParseAddr("93.184.215.99")
		if err := netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: added.AsSlice(), Mask: net.CIDRMask(32, 32)}}); err != nil {
			return err
		}
		_, anyIP, _ := net.ParseCIDR("93.184.216.0/24")
		if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: anyIP, Type: unix.RTN_LOCAL,
			Table: unix.RT_TABLE_LOCAL, Scope: netlink.SCOPE_HOST}); err != nil {
			return err
		}
		for addr, want := range map[string]bool{"93.184.215.99": true, "93.184.216.7": true, "127.0.0.1": true, "93.184.215.1": false} {
			if got, err := kernelIsLocal(netip.MustParseAddr(addr)); err != nil || got != want {
				t.Errorf("kernelIsLocal(%s) = %v, %v; want %v", addr, got, err, want)
			}
		}
		l, err := net.Listen("tcp4", added.String()+":0")
		if err != nil {
			return err
		}
		defer l.Close()
		accepted := make(chan struct{}, 1)
		go func() {
			if c, err := l.Accept(); err == nil {
				c.Close()
				accepted <- struct{}{}
			}
		}()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		port := l.Addr().(*net.TCPAddr).Port
		// The proxy's own dialer, as the node builds it, knowing none of these at start.
		c, _, err := proxyDialer(egress.Guard{}, nil).DialChecked(ctx, added.String(), port, nil)
		if err == nil {
			c.Close()
		}
		if !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("dial %v, the node's own address: %v, want permission denied", l.Addr(), err)
		}
		// Known at start, the Guard decides it (Private, allowed here as allow_private
		// would): the dial goes.
		known := []netip.Prefix{netip.PrefixFrom(added, 32)}
		c, _, err = proxyDialer(egress.Guard{Node: known}, nil).DialChecked(ctx, added.String(), port, known)
		if err != nil {
			t.Errorf("dial %v known to the Guard: %v", l.Addr(), err)
		} else {
			c.Close()
			<-accepted
		}
		return nil
	})
}

// errListener fails its first Accepts as a listener short of descriptors does, then
// reports itself closed.
type errListener struct {
	net.Listener
	fails, calls int
}

func (l *errListener) Accept() (net.Conn, error) {
	l.calls++
	if l.calls <= l.fails {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", unix.EMFILE)}
	}
	return nil, net.ErrClosed
}

// TestAcceptSurvivesErrors: running out of descriptors for a moment (which sandboxes
// opening connections can bring about) must not end a listener's service: the
// transparent listeners' loop and limitedListener go on accepting until closed.
func TestAcceptSurvivesErrors(t *testing.T) {
	n := &Node{limit: newConnLimit(1, 1, 1, func(netip.Addr) (string, string, bool) { return "", "", false }, nil)}
	l := &errListener{fails: 3}
	done := make(chan struct{})
	go func() {
		defer close(done)
		n.acceptTransparent(l, func(net.Conn, netip.AddrPort) {})
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("acceptTransparent did not return after its listener closed")
	}
	if l.calls != 4 {
		t.Errorf("acceptTransparent called Accept %d times, want 4 (3 failures, then closed)", l.calls)
	}
	ll := &limitedListener{Listener: &errListener{fails: 3}, lim: n.limit}
	if _, err := ll.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("limitedListener.Accept = %v, want net.ErrClosed", err)
	}
	if calls := ll.Listener.(*errListener).calls; calls != 4 {
		t.Errorf("limitedListener called Accept %d times, want 4", calls)
	}
}
