package integration

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
)

// netPublicWorld is a piece of the internet in a network namespace of the test's own:
// one public address on the namespace's loopback, routed from the host through a veth
// pair, where the world's HTTP and HTTPS handlers and a TCP echo server listen. Unlike
// the loopback upstreams, nothing about it is protected, so no policy needs to
// authorise a private range to reach it.
type netPublicWorld struct {
	addr     netip.Addr
	echoPort string
}

// newNetPublicWorld builds the namespace and its link; everything goes at cleanup.
func newNetPublicWorld(t testing.TB, w *netWorld) *netPublicWorld {
	t.Helper()
	b := make([]byte, 2)
	rand.Read(b)
	tag := hex.EncodeToString(b)
	name, hostIf, worldIf := "alworld"+tag, "alw"+tag, "alwp"+tag
	pub := netip.AddrFrom4([4]byte{203, 0, 114, 1 + b[0]%250}) // public, not documentation
	hostSide := netip.AddrFrom4([4]byte{100, 127, b[1], 1})    // the link, in CGNAT space
	worldSide := netip.AddrFrom4([4]byte{100, 127, b[1], 2})
	pw := &netPublicWorld{addr: pub}

	var l80, l443, echo net.Listener
	var worldNS vnetns.NsHandle
	// Sockets keep the namespace they were made in: make them inside, on a thread of
	// their own that goes back (or dies, if it cannot).
	err := onOwnThread(func(back func() error) error {
		var err error
		if worldNS, err = vnetns.NewNamed(name); err != nil {
			return err
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.AddrAdd(lo, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(pub, 32))})
		}
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		for _, l := range []*net.Listener{&l80, &l443, &echo} {
			if err != nil {
				break
			}
			port := map[*net.Listener]string{&l80: "80", &l443: "443", &echo: "0"}[l]
			*l, err = net.Listen("tcp4", net.JoinHostPort(pub.String(), port))
		}
		return errors.Join(err, back())
	})
	t.Cleanup(func() {
		for _, l := range []net.Listener{l80, l443, echo} {
			if l != nil {
				l.Close()
			}
		}
		if link, err := netlink.LinkByName(hostIf); err == nil {
			netlink.LinkDel(link) // takes its peer along
		}
		if err := vnetns.DeleteNamed(name); err != nil {
			t.Errorf("remove namespace %s: %v", name, err)
		}
		worldNS.Close()
	})
	if err != nil {
		t.Fatalf("public world: %v", err)
	}

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: hostIf}, PeerName: worldIf, PeerNamespace: netlink.NsFd(worldNS)}
	err = netlink.LinkAdd(veth)
	if err == nil {
		err = netlink.AddrAdd(veth, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(hostSide, 30))})
	}
	if err == nil {
		err = netlink.LinkSetUp(veth)
	}
	if err == nil {
		err = netlink.RouteAdd(&netlink.Route{LinkIndex: veth.Attrs().Index, Dst: prefixNet(netip.PrefixFrom(pub, 32)), Gw: worldSide.AsSlice()})
	}
	if err == nil {
		err = onOwnThread(func(back func() error) error {
			err := vnetns.Set(worldNS)
			var peer netlink.Link
			if err == nil {
				peer, err = netlink.LinkByName(worldIf)
			}
			if err == nil {
				err = netlink.AddrAdd(peer, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(worldSide, 30))})
			}
			if err == nil {
				err = netlink.LinkSetUp(peer)
			}
			if err == nil {
				err = netlink.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: hostSide.AsSlice()})
			}
			return errors.Join(err, back())
		})
	}
	if err != nil {
		t.Fatalf("public world link: %v", err)
	}

	hs := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second, ErrorLog: netQuietLog()}
	tlsSrv := &http.Server{Handler: w, ReadHeaderTimeout: 10 * time.Second, ErrorLog: netQuietLog(),
		TLSConfig: &tls.Config{GetCertificate: w.leaf, NextProtos: []string{"h2", "http/1.1"}}}
	go hs.Serve(l80)
	go tlsSrv.ServeTLS(l443, "", "")
	t.Cleanup(func() { hs.Close(); tlsSrv.Close() })
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						c.Write(buf[:n])
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	_, pw.echoPort, _ = net.SplitHostPort(echo.Addr().String())
	return pw
}

// onOwnThread runs fn on a locked OS thread; back returns the thread to the namespace
// it started in. If fn's thread cannot go back, it is not unlocked, so it ends with
// its goroutine instead of serving others from the wrong namespace.
func onOwnThread(fn func(back func() error) error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		origin, err := vnetns.Get()
		if err != nil {
			done <- err
			return
		}
		defer origin.Close()
		restored := false
		back := func() error {
			if err := vnetns.Set(origin); err != nil {
				return err
			}
			restored = true
			return nil
		}
		err = fn(back)
		if restored {
			runtime.UnlockOSThread()
		}
		done <- err
	}()
	return <-done
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// TestNetworkPublicInternet reaches a public address in a namespace of the test's own,
// with no private range authorised: through the proxy and transparently in mode
// unrestricted, by name in an allowlist, and refused in baseline; plain TCP goes to
// any port in unrestricted and only where a rule says in an allowlist.
func TestNetworkPublicInternet(t *testing.T) {
	w := newNetWorld(t)
	n := w.node(t)
	pw := newNetPublicWorld(t, w)
	const name = "public.example.test"
	w.dns.setAnswers(name, pw.addr)
	create := func(sbName string, pol api.NetworkPolicy) *api.Sandbox {
		sb := n.Create(t, api.CreateSandboxRequest{Name: sbName, Network: &pol})
		netInstallProbe(t, n, sb.Name)
		return sb
	}
	unr := create("pub-unr", api.NetworkPolicy{Mode: "unrestricted"})
	allow := create("pub-allow", api.NetworkPolicy{Mode: "allowlist", Allow: []string{name + "/GET", name + ":" + pw.echoPort}})
	base := create("pub-base", api.NetworkPolicy{Mode: "baseline"})

	t.Run("unrestricted", func(t *testing.T) {
		netWantAllowed(t, w, n, unr.Name, "GET", "https://"+name+"/")
		netWantAllowed(t, w, n, unr.Name, "POST", "http://"+name+"/", curlProxied, curlIgnoring)
		if r := netProbe(t, n, unr.Name, "echo", pw.addr.String(), pw.echoPort, "public", "2000"); !r.OK {
			t.Errorf("plain TCP to %s:%s: %s", pw.addr, pw.echoPort, r)
		}
		rec := netWaitEgress(t, n, unr.Name, "the plain TCP connection", func(r api.EgressRecord) bool {
			return r.Method == "TCP" && r.Allowed
		})
		if rec.Port != 0 && (rec.Rule != "unrestricted" || rec.Addr != pw.addr.String() || rec.BytesDown != 12000) {
			t.Errorf("record %+v, want TCP to %s under unrestricted with 12000 bytes down", rec, pw.addr)
		}
	})
	t.Run("allowlist", func(t *testing.T) {
		netWantAllowed(t, w, n, allow.Name, "GET", "https://"+name+"/")
		netWantRefused(t, w, n, allow.Name, "POST", "https://"+name+"/")
		if r := netProbe(t, n, allow.Name, "echo", name, pw.echoPort, "x", "100"); !r.OK {
			t.Errorf("plain TCP to %s:%s by name: %s", name, pw.echoPort, r)
		}
		if r := netProbe(t, n, allow.Name, "tcp", pw.addr.String(), "22"); r.OK {
			t.Errorf("plain TCP to %s:22, which no rule names: %s", pw.addr, r)
		}
	})
	t.Run("baseline", func(t *testing.T) {
		netWantRefused(t, w, n, base.Name, "GET", "https://"+name+"/")
		if r := netProbe(t, n, base.Name, "echo", pw.addr.String(), pw.echoPort, "x", "10"); r.OK {
			t.Errorf("plain TCP from baseline: %s", r)
		}
		rec := netWaitEgress(t, n, base.Name, "the refusal", func(r api.EgressRecord) bool {
			return r.Method == "TCP" && !r.Allowed
		})
		if rec.Port != 0 && !strings.Contains(rec.Reason, "baseline") {
			t.Errorf("refusal %+v, want the baseline's reason", rec)
		}
	})
	if t.Failed() {
		t.Logf("public world at %s, echo port %s", pw.addr, pw.echoPort)
	}
}
