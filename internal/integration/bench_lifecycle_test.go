package integration

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// Lifecycle benchmarks against a real daemon process (so its RSS is the daemon's):
//
//	go test ./internal/integration -run '^$' -bench Lifecycle -benchtime 1x
//
// Each reports p50 milliseconds (and ratios) with b.ReportMetric; bench/RESULTS.md
// records a run.

func daemonClient(b *testing.B) (*daemon, *client.Client) {
	d := startDaemonB(b)
	cl, err := client.New(client.Options{Socket: d.socket})
	if err != nil {
		b.Fatal(err)
	}
	return d, cl
}

func p50(ds []time.Duration) float64 {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return float64(ds[len(ds)/2].Microseconds()) / 1000
}

func rssMiB(pid int) float64 {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// BenchmarkLifecycleResumeVsCreate: create → first exec result against resume → first
// exec result (target: resume p50 at most 2x create).
func BenchmarkLifecycleResumeVsCreate(b *testing.B) {
	_, cl := daemonClient(b)
	ctx := context.Background()
	const n = 15
	var create, resume []time.Duration
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("rvc-%d", i)
		t0 := time.Now()
		if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		create = append(create, time.Since(t0))
		if _, err := cl.Suspend(ctx, name); err != nil {
			b.Fatal(err)
		}
		t0 = time.Now()
		if _, err := cl.Resume(ctx, name); err != nil {
			b.Fatal(err)
		}
		if _, err := cl.Exec(ctx, name, api.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
		resume = append(resume, time.Since(t0))
		cl.Terminate(ctx, name)
	}
	c, r := p50(create), p50(resume)
	b.ReportMetric(c, "create-p50-ms")
	b.ReportMetric(r, "resume-p50-ms")
	b.ReportMetric(r/c, "resume/create")
}

// BenchmarkLifecycleSuspendFork100MiB: suspend, and fork, of a sandbox with a 100 MiB
// upper layer (targets: p50 under 300 ms each), and the bytes a second snapshot after a
// 1 MiB change stores (target: at most 2 MiB).
func BenchmarkLifecycleSuspendFork100MiB(b *testing.B) {
	_, cl := daemonClient(b)
	ctx := context.Background()
	const n = 7
	var suspend, fork []time.Duration
	var second float64
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("big-%d", i)
		if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		res, err := cl.Exec(ctx, name, api.ExecRequest{Shell: "head -c 100M /dev/urandom > /root/data && sync"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("fill: %v %+v", err, res)
		}
		t0 := time.Now()
		if _, err := cl.Fork(ctx, name, api.ForkRequest{Name: name + "-f"}); err != nil {
			b.Fatal(err)
		}
		fork = append(fork, time.Since(t0))
		if _, err := cl.Snapshot(ctx, name, nil); err != nil { // the first snapshot
			b.Fatal(err)
		}
		cl.Exec(ctx, name, api.ExecRequest{Shell: "head -c 1M /dev/urandom | dd of=/root/data bs=1M seek=7 conv=notrunc 2>/dev/null"})
		snap, err := cl.Snapshot(ctx, name, nil)
		if err != nil {
			b.Fatal(err)
		}
		second = float64(snap.Snapshot.StoredSize) / (1 << 20)
		t0 = time.Now()
		if _, err := cl.Suspend(ctx, name); err != nil {
			b.Fatal(err)
		}
		suspend = append(suspend, time.Since(t0))
		cl.Terminate(ctx, name)
		cl.Terminate(ctx, name+"-f")
	}
	b.ReportMetric(p50(suspend), "suspend-p50-ms")
	b.ReportMetric(p50(fork), "fork-p50-ms")
	b.ReportMetric(second, "second-snapshot-MiB")
}

// BenchmarkLifecycleManySuspended: 200 suspended plus 20 running sandboxes; the
// daemon's RSS (target: under 100 MiB).
func BenchmarkLifecycleManySuspended(b *testing.B) {
	if testing.Short() {
		b.Skip("creates 220 sandboxes")
	}
	d, cl := daemonClient(b)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 220)
	sem := make(chan struct{}, 4)
	for i := 0; i < 220; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			name := fmt.Sprintf("many-%d", i)
			if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: name, Limits: api.Limits{Memory: 64 << 20}}); err != nil {
				errs <- err
				return
			}
			if i >= 20 {
				if _, err := cl.Suspend(ctx, name); err != nil {
					errs <- err
				}
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	for i := 0; i < 20; i++ { // the running ones answer
		if _, err := cl.Exec(ctx, fmt.Sprintf("many-%d", i), api.ExecRequest{Argv: []string{"true"}}); err != nil {
			b.Fatal(err)
		}
	}
	list, _ := cl.List(ctx, client.ListOptions{States: []string{"suspended"}})
	b.ReportMetric(float64(len(list)), "suspended")
	b.ReportMetric(rssMiB(d.cmd.Process.Pid), "daemon-rss-MiB")
}
