package integration

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// BenchmarkFork100MiB: fork of a running sandbox that has just written 100 MiB (not
// synced), from the API call to the fork running and on stable storage, with the state
// directory on the host's file system and, taking turns in the same run, on an xfs
// with reflinks (when mkfs.xfs is installed), where the disk image's copy shares the
// parent's extents:
//
//	go test ./internal/integration -run '^$' -bench Fork100MiB -benchtime 1x
func BenchmarkFork100MiB(b *testing.B) {
	type peer struct {
		name  string
		cl    *client.Client
		times []time.Duration
	}
	_, cl := daemonClient(b)
	peers := []*peer{{name: "host-fs", cl: cl}}
	if _, err := exec.LookPath("mkfs.xfs"); err == nil {
		d := startDaemonOn(b, loopState(8<<30, "mkfs.xfs", "-q", "-f", "-m", "reflink=1"))
		cl, err := client.New(client.Options{Socket: d.socket})
		if err != nil {
			b.Fatal(err)
		}
		peers = append(peers, &peer{name: "xfs-reflink", cl: cl})
	}
	ctx := context.Background()
	const rounds = 11
	for i := 0; i < rounds; i++ {
		for _, p := range peers {
			cl := p.cl
			name := fmt.Sprintf("fk-%d", i)
			if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
				b.Fatal(err)
			}
			res, err := cl.Exec(ctx, name, api.ExecRequest{Shell: "dd if=/dev/urandom of=/root/f bs=1M count=100 2>/dev/null"})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("fill: %v %+v", err, res)
			}
			t0 := time.Now()
			if _, err := cl.Fork(ctx, name, api.ForkRequest{Name: name + "-f"}); err != nil {
				b.Fatal(err)
			}
			p.times = append(p.times, time.Since(t0))
			cl.Terminate(ctx, name+"-f")
			cl.Terminate(ctx, name)
		}
	}
	for _, p := range peers {
		sort.Slice(p.times, func(i, j int) bool { return p.times[i] < p.times[j] })
		ms := func(q float64) float64 { return float64(p.times[int(q*float64(len(p.times)-1))].Microseconds()) / 1000 }
		b.ReportMetric(ms(0.5), p.name+"-p50-ms")
		b.ReportMetric(ms(0.9), p.name+"-p90-ms")
	}
}
