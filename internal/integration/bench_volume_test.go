package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// Volume benchmarks against a real daemon process, each side by side with its peer in
// one run (bench/RESULTS.md records a run):
//
//	go test ./internal/integration -run '^$' -bench Volume -benchtime 1x

// BenchmarkVolumeWrite: write throughput inside an encrypted volume against the
// sandbox's own disk (its upper layer), in one sandbox, alternating rounds: 256 MiB
// written with dd and fsync'd at the end (target: volume at least 0.9x).
func BenchmarkVolumeWrite(b *testing.B) {
	d, cl := daemonClient(b)
	ctx := context.Background()
	d.must("volume", "create", "bench", "--size", "1G")
	b.Cleanup(func() {
		d.airlock("rm", "vw")
		d.airlock("volume", "rm", "bench", "--yes")
	})
	if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: "vw", Volumes: []api.VolumeMount{{Name: "bench", Path: "/data"}}}); err != nil {
		b.Fatal(err)
	}
	rate := func(dir string) float64 {
		res, err := cl.Exec(ctx, "vw", api.ExecRequest{Timeout: "120s",
			Shell: "rm -f " + dir + "/w; sync; s=$(date +%s%N); dd if=/dev/zero of=" + dir + "/w bs=1M count=256 conv=fsync 2>/dev/null; e=$(date +%s%N); rm -f " + dir + "/w; echo $((e-s))"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("dd in %s: %v %+v", dir, err, res)
		}
		ns, _ := strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
		return 256 / (ns / 1e9)
	}
	const rounds = 5
	var disk, vol []float64
	for i := 0; i < rounds; i++ {
		disk = append(disk, rate("/root"))
		vol = append(vol, rate("/data"))
	}
	md, mv := median(disk), median(vol)
	b.ReportMetric(md, "disk-MiB/s")
	b.ReportMetric(mv, "volume-MiB/s")
	b.ReportMetric(mv/md, "volume/disk")
}

// BenchmarkVolumeCreateExec: create → first exec result with one volume attached
// against without, alternating (target: at most +10 ms at p50). added-ms is the median
// of each pair's difference, steadier on a busy machine than the difference of the
// medians.
func BenchmarkVolumeCreateExec(b *testing.B) {
	d, cl := daemonClient(b)
	ctx := context.Background()
	const n = 25
	for i := 0; i < n; i++ {
		d.must("volume", "create", fmt.Sprintf("cv-%d", i), "--size", "64M")
	}
	b.Cleanup(func() {
		for i := 0; i < n; i++ {
			d.airlock("rm", fmt.Sprintf("plain-%d", i))
			d.airlock("rm", fmt.Sprintf("withvol-%d", i))
		}
		for i := 0; i < n; i++ {
			d.airlock("volume", "rm", fmt.Sprintf("cv-%d", i), "--yes")
		}
	})
	timeCreate := func(req api.CreateSandboxRequest) time.Duration {
		t0 := time.Now()
		if _, err := cl.Create(ctx, req); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Exec(ctx, req.Name, api.ExecRequest{Shell: "true"}); err != nil {
			b.Fatal(err)
		}
		return time.Since(t0)
	}
	var plain, withVol []time.Duration
	var diffs []float64
	for i := 0; i < n; i++ {
		// Which goes first alternates: the background cleanup of the round before
		// (terminates return before their resources are gone) slows the first.
		p := func() { plain = append(plain, timeCreate(api.CreateSandboxRequest{Name: fmt.Sprintf("plain-%d", i)})) }
		v := func() {
			withVol = append(withVol, timeCreate(api.CreateSandboxRequest{Name: fmt.Sprintf("withvol-%d", i),
				Volumes: []api.VolumeMount{{Name: fmt.Sprintf("cv-%d", i), Path: "/data"}}}))
		}
		if i%2 == 0 {
			p()
			v()
		} else {
			v()
			p()
		}
		diffs = append(diffs, float64((withVol[i]-plain[i]).Microseconds())/1000)
		d.airlock("rm", fmt.Sprintf("plain-%d", i))
		d.airlock("rm", fmt.Sprintf("withvol-%d", i))
	}
	pp, pv := p50(plain), p50(withVol)
	b.ReportMetric(pp, "plain-p50-ms")
	b.ReportMetric(pv, "volume-p50-ms")
	b.ReportMetric(median(diffs), "added-ms")
}
