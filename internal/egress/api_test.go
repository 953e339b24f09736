package egress

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/miekg/dns"
)

const (
	sessionPlaceholder = "AIRLOCK_SESSION_PH_0b1c"
	sessionToken       = "alk_session_REAL_9f8e"
)

// apiFake is what a test's Config.API saw, and the SessionToken it serves.
type apiFake struct {
	mu       sync.Mutex
	requests []apiSeen
	tokens   atomic.Int64 // SessionToken calls
	fail     atomic.Bool  // SessionToken fails
}

type apiSeen struct {
	sandbox, method, host, uri, auth string
	header                           http.Header
}

func (a *apiFake) config(c *Config) {
	c.API = func(w http.ResponseWriter, r *http.Request, sb SandboxInfo) {
		a.mu.Lock()
		a.requests = append(a.requests, apiSeen{sandbox: sb.ID, method: r.Method, host: r.Host, uri: r.RequestURI,
			auth: r.Header.Get("Authorization"), header: r.Header.Clone()})
		a.mu.Unlock()
		fmt.Fprintf(w, "api %s %s", r.Method, r.URL.Path)
	}
	c.SessionToken = func(sb SandboxInfo) (string, error) {
		a.tokens.Add(1)
		if a.fail.Load() {
			return "", errdefs.Unavailable("the token service is down")
		}
		return sessionToken, nil
	}
}

func (a *apiFake) last() apiSeen {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.requests) == 0 {
		return apiSeen{}
	}
	return a.requests[len(a.requests)-1]
}

func (a *apiFake) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.requests)
}

// TestAPIHost: a request to APIHost reaches Config.API in-process by every way into
// the proxy, in deny_all, with the session placeholder swapped for a real token and
// nothing dialled.
func TestAPIHost(t *testing.T) {
	api := &apiFake{}
	e := newTestEnv(t, SandboxInfo{ID: "sb_api", Generation: 1, Policy: Policy{Mode: ModeDenyAll},
		SessionPlaceholder: sessionPlaceholder}, api.config)
	c := e.client("127.0.0.1", false)
	bearer := "Bearer " + sessionPlaceholder
	for _, tt := range []struct {
		method, url, auth, wantAuth string
	}{
		{"GET", "http://airlock.internal/v1/sandboxes?limit=2", bearer, "Bearer " + sessionToken},
		{"POST", "https://airlock.internal/v1/sandboxes/sb_api/exec", bearer, "Bearer " + sessionToken},
		{"DELETE", "https://AIRLOCK.internal./v1/x", "bearer  " + sessionPlaceholder, "Bearer " + sessionToken},
		{"GET", "https://airlock.internal/v1/me", "Bearer alk_someone_elses", "Bearer alk_someone_elses"},
		{"GET", "http://airlock.internal/v1/me", "", ""},
	} {
		e.resetRecords()
		got, body := send(t, c, tt.method, tt.url, "Authorization", tt.auth,
			"X-Forwarded-For", "10.9.9.9", "Connection", "X-Drop", "X-Drop", "1", "X-Keep", "1")
		if got != 200 || !strings.HasPrefix(body, "api "+tt.method+" /v1/") {
			t.Errorf("%s %s = %d (%s), want 200 from the API", tt.method, tt.url, got, body)
			continue
		}
		seen := api.last()
		if seen.auth != tt.wantAuth || seen.sandbox != "sb_api" || seen.host != APIHost || !strings.HasPrefix(seen.uri, "/v1/") {
			t.Errorf("%s %s: the API saw %+v, want Authorization %q for sb_api, Host %s and a path", tt.method, tt.url, seen, tt.wantAuth, APIHost)
		}
		for _, h := range []string{"X-Forwarded-For", "X-Drop", "Connection"} {
			if v := seen.header.Get(h); v != "" {
				t.Errorf("%s %s: the API got %s: %s, want it dropped", tt.method, tt.url, h, v)
			}
		}
		if seen.header.Get("X-Keep") != "1" {
			t.Errorf("%s %s: the API did not get X-Keep", tt.method, tt.url)
		}
		r := e.waitRecord(tt.url, func(r Record) bool { return r.Method == tt.method })
		if !r.Allowed || r.Rule != "airlock-api" || r.Host != APIHost || r.Addr != "" || r.Sandbox != "sb_api" {
			t.Errorf("%s %s recorded as %+v, want allowed by airlock-api", tt.method, tt.url, r)
		}
	}
	if api.count() != 5 {
		t.Errorf("the API served %d requests, want 5", api.count())
	}
	if n := api.tokens.Load(); n != 3 {
		t.Errorf("SessionToken was called %d times, want 3 (once per request with the placeholder)", n)
	}

	// Transparent plain HTTP (by Host) and TLS (by SNI, with a leaf from the node CA).
	conn := e.transparent(t, netip.AddrPortFrom(apiAddr, 80))
	if got, err := request(conn, "PUT", "airlock.internal"); got != 200 {
		t.Errorf("transparent HTTP to %s = %d (%v), want 200", APIHost, got, err)
	}
	conn = e.transparent(t, netip.AddrPortFrom(apiAddr, 443))
	tc := tls.Client(conn, &tls.Config{ServerName: APIHost, RootCAs: e.nodeCA.Pool()})
	if got, err := request(tc, "PATCH", "airlock.internal"); got != 200 {
		t.Errorf("transparent TLS to %s = %d (%v), want 200", APIHost, got, err)
	}
	if api.count() != 7 {
		t.Errorf("the API served %d requests, want 7", api.count())
	}

	// No other port; nothing in mode none.
	if got, body := send(t, c, "GET", "http://airlock.internal:8080/v1/me"); got != 403 {
		t.Errorf("GET %s:8080 = %d (%s), want 403", APIHost, got, body)
	}
	e.setPolicy(Policy{Mode: ModeNone})
	for _, u := range []string{"http://airlock.internal/v1/me", "https://airlock.internal/v1/me"} {
		if got, body := send(t, c, "GET", u, "Authorization", bearer); got != 403 {
			t.Errorf("mode none: GET %s = %d (%s), want 403", u, got, body)
		}
	}
	if api.count() != 7 {
		t.Errorf("the API served %d requests, want still 7", api.count())
	}
	if n := e.dials.Load(); n != 0 {
		t.Errorf("the proxy dialled %d upstream connections for the API, want none", n)
	}
	e.mu.Lock()
	all := fmt.Sprintf("%+v", e.records)
	e.mu.Unlock()
	if strings.Contains(all, sessionToken) {
		t.Errorf("a record has the session token: %s", all)
	}
}

func TestAPIHostSessionTokenFails(t *testing.T) {
	api := &apiFake{}
	e := newTestEnv(t, SandboxInfo{ID: "sb_api", Generation: 1, Policy: Policy{Mode: ModeBaseline},
		SessionPlaceholder: sessionPlaceholder}, api.config)
	api.fail.Store(true)
	c := e.client("127.0.0.1", false)
	for _, u := range []string{"http://airlock.internal/v1/me", "https://airlock.internal/v1/me"} {
		got, body := send(t, c, "GET", u, "Authorization", "Bearer "+sessionPlaceholder)
		if code, msg := apiError(body); got != http.StatusServiceUnavailable || code != "unavailable" || !strings.Contains(msg, "the token service is down") {
			t.Errorf("GET %s without a session token = %d (%s), want 503 unavailable with the reason", u, got, body)
		}
	}
	r := e.waitRecord("the refusal", func(r Record) bool { return r.Method == "GET" })
	if r.Allowed || r.Host != APIHost || !strings.Contains(r.Reason, "no session token") {
		t.Errorf("record %+v, want refused for want of a session token", r)
	}
	if api.count() != 0 {
		t.Errorf("the API served %d requests, want none", api.count())
	}
}

func TestAPIHostRefusedWithoutAPI(t *testing.T) {
	e := newTestEnv(t, SandboxInfo{ID: "sb_api", Generation: 1, Policy: Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8},
		SessionPlaceholder: sessionPlaceholder})
	e.res.set(APIHost, []string{"127.0.0.1"}) // were it dialled, it would reach the upstreams
	c := e.client("127.0.0.1", false)
	for _, u := range []string{"http://airlock.internal/v1/me", "https://airlock.internal/v1/me"} {
		if got, body := send(t, c, "GET", u, "Authorization", "Bearer "+sessionPlaceholder); got != 403 {
			t.Errorf("GET %s with no API = %d (%s), want 403", u, got, body)
		}
	}
	e.waitRecord("the refusal", func(r Record) bool {
		return r.Method == "GET" && r.Host == APIHost && !r.Allowed && strings.Contains(r.Reason, "not served")
	})
	if n := e.httpHits.Load() + e.httpsHits.Load() + e.dials.Load(); n != 0 {
		t.Errorf("a request to %s reached upstream (%d hits and dials), want none", APIHost, n)
	}
}

func TestDNSAnswersAPIHost(t *testing.T) {
	e := newDNSEnv(t, SandboxInfo{ID: "sb_dns", Policy: Policy{Mode: ModeDenyAll}})
	for _, tt := range []struct {
		mode  Mode
		name  string
		qtype uint16
		want  string
	}{
		{ModeDenyAll, "airlock.internal", dns.TypeA, "192.0.2.1"},
		{ModeDenyAll, "Airlock.Internal", dns.TypeA, "192.0.2.1"},
		{ModeDenyAll, "airlock.internal", dns.TypeAAAA, ""},
		{ModeUnrestricted, "airlock.internal", dns.TypeA, "192.0.2.1"},
		{ModeDenyAll, "x.airlock.internal", dns.TypeA, "NXDOMAIN"},
		{ModeNone, "airlock.internal", dns.TypeA, "NXDOMAIN"},
	} {
		sb := *e.sandbox.Load()
		sb.Policy.Mode = tt.mode
		e.sandbox.Store(&sb)
		resp := e.query("127.0.0.1", "udp", tt.name, tt.qtype)
		got := strings.Join(answers(resp), " ")
		if resp.Rcode == dns.RcodeNameError {
			got = "NXDOMAIN"
		} else if resp.Rcode != dns.RcodeSuccess {
			got = dns.RcodeToString[resp.Rcode]
		}
		if got != tt.want {
			t.Errorf("%s: %s %s = %q, want %q", tt.mode, tt.name, dns.TypeToString[tt.qtype], got, tt.want)
		}
	}
	if e.askedUpstream(APIHost) {
		t.Errorf("%s was asked upstream; the node answers it", APIHost)
	}
}

// TestSecretNeverLeaks: the value of a secret and the session token appear in no
// record, no log line and no answer the proxy makes itself, whatever happens to the
// request (substituted, refused, failed upstream).
func TestSecretNeverLeaks(t *testing.T) {
	logs := &lockedBuffer{}
	api := &apiFake{}
	e := newSecretEnv(t, Policy{Mode: ModeAllowlist, Rules: mustRules(t, "badcert.example:8443/GET"), AllowPrivate: loopback8},
		api.config, func(c *Config) {
			c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
	sb := *e.sandbox.Load()
	sb.SessionPlaceholder, sb.Secrets = sessionPlaceholder, e.secrets()
	sb.Secrets[1].Hosts = append(sb.Secrets[1].Hosts, "badcert.example")
	e.sandbox.Store(&sb)
	c := e.client("127.0.0.1", false)
	var answers []string
	check := func(method, url string, want int, headers ...string) {
		t.Helper()
		got, body := send(t, c, method, url, headers...)
		if got != want {
			t.Errorf("%s %s = %d (%s), want %d", method, url, got, body, want)
		}
		answers = append(answers, body) // the echo's too: what the upstream got comes back redacted
	}
	bearer := "Bearer " + ghPlaceholder
	check("GET", "https://api.example.com/echo?key="+qPlaceholder, 200, "Authorization", bearer)
	check("GET", "http://api.example.com/", 403, "Authorization", bearer)
	check("GET", "https://other.example.com/?x="+qPlaceholder, 403, "Authorization", bearer)
	check("GET", "https://api.example.com/"+ghPlaceholder, 403, "Authorization", bearer)
	check("GET", "https://badcert.example:8443/?key="+qPlaceholder, http.StatusBadGateway, "Authorization", "Bearer "+qPlaceholder)
	check("GET", "https://airlock.internal/v1/me", 200, "Authorization", "Bearer "+sessionPlaceholder)
	e.revoked.Store(true)
	check("GET", "https://api.example.com/", 403, "Authorization", bearer)
	for _, tr := range e.transport {
		tr.CloseIdleConnections() // the tunnels' records too
	}
	e.waitRecord("a tunnel's record", func(r Record) bool { return r.Method == "CONNECT" && r.Host == "api.example.com" })

	e.mu.Lock()
	records := fmt.Sprintf("%+v", e.records)
	e.mu.Unlock()
	if !strings.Contains(records, "[gh q]") {
		t.Errorf("no record names the secrets substituted: %s", records)
	}
	if logs.String() == "" {
		t.Errorf("the proxy logged nothing at debug level; the upstream failure should be there")
	}
	for _, v := range []string{ghValue, qValue, qEscaped, sessionToken} {
		if strings.Contains(records, v) {
			t.Errorf("a record has %q: %s", v, records)
		}
		if strings.Contains(logs.String(), v) {
			t.Errorf("the log has %q: %s", v, logs.String())
		}
		for _, a := range answers {
			if strings.Contains(a, v) {
				t.Errorf("an answer has %q: %s", v, a)
			}
		}
	}
}

// lockedBuffer is a log sink for concurrent writers.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
