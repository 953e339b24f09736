package egress

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testEnv is a proxy on loopback with a plain and a TLS upstream (the TLS one with a
// CA of its own), a fake resolver that sends every test name to 127.0.0.1, and a dial
// hook that routes 127.0.0.1:80 and :443 to the upstreams and refuses anything that is
// not loopback, so no test traffic leaves the machine.
type testEnv struct {
	t         testing.TB
	nodeCA    *CA
	upCA      *CA
	res       *fakeResolver
	proxy     *Proxy
	proxyAddr string
	httpHits  atomic.Int64
	httpsHits atomic.Int64
	dials     atomic.Int64 // upstream connections the proxy opened
	httpUp    *httptest.Server
	httpsUp   *httptest.Server
	sandbox   atomic.Pointer[SandboxInfo]
	echoed    atomic.Pointer[string] // the upstreams' last /echo answer, as they sent it
	names     ResolvedNames          // what the sandbox resolved, as the node's DNS would record it

	mu        sync.Mutex
	records   []Record
	notify    chan struct{}
	offLoop   []string // non-loopback addresses the proxy tried to dial
	transport []*http.Transport
}

var loopback8 = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

func newTestEnv(t testing.TB, sb SandboxInfo, opts ...func(*Config)) *testEnv {
	t.Helper()
	e := &testEnv{t: t, notify: make(chan struct{}, 1)}
	e.sandbox.Store(&sb)
	var err error
	if e.nodeCA, err = NewCA("test node CA"); err != nil {
		t.Fatal(err)
	}
	if e.upCA, err = NewCA("test upstream CA"); err != nil {
		t.Fatal(err)
	}
	e.httpUp = httptest.NewServer(upstreamHandler("http-upstream", &e.httpHits, &e.echoed))
	e.httpsUp = httptest.NewUnstartedServer(upstreamHandler("https-upstream", &e.httpsHits, &e.echoed))
	ipLeaf, err := e.upCA.Leaf("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	e.httpsUp.TLS = &tls.Config{
		Certificates: []tls.Certificate{*ipLeaf},
		GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
			return e.upCA.Leaf(h.ServerName)
		},
	}
	e.httpsUp.StartTLS()

	local := []string{"pypi.org", "files.pythonhosted.org", "api.example.com", "other.example.com",
		"localhost", "badcert.example"}
	answers := map[string][][]string{
		"internal.example": {{"10.0.0.1"}},
		"meta.example":     {{"169.254.169.254"}},
		"v6local.example":  {{"::1"}},
		"rebind.example":   {{"93.184.216.34"}, {"127.0.0.1"}},
	}
	for _, h := range local {
		answers[h] = [][]string{{"127.0.0.1"}}
	}
	e.res = newFakeResolver(answers)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.proxyAddr = l.Addr().String()
	cfg := Config{
		CA:            e.nodeCA,
		Lookup:        e.lookup,
		Audit:         e.audit,
		NamesOf:       e.names.Names,
		Dialer:        &Dialer{Resolver: e.res, Dial: e.dial},
		UpstreamRoots: e.upCA.Pool(),
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.proxy, err = NewProxy(cfg)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- e.proxy.Serve(l) }()
	t.Cleanup(func() {
		for _, tr := range e.transport {
			tr.CloseIdleConnections()
		}
		if err := e.proxy.Close(); err != nil {
			t.Errorf("proxy Close: %v", err)
		}
		if err := <-served; err != nil {
			t.Errorf("proxy Serve: %v", err)
		}
		e.httpUp.Close()
		e.httpsUp.Close()
	})
	return e
}

func upstreamHandler(name string, hits *atomic.Int64, echoed *atomic.Pointer[string]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if strings.HasPrefix(r.URL.Path, "/leak/") {
			leakHandler(w, r)
			return
		}
		n, _ := io.Copy(io.Discard, r.Body)
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, r.URL.Query().Get("to"), http.StatusFound)
		case "/bytes":
			k, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Write(bytes.Repeat([]byte("x"), k))
		case "/echo": // the query and the headers, as the upstream got them
			var b strings.Builder
			fmt.Fprintf(&b, "query=%s\n", r.URL.RawQuery)
			for _, k := range slices.Sorted(maps.Keys(r.Header)) {
				fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
			}
			echo := b.String()
			echoed.Store(&echo)
			io.WriteString(w, echo)
		default:
			fmt.Fprintf(w, "%s %s %s %s body=%d", name, r.Method, r.Host, r.URL.Path, n)
		}
	})
}

// lastEcho is the upstreams' last /echo answer: what they got of a request.
func (e *testEnv) lastEcho() string {
	if s := e.echoed.Load(); s != nil {
		return *s
	}
	return ""
}

// lookup knows one sandbox, at 127.0.0.1.
func (e *testEnv) lookup(remote netip.AddrPort) (SandboxInfo, bool) {
	if remote.Addr().Unmap() != netip.MustParseAddr("127.0.0.1") {
		return SandboxInfo{}, false
	}
	return *e.sandbox.Load(), true
}

func (e *testEnv) setPolicy(p Policy) {
	sb := *e.sandbox.Load()
	sb.Policy = p
	e.sandbox.Store(&sb)
}

func (e *testEnv) audit(r Record) {
	e.mu.Lock()
	e.records = append(e.records, r)
	e.mu.Unlock()
	select {
	case e.notify <- struct{}{}:
	default:
	}
}

// dial routes the checked loopback addresses to the upstreams and dials nothing else.
func (e *testEnv) dial(ctx context.Context, network, address string) (net.Conn, error) {
	e.dials.Add(1)
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return nil, err
	}
	if !ap.Addr().IsLoopback() {
		e.mu.Lock()
		e.offLoop = append(e.offLoop, address)
		e.mu.Unlock()
		return nil, errors.New("test: not dialing off loopback")
	}
	switch ap.Port() {
	case 80:
		address = e.httpUp.Listener.Addr().String()
	case 443:
		address = e.httpsUp.Listener.Addr().String()
	case 8443:
		address = e.httpUp.Listener.Addr().String() // a plain server: TLS to it fails
	}
	var d net.Dialer
	return d.DialContext(ctx, network, address)
}

// waitRecord waits for an audit record that match accepts and returns it.
func (e *testEnv) waitRecord(what string, match func(Record) bool) Record {
	e.t.Helper()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	for {
		e.mu.Lock()
		for _, r := range e.records {
			if match(r) {
				e.mu.Unlock()
				return r
			}
		}
		all := fmt.Sprintf("%+v", e.records)
		e.mu.Unlock()
		select {
		case <-e.notify:
		case <-deadline.C:
			e.t.Fatalf("no audit record for %s; have %s", what, all)
		}
	}
}

func (e *testEnv) offLoopDials() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.offLoop)
}

func (e *testEnv) resetRecords() {
	e.mu.Lock()
	e.records = nil
	e.mu.Unlock()
}

// client is an HTTP client that uses the proxy from source address from and trusts
// the node CA and the upstreams' (as a sandbox trusts the node CA and the public
// roots); it does not follow redirects unless follow.
func (e *testEnv) client(from string, follow bool) *http.Client {
	roots := e.nodeCA.Pool()
	roots.AddCert(e.upCA.Certificate())
	tr := &http.Transport{
		Proxy:           http.ProxyURL(&url.URL{Scheme: "http", Host: e.proxyAddr}),
		TLSClientConfig: &tls.Config{RootCAs: roots},
		DialContext:     (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext,
	}
	e.mu.Lock()
	e.transport = append(e.transport, tr)
	e.mu.Unlock()
	c := &http.Client{Transport: tr, Timeout: 10 * time.Second}
	if !follow {
		c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	return c
}

// do sends a request and returns its status (403 for a refused CONNECT) and body.
func do(t testing.TB, c *http.Client, method, rawURL string, body string) (int, string) {
	t.Helper()
	var rb io.Reader
	if body != "" {
		rb = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, rawURL, rb)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		if strings.Contains(err.Error(), "Forbidden") {
			return http.StatusForbidden, err.Error()
		}
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// tlsTunnel opens a CONNECT tunnel to host:443 and TLS inside it, trusting the node CA;
// the test fails if the tunnel is refused. The connection closes with the test.
func (e *testEnv) tlsTunnel(t *testing.T, host string) *tls.Conn {
	t.Helper()
	status, conn := e.rawConnect(t, host+":443")
	if conn == nil {
		t.Fatalf("CONNECT %s:443 = %d, want 200", host, status)
	}
	tc := tls.Client(conn, &tls.Config{ServerName: host, RootCAs: e.nodeCA.Pool()})
	t.Cleanup(func() { tc.Close() })
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	return tc
}

// rawConnect sends CONNECT target over a new connection and returns the status and
// the connection (nil unless the tunnel opened).
func (e *testEnv) rawConnect(t *testing.T, target string) (int, net.Conn) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", e.proxyAddr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(conn, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	resp, err := http.ReadResponse(bufio.NewReader(conn), &http.Request{Method: http.MethodConnect})
	if err != nil {
		conn.Close()
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		conn.Close()
		return resp.StatusCode, nil
	}
	conn.SetDeadline(time.Time{})
	return resp.StatusCode, conn
}
