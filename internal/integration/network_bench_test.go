package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// netBenchSandbox starts a world, a node and n baseline sandboxes that reach the
// world's loopback upstreams; the benchmarks skip under -short.
func netBenchSandbox(b *testing.B, count int) (*netWorld, *testenv.Node, []*api.Sandbox) {
	b.Helper()
	if testing.Short() {
		b.Skip("network benchmarks start a node and sandboxes; skipped under -short")
	}
	w := newNetWorld(b)
	n := w.node(b)
	var sbs []*api.Sandbox
	for i := 0; i < count; i++ {
		sb := n.Create(b, api.CreateSandboxRequest{Name: fmt.Sprintf("bench-%d", i),
			Network: &api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8}})
		sbs = append(sbs, sb)
	}
	return w, n, sbs
}

// hostPython is the host's python3, the same one the host image gives sandboxes.
func hostPython() string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		return "/usr/bin/python3"
	}
	return "python3"
}

// BenchmarkProxyHTTPSDownload downloads 100 MiB over HTTPS from the loopback upstream:
// with curl in a sandbox, through the egress proxy (which terminates TLS and opens its
// own to the upstream), and with curl on the host, straight to the same server, once
// as curl does by default (HTTP/2, which the upstream offers) and once over HTTP/1.1,
// the protocol the proxy speaks to sandboxes. It reports the ratio to each.
func BenchmarkProxyHTTPSDownload(b *testing.B) {
	const size = 100 << 20
	w, n, sbs := netBenchSandbox(b, 1)
	sb := sbs[0]
	rawURL := "https://files.pythonhosted.org/bytes?n=" + strconv.Itoa(size)
	curlArgs := []string{"-sS", "--max-time", "120", "-o", "/dev/null", "-w", "%{size_download} %{time_total}"}
	parse := func(what, out string) float64 {
		var got int64
		var secs float64
		if _, err := fmt.Sscanf(out, "%d %g", &got, &secs); err != nil || got != size || secs <= 0 {
			b.Fatalf("%s: curl said %q, want %d bytes", what, out, size)
		}
		return float64(size) / 1e6 / secs
	}
	host := func(extra ...string) float64 {
		args := append(append(slices.Clone(curlArgs), extra...), "--noproxy", "*", "--cacert", w.caFile,
			"--resolve", "files.pythonhosted.org:443:"+w.ip.String(), rawURL)
		out, err := exec.Command("curl", args...).Output()
		if err != nil {
			b.Fatalf("download on the host: %v", err)
		}
		return parse("host", string(out))
	}
	var viaProxy, direct, directH1 float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{Argv: append(append([]string{"curl"}, curlArgs...), rawURL), Timeout: "150s"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("download in the sandbox: %v %+v", err, res)
		}
		viaProxy += parse("sandbox", res.Stdout)
		direct += host()
		directH1 += host("--http1.1")
	}
	b.StopTimer()
	viaProxy /= float64(b.N)
	direct /= float64(b.N)
	directH1 /= float64(b.N)
	b.ReportMetric(viaProxy, "proxy-MB/s")
	b.ReportMetric(direct, "direct-MB/s")
	b.ReportMetric(directH1, "direct-h1-MB/s")
	b.ReportMetric(viaProxy/direct, "proxy/direct")
	b.ReportMetric(viaProxy/directH1, "proxy/direct-h1")
	netWaitEgress(b, n, sb.Name, "the 100 MiB download", func(r api.EgressRecord) bool {
		return r.Allowed && r.Method == "GET" && r.BytesDown == size
	})
}

// netLatencyScript makes warm-up plus N requests on one kept-alive HTTPS connection to
// pypi.org and prints the p50 and p90 in ms: through the proxy ("proxy", a CONNECT
// tunnel to HTTPS_PROXY) or straight to ADDR ("direct ADDR CAFILE").
const netLatencyScript = `
import http.client, json, os, socket, ssl, sys, time, urllib.parse
n, mode = int(sys.argv[1]), sys.argv[2]
if mode == "proxy":
    u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
    c = http.client.HTTPSConnection(u.hostname, u.port, context=ssl.create_default_context(), timeout=10)
    c.set_tunnel("pypi.org", 443)
else:
    addr, cafile = sys.argv[3], sys.argv[4]
    gai = socket.getaddrinfo
    socket.getaddrinfo = lambda h, *a, **k: gai(addr if h == "pypi.org" else h, *a, **k)
    c = http.client.HTTPSConnection("pypi.org", 443, context=ssl.create_default_context(cafile=cafile), timeout=10)
ts = []
for i in range(n + 10):
    t0 = time.perf_counter()
    c.request("GET", "/")
    r = c.getresponse()
    r.read()
    dt = time.perf_counter() - t0
    if r.status != 200:
        raise SystemExit("status %d" % r.status)
    if i >= 10:
        ts.append(dt * 1000)
ts.sort()
print(json.dumps({"p50": ts[len(ts) // 2], "p90": ts[len(ts) * 9 // 10]}))
`

// BenchmarkProxyAddedLatency measures what the proxy adds to a request on a kept-alive
// HTTPS connection: python in a sandbox through the proxy against python on the host
// straight to the upstream, each making 200 requests on one connection.
func BenchmarkProxyAddedLatency(b *testing.B) {
	const requests = 200
	w, n, sbs := netBenchSandbox(b, 1)
	sb := sbs[0]
	type pct struct{ P50, P90 float64 }
	parse := func(what, out string) pct {
		var p pct
		if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &p); err != nil || p.P50 <= 0 {
			b.Fatalf("%s: got %q: %v", what, out, err)
		}
		return p
	}
	var proxied, direct []float64
	var proxied90, direct90 []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{
			Argv: []string{"python3", "-c", netLatencyScript, strconv.Itoa(requests), "proxy"}, Timeout: "120s"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("requests in the sandbox: %v %+v", err, res)
		}
		p := parse("sandbox", res.Stdout)
		proxied, proxied90 = append(proxied, p.P50), append(proxied90, p.P90)
		out, err := exec.Command(hostPython(), "-c", netLatencyScript, strconv.Itoa(requests), "direct", w.ip.String(), w.caFile).Output()
		if err != nil {
			b.Fatalf("requests on the host: %v", err)
		}
		p = parse("host", string(out))
		direct, direct90 = append(direct, p.P50), append(direct90, p.P90)
	}
	b.StopTimer()
	mid := netMedian
	b.ReportMetric(mid(proxied), "proxy-p50-ms")
	b.ReportMetric(mid(direct), "direct-p50-ms")
	b.ReportMetric(mid(proxied)-mid(direct), "added-p50-ms")
	b.ReportMetric(mid(proxied90), "proxy-p90-ms")
	b.ReportMetric(mid(direct90), "direct-p90-ms")
}

// netConcurrentScript opens N connections through the proxy (CONNECT and TLS), waits
// until all are open, then sends one request on each to /hold (which answers after
// HOLD ms) and prints {"ok": n, "errors": [...]}.
const netConcurrentScript = `
import http.client, json, os, ssl, sys, threading, urllib.parse
n, hold = int(sys.argv[1]), sys.argv[2]
u = urllib.parse.urlsplit(os.environ["HTTPS_PROXY"])
ctx = ssl.create_default_context()
barrier = threading.Barrier(n, timeout=60)
ok, errors, lock = [0], [], threading.Lock()
def worker():
    try:
        c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=60)
        c.set_tunnel("pypi.org", 443)
        c.connect()
    except Exception as e:
        with lock:
            errors.append("connect: %s" % e)
        barrier.abort()
        return
    try:
        barrier.wait()
        c.request("GET", "/hold?ms=" + hold)
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or not body.startswith(b"held"):
            raise Exception("status %d %r" % (r.status, body[:100]))
        with lock:
            ok[0] += 1
    except Exception as e:
        with lock:
            errors.append("%s: %s" % (type(e).__name__, e))
    finally:
        c.close()
threads = [threading.Thread(target=worker) for _ in range(n)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"ok": ok[0], "errors": errors[:5], "nerrors": len(errors)}))
`

// BenchmarkProxyConcurrent holds 1,000 connections through the proxy at once, 100 from
// each of 10 sandboxes, each carrying one request the upstream holds for 3 s, and
// reports the errors (there must be none), the most requests the upstream had in flight
// at once and the RSS of this process, where the proxy runs.
func BenchmarkProxyConcurrent(b *testing.B) {
	const sandboxes, perSandbox = 10, 100
	w, n, sbs := netBenchSandbox(b, sandboxes)
	var peakRSS, startRSS float64
	startRSS = netVmRSSMiB()
	var errs atomic.Int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		w.peak.Store(0)
		stop := make(chan struct{})
		var sampler sync.WaitGroup
		sampler.Add(1)
		go func() {
			defer sampler.Done()
			for {
				if r := netVmRSSMiB(); r > peakRSS {
					peakRSS = r
				}
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()
		var wg sync.WaitGroup
		for _, sb := range sbs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{
					Argv: []string{"python3", "-c", netConcurrentScript, strconv.Itoa(perSandbox), "3000"}, Timeout: "120s"})
				if err != nil || res.ExitCode != 0 {
					b.Errorf("%s: %v %+v", sb.Name, err, res)
					errs.Add(perSandbox)
					return
				}
				var out struct {
					OK      int
					Errors  []string
					NErrors int
				}
				if err := json.Unmarshal([]byte(strings.TrimSpace(res.Stdout)), &out); err != nil {
					b.Errorf("%s: output %q: %v", sb.Name, res.Stdout, err)
					errs.Add(perSandbox)
					return
				}
				if out.OK != perSandbox {
					b.Errorf("%s: %d of %d requests succeeded; errors %v", sb.Name, out.OK, perSandbox, out.Errors)
					errs.Add(int64(perSandbox - out.OK))
				}
			}()
		}
		wg.Wait()
		close(stop)
		sampler.Wait()
	}
	b.StopTimer()
	b.ReportMetric(float64(errs.Load()), "errors")
	b.ReportMetric(float64(w.peak.Load()), "peak-in-flight")
	b.ReportMetric(peakRSS, "peak-RSS-MiB")
	b.ReportMetric(startRSS, "idle-RSS-MiB")
	if errs.Load() != 0 {
		b.Errorf("%d of %d requests failed, want none", errs.Load(), sandboxes*perSandbox)
	}
}

// netVmRSSMiB is this process's resident set (the node, proxy included, runs in it).
func netVmRSSMiB() float64 {
	data, _ := os.ReadFile("/proc/self/status")
	kb, _ := strconv.ParseFloat(strings.TrimSuffix(statusField(string(data), "VmRSS"), " kB"), 64)
	return kb / 1024
}

func netMedian(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}
