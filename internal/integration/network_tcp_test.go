package integration

import (
	"crypto/rand"
	"io"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
	"github.com/vishvananda/netlink"
)

// netEchoServer listens on ip (port 0: any) and echoes each connection until the
// client half-closes, then closes; it counts connections.
func netEchoServer(t testing.TB, ip string) (port string, conns func() int) {
	t.Helper()
	l, err := net.Listen("tcp4", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	count := make(chan struct{}, 1000)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			count <- struct{}{}
			go func() {
				defer c.Close()
				c.SetDeadline(time.Now().Add(30 * time.Second))
				io.Copy(c, c)
			}()
		}
	}()
	_, port, _ = net.SplitHostPort(l.Addr().String())
	return port, func() int { return len(count) }
}

// TestNetworkTCPRules checks plain TCP to ports other than 80 and 443: it goes through
// the proxy's relay, which lets it through only when an address or prefix rule allows
// the address and port, still refuses protected addresses that are not authorised, and
// audits each connection with its bytes.
func TestNetworkTCPRules(t *testing.T) {
	w := newNetWorld(t)
	n := w.node(t)
	// The upstreams listen on an address of the host's that is neither loopback (a
	// sandbox's 127.0.0.1 is its own) nor a documentation one (never reachable): the
	// relay dials a connection's original destination as it is.
	host := netLoopbackAlias(t)
	ip := host.String()
	allowedPort, allowedConns := netEchoServer(t, ip)
	otherPort, otherConns := netEchoServer(t, ip)
	prefix := ip + "/32:" + allowedPort
	private := []string{ip + "/32"} // the node's own address is protected unless authorised
	wide := netip.PrefixFrom(host, 24).Masked().String()

	create := func(name string, pol api.NetworkPolicy) *api.Sandbox {
		sb := n.Create(t, api.CreateSandboxRequest{Name: name, Network: &pol})
		netInstallProbe(t, n, sb.Name)
		return sb
	}
	cidr := create("tcp-cidr", api.NetworkPolicy{Mode: "allowlist", Allow: []string{wide + ":" + allowedPort}, AllowPrivate: private})
	exact := create("tcp-exact", api.NetworkPolicy{Mode: "allowlist", Allow: []string{prefix}, AllowPrivate: private})
	unauthorised := create("tcp-unauth", api.NetworkPolicy{Mode: "allowlist", Allow: []string{prefix}})
	baseline := create("tcp-base", api.NetworkPolicy{Mode: "baseline", AllowPrivate: private})
	methods := create("tcp-methods", api.NetworkPolicy{Mode: "allowlist", Allow: []string{prefix + "/GET"}, AllowPrivate: private})

	t.Run("allowed by a prefix rule", func(t *testing.T) {
		for _, sb := range []*api.Sandbox{cidr, exact} {
			// 64 KiB each way with a half-close in the middle.
			if r := netProbe(t, n, sb.Name, "echo", ip, allowedPort, "0123456789abcdef", "4096"); !r.OK {
				t.Errorf("%s: echo through the relay: %s", sb.Name, r)
			}
			rec := netWaitEgress(t, n, sb.Name, "the relayed connection", func(r api.EgressRecord) bool {
				return r.Method == "TCP" && r.Allowed
			})
			if rec.Port == 0 {
				continue
			}
			if rec.Addr != ip || rec.Port != atoi(t, allowedPort) || rec.BytesUp != 65536 || rec.BytesDown != 65536 || rec.Rule == "" {
				t.Errorf("%s: egress record %+v, want TCP to %s:%s with 65536 bytes each way and its rule", sb.Name, rec, ip, allowedPort)
			}
		}
	})

	t.Run("refused", func(t *testing.T) {
		before := otherConns() + allowedConns()
		cases := []struct {
			sb     *api.Sandbox
			port   string
			reason string
		}{
			{cidr, otherPort, "no rule without methods"},
			{exact, otherPort, "no rule without methods"},
			{unauthorised, allowedPort, "protected"},
			{baseline, allowedPort, "baseline allows only HTTP"},
			{methods, allowedPort, "no rule without methods"},
		}
		for _, c := range cases {
			if r := netProbe(t, n, c.sb.Name, "echo", ip, c.port, "x", "10"); r.OK || r.Error == "" && r.Body == "10 of 10 bytes echoed" {
				t.Errorf("%s: TCP to %s:%s got %s, want it refused", c.sb.Name, ip, c.port, r)
			}
			rec := netWaitEgress(t, n, c.sb.Name, "the refusal", func(r api.EgressRecord) bool {
				return r.Method == "TCP" && !r.Allowed && r.Port == atoi(t, c.port)
			})
			if rec.Port != 0 && !strings.Contains(rec.Reason, c.reason) {
				t.Errorf("%s: refusal reason %q, want it to say %q", c.sb.Name, rec.Reason, c.reason)
			}
		}
		if got := otherConns() + allowedConns(); got != before {
			t.Errorf("the upstreams got %d connections from refused sandboxes", got-before)
		}
	})

	t.Run("allowed by a host rule, for the addresses the sandbox resolved", func(t *testing.T) {
		w.dns.setAnswers("db.example.test", host)
		sb := create("tcp-name", api.NetworkPolicy{Mode: "allowlist", Allow: []string{"db.example.test:" + allowedPort}, AllowPrivate: private})
		// The address alone is not allowed before the sandbox has looked the name up.
		if r := netProbe(t, n, sb.Name, "echo", ip, allowedPort, "x", "10"); r.OK {
			t.Errorf("TCP to %s:%s before resolving db.example.test: %s, want it refused", ip, allowedPort, r)
		}
		// A client that ignores the proxy resolves the name and connects to the address.
		if r := netProbe(t, n, sb.Name, "echo", "db.example.test", allowedPort, "q", "1000"); !r.OK {
			t.Errorf("TCP to db.example.test:%s: %s", allowedPort, r)
		}
		rec := netWaitEgress(t, n, sb.Name, "the connection by name", func(r api.EgressRecord) bool {
			return r.Method == "TCP" && r.Allowed
		})
		if rec.Port != 0 && (rec.Host != "db.example.test" || rec.Addr != ip || rec.BytesUp != 1000) {
			t.Errorf("record %+v, want host db.example.test at %s with 1000 bytes up", rec, ip)
		}
		// Another port of the same host stays closed.
		if r := netProbe(t, n, sb.Name, "echo", "db.example.test", otherPort, "x", "10"); r.OK {
			t.Errorf("TCP to db.example.test:%s: %s, want it refused", otherPort, r)
		}
		// Through the proxy (CONNECT), the tunnel is relayed as it is.
		res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{Argv: []string{"python3", "-c", `
import os, socket, urllib.parse, sys
u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
s = socket.create_connection((u.hostname, u.port), timeout=10)
s.sendall(b"CONNECT db.example.test:` + allowedPort + ` HTTP/1.1\r\nHost: db.example.test\r\n\r\n")
head = b""
while b"\r\n\r\n" not in head:
    head += s.recv(1)
s.sendall(b"through the tunnel")
s.shutdown(socket.SHUT_WR)
body = b""
while True:
    c = s.recv(4096)
    if not c: break
    body += c
print(head.split(b"\r\n")[0].decode(), body.decode())
`}, Timeout: "30s"})
		if err != nil {
			t.Fatalf("CONNECT db.example.test:%s: %v", allowedPort, err)
		}
		if !strings.Contains(res.Stdout, " 200 ") || !strings.Contains(res.Stdout, "through the tunnel") {
			t.Errorf("CONNECT db.example.test:%s: got %q (stderr %q), want 200 and the echo", allowedPort, res.Stdout, res.Stderr)
		}
	})

	t.Run("UDP stays closed", func(t *testing.T) {
		udp := netUDPTrap(t, net.JoinHostPort(ip, "0"))
		if r := netProbe(t, n, cidr.Name, "udp", ip, udp.port()); r.OK {
			t.Errorf("UDP from an allowlist with TCP rules: got %s, want no answer", r)
		}
		if p := udp.pkts.Load(); p != 0 {
			t.Errorf("a sandbox's datagrams reached the host: %d", p)
		}
	})

	t.Run("policy change applies within 1s", func(t *testing.T) {
		netSetPolicy(t, n, cidr.Name, api.NetworkPolicy{Mode: "allowlist",
			Allow: []string{wide + ":" + allowedPort + "," + otherPort}, AllowPrivate: private})
		netWithin(t, time.Second, "the second port allowed", func() bool {
			return netProbe(t, n, cidr.Name, "echo", ip, otherPort, "y", "3").OK
		})
		netSetPolicy(t, n, cidr.Name, api.NetworkPolicy{Mode: "baseline", AllowPrivate: private})
		netWithin(t, time.Second, "TCP refused again", func() bool {
			return !netProbe(t, n, cidr.Name, "echo", ip, allowedPort, "z", "3").OK
		})
	})
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// netLoopbackAlias gives the host a private address of its own, on its loopback
// interface, for the test's duration.
func netLoopbackAlias(t testing.TB) netip.Addr {
	t.Helper()
	b := make([]byte, 2)
	rand.Read(b)
	addr := netip.AddrFrom4([4]byte{10, 252, b[0], 1 + b[1]%250})
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	if err := netlink.AddrAdd(lo, a); err != nil {
		t.Fatalf("add %s to lo: %v", addr, err)
	}
	t.Cleanup(func() {
		if err := netlink.AddrDel(lo, a); err != nil {
			t.Errorf("remove %s from lo: %v", addr, err)
		}
	})
	return addr
}

// TestNetworkConnectionCap: a sandbox holds at most the node's cap of connections to
// the proxy at once; one over it is reset and audited, and closing one makes room.
func TestNetworkConnectionCap(t *testing.T) {
	w := newNetWorld(t)
	netRequireHostNetns(t)
	n := testenv.NewNode(t, testenv.Options{Network: true, UpstreamDNS: w.dns.addr, ExtraCAs: []string{w.caFile}, MaxConns: 5})
	sb := n.Create(t, api.CreateSandboxRequest{Name: "cap", Network: &api.NetworkPolicy{Mode: "baseline"}})
	// Five connections to the proxy stay open; the sixth is reset; after one closes,
	// another gets in. Each line is what one attempt saw.
	res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{Argv: []string{"python3", "-c", `
import os, socket, time, urllib.parse
u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
def attempt():
    s = None
    try:
        s = socket.create_connection((u.hostname, u.port), timeout=5)
        s.settimeout(1)
        print("closed" if s.recv(1) == b"" else "data")
    except socket.timeout:
        print("open")
    except OSError as e:
        print("reset" if isinstance(e, ConnectionResetError) else type(e).__name__)
    return s
held = [attempt() for _ in range(6)]
held[0].close()
time.sleep(0.5)  # the proxy sees the close and gives the slot back
held.append(attempt())
`}, Timeout: "60s"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(res.Stdout), []string{"open", "open", "open", "open", "open", "reset", "open"}; !slices.Equal(got, want) {
		t.Fatalf("attempts saw %v (stderr %q), want %v", got, res.Stderr, want)
	}
	netWaitEgress(t, n, sb.Name, "the refusal over the cap", func(r api.EgressRecord) bool {
		return !r.Allowed && strings.Contains(r.Reason, "5 connections open")
	})
}
