package egress

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// BenchmarkHTTPSKeptAlive compares a kept-alive HTTPS GET to the loopback upstream
// directly with the same GET through the proxy (CONNECT, TLS terminated with the node
// CA, decided, and sent on over the proxy's own kept-alive upstream connection). The
// "overhead" case alternates the two in one loop and reports the added time per request.
func BenchmarkHTTPSKeptAlive(b *testing.B) {
	e := newTestEnv(b, SandboxInfo{ID: "sb_bench", Generation: 1, Policy: Policy{Mode: ModeBaseline, AllowPrivate: loopback8}})
	upstream := e.httpsUp.Listener.Addr().String()
	directTr := &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: e.upCA.Pool()},
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, upstream)
		},
	}
	b.Cleanup(directTr.CloseIdleConnections)
	direct := &http.Client{Transport: directTr, Timeout: 10 * time.Second}
	proxied := e.client("127.0.0.1", false)
	get := func(c *http.Client) {
		resp, err := c.Get("https://pypi.org/simple/")
		if err != nil {
			b.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("status %d", resp.StatusCode)
		}
	}
	get(direct) // open the kept-alive connections before timing
	get(proxied)

	b.Run("direct", func(b *testing.B) {
		for b.Loop() {
			get(direct)
		}
	})
	b.Run("proxy", func(b *testing.B) {
		n := 0
		for b.Loop() {
			get(proxied)
			if n++; n%1024 == 0 {
				e.resetRecords()
			}
		}
	})
	b.Run("overhead", func(b *testing.B) {
		var d, p time.Duration
		n := 0
		for b.Loop() {
			t0 := time.Now()
			get(direct)
			t1 := time.Now()
			get(proxied)
			d, p = d+t1.Sub(t0), p+time.Since(t1)
			if n++; n%1024 == 0 {
				e.resetRecords()
			}
		}
		b.ReportMetric(float64(d.Microseconds())/float64(n), "direct-µs/req")
		b.ReportMetric(float64(p.Microseconds())/float64(n), "proxy-µs/req")
		b.ReportMetric(float64((p-d).Microseconds())/float64(n), "added-µs/req")
	})
}

// BenchmarkSubstitution: a kept-alive HTTPS GET through the proxy (CONNECT, TLS
// terminated, decided, sent on) carrying "Authorization: Bearer PLACEHOLDER", with the
// secret bound to the sandbox (the value is substituted) and without (the header goes
// as it is; another host's secret is bound, so TLS is terminated all the same). p50-µs
// is the median time of one request.
func BenchmarkSubstitution(b *testing.B) {
	secret := []Substitution{{Secret: "gh", Placeholder: ghPlaceholder, Hosts: []string{"api.example.com"},
		Value: func() ([]byte, error) { return []byte(ghValue), nil }}}
	for _, bc := range []struct {
		name    string
		secrets []Substitution
		want    string // what the upstream must get
	}{
		{"bound", secret, "Authorization: Bearer " + ghValue},
		// A secret of another host keeps TLS terminated (see SandboxInfo.passesTLS).
		{"none", []Substitution{{Secret: "other", Placeholder: "AIRLOCK_PLACEHOLDER_other", Hosts: []string{"other.example.com"}}},
			"Authorization: Bearer " + ghPlaceholder},
	} {
		b.Run(bc.name, func(b *testing.B) {
			e := newTestEnv(b, SandboxInfo{ID: "sb_bench", Generation: 1,
				Policy: Policy{Mode: ModeUnrestricted, AllowPrivate: loopback8}, Secrets: bc.secrets})
			c := e.client("127.0.0.1", false)
			get := func() {
				got, body := send(b, c, "GET", "https://api.example.com/echo", "Authorization", "Bearer "+ghPlaceholder)
				if got != http.StatusOK || !strings.Contains(e.lastEcho(), bc.want) {
					b.Fatalf("GET = %d (%s), want 200, the upstream with %q", got, body, bc.want)
				}
			}
			get() // open the kept-alive connections before timing
			times := make([]time.Duration, 0, b.N)
			for b.Loop() {
				t0 := time.Now()
				get()
				times = append(times, time.Since(t0))
				if len(times)%1024 == 0 {
					e.resetRecords()
				}
			}
			slices.Sort(times)
			b.ReportMetric(float64(times[len(times)/2].Nanoseconds())/1e3, "p50-µs")
		})
	}
}
