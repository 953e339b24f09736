package integration

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// BenchmarkEgressDownload512MiB: one 512 MiB HTTPS download from the loopback upstream
// (served from memory), in turns in each round:
//   - pass: curl in a sandbox of mode unrestricted, through the egress proxy, which
//     passes its TLS through (its bytes relayed as they are), so curl speaks HTTP/2 to the
//     server as it does directly; pass-h1: the same over HTTP/1.1;
//   - terminated: curl in a baseline sandbox to a registry host, through the proxy,
//     which terminates TLS (speaking HTTP/1.1 to curl) and makes its own to the
//     upstream;
//   - direct: curl on the host straight to the server (HTTP/2, as curl does by default),
//     and direct-h1: the same over HTTP/1.1;
//   - veth, veth-h1: curl in a network namespace of its own behind a veth pair made as a
//     sandbox's is (same MTU, the kernel's default offloads), straight to the same server
//     listening on the host side of that link: a sandbox's path without the proxy's hop.
//
// Each download is logged (with -v: its MB/s and CPU, for the spread). It reports each
// case's p50 and p90 in MB/s and the p50 of the CPU time a download takes (curl's, and
// this process's: the upstream server and the node with its proxy), and, at the p50,
// each proxied case against the direct one of its protocol and against the veth one
// (the fairer peer: the same link, one hop less), by throughput and by CPU (the ratio
// of CPU per byte, what the throughput ratio is when the cores are the limit, as on a
// loaded machine):
//
//	go test ./internal/integration -run '^$' -bench EgressDownload512MiB -benchtime 1x
//
// AIRLOCK_BENCH_PEERS (names, comma-separated) runs only those cases, and
// AIRLOCK_BENCH_ROUNDS sets the number of rounds (7).
func BenchmarkEgressDownload512MiB(b *testing.B) {
	const size = 512 << 20
	rounds := 7
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
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
	// A download's result: curl's throughput and the CPU seconds curl used.
	type got struct{ mbps, cpu float64 }
	parse := func(what, out string, cpu float64) got {
		var n int64
		var secs float64
		if _, err := fmt.Sscanf(out, "%d %g", &n, &secs); err != nil || n != size || secs <= 0 {
			b.Fatalf("%s: curl said %q, want %d bytes", what, out, size)
		}
		return got{float64(size) / 1e6 / secs, cpu}
	}
	inSandbox := func(sb *api.Sandbox, extra ...string) func() got {
		return func() got {
			// bash's time tells curl's user and system CPU seconds on stderr.
			argv := append(append([]string{"bash", "-c", `TIMEFORMAT="%3U %3S"; time "$@"`, "bash"}, curl...), extra...)
			res, err := n.Client.Exec(background, sb.Name, api.ExecRequest{Argv: append(argv, url), Timeout: "320s"})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("download in %s: %v %+v", sb.Name, err, res)
			}
			var user, sys float64
			if _, err := fmt.Sscanf(res.Stderr, "%g %g", &user, &sys); err != nil {
				b.Fatalf("download in %s: no CPU times from bash in %q", sb.Name, res.Stderr)
			}
			return parse(sb.Name, res.Stdout, user+sys)
		}
	}
	// outside runs curl outside any sandbox, behind the command given (none: on the
	// host), to the server at addr.
	outside := func(what string, front []string, addr netip.Addr, extra ...string) func() got {
		return func() got {
			argv := append(append(append(front[:len(front):len(front)], curl...), extra...), "--noproxy", "*",
				"--cacert", w.caFile, "--resolve", "files.pythonhosted.org:443:"+addr.String(), url)
			cmd := exec.Command(argv[0], argv[1:]...)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				b.Fatalf("download %s: %v: %s", what, err, stderr.String())
			}
			return parse(what, string(out), (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds())
		}
	}
	onHost := func(extra ...string) func() got { return outside("on the host", nil, w.ip, extra...) }
	type peer struct {
		name               string
		run                func() got
		mbps, cpu, curlCPU []float64
	}
	peers := []peer{
		{name: "pass", run: inSandbox(pass)},
		{name: "pass-h1", run: inSandbox(pass, "--http1.1")},
		{name: "terminated", run: inSandbox(term)},
		{name: "direct", run: onHost()},
		{name: "direct-h1", run: onHost("--http1.1")},
	}
	if ns, addr, ok := bareLink(b, w); ok {
		front := []string{"ip", "netns", "exec", ns}
		peers = append(peers,
			peer{name: "veth", run: outside("behind a bare veth", front, addr)},
			peer{name: "veth-h1", run: outside("behind a bare veth", front, addr, "--http1.1")})
	}
	if only := os.Getenv("AIRLOCK_BENCH_PEERS"); only != "" {
		want := strings.Split(only, ",")
		peers = slices.DeleteFunc(peers, func(p peer) bool { return !slices.Contains(want, p.name) })
	}
	b.ResetTimer()
	for i := 0; i < rounds; i++ {
		for j := range peers {
			t0 := selfCPU()
			g := peers[j].run()
			peers[j].mbps = append(peers[j].mbps, g.mbps)
			// This process holds the upstream server and the node (its proxy).
			peers[j].cpu = append(peers[j].cpu, g.cpu+(selfCPU()-t0).Seconds())
			peers[j].curlCPU = append(peers[j].curlCPU, g.cpu)
			b.Logf("round %d %-10s %6.1f MB/s, CPU %4.0f ms (curl %4.0f)", i, peers[j].name, g.mbps,
				peers[j].cpu[i]*1e3, g.cpu*1e3)
		}
	}
	b.StopTimer()
	q := func(v []float64, at float64) float64 {
		s := append([]float64(nil), v...)
		sort.Float64s(s)
		return s[int(at*float64(len(s)-1))]
	}
	p50 := map[string]float64{}
	cpu50 := map[string]float64{}
	for _, p := range peers {
		// MB/s: the p90 of the slow side is the 0.1 quantile.
		b.ReportMetric(q(p.mbps, 0.5), p.name+"-p50-MB/s")
		b.ReportMetric(q(p.mbps, 0.1), p.name+"-p90-MB/s")
		b.ReportMetric(q(p.cpu, 0.5)*1e3, p.name+"-cpu-ms")
		b.ReportMetric(q(p.curlCPU, 0.5)*1e3, p.name+"-curl-cpu-ms")
		p50[p.name], cpu50[p.name] = q(p.mbps, 0.5), q(p.cpu, 0.5)
	}
	for _, r := range [][2]string{
		{"pass", "direct"}, {"pass-h1", "direct-h1"}, {"terminated", "direct-h1"},
		{"pass", "veth"}, {"pass-h1", "veth-h1"}, {"terminated", "veth-h1"},
	} {
		if p50[r[0]] > 0 && p50[r[1]] > 0 {
			b.ReportMetric(p50[r[0]]/p50[r[1]], r[0]+"/"+r[1])
			// CPU per byte, peer over proxied: what throughput would be if CPU bound.
			b.ReportMetric(cpu50[r[1]]/cpu50[r[0]], r[0]+"/"+r[1]+"-by-cpu")
		}
	}
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// bareLink makes a network namespace joined to the host by a veth pair as a sandbox's
// link is (sandboxlink: MTU 65520, the kernel's default offloads), with the world's
// HTTPS server also listening on the host side, addr. Everything goes at the
// benchmark's end. ok is false, and the log says why, when the host cannot make one.
func bareLink(b *testing.B, w *netWorld) (ns string, addr netip.Addr, ok bool) {
	tag := randHex(3)
	ns, hostIf, peerIf := "albench-"+tag, "abh"+tag, "abs"+tag
	sub := testenv.FreeSubnet(b, 213)
	addr, peerAddr := sub.Addr().Next(), sub.Addr().Next().Next()
	b.Cleanup(func() {
		exec.Command("ip", "link", "del", hostIf).Run()
		exec.Command("ip", "netns", "del", ns).Run()
	})
	mtu := "65520"
	for _, args := range [][]string{
		{"netns", "add", ns},
		{"link", "add", hostIf, "mtu", mtu, "type", "veth", "peer", "name", peerIf, "mtu", mtu, "netns", ns},
		{"addr", "add", addr.String() + "/30", "dev", hostIf},
		{"link", "set", hostIf, "up"},
		{"-n", ns, "addr", "add", peerAddr.String() + "/30", "dev", peerIf},
		{"-n", ns, "link", "set", peerIf, "up"},
		{"-n", ns, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			b.Logf("no bare veth peer: ip %s: %v: %s", strings.Join(args, " "), err, out)
			return "", netip.Addr{}, false
		}
	}
	l, err := net.Listen("tcp4", netip.AddrPortFrom(addr, 443).String())
	if err != nil {
		b.Logf("no bare veth peer: %v", err)
		return "", netip.Addr{}, false
	}
	srv := w.httpsServer()
	go srv.ServeTLS(l, "", "")
	b.Cleanup(func() { srv.Close() })
	return ns, addr, true
}
