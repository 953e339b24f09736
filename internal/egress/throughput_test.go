package egress

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// dlEnv is a proxy with one streaming HTTPS upstream (N zero bytes in 1 MiB writes,
// with a Content-Length, as the integration tests' upstream sends them).
type dlEnv struct {
	nodeCA, upCA *CA
	up           *httptest.Server
	proxy        *Proxy
	proxyAddr    string
	dir          string // holds node-ca.pem and up-ca.pem for curl
	sb           atomic.Pointer[SandboxInfo]
}

var dlZeros = make([]byte, 1<<20)

func newDLEnv(b *testing.B) *dlEnv {
	b.Helper()
	e := &dlEnv{dir: b.TempDir()}
	var err error
	if e.nodeCA, err = NewCA("bench node CA"); err != nil {
		b.Fatal(err)
	}
	if e.upCA, err = NewCA("bench upstream CA"); err != nil {
		b.Fatal(err)
	}
	e.up = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.ParseInt(r.URL.Query().Get("n"), 10, 64)
		w.Header().Set("Content-Length", strconv.FormatInt(n, 10))
		w.Header().Set("Content-Type", "application/octet-stream")
		for n > 0 {
			k := min(n, int64(len(dlZeros)))
			if _, err := w.Write(dlZeros[:k]); err != nil {
				return
			}
			n -= k
		}
	}))
	e.up.EnableHTTP2 = true // as the integration tests' upstream: h2 and http/1.1
	e.up.TLS = &tls.Config{GetCertificate: func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		return e.upCA.Leaf(h.ServerName)
	}}
	e.up.StartTLS()
	upAddr := e.up.Listener.Addr().String()
	os.WriteFile(filepath.Join(e.dir, "node-ca.pem"), e.nodeCA.CertPEM(), 0o644)
	os.WriteFile(filepath.Join(e.dir, "up-ca.pem"), e.upCA.CertPEM(), 0o644)

	e.sb.Store(&SandboxInfo{ID: "sb_dl", Generation: 1, Policy: Policy{Mode: ModeBaseline, AllowPrivate: loopback8}})
	e.proxy, err = NewProxy(Config{
		CA:     e.nodeCA,
		Lookup: func(netip.AddrPort) (SandboxInfo, bool) { return *e.sb.Load(), true },
		Dialer: &Dialer{
			Resolver: newFakeResolver(map[string][][]string{"files.pythonhosted.org": {{"127.0.0.1"}}}),
			Dial: func(ctx context.Context, network, address string) (net.Conn, error) {
				if !strings.HasSuffix(address, ":443") {
					return nil, errors.New("bench: only port 443")
				}
				var d net.Dialer
				return d.DialContext(ctx, network, upAddr)
			},
		},
		UpstreamRoots: e.upCA.Pool(),
	})
	if err != nil {
		b.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	e.proxyAddr = l.Addr().String()
	served := make(chan error, 1)
	go func() { served <- e.proxy.Serve(l) }()
	b.Cleanup(func() {
		e.proxy.Close()
		<-served
		e.up.Close()
	})
	return e
}

// BenchmarkHTTPSDownload downloads 100 MiB over HTTPS from a streaming loopback
// upstream, with a Go client or with curl (when installed), directly and through the
// proxy (CONNECT, TLS terminated with the node CA, re-encrypted to the upstream), and
// with curl through the proxy in mode unrestricted, where TLS passes through.
// Profile the proxy with -cpuprofile on the curl cases: the client is then another
// process and the profile holds only the proxy and the upstream.
func BenchmarkHTTPSDownload(b *testing.B) {
	const size = 100 << 20
	e := newDLEnv(b)
	rawURL := "https://files.pythonhosted.org/bytes?n=" + strconv.Itoa(size)
	upAddr := e.up.Listener.Addr().String()

	var curlCPU time.Duration
	var curlSecs float64
	// measure reports, per download, the CPU time of this process (the proxy and the
	// upstream, and the Go client if any) and of curl, and curl's own throughput.
	measure := func(b *testing.B, f func()) {
		curlCPU, curlSecs = 0, 0
		t0 := selfCPU()
		n := 0
		for b.Loop() {
			f()
			n++
		}
		b.ReportMetric(float64((selfCPU()-t0).Milliseconds())/float64(n), "self-cpu-ms/op")
		if curlSecs > 0 {
			b.ReportMetric(float64(curlCPU.Milliseconds())/float64(n), "curl-cpu-ms/op")
			b.ReportMetric(float64(n)*float64(size)/1e6/curlSecs, "curl-MB/s")
		}
	}
	goClient := func(proxied bool) *http.Client {
		tr := &http.Transport{ForceAttemptHTTP2: false, DisableCompression: true}
		if proxied {
			tr.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: e.proxyAddr})
			tr.TLSClientConfig = &tls.Config{RootCAs: e.nodeCA.Pool()}
		} else {
			tr.TLSClientConfig = &tls.Config{RootCAs: e.upCA.Pool()}
			tr.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, network, upAddr)
			}
		}
		b.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr}
	}
	goGet := func(b *testing.B, c *http.Client) {
		resp, err := c.Get(rawURL)
		if err != nil {
			b.Fatal(err)
		}
		buf := make([]byte, 256<<10)
		n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{resp.Body}, buf)
		resp.Body.Close()
		if err != nil || n != size {
			b.Fatalf("got %d bytes, %v", n, err)
		}
	}
	for _, proxied := range []bool{false, true} {
		name := map[bool]string{false: "go-direct", true: "go-proxy"}[proxied]
		b.Run(name, func(b *testing.B) {
			c := goClient(proxied)
			b.SetBytes(size)
			measure(b, func() { goGet(b, c) })
		})
	}

	curl, err := exec.LookPath("curl")
	if err != nil {
		return
	}
	curlGet := func(b *testing.B, args ...string) {
		args = append([]string{"-sS", "--max-time", "120", "-o", "/dev/null", "-w", "%{size_download} %{time_total}"}, args...)
		cmd := exec.Command(curl, append(args, rawURL)...)
		out, err := cmd.Output()
		if cmd.ProcessState == nil {
			b.Fatalf("curl: %v", err)
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			curlCPU += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		if err != nil {
			b.Fatalf("curl: %v", err)
		}
		var got int64
		var secs float64
		if _, err := fmt.Sscanf(string(out), "%d %g", &got, &secs); err != nil || got != size {
			b.Fatalf("curl said %q, want %d bytes", out, size)
		}
		curlSecs += secs
	}
	_, port, _ := net.SplitHostPort(upAddr)
	b.Run("curl-direct", func(b *testing.B) {
		b.SetBytes(size)
		measure(b, func() {
			curlGet(b, "--noproxy", "*", "--cacert", filepath.Join(e.dir, "up-ca.pem"),
				"--connect-to", "files.pythonhosted.org:443:127.0.0.1:"+port)
		})
	})
	b.Run("curl-proxy", func(b *testing.B) {
		b.SetBytes(size)
		measure(b, func() {
			curlGet(b, "--proxy", "http://"+e.proxyAddr, "--cacert", filepath.Join(e.dir, "node-ca.pem"))
		})
	})
	b.Run("curl-pass", func(b *testing.B) {
		sb := *e.sb.Load()
		sb.Policy.Mode = ModeUnrestricted
		e.sb.Store(&sb)
		b.SetBytes(size)
		measure(b, func() {
			curlGet(b, "--proxy", "http://"+e.proxyAddr, "--cacert", filepath.Join(e.dir, "up-ca.pem"))
		})
	})
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
