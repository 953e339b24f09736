package integration

import (
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"testing"

	"github.com/airlockhq/airlock/api"
)

// BenchmarkEgressDownload512MiB: one 512 MiB HTTPS download from the loopback upstream
// (served from memory), in turns in each round:
//   - pass: curl in a sandbox of mode unrestricted, through the egress proxy, which
//     passes its TLS through (relayed in the kernel), so curl speaks HTTP/2 to the
//     server as it does directly; pass-h1: the same over HTTP/1.1;
//   - terminated: curl in a baseline sandbox to a registry host, through the proxy,
//     which terminates TLS (speaking HTTP/1.1 to curl) and makes its own to the
//     upstream;
//   - direct: curl on the host straight to the server (HTTP/2, as curl does by default),
//     and direct-h1: the same over HTTP/1.1.
//
// It reports each one's p50 and p90 in MB/s and, at the p50, each proxied case against
// the direct one of its protocol:
//
//	go test ./internal/integration -run '^$' -bench EgressDownload512MiB -benchtime 1x
func BenchmarkEgressDownload512MiB(b *testing.B) {
	const size = 512 << 20
	const rounds = 7
	if testing.Short() {
		b.Skip("network benchmarks start a node and sandboxes; skipped under -short")
	}
	w := newNetWorld(b)
	n := w.node(b)
	// Both cores, as curl on the host has.
	pass := n.Create(b, api.CreateSandboxRequest{Name: "dl-pass", Limits: api.Limits{CPU: 2},
		Network: &api.NetworkPolicy{Mode: "unrestricted", AllowPrivate: netLoopback8}})
	term := n.Create(b, api.CreateSandboxRequest{Name: "dl-term", Limits: api.Limits{CPU: 2},
		Network: &api.NetworkPolicy{Mode: "baseline", AllowPrivate: netLoopback8}})
	url := "https://files.pythonhosted.org/bytes?n=" + strconv.Itoa(size)
	curl := []string{"curl", "-sS", "--max-time", "300", "-o", "/dev/null", "-w", "%{size_download} %{time_total}"}
	parse := func(what, out string) float64 {
		var got int64
		var secs float64
		if _, err := fmt.Sscanf(out, "%d %g", &got, &secs); err != nil || got != size || secs <= 0 {
			b.Fatalf("%s: curl said %q, want %d bytes", what, out, size)
		}
		return float64(size) / 1e6 / secs
	}
	inSandbox := func(sb *api.Sandbox, extra ...string) func() float64 {
		return func() float64 {
			argv := append(append(curl[:len(curl):len(curl)], extra...), url)
			res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{Argv: argv, Timeout: "320s"})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("download in %s: %v %+v", sb.Name, err, res)
			}
			return parse(sb.Name, res.Stdout)
		}
	}
	onHost := func(extra ...string) func() float64 {
		return func() float64 {
			args := append(append(curl[1:len(curl):len(curl)], extra...), "--noproxy", "*", "--cacert", w.caFile,
				"--resolve", "files.pythonhosted.org:443:"+w.ip.String(), url)
			out, err := exec.Command("curl", args...).Output()
			if err != nil {
				b.Fatalf("download on the host: %v", err)
			}
			return parse("host", string(out))
		}
	}
	peers := []struct {
		name string
		run  func() float64
		got  []float64
	}{
		{name: "pass", run: inSandbox(pass)},
		{name: "pass-h1", run: inSandbox(pass, "--http1.1")},
		{name: "terminated", run: inSandbox(term)},
		{name: "direct", run: onHost()},
		{name: "direct-h1", run: onHost("--http1.1")},
	}
	b.ResetTimer()
	for i := 0; i < rounds; i++ {
		for j := range peers {
			peers[j].got = append(peers[j].got, peers[j].run())
		}
	}
	b.StopTimer()
	q := func(v []float64, at float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[int(at*float64(len(s)-1))]
	}
	for _, p := range peers {
		// MB/s: the p90 of the slow side is the 0.1 quantile.
		b.ReportMetric(q(p.got, 0.5), p.name+"-p50-MB/s")
		b.ReportMetric(q(p.got, 0.1), p.name+"-p90-MB/s")
	}
	p50 := func(name string) float64 {
		for _, p := range peers {
			if p.name == name {
				return q(p.got, 0.5)
			}
		}
		return 0
	}
	b.ReportMetric(p50("pass")/p50("direct"), "pass/direct")
	b.ReportMetric(p50("pass-h1")/p50("direct-h1"), "pass-h1/direct-h1")
	b.ReportMetric(p50("terminated")/p50("direct-h1"), "terminated/direct-h1")
}
