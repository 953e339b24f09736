package console

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"
)

// fakeAPI answers /v1/whoami for the token "good" and echoes what reached it.
type fakeAPI struct{ last *http.Request }

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.last = r.Clone(r.Context())
	if strings.HasPrefix(r.URL.Path, "/v1/ports/") { // what a sandbox's server answers
		w.Header().Add("Set-Cookie", cookieName+"=planted; Path=/console")
		w.Header().Add("Set-Cookie", "app=1; Path=/v1/ports/")
		io.WriteString(w, "the app")
		return
	}
	if r.Header.Get("Authorization") != "Bearer good" {
		writeError(w, http.StatusUnauthorized, "unauthenticated", "bad token")
		return
	}
	switch {
	case r.URL.Path == "/v1/whoami":
		writeJSON(w, 200, map[string]any{"user": "ann", "roles": []string{"developer"}})
	case strings.HasSuffix(r.URL.Path, "/files"):
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<script>alert(1)</script>")
	default:
		writeJSON(w, 200, map[string]any{"method": r.Method, "path": r.URL.Path})
	}
}

func newTestConsole(t *testing.T) (*httptest.Server, *fakeAPI, *http.Client) {
	t.Helper()
	api := &fakeAPI{}
	c := New(Options{API: api})
	srv := httptest.NewServer(Mount(api, c))
	t.Cleanup(func() { srv.Close(); c.Close() })
	jar, _ := cookiejar.New(nil)
	return srv, api, &http.Client{Jar: jar}
}

func do(t *testing.T, hc *http.Client, method, url string, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func signIn(t *testing.T, srv *httptest.Server, hc *http.Client) string {
	t.Helper()
	resp, body := do(t, hc, "POST", srv.URL+"/console/session", `{"token":"good"}`, map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != 200 {
		t.Fatalf("sign-in: got %d %s, want 200", resp.StatusCode, body)
	}
	var ck *http.Cookie
	for _, c := range resp.Cookies() {
		if c.Name == cookieName {
			ck = c
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.MaxAge <= 0 || strings.Contains(ck.Value, "good") {
		t.Fatalf("sign-in cookie: got %+v, want HttpOnly, SameSite=Strict, expiring, not the token", ck)
	}
	var a sessionAnswer
	if err := json.Unmarshal([]byte(body), &a); err != nil || a.CSRF == "" || strings.Contains(body, `"good"`) {
		t.Fatalf("sign-in answer: got %s, want a CSRF token and never the API token", body)
	}
	return a.CSRF
}

func TestSignInRefusesABadToken(t *testing.T) {
	srv, _, hc := newTestConsole(t)
	resp, body := do(t, hc, "POST", srv.URL+"/console/session", `{"token":"bad"}`, map[string]string{"Content-Type": "application/json"})
	if resp.StatusCode != 401 || len(resp.Cookies()) != 0 {
		t.Errorf("sign-in with a bad token: got %d %s cookies %v, want 401 and no cookie", resp.StatusCode, body, resp.Cookies())
	}
	resp, _ = do(t, hc, "POST", srv.URL+"/console/session", `{"token":"good"}`, map[string]string{"Content-Type": "application/json", "Origin": "https://evil.example"})
	if resp.StatusCode != 403 {
		t.Errorf("sign-in from another origin: got %d, want 403", resp.StatusCode)
	}
	resp, _ = do(t, hc, "GET", srv.URL+"/console/v1/sandboxes", "", nil)
	if resp.StatusCode != 401 {
		t.Errorf("a call without a session: got %d, want 401", resp.StatusCode)
	}
}

func TestProxyUsesTheViewersTokenAndNeedsCSRF(t *testing.T) {
	srv, api, hc := newTestConsole(t)
	csrf := signIn(t, srv, hc)
	resp, body := do(t, hc, "GET", srv.URL+"/console/v1/sandboxes?state=running", "", nil)
	if resp.StatusCode != 200 || api.last.URL.Path != "/v1/sandboxes" || api.last.URL.RawQuery != "state=running" ||
		api.last.Header.Get("Cookie") != "" || api.last.Header.Get("Authorization") != "Bearer good" {
		t.Fatalf("proxied GET: got %d %s; the API saw %s ?%s cookie %q auth %q", resp.StatusCode, body, api.last.URL.Path,
			api.last.URL.RawQuery, api.last.Header.Get("Cookie"), api.last.Header.Get("Authorization"))
	}
	api.last = nil
	for _, tc := range []struct {
		name string
		hdr  map[string]string
		want int
	}{
		{"no CSRF header", nil, 403},
		{"a wrong CSRF header", map[string]string{csrfHeader: "x" + csrf}, 403},
		{"the right header from another origin", map[string]string{csrfHeader: csrf, "Origin": "https://evil.example"}, 403},
		{"the right header", map[string]string{csrfHeader: csrf}, 200},
	} {
		resp, body := do(t, hc, "DELETE", srv.URL+"/console/v1/sandboxes/a", "", tc.hdr)
		if resp.StatusCode != tc.want {
			t.Errorf("DELETE with %s: got %d %s, want %d", tc.name, resp.StatusCode, body, tc.want)
		}
		if tc.want == 403 && api.last != nil {
			t.Errorf("DELETE with %s reached the API", tc.name)
		}
	}
}

func TestPagesAndFilesAreServedSafely(t *testing.T) {
	srv, _, hc := newTestConsole(t)
	resp, body := do(t, hc, "GET", srv.URL+"/", "", nil)
	csp := resp.Header.Get("Content-Security-Policy")
	if resp.StatusCode != 200 || !strings.Contains(body, "/assets/js/main.js") || !strings.Contains(csp, "default-src 'self'") ||
		strings.Contains(csp, "unsafe") {
		t.Errorf("GET /: got %d CSP %q, want the page under a strict policy", resp.StatusCode, csp)
	}
	if bytes.Contains([]byte(body), []byte("<script>")) && !strings.Contains(body, `<script type="module" src=`) {
		t.Errorf("the page has an inline script")
	}
	signIn(t, srv, hc)
	resp, _ = do(t, hc, "GET", srv.URL+"/console/v1/sandboxes/a/files?path=/x.html", "", nil)
	if ct, cd := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Disposition"); ct != "application/octet-stream" || cd != "attachment" ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("a file's download: got Content-Type %q, Content-Disposition %q, CSP %q; want an attachment that never renders",
			ct, cd, resp.Header.Get("Content-Security-Policy"))
	}
	resp, _ = do(t, hc, "GET", srv.URL+"/v1/ports/sb_x/80/", "", nil)
	if !strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") {
		t.Errorf("an exposed port's answer: got CSP %q, want a sandboxed origin", resp.Header.Get("Content-Security-Policy"))
	}
}

func TestSessionsAreBoundedPerToken(t *testing.T) {
	s := newSessions(time.Hour, 20)
	first, _, err := s.add("a")
	if err != nil {
		t.Fatal(err)
	}
	for range maxPerToken {
		if _, _, err := s.add("a"); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(s.m); n != maxPerToken {
		t.Errorf("one token signed in %d times: %d sessions kept, want %d", maxPerToken+1, n, maxPerToken)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.AddCookie(&http.Cookie{Name: cookieName, Value: first})
	if ss, _ := s.get(r); ss != nil {
		t.Errorf("the token's oldest session is still live, want it pushed out")
	}
	for range 4 {
		if _, _, err := s.add("b"); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.add("c"); err != errFull {
		t.Errorf("a sign-in past the console's bound: got %v, want it refused (never another viewer's session pushed out)", err)
	}
}

func TestSandboxNamedLikeARoute(t *testing.T) {
	srv, api, hc := newTestConsole(t)
	signIn(t, srv, hc)
	for _, name := range []string{"pty", "files"} {
		resp, body := do(t, hc, "GET", srv.URL+"/console/v1/sandboxes/"+name, "", nil)
		if resp.StatusCode != 200 || api.last.URL.Path != "/v1/sandboxes/"+name || resp.Header.Get("Content-Disposition") != "" {
			t.Errorf("GET of the sandbox %q: got %d %s (Content-Disposition %q), want its record passed as it is",
				name, resp.StatusCode, body, resp.Header.Get("Content-Disposition"))
		}
	}
	if resp, _ := do(t, hc, "GET", srv.URL+"/console/v1/sandboxes/a/pty", "", nil); resp.StatusCode != 404 {
		t.Errorf("the PTY route through the proxy: got %d, want 404 (the console's terminal is /console/pty)", resp.StatusCode)
	}
}

// TestPortNeverSeesNorSetsTheSession: an exposed port, served on the console's origin,
// gets the browser's other cookies but never the console's session cookie, and its
// answer cannot set one.
func TestPortNeverSeesNorSetsTheSession(t *testing.T) {
	srv, api, hc := newTestConsole(t)
	signIn(t, srv, hc)
	req, _ := http.NewRequest("GET", srv.URL+"/v1/ports/sb_x/80/", nil)
	req.AddCookie(&http.Cookie{Name: "app", Value: "mine"})
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if ck := api.last.Header.Get("Cookie"); strings.Contains(ck, cookieName) || !strings.Contains(ck, "app=mine") {
		t.Errorf("the port got Cookie %q, want the app's own cookie and not the console's session", ck)
	}
	sc := resp.Header.Values("Set-Cookie")
	if len(sc) != 1 || !strings.HasPrefix(sc[0], "app=1") {
		t.Errorf("the port's answer set cookies %q, want only the app's own", sc)
	}
	if _, body := do(t, hc, "GET", srv.URL+"/console/session", "", nil); !strings.Contains(body, "csrf") {
		t.Errorf("after the port's answer the console's session is gone: %s", body)
	}
}

// TestPortUpgradeSetsNoSession: an exposed port's answer to an upgrade (a WebSocket),
// which the proxy writes on the hijacked connection itself, cannot set the console's
// session cookie either.
func TestPortUpgradeSetsNoSession(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close()
		brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: test\r\nConnection: Upgrade\r\n" +
			"Set-Cookie: " + cookieName + "=planted; Path=/console\r\nSet-Cookie: app=1\r\n\r\nhello")
		brw.Flush()
	}))
	defer app.Close()
	target, _ := url.Parse(app.URL)
	api := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) { pr.SetURL(target) }}
	c := New(Options{API: api})
	srv := httptest.NewServer(Mount(api, c))
	defer func() { srv.Close(); c.Close() }()

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET /v1/ports/sb_x/80/ HTTP/1.1\r\nHost: "+srv.Listener.Addr().String()+"\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if sc := resp.Header.Values("Set-Cookie"); resp.StatusCode != 101 || len(sc) != 1 || sc[0] != "app=1" {
		t.Errorf("the upgrade's answer: %d, Set-Cookie %q; want 101 with only the app's own cookie", resp.StatusCode, sc)
	}
	if b, _ := io.ReadAll(io.LimitReader(br, 5)); string(b) != "hello" {
		t.Errorf("after the upgrade's header: %q, want the app's bytes", b)
	}
}
