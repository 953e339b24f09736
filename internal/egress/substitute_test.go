package egress

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/miekg/dns"
)

// The test secrets: "gh" for api.example.com in Authorization and X-Api-Key, "q" for
// every subdomain of example.com, in Authorization (the default) and the query string.
// The values have characters a query must escape.
const (
	ghPlaceholder = "AIRLOCK_PH_gh_5f2c9a"
	ghValue       = "ghp_real/VALUE+1"
	qPlaceholder  = "AIRLOCK_PH_q_77d01e"
	qValue        = "q-VALUE&x=1 "
	qEscaped      = "q-VALUE%26x%3D1+"
)

// secretEnv is a test proxy whose sandbox has the secrets gh and q; revoked makes
// their values fail to open, opened counts the openings.
type secretEnv struct {
	*testEnv
	revoked atomic.Bool
	opened  atomic.Int64
}

func newSecretEnv(t testing.TB, p Policy, opts ...func(*Config)) *secretEnv {
	t.Helper()
	e := &secretEnv{}
	e.testEnv = newTestEnv(t, SandboxInfo{ID: "sb_secrets", Generation: 1, Policy: p, Secrets: e.secrets()}, opts...)
	return e
}

func (e *secretEnv) secrets() []Substitution {
	value := func(v string) func() ([]byte, error) {
		return func() ([]byte, error) {
			e.opened.Add(1)
			if e.revoked.Load() {
				return nil, errdefs.Precondition("secret was revoked at 12:00")
			}
			return []byte(v), nil
		}
	}
	return []Substitution{
		{Secret: "gh", Placeholder: ghPlaceholder, Hosts: []string{"api.example.com"}, Headers: []string{"authorization", "X-Api-Key"},
			Value: value(ghValue)},
		{Secret: "q", Placeholder: qPlaceholder, Hosts: []string{"*.example.com"}, Query: true, Value: value(qValue)},
	}
}

// apiError returns the code and message of an answer in the API's error shape.
func apiError(body string) (code, msg string) {
	var e struct {
		Error struct{ Code, Message string }
	}
	json.Unmarshal([]byte(body), &e)
	return e.Error.Code, e.Error.Message
}

func basicAuth(cred string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(cred)) }

// send sends method url with headers (name, value pairs) through c and returns the
// status and body.
func send(t testing.TB, c *http.Client, method, url string, headers ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestSecretSubstitution(t *testing.T) {
	e := newSecretEnv(t, Policy{Mode: ModeBaseline, AllowPrivate: loopback8})
	c := e.client("127.0.0.1", false)
	tests := []struct {
		name     string
		method   string
		host     string
		path     string // with the query
		headers  []string
		want     int
		upstream []string // lines the upstream must have got (its /echo answer)
		secrets  []string // Record.Secrets
		reason   string   // in the refusal's record and answer
	}{
		{name: "bearer", method: "GET", host: "api.example.com", path: "/echo",
			headers: []string{"Authorization", "Bearer " + ghPlaceholder}, want: 200,
			upstream: []string{"Authorization: Bearer " + ghValue}, secrets: []string{"gh"}},
		{name: "custom header", method: "POST", host: "api.example.com", path: "/echo",
			headers: []string{"X-Api-Key", ghPlaceholder, "X-Other", "keep"}, want: 200,
			upstream: []string{"X-Api-Key: " + ghValue, "X-Other: keep"}, secrets: []string{"gh"}},
		{name: "basic auth password", method: "GET", host: "api.example.com", path: "/echo",
			headers: []string{"Authorization", basicAuth("user:" + ghPlaceholder)}, want: 200,
			upstream: []string{"Authorization: " + basicAuth("user:"+ghValue)}, secrets: []string{"gh"}},
		{name: "basic auth user", method: "GET", host: "api.example.com", path: "/echo",
			headers: []string{"Authorization", "basic " + base64.StdEncoding.EncodeToString([]byte(ghPlaceholder+":x-oauth-basic"))}, want: 200,
			upstream: []string{"Authorization: " + basicAuth(ghValue+":x-oauth-basic")}, secrets: []string{"gh"}},
		{name: "query of a secret with Query", method: "GET", host: "other.example.com", path: "/echo?key=" + qPlaceholder + "&a=b",
			want: 200, upstream: []string{"query=key=" + qEscaped + "&a=b"}, secrets: []string{"q"}},
		{name: "two secrets", method: "GET", host: "api.example.com", path: "/echo?key=" + qPlaceholder,
			headers: []string{"Authorization", "Bearer " + ghPlaceholder}, want: 200,
			upstream: []string{"query=key=" + qEscaped, "Authorization: Bearer " + ghValue}, secrets: []string{"gh", "q"}},
		{name: "no placeholder", method: "GET", host: "api.example.com", path: "/echo",
			headers: []string{"Authorization", "Bearer mine"}, want: 200, upstream: []string{"Authorization: Bearer mine"}},
		{name: "query of a secret without Query", method: "GET", host: "api.example.com", path: "/echo?token=" + ghPlaceholder,
			want: 403, secrets: []string{"gh"}, reason: `placeholder of secret "gh" in the query string`},
		{name: "path", method: "GET", host: "api.example.com", path: "/repos/" + ghPlaceholder,
			headers: []string{"Authorization", "Bearer " + ghPlaceholder}, want: 403, secrets: []string{"gh"},
			reason: `placeholder of secret "gh" in the URL path`},
		{name: "header the binding does not name", method: "GET", host: "api.example.com", path: "/echo",
			headers: []string{"Authorization", "Bearer " + ghPlaceholder, "Origin", "https://" + ghPlaceholder}, want: 403, secrets: []string{"gh"},
			reason: `placeholder of secret "gh" in the Origin header, where this secret is not substituted (its binding names Authorization, X-Api-Key)`},
		{name: "header outside the default", method: "GET", host: "other.example.com", path: "/echo",
			headers: []string{"x-anything", qPlaceholder}, want: 403, secrets: []string{"q"},
			reason: `placeholder of secret "q" in the X-Anything header, where this secret is not substituted (its binding names Authorization)`},
		{name: "basic auth of a binding without Authorization", method: "GET", host: "other.example.com", path: "/echo",
			headers: []string{"Authorization", basicAuth("user:" + qPlaceholder)}, want: 200,
			upstream: []string{"Authorization: " + basicAuth("user:"+qValue)}, secrets: []string{"q"}},
		{name: "host the policy allows", method: "GET", host: "pypi.org", path: "/echo",
			headers: []string{"Authorization", "Bearer " + ghPlaceholder}, want: 403, secrets: []string{"gh"},
			reason: `placeholder of secret "gh" sent to pypi.org, not one of its allowed hosts`},
		{name: "host of another secret", method: "GET", host: "other.example.com", path: "/echo",
			headers: []string{"X-Api-Key", ghPlaceholder}, want: 403, secrets: []string{"gh"},
			reason: `placeholder of secret "gh" sent to other.example.com, not one of its allowed hosts`},
	}
	for _, scheme := range []string{"http", "https"} {
		for _, tt := range tests {
			if scheme == "http" && tt.want == 200 && len(tt.secrets) > 0 {
				// Never substituted into plain http, where the value would travel in the clear.
				tt.want, tt.upstream, tt.reason = 403, nil, "secrets are substituted over https only"
			}
			e.resetRecords()
			hits, opened := e.httpHits.Load()+e.httpsHits.Load(), e.opened.Load()
			got, body := send(t, c, tt.method, scheme+"://"+tt.host+tt.path, tt.headers...)
			what := scheme + " " + tt.name
			if got != tt.want {
				t.Errorf("%s: %s %s = %d (%s), want %d", what, tt.method, tt.path, got, body, tt.want)
				continue
			}
			seen := e.lastEcho()
			for _, line := range tt.upstream {
				if !slices.Contains(strings.Split(seen, "\n"), line) {
					t.Errorf("%s: the upstream got\n%s\nwant the line %q", what, seen, line)
				}
			}
			for _, ph := range []string{ghPlaceholder, qPlaceholder} {
				if got == 200 && strings.Contains(seen, ph) {
					t.Errorf("%s: the upstream got the placeholder %s:\n%s", what, ph, seen)
				}
			}
			// What the upstream echoed reaches the sandbox with every value starred out.
			for _, v := range []string{ghValue, qValue, qEscaped} {
				if strings.Contains(body, v) {
					t.Errorf("%s: the sandbox got the value %q back:\n%s", what, v, body)
				}
			}
			if got == 200 && len(body) != len(seen) {
				t.Errorf("%s: the sandbox got %d bytes of the upstream's %d:\n%s", what, len(body), len(seen), body)
			}
			r := e.waitRecord(what, func(r Record) bool { return r.Method == tt.method && r.Host == tt.host })
			if !slices.Equal(r.Secrets, tt.secrets) || r.Allowed != (tt.want == 200) || !strings.Contains(r.Reason, tt.reason) {
				t.Errorf("%s: record %+v, want allowed=%v with secrets %v and reason %q", what, r, tt.want == 200, tt.secrets, tt.reason)
			}
			if tt.want == 403 {
				if n := e.httpHits.Load() + e.httpsHits.Load(); n != hits {
					t.Errorf("%s: a refused request reached the upstream", what)
				}
				if n := e.opened.Load(); n != opened {
					t.Errorf("%s: a refused request opened a secret's value %d times", what, n-opened)
				}
				if code, msg := apiError(body); code != "permission_denied" || !strings.Contains(msg, tt.reason) {
					t.Errorf("%s: the refusal says %q, want permission_denied with %q", what, body, tt.reason)
				}
			}
		}
	}
}

func TestSecretRevoked(t *testing.T) {
	e := newSecretEnv(t, Policy{Mode: ModeDenyAll, AllowPrivate: loopback8})
	c := e.client("127.0.0.1", false)
	e.revoked.Store(true)
	for _, scheme := range []string{"https"} { // plain http is refused before any value is opened
		got, body := send(t, c, "GET", scheme+"://api.example.com/echo", "Authorization", "Bearer "+ghPlaceholder)
		if got != 403 || !strings.Contains(body, "revoked") {
			t.Errorf("%s: GET with a revoked secret = %d (%s), want 403 saying it is revoked", scheme, got, body)
		}
	}
	r := e.waitRecord("the refusal", func(r Record) bool { return r.Method == "GET" })
	if r.Allowed || !slices.Equal(r.Secrets, []string{"gh"}) ||
		r.Reason != `secret "gh" is unavailable (secret was revoked at 12:00); its placeholder was not substituted` {
		t.Errorf("record %+v, want refused for secret gh, with the reason", r)
	}
	if n := e.httpHits.Load() + e.httpsHits.Load(); n != 0 {
		t.Errorf("the upstreams got %d requests with a revoked secret, want none", n)
	}
}

// TestSecretRevokedOnOpenTunnel: each request inside a tunnel opened before is decided
// and substituted anew: once the value fails to open, or the secret is no longer the
// sandbox's, the next request on the same connection is refused.
func TestSecretRevokedOnOpenTunnel(t *testing.T) {
	e := newSecretEnv(t, Policy{Mode: ModeBaseline, AllowPrivate: loopback8})
	tc := e.tlsTunnel(t, "api.example.com") // the secret's host
	br := bufio.NewReader(tc)
	get := func() (int, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", "https://api.example.com/echo", nil)
		req.Header.Set("Authorization", "Bearer "+ghPlaceholder)
		if err := req.Write(tc); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if got, body := get(); got != 200 || !strings.Contains(e.lastEcho(), "Authorization: Bearer "+ghValue) ||
		!strings.Contains(body, "Authorization: Bearer ****************\n") {
		t.Fatalf("first request = %d (%s), want 200 with the value substituted (upstream got %s) and starred out", got, body, e.lastEcho())
	}
	e.revoked.Store(true)
	if got, body := get(); got != 403 || !strings.Contains(body, "is unavailable") {
		t.Errorf("request after the revocation, same tunnel = %d (%s), want 403", got, body)
	}
	if got := e.httpsHits.Load(); got != 1 {
		t.Errorf("the upstream got %d requests, want 1 (before the revocation)", got)
	}
	// The refusal closed that connection; on a new one, the secret taken from the
	// sandbox closes its host again (baseline does not reach api.example.com).
	e.revoked.Store(false)
	tc = e.tlsTunnel(t, "api.example.com")
	br = bufio.NewReader(tc)
	if got, _ := get(); got != 200 {
		t.Fatalf("request on the second tunnel = %d, want 200", got)
	}
	sb := *e.sandbox.Load()
	sb.Secrets = nil
	e.sandbox.Store(&sb)
	if got, body := get(); got != 403 || !strings.Contains(body, "not in the baseline") {
		t.Errorf("request after the secret was unbound, same tunnel = %d (%s), want 403", got, body)
	}
	if got := e.httpsHits.Load(); got != 2 {
		t.Errorf("the upstream got %d requests, want 2", got)
	}
}

// TestSecretHostsOpen: a secret's hosts are reachable on ports 80 and 443 with every
// method in every mode but none, through every way into the proxy; the address check
// still applies.
func TestSecretHostsOpen(t *testing.T) {
	e := newSecretEnv(t, Policy{Mode: ModeDenyAll})
	c := e.client("127.0.0.1", false)
	tests := []struct {
		policy Policy
		method string
		url    string
		want   int
	}{
		{Policy{Mode: ModeDenyAll, AllowPrivate: loopback8}, "POST", "https://api.example.com/", 200},
		{Policy{Mode: ModeDenyAll, AllowPrivate: loopback8}, "DELETE", "http://api.example.com/", 200},
		{Policy{Mode: ModeDenyAll, AllowPrivate: loopback8}, "POST", "https://x.other.example.com/", 200},
		{Policy{Mode: ModeDenyAll, AllowPrivate: loopback8}, "GET", "https://api.example.com:8443/", 403},
		{Policy{Mode: ModeDenyAll, AllowPrivate: loopback8}, "GET", "https://pypi.org/", 403},
		{Policy{Mode: ModeDenyAll}, "GET", "https://api.example.com/", 403}, // loopback is protected
		{Policy{Mode: ModeBaseline, AllowPrivate: loopback8}, "POST", "https://api.example.com/", 200},
		{Policy{Mode: ModeBaseline, AllowPrivate: loopback8}, "PUT", "http://api.example.com/", 200},
		{Policy{Mode: ModeBaseline, AllowPrivate: loopback8}, "POST", "https://pypi.org/", 403},
		{Policy{Mode: ModeNone, AllowPrivate: loopback8}, "GET", "https://api.example.com/", 403},
		{Policy{Mode: ModeNone, AllowPrivate: loopback8}, "GET", "http://api.example.com/", 403},
	}
	e.res.set("x.other.example.com", []string{"127.0.0.1"})
	for _, tt := range tests {
		e.setPolicy(tt.policy)
		e.resetRecords()
		hits := e.httpHits.Load() + e.httpsHits.Load()
		got, body := do(t, c, tt.method, tt.url, "x")
		if got != tt.want {
			t.Errorf("%s: %s %s = %d (%s), want %d", tt.policy.Mode, tt.method, tt.url, got, body, tt.want)
			continue
		}
		if reached := e.httpHits.Load()+e.httpsHits.Load() > hits; reached != (got == 200) {
			t.Errorf("%s: %s %s = %d, but the upstream was reached=%v", tt.policy.Mode, tt.method, tt.url, got, reached)
		}
		if got == 200 {
			r := e.waitRecord(tt.url, func(r Record) bool { return r.Method == tt.method })
			if !r.Allowed || !strings.HasPrefix(r.Rule, "secret:") {
				t.Errorf("%s: %s %s recorded as %+v, want allowed by a secret:NAME rule", tt.policy.Mode, tt.method, tt.url, r)
			}
		}
	}

	// Transparent TLS (by SNI) and plain HTTP (by Host) in deny_all.
	e.setPolicy(Policy{Mode: ModeDenyAll, AllowPrivate: loopback8})
	for _, tt := range []struct {
		host string
		want int
	}{{"api.example.com", 200}, {"pypi.org", 403}} {
		conn := e.transparent(t, netip.MustParseAddrPort("93.184.216.34:80"))
		if got, err := request(conn, "POST", tt.host); got != tt.want {
			t.Errorf("transparent HTTP POST Host %s in deny_all = %d (%v), want %d", tt.host, got, err, tt.want)
		}
	}
	conn := e.transparent(t, netip.MustParseAddrPort("93.184.216.34:443"))
	tc := tls.Client(conn, &tls.Config{ServerName: "api.example.com", RootCAs: e.nodeCA.Pool()})
	if got, err := request(tc, "POST", "api.example.com"); got != 200 {
		t.Errorf("transparent TLS POST to a secret's host in deny_all = %d (%v), want 200", got, err)
	}
	conn = e.transparent(t, netip.MustParseAddrPort("93.184.216.34:443"))
	tc = tls.Client(conn, &tls.Config{ServerName: "pypi.org", RootCAs: e.nodeCA.Pool()})
	if err := tc.Handshake(); err == nil {
		t.Errorf("transparent TLS to pypi.org in deny_all completed its handshake, want refused")
	}
}

// transparent hands the proxy a connection from 127.0.0.1 as the node's redirect would
// for one headed to dst (port 80 or 443), and returns the client's end.
func (e *testEnv) transparent(t *testing.T, dst netip.AddrPort) net.Conn {
	return e.handOver(t, "127.0.0.1", dst, e.proxy.ServeTransparent)
}

func TestSandboxInfoDecide(t *testing.T) {
	secrets := []Substitution{
		{Secret: "gh", Placeholder: "p1", Hosts: []string{"api.github.com", "*.githubusercontent.com"}},
		{Secret: "wide", Placeholder: "p2", Hosts: []string{"*.", "*", ""}}, // matches nothing
	}
	tests := []struct {
		mode   Mode
		host   string
		port   int
		method string
		rule   string // "" for refused
	}{
		{ModeDenyAll, "api.github.com", 443, "POST", "secret:gh"},
		{ModeDenyAll, "API.GitHub.com.", 80, "DELETE", "secret:gh"},
		{ModeDenyAll, "api.github.com", 0, "", "secret:gh"},
		{ModeDenyAll, "raw.githubusercontent.com", 443, "GET", "secret:gh"},
		{ModeDenyAll, "githubusercontent.com", 443, "GET", ""},
		{ModeDenyAll, "evilgithubusercontent.com", 443, "GET", ""},
		{ModeDenyAll, "api.github.com", 8443, "GET", ""},
		{ModeDenyAll, "github.com", 443, "GET", ""},
		{ModeDenyAll, "pypi.org", 443, "GET", ""},
		{ModeBaseline, "pypi.org", 443, "GET", "baseline:pypi.org/GET,HEAD"},
		{ModeBaseline, "api.github.com", 443, "PATCH", "secret:gh"},
		{ModeUnrestricted, "api.github.com", 8443, "GET", "unrestricted"},
		{ModeNone, "api.github.com", 443, "GET", ""},
		{"bogus", "api.github.com", 443, "GET", ""},
		{ModeDenyAll, APIHost, 443, "DELETE", "airlock-api"},
		{ModeDenyAll, "Airlock.Internal.", 80, "GET", "airlock-api"},
		{ModeUnrestricted, APIHost, 0, "", "airlock-api"},
		{ModeDenyAll, APIHost, 8080, "GET", ""},
		{ModeNone, APIHost, 443, "GET", ""},
		{ModeDenyAll, "x.airlock.internal", 443, "GET", ""},
	}
	for _, withSecrets := range []bool{true, false} {
		for _, tt := range tests {
			sb := SandboxInfo{Policy: Policy{Mode: tt.mode}}
			if withSecrets {
				sb.Secrets = secrets
			}
			want := tt.rule
			if !withSecrets && strings.HasPrefix(want, "secret:") {
				want = ""
			}
			d := sb.Decide(tt.host, tt.port, tt.method)
			if d.Allowed != (want != "") || d.Rule != want || d.Allowed == (d.Reason != "") {
				t.Errorf("secrets=%v %s: Decide(%s, %d, %s) = %+v, want rule %q", withSecrets, tt.mode, tt.host, tt.port, tt.method, d, want)
			}
		}
	}
}

func TestDNSAnswersSecretHosts(t *testing.T) {
	e := newDNSEnv(t, SandboxInfo{ID: "sb_dns", Policy: Policy{Mode: ModeDenyAll},
		Secrets: []Substitution{{Secret: "ex", Placeholder: "p", Hosts: []string{"api.example.org", "*.corp.example.org"}}}})
	for _, tt := range []struct {
		mode       Mode
		name, want string
	}{
		{ModeDenyAll, "api.example.org", "93.184.216.34"},
		{ModeDenyAll, "x.corp.example.org", "93.184.216.37"},
		{ModeDenyAll, "any.example.net", "NXDOMAIN"},
		{ModeBaseline, "api.example.org", "93.184.216.34"},
		{ModeNone, "api.example.org", "NXDOMAIN"},
	} {
		sb := *e.sandbox.Load()
		sb.Policy.Mode = tt.mode
		e.sandbox.Store(&sb)
		resp := e.query("127.0.0.1", "udp", tt.name, dns.TypeA)
		got := strings.Join(answers(resp), " ")
		if resp.Rcode == dns.RcodeNameError {
			got = "NXDOMAIN"
		}
		if got != tt.want {
			t.Errorf("%s: %s = %q, want %q", tt.mode, tt.name, got, tt.want)
		}
	}
}

// TestSubstitutionMalformedBasic: Basic credentials are substituted into only when
// they decode; anything else is left as it is, and nothing panics.
func TestSubstitutionMalformedBasic(t *testing.T) {
	b64 := base64.StdEncoding.EncodeToString
	subs := []Substitution{{Secret: "gh", Placeholder: "PH", Hosts: []string{"api.example.com"},
		Value: func() ([]byte, error) { return []byte("VAL:UE"), nil }}}
	tests := []struct {
		auth string
		want string // the Authorization sent upstream; "" means as it was
	}{
		{"Basic " + b64([]byte("user:PH")), "Basic " + b64([]byte("user:VAL:UE"))},
		{"BASIC   " + b64([]byte("PH:PH")) + "  ", "Basic " + b64([]byte("VAL:UE:VAL:UE"))},
		{"basic " + b64([]byte("PH")), "Basic " + b64([]byte("VAL:UE"))}, // no colon
		{"Basic " + b64([]byte("\xff\x00:PH")), "Basic " + b64([]byte("\xff\x00:VAL:UE"))},
		{"Basic", ""},
		{"Basic ", ""},
		{"Basic !!!", ""},
		{"Basic " + base64.RawStdEncoding.EncodeToString([]byte("user:PH")), ""}, // no padding
		{"Basic " + b64([]byte("user:PH"))[:6], ""},
		{"Basic " + b64([]byte("user:other")), ""},
		{"Basicx " + b64([]byte("user:PH")), ""},
		{"Digest username=\"PHx\"", "Digest username=\"VAL:UEx\""}, // a header value like any other
	}
	for _, tt := range tests {
		r := &http.Request{Header: http.Header{"Authorization": {tt.auth}}, URL: &url.URL{Path: "/"}}
		open, names, refusal := openSecrets(r, subs, "api.example.com", true)
		if refusal != "" {
			t.Errorf("%q: refused: %s", tt.auth, refusal)
			continue
		}
		out := r.Clone(context.Background())
		applySecrets(out, open)
		want := cmp.Or(tt.want, tt.auth)
		if got := out.Header.Get("Authorization"); got != want {
			t.Errorf("%q became %q, want %q", tt.auth, got, want)
		}
		if substituted := tt.want != ""; substituted != slices.Equal(names, []string{"gh"}) {
			t.Errorf("%q: secrets %v, want substituted=%v", tt.auth, names, substituted)
		}
		if r.Header.Get("Authorization") != tt.auth {
			t.Errorf("%q: the incoming request was changed", tt.auth)
		}
	}
}
