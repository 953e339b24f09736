package server_test

import (
	"context"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// BenchmarkWarmExec is one exec of /bin/true in a running sandbox through the API end
// to end (the Go SDK over the node's unix socket), on a node whose runtime is the fake
// one: the agent runs in this process and spawns on the host, so the figure is the
// daemon's and the agent's own work around the spawn, without a container's. Reports the
// p50 beside a GET of the same sandbox (the API floor), and the CPU time per exec.
//
//	go test -run '^$' -bench BenchmarkWarmExec -benchtime 2000x ./internal/server/
func BenchmarkWarmExec(b *testing.B) {
	node := testenv.NewFakeNode(b, testenv.FakeOptions{})
	ctx := context.Background()
	if _, err := node.Client.Create(ctx, api.CreateSandboxRequest{Name: "warm"}); err != nil {
		b.Fatal(err)
	}
	req := api.ExecRequest{Argv: []string{"/bin/true"}}
	if _, err := node.Client.Exec(ctx, "warm", req); err != nil {
		b.Fatal(err)
	}
	var execs, gets []float64
	c0 := processCPU(b)
	for b.Loop() {
		t0 := time.Now()
		res, err := node.Client.Exec(ctx, "warm", req)
		execs = append(execs, float64(time.Since(t0))/float64(time.Millisecond))
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec: %+v, %v", res, err)
		}
		t0 = time.Now()
		if _, err := node.Client.Get(ctx, "warm"); err != nil {
			b.Fatal(err)
		}
		gets = append(gets, float64(time.Since(t0))/float64(time.Millisecond))
	}
	b.ReportMetric(float64(processCPU(b)-c0)/float64(time.Millisecond)/float64(len(execs)), "cpu-ms/exec+get")
	b.ReportMetric(median(execs), "exec-p50-ms")
	b.ReportMetric(median(gets), "get-p50-ms")
}
