package egress

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestProxyModes(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_modes", Generation: 1})
	c := e.client("127.0.0.1", false)
	rules := []Rule{mustRule(t, "api.example.com/GET,POST")}
	type want struct{ none, deny, baseline, allowlist, unrestricted int }
	tests := []struct {
		method, host string
		want         want
	}{
		{"GET", "pypi.org", want{403, 403, 200, 200, 200}},
		{"POST", "pypi.org", want{403, 403, 403, 403, 200}},
		{"GET", "api.example.com", want{403, 403, 403, 200, 200}},
		{"POST", "api.example.com", want{403, 403, 403, 200, 200}},
		{"GET", "other.example.com", want{403, 403, 403, 403, 200}},
		{"POST", "other.example.com", want{403, 403, 403, 403, 200}},
	}
	for _, scheme := range []string{"http", "https"} {
		for _, tt := range tests {
			wants := map[Mode]int{ModeNone: tt.want.none, ModeDenyAll: tt.want.deny, ModeBaseline: tt.want.baseline,
				ModeAllowlist: tt.want.allowlist, ModeUnrestricted: tt.want.unrestricted}
			for _, mode := range modes {
				p := Policy{Mode: mode, AllowPrivate: loopback8}
				if mode == ModeAllowlist {
					p.Rules = rules
				}
				if err := p.Validate(); err != nil {
					t.Fatal(err)
				}
				e.setPolicy(p)
				hits := e.httpHits.Load() + e.httpsHits.Load()
				u := scheme + "://" + tt.host + "/simple/"
				got, body := do(t, c, tt.method, u, "x")
				c.CloseIdleConnections() // each mode decides a connection of its own
				if got != wants[mode] {
					t.Errorf("%s: %s %s = %d (%s), want %d", mode, tt.method, u, got, body, wants[mode])
					continue
				}
				reached := e.httpHits.Load()+e.httpsHits.Load() > hits
				if reached != (got == 200) {
					t.Errorf("%s: %s %s answered %d but the upstream was reached=%v", mode, tt.method, u, got, reached)
				}
				if got == 200 && !strings.Contains(body, scheme+"-upstream "+tt.method+" "+tt.host+" /simple/ body=1") {
					t.Errorf("%s: %s %s reached the upstream as %q", mode, tt.method, u, body)
				}
			}
		}
	}
}

// TestProxyNeedsAllowPrivate: the upstreams are on loopback, so without AllowPrivate no
// mode reaches them, whatever the host rules say.
func TestProxyNeedsAllowPrivate(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_private", Generation: 1, Policy: Policy{Mode: ModeUnrestricted}})
	c := e.client("127.0.0.1", false)
	for _, u := range []string{"http://pypi.org/", "https://pypi.org/", "http://127.0.0.1/", "https://127.0.0.1/"} {
		if got, body := do(t, c, "GET", u, ""); got != http.StatusForbidden {
			t.Errorf("GET %s without AllowPrivate = %d (%s), want 403", u, got, body)
		}
	}
	if n := e.httpHits.Load() + e.httpsHits.Load(); n != 0 {
		t.Errorf("the upstreams got %d requests, want none", n)
	}
	e.setPolicy(Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8})
	for _, u := range []string{"http://pypi.org/", "https://pypi.org/", "http://127.0.0.1/", "https://127.0.0.1/"} {
		if got, body := do(t, c, "GET", u, ""); got != http.StatusOK {
			t.Errorf("GET %s with 127.0.0.0/8 authorised = %d (%s), want 200", u, got, body)
		}
	}
}

func TestProxyMethodsInsideHTTPS(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_methods", Generation: 1, Policy: Policy{
		Mode: ModeAllowlist, Rules: []Rule{mustRule(t, "api.example.com:443/GET")}, AllowPrivate: loopback8}})
	c := e.client("127.0.0.1", false)
	tests := []struct {
		method, url string
		want        int
	}{
		{"GET", "https://api.example.com/", 200},
		{"POST", "https://api.example.com/", 403},
		{"DELETE", "https://api.example.com/", 403},
		{"PUT", "https://api.example.com/", 403},
		{"GET", "https://api.example.com/again", 200},
		{"GET", "http://api.example.com/", 403}, // the rule names port 443 only
		{"HEAD", "https://pypi.org/", 200},
		{"PATCH", "https://pypi.org/", 403},
	}
	for _, tt := range tests {
		got, body := do(t, c, tt.method, tt.url, "payload")
		if got != tt.want {
			t.Errorf("%s %s = %d (%s), want %d", tt.method, tt.url, got, body, tt.want)
		}
		if got == 403 && tt.method == "POST" && !strings.Contains(body, "method POST is not allowed") {
			t.Errorf("POST refusal says %q, want it to name the method", body)
		}
	}
	// Every request inside the one tunnel was decided on its own; the refused ones
	// never reached the upstream.
	if got := e.httpsHits.Load(); got != 3 {
		t.Errorf("the TLS upstream got %d requests, want 3 (the allowed ones)", got)
	}
	e.waitRecord("refused DELETE", func(r Record) bool {
		return r.Method == "DELETE" && !r.Allowed && r.Port == 443 && r.Host == "api.example.com"
	})
}

func TestProxyAudit(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_audit", Generation: 7, Policy: Policy{
		Mode: ModeAllowlist, Rules: []Rule{mustRule(t, "api.example.com/GET,POST")}, AllowPrivate: loopback8}})
	c := e.client("127.0.0.1", false)
	body := strings.Repeat("u", 1000)
	for _, scheme := range []string{"http", "https"} {
		e.resetRecords()
		if got, _ := do(t, c, "POST", scheme+"://api.example.com/bytes?n=5000", body); got != 200 {
			t.Fatalf("%s POST = %d, want 200", scheme, got)
		}
		port := map[string]int{"http": 80, "https": 443}[scheme]
		r := e.waitRecord(scheme+" POST", func(r Record) bool { return r.Method == "POST" })
		want := Record{Sandbox: "sb_audit", Generation: 7, Host: "api.example.com", Addr: "127.0.0.1", Port: port,
			Method: "POST", BytesUp: 1000, BytesDown: 5000, Allowed: true, Decision: DecisionAllow, Rule: "api.example.com/GET,POST", Time: r.Time,
			Mode: string(ModeAllowlist)}
		if !reflect.DeepEqual(r, want) {
			t.Errorf("%s POST record = %+v, want %+v", scheme, r, want)
		}
		if r.Time.IsZero() {
			t.Errorf("%s POST record has no time", scheme)
		}
	}
	// The tunnel's own record comes when it closes, with its wire bytes.
	for _, tr := range e.transport {
		tr.CloseIdleConnections()
	}
	r := e.waitRecord("the tunnel", func(r Record) bool { return r.Method == "CONNECT" })
	if !r.Allowed || r.Host != "api.example.com" || r.Port != 443 || r.Addr != "127.0.0.1" || r.BytesUp < 1000 || r.BytesDown < 5000 {
		t.Errorf("tunnel record = %+v, want allowed api.example.com:443 via 127.0.0.1 with at least the body bytes", r)
	}
	// A refusal is audited with its reason.
	if got, _ := do(t, c, "GET", "http://other.example.com/", ""); got != 403 {
		t.Fatalf("GET other.example.com = %d, want 403", got)
	}
	r = e.waitRecord("the refusal", func(r Record) bool { return r.Host == "other.example.com" })
	if r.Allowed || !strings.Contains(r.Reason, "not in the allowlist") || r.Sandbox != "sb_audit" {
		t.Errorf("refusal record = %+v, want refused with the reason", r)
	}
}

func TestProxyPolicyChange(t *testing.T) {
	// A secret bound keeps TLS terminated in mode unrestricted (a tunnel that passes
	// TLS through is cut instead: TestProxyPassesTLS).
	e := newTestEnv(t, SandboxInfo{ID: "sb_change", Generation: 1, Policy: Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8},
		Secrets: []Substitution{{Secret: "s", Placeholder: "AIRLOCK_PLACEHOLDER_s", Hosts: []string{"api.example.com"}}}})
	c := e.client("127.0.0.1", false)
	for _, u := range []string{"http://other.example.com/", "https://other.example.com/"} {
		if got, _ := do(t, c, "GET", u, ""); got != 200 {
			t.Fatalf("GET %s under unrestricted = %d, want 200", u, got)
		}
	}
	// The https tunnel is still open (kept alive): its next request follows the new
	// policy, and so does every new connection.
	e.setPolicy(Policy{Mode: ModeDenyAll})
	for _, u := range []string{"http://other.example.com/", "https://other.example.com/", "https://pypi.org/"} {
		if got, _ := do(t, c, "GET", u, ""); got != 403 {
			t.Errorf("GET %s after the change to deny_all = %d, want 403", u, got)
		}
	}
	fresh := e.client("127.0.0.1", false)
	if got, _ := do(t, fresh, "GET", "https://other.example.com/", ""); got != 403 {
		t.Errorf("new connection after the change to deny_all = %d, want 403", got)
	}
	e.setPolicy(Policy{Mode: ModeBaseline, AllowPrivate: loopback8})
	if got, _ := do(t, fresh, "GET", "https://pypi.org/", ""); got != 200 {
		t.Errorf("GET pypi.org after the change to baseline = %d, want 200", got)
	}
	// A new generation behind the same address does not inherit the old tunnels.
	if got, _ := do(t, c, "GET", "https://other.example.com/", ""); got != 403 {
		t.Errorf("GET other.example.com under baseline = %d, want 403", got)
	}
	sb := *e.sandbox.Load()
	sb.Generation++
	e.sandbox.Store(&sb)
	if got, body := do(t, fresh, "GET", "https://pypi.org/", ""); got != 403 || !strings.Contains(body, "changed") {
		t.Errorf("old tunnel after a restart = %d (%s), want 403 saying the sandbox changed", got, body)
	}
}

func TestProxyUnknownSource(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_known", Generation: 1, Policy: Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8}})
	c := e.client("127.0.0.3", false)
	for _, u := range []string{"http://pypi.org/", "https://pypi.org/"} {
		if got, body := do(t, c, "GET", u, ""); got != 403 {
			t.Errorf("GET %s from an unknown source = %d (%s), want 403", u, got, body)
		}
	}
	e.waitRecord("unknown source", func(r Record) bool { return strings.Contains(r.Reason, "unknown source 127.0.0.3") })
	if n := e.httpHits.Load() + e.httpsHits.Load(); n != 0 {
		t.Errorf("the upstreams got %d requests from an unknown source, want none", n)
	}
}

func TestProxyRefusesNonProxyRequests(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_plain", Generation: 1, Policy: Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8}})
	// A client of its own: no connection pooled by another test, no proxy from the
	// environment, and a bound on the wait.
	c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get("http://" + e.proxyAddr + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("origin-form request to the proxy = %d, want 400", resp.StatusCode)
	}
}

func TestProxyVerifiesUpstreamCertificate(t *testing.T) {
	// A rule with methods: the proxy terminates the tunnel (without, a tunnel to a port
	// other than 443 is relayed as it is).
	e := newTestEnv(t, SandboxInfo{ID: "sb_cert", Generation: 1, Policy: Policy{Mode: ModeAllowlist,
		Rules: mustRules(t, "badcert.example:8443/GET"), AllowPrivate: loopback8}})
	c := e.client("127.0.0.1", false)
	// The dial hook sends port 8443 to the plain upstream, which cannot answer TLS.
	if got, body := do(t, c, "GET", "https://badcert.example:8443/", ""); got != http.StatusBadGateway {
		t.Errorf("GET an upstream that fails TLS = %d (%s), want 502", got, body)
	}
	// An upstream whose certificate is not from a trusted root is refused too.
	e.proxy.cfg.UpstreamRoots = e.nodeCA.Pool()
	e.proxy.mu.Lock()
	clear(e.proxy.transports)
	e.proxy.mu.Unlock()
	if got, body := do(t, c, "GET", "https://pypi.org/", ""); got != http.StatusBadGateway {
		t.Errorf("GET an upstream with an untrusted certificate = %d (%s), want 502", got, body)
	}
}

// TestProxyCloseWithOpenConnections: Close ends tunnels that are waiting for a
// handshake and transparent connections that sent nothing, and waits for them.
func TestProxyCloseWithOpenConnections(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_close", Generation: 1, Policy: Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8}})
	_, tunnel := e.rawConnect(t, "pypi.org:443")
	defer tunnel.Close()
	client, server := tcpPair(t)
	e.proxy.ServeTransparent(server, netip.MustParseAddrPort("93.184.216.34:443")) // waits for a first byte
	if err := e.proxy.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for _, c := range []net.Conn{tunnel, client} {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("an open connection was not closed by Close: %v", err)
		}
	}
}

// TestProxySaysWhy: a refused or failed CONNECT carries the reason in its status line
// and headers, where clients that show only the status (pip, Go) show it; a name that
// does not resolve is an error decision, over https and plain http alike, and a policy
// refusal a deny.
func TestProxySaysWhy(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_why", Generation: 1, Policy: Policy{
		Mode: ModeAllowlist, Rules: []Rule{mustRule(t, "nowhere.example"), mustRule(t, "api.example.com")}, AllowPrivate: loopback8}})
	connect := func(target string) *http.Response {
		t.Helper()
		conn, err := net.DialTimeout("tcp", e.proxyAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
		resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
		if err != nil {
			t.Fatalf("CONNECT %s: %v", target, err)
		}
		resp.Body.Close()
		return resp
	}
	for _, c := range []struct {
		target, decision, reason string
		status                   int
	}{
		{"nowhere.example:443", DecisionError, "cannot resolve nowhere.example", http.StatusBadGateway},
		{"other.example.com:443", DecisionDeny, "other.example.com:443 refused", http.StatusForbidden},
	} {
		e.resetRecords()
		resp := connect(c.target)
		if resp.StatusCode != c.status || !strings.Contains(resp.Status, c.reason) ||
			resp.Header.Get(DecisionHeader) != c.decision || !strings.Contains(resp.Header.Get(ReasonHeader), c.reason) {
			t.Errorf("CONNECT %s: status %q, headers %v; want %d with %q in the status line and a %s decision",
				c.target, resp.Status, resp.Header, c.status, c.reason, c.decision)
		}
		r := e.waitRecord("CONNECT "+c.target, func(r Record) bool { return r.Method == http.MethodConnect })
		if r.Decision != c.decision || r.Allowed {
			t.Errorf("CONNECT %s record: %+v, want decision %s", c.target, r, c.decision)
		}
	}
	e.resetRecords()
	c := e.client("127.0.0.1", false)
	req, _ := http.NewRequest("GET", "http://nowhere.example/", nil)
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway || resp.Header.Get(DecisionHeader) != DecisionError {
		t.Errorf("plain http to a name that does not resolve: %d %v, want 502 and an error decision", resp.StatusCode, resp.Header)
	}
	if r := e.waitRecord("GET nowhere", func(r Record) bool { return r.Method == "GET" }); r.Decision != DecisionError || r.Allowed {
		t.Errorf("plain http record %+v, want decision error", r)
	}
	// A reason carries hosts a sandbox chose: nothing in it can end the status line.
	if got := headerSafe("a\r\nInjected: 1\x00é"); strings.ContainsAny(got, "\r\n\x00") {
		t.Errorf("headerSafe kept control bytes: %q", got)
	}
}
