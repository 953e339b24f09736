package integration

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// BenchmarkWarmExec is one exec of `true` in a running sandbox through the API end to
// end (the Go SDK over the daemon's unix socket) beside a GET of the same sandbox (the
// API floor), alternated, on a real daemon and runc. Reports both p50s. With
// AIRLOCK_BENCH_PERF=FILE it records the daemon with `perf record -g` into FILE
// meanwhile (with AIRLOCK_BENCH_PERF_ALL=1 the whole machine: the agent and the
// command too; `perf report --sort comm` splits it). AIRLOCK_BENCH_GAP=1500ms waits that
// long before each exec, as a caller that is not in a loop does (the agent gives its
// memory back after a second without calls).
//
//	go test ./internal/integration -run '^$' -bench '^BenchmarkWarmExec$' -benchtime 400x
func BenchmarkWarmExec(b *testing.B) {
	d, cl := daemonClient(b)
	ctx := context.Background()
	if _, err := cl.Create(ctx, api.CreateSandboxRequest{Name: "warm", Network: &api.NetworkPolicy{Mode: "none"}}); err != nil {
		b.Fatal(err)
	}
	req := api.ExecRequest{Argv: []string{"true"}}
	for range 20 {
		if _, err := cl.Exec(ctx, "warm", req); err != nil {
			b.Fatal(err)
		}
	}
	if out := os.Getenv("AIRLOCK_BENCH_PERF"); out != "" {
		perf := exec.Command("perf", "record", "-g", "-o", out, "-p", strconv.Itoa(d.cmd.Process.Pid))
		if os.Getenv("AIRLOCK_BENCH_PERF_ALL") != "" {
			perf = exec.Command("perf", "record", "-a", "-g", "-o", out)
		}
		if err := perf.Start(); err != nil {
			b.Fatal(err)
		}
		defer func() { perf.Process.Signal(os.Interrupt); perf.Wait() }()
		time.Sleep(300 * time.Millisecond) // perf attaches
	}
	var execs, gets []time.Duration
	gap, _ := time.ParseDuration(os.Getenv("AIRLOCK_BENCH_GAP"))
	for b.Loop() {
		time.Sleep(gap)
		t0 := time.Now()
		res, err := cl.Exec(ctx, "warm", req)
		execs = append(execs, time.Since(t0))
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v, %v", res, err)
		}
		t0 = time.Now()
		if _, err := cl.Get(ctx, "warm"); err != nil {
			b.Fatal(err)
		}
		gets = append(gets, time.Since(t0))
	}
	b.ReportMetric(p50(execs), "exec-p50-ms")
	b.ReportMetric(p50(gets), "get-p50-ms")
}
