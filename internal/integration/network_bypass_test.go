package integration

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// TestNetworkBypass tries, from inside real sandboxes, the ways around the egress
// policy DESIGN.md §6 names — alternate encodings of protected addresses, Host/SNI
// games on the transparent path, redirects to internal addresses and DNS rebinding —
// and checks that each is refused and that nothing behind it was reached.
func TestNetworkBypass(t *testing.T) {
	w := newNetWorld(t)
	n := w.node(t)
	create := func(name string, pol api.NetworkPolicy) *api.Sandbox {
		sb := n.Create(t, api.CreateSandboxRequest{Name: name, Network: &pol})
		netInstallProbe(t, n, sb.Name)
		return sb
	}
	// Every name allowed, no protected address authorised: the address checks decide.
	unr := create("byp-unr", api.NetworkPolicy{Mode: "unrestricted"})
	// The loopback authorised, one host allowed: the name rules decide.
	lst := create("byp-list", api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.example.test"}, AllowPrivate: netLoopback8})
	// The baseline, with the loopback authorised, for the Host/SNI games.
	base := create("byp-base", api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8})
	// Every name allowed, only the upstream's own address authorised.
	narrow := create("byp-narrow", api.NetworkPolicy{Mode: "unrestricted", AllowPrivate: []string{netip.PrefixFrom(w.ip, 32).String()}})

	t.Run("IP literals", func(t *testing.T) {
		loop := []string{"127.0.0.1", "2130706433", "017700000001", "0177.0.0.1", "0x7f.0.0.1", "0x7f000001",
			"0X7F.1", "127.1", "127.0.1", "127.0.0.1.", "localhost", "LOCALHOST.",
			"[::1]", "[0:0:0:0:0:0:0:1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[::127.0.0.1]", "[64:ff9b::7f00:1]"}
		meta := []string{"169.254.169.254", "2852039166", "0251.0376.0251.0376", "0xa9fea9fe", "0xa9.0xfe.0xa9.0xfe",
			"169.254.43518", "0251.0xfe.43518", "[::ffff:169.254.169.254]", "[::ffff:a9fe:a9fe]", "[fd00:ec2::254]",
			"100.100.100.200"}
		if w.ip != netip.MustParseAddr("127.0.0.1") {
			loop = append(loop, w.ip.String())
		}
		// Positive control: the same way to ask works for an allowed host.
		if r := netProbe(t, n, lst.Name, "connect", "api.example.test:443"); r.Status != 200 {
			t.Fatalf("CONNECT api.example.test:443: got %s, want 200", r)
		}
		before := w.totalHits()
		var cmds [][]string
		for _, h := range loop {
			cmds = append(cmds, []string{"connect", h + ":443"}, []string{"absolute", "http://" + h + "/"})
		}
		for _, h := range meta {
			cmds = append(cmds, []string{"connect", h + ":80"}, []string{"absolute", "http://" + h + "/latest/meta-data/"})
		}
		// A user-info part does not change the host.
		cmds = append(cmds, []string{"absolute", "http://api.example.test@169.254.169.254/"},
			[]string{"absolute", "http://api.example.test:80@2130706433/"})
		// Transparently, the Host header names the destination; an address there is
		// checked like any other.
		for _, h := range []string{"2130706433", "0x7f.1", "[::1]", "169.254.169.254", "0xa9fea9fe", "[fd00:ec2::254]"} {
			cmds = append(cmds, []string{"plain", netFrontAddr + ":80", h})
		}
		for _, sb := range []*api.Sandbox{unr, lst} {
			for i, r := range netProbeBatch(t, n, sb.Name, cmds) {
				if r.Status != 403 {
					t.Errorf("%s: %s: got %s, want 403", sb.Name, strings.Join(cmds[i], " "), r)
				}
			}
		}
		if got := w.totalHits(); got != before {
			t.Errorf("the upstreams served %d requests addressed by IP literal, want none", got-before)
		}
		netWaitEgress(t, n, unr.Name, "a refused metadata address", func(r api.EgressRecord) bool {
			return !r.Allowed && r.Host == "169.254.169.254" && strings.Contains(r.Reason, "metadata")
		})
		netWaitEgress(t, n, unr.Name, "a refused loopback address in another encoding", func(r api.EgressRecord) bool {
			return !r.Allowed && r.Host == "127.0.0.1" && r.Method == "CONNECT" && strings.Contains(r.Reason, "protected")
		})
	})

	t.Run("Host and SNI", func(t *testing.T) {
		front443 := netFrontAddr + ":443"
		// Positive controls.
		if r := netProbe(t, n, base.Name, "tls", front443, "pypi.org", "pypi.org"); r.Status != 200 || !strings.Contains(r.Text, "hello from pypi.org") {
			t.Fatalf("transparent TLS to pypi.org: got %s, want 200", r)
		}
		if r := netProbe(t, n, base.Name, "tls", "-:0", "pypi.org", "pypi.org", "pypi.org:443"); r.Status != 200 {
			t.Fatalf("TLS to pypi.org through CONNECT: got %s, want 200", r)
		}
		before := w.hitsOf("other.example.test")
		cases := []struct {
			name       string
			args       []string
			wantStatus int // 403, or 0 for a closed connection
		}{
			{"transparent: allowed SNI, other Host", []string{"tls", front443, "pypi.org", "other.example.test"}, 403},
			{"transparent: other SNI, allowed Host", []string{"tls", front443, "other.example.test", "pypi.org"}, 0},
			{"transparent: allowed SNI, Host with another port", []string{"tls", front443, "pypi.org", "pypi.org:8443"}, 403},
			{"transparent: allowed SNI, Host an address", []string{"tls", front443, "pypi.org", "127.0.0.1"}, 403},
			{"transparent: no SNI", []string{"tls", front443, "127.0.0.1", "pypi.org"}, 0},
			{"CONNECT: other SNI in the tunnel", []string{"tls", "-:0", "other.example.test", "other.example.test", "pypi.org:443"}, 0},
			{"CONNECT: other Host in the tunnel", []string{"tls", "-:0", "pypi.org", "other.example.test", "pypi.org:443"}, 403},
		}
		for _, c := range cases {
			r := netProbe(t, n, base.Name, c.args...)
			if r.Status != c.wantStatus || strings.Contains(r.Text, "hello from") {
				t.Errorf("%s: got %s, want status %d", c.name, r, c.wantStatus)
			}
		}
		if got := w.hitsOf("other.example.test"); got != before {
			t.Errorf("other.example.test was reached %d times through Host/SNI games", got-before)
		}
		// The original destination is not trusted: plain HTTP to the metadata address
		// with an allowed Host goes to that host, resolved by the proxy.
		r := netProbe(t, n, base.Name, "plain", "169.254.169.254:80", "pypi.org")
		if r.Status != 200 || !strings.Contains(r.Text, "hello from pypi.org") {
			t.Errorf("plain HTTP to 169.254.169.254 with Host pypi.org: got %s, want pypi.org's answer", r)
		}
		if r := netProbe(t, n, base.Name, "plain", "169.254.169.254:80", "169.254.169.254"); r.Status != 403 {
			t.Errorf("plain HTTP to 169.254.169.254: got %s, want 403", r)
		}
	})

	t.Run("redirect to an internal address", func(t *testing.T) {
		internal := netip.MustParseAddr("127.0.0.2")
		if internal == w.ip {
			internal = netip.MustParseAddr("127.0.0.3")
		}
		tr := netTCPTrap(t, netip.AddrPortFrom(internal, 0).String())
		name := fmt.Sprintf("internal-%s.example.com", randHex(4))
		w.dns.setAnswers(name, internal)
		first := "api.example.test"
		// Positive control: the first host is reachable.
		netWantAllowed(t, w, n, narrow.Name, "GET", "https://"+first+"/", curlProxied, curlIgnoring)
		for _, to := range []string{
			"http://" + tr.addr + "/",
			"http://" + name + ":" + tr.port() + "/",
			"http://169.254.169.254/latest/meta-data/",
			"http://[fd00:ec2::254]/latest/meta-data/",
		} {
			from := "https://" + first + "/redirect?to=" + to
			for _, c := range netClients {
				hits := w.hitsOf(first)
				var r netFetchResult
				switch c {
				case curlProxied:
					r = sbCurl(t, n, narrow.Name, "-L", from).netFetchResult()
				case curlIgnoring:
					r = sbCurlDirect(t, n, narrow.Name, first, from, "-L").netFetchResult()
				default:
					r = netFetch(t, n, narrow.Name, c, "GET", from) // urllib follows redirects
				}
				if w.hitsOf(first) != hits+1 {
					t.Errorf("%s via %s: the first host served %d requests, want 1 (the redirect)", to, c, w.hitsOf(first)-hits)
				}
				if r.Status != 403 && r.Status != 0 || strings.Contains(r.Body, "trapped") {
					t.Errorf("redirect to %s followed by %s: got %s, want the second request refused", to, c, r.Detail)
				}
				if (c == curlProxied || c == pyProxied) && r.Status != 403 {
					t.Errorf("redirect to %s followed by %s: got %s, want the proxy's 403", to, c, r.Detail)
				}
			}
		}
		if got := tr.conns.Load(); got != 0 {
			t.Errorf("the internal server at %s got %d connections through redirects", tr.addr, got)
		}
		netWaitEgress(t, n, narrow.Name, "the refused redirect target", func(r api.EgressRecord) bool {
			return !r.Allowed && r.Host == internal.String() && strings.Contains(r.Reason, "protected")
		})
	})

	t.Run("DNS rebinding", func(t *testing.T) {
		link, ok := n.Network.Link(narrow.ID)
		if !ok {
			t.Fatalf("no link for %s", narrow.Name)
		}
		// Something that would answer at the node's own address on the link.
		tr := netTCPTrap(t, netip.AddrPortFrom(link.HostAddr, 443).String())
		metadata := netip.MustParseAddr("169.254.169.254")
		for _, bad := range []netip.Addr{metadata, link.HostAddr, netip.MustParseAddr("10.0.0.1")} {
			for _, c := range []netClient{curlProxied, curlIgnoring, pyProxied} {
				name := fmt.Sprintf("rebind-%s.example.com", randHex(4))
				// First the allowed upstream, then the protected address.
				w.dns.setRebind(name, w.ip, bad)
				r := netFetch(t, n, narrow.Name, c, "GET", "https://"+name+"/")
				if r.Status != 403 && r.Status != 0 || strings.Contains(r.Body, "hello from") {
					t.Errorf("%s rebinding to %s with %s: got %s, want it refused", name, bad, c, r.Detail)
				}
				if got := w.hitsOf(name); got != 0 {
					t.Errorf("%s rebinding to %s with %s: the upstream served %d requests", name, bad, c, got)
				}
				if w.dns.count("upstream", name) < 2 {
					t.Errorf("%s: the proxy resolved the name %d times, want a second look-up at dial time", name, w.dns.count("upstream", name))
				}
			}
		}
		if got := tr.conns.Load(); got != 0 {
			t.Errorf("the node's own address %s got %d connections through DNS rebinding", tr.addr, got)
		}
		netWaitEgress(t, n, narrow.Name, "a rebound name refused", func(r api.EgressRecord) bool {
			return !r.Allowed && strings.HasPrefix(r.Host, "rebind-") && strings.Contains(r.Reason, "169.254.169.254")
		})

		// A name with an allowed and a protected address is refused as a whole, and the
		// sandbox's DNS withholds the protected one.
		mixed := fmt.Sprintf("mixed-%s.example.com", randHex(4))
		w.dns.setAnswers(mixed, w.ip, metadata)
		netWantRefused(t, w, n, narrow.Name, "GET", "https://"+mixed+"/", curlProxied, curlIgnoring)
		r := netProbe(t, n, narrow.Name, "dns", mixed)
		if len(r.Addrs) != 1 || r.Addrs[0] != w.ip.String() {
			t.Errorf("DNS %s: got %s, want only %s (the metadata address withheld)", mixed, r, w.ip)
		}
		// The sandbox's DNS checks every answer: one that changes to a protected address
		// is withheld.
		sbName := fmt.Sprintf("rebind-dns-%s.example.com", randHex(4))
		w.dns.setRebind(sbName, w.ip, metadata)
		if r := netProbe(t, n, narrow.Name, "dns", sbName); len(r.Addrs) != 1 || r.Addrs[0] != w.ip.String() {
			t.Errorf("DNS %s, first answer: got %s, want %s", sbName, r, w.ip)
		}
		if r := netProbe(t, n, narrow.Name, "dns", sbName); len(r.Addrs) != 0 {
			t.Errorf("DNS %s, rebound to the metadata address: got %s, want it withheld", sbName, r)
		}
	})
}
