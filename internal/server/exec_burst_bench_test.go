package server_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// BenchmarkExecBurst sends 100 execs of /bin/true at once, one into each of 100
// running sandboxes, as the floor of bench/run.sh -burst-pool does, on a node whose
// runtime is the fake one (the agents run in this process and spawn on the host): what
// it times is the daemon's and the agents' own part of an exec under concurrency (HTTP,
// authentication, the audit record, the store's reads, the agent's frames), without a
// container's. It reports the execs' p50 and p99 and the process's CPU per exec.
//
//	go test -run '^$' -bench BenchmarkExecBurst -benchtime 10x ./internal/server/
func BenchmarkExecBurst(b *testing.B) {
	const n = 100
	node := testenv.NewFakeNode(b, testenv.FakeOptions{})
	ctx := context.Background()
	c := node.Client
	req := api.ExecRequest{Argv: []string{"/bin/true"}}
	for i := range n {
		name := fmt.Sprintf("b%d", i)
		if _, err := c.Create(ctx, api.CreateSandboxRequest{Name: name}); err != nil {
			b.Fatal(err)
		}
		if _, err := c.Exec(ctx, name, req); err != nil { // its agent connection kept
			b.Fatal(err)
		}
	}
	var p50, p99, cpu []float64
	for b.Loop() {
		c0 := processCPU(b)
		took := timedAtOnce(n, func(i int) {
			if res, err := c.Exec(ctx, fmt.Sprintf("b%d", i), req); err != nil || res.ExitCode != 0 {
				b.Errorf("exec %d: %+v, %v", i, res, err)
			}
		})
		cpu = append(cpu, float64(processCPU(b)-c0)/float64(time.Millisecond)/n)
		p50, p99 = append(p50, quantile(took, 0.5)), append(p99, quantile(took, 0.99))
	}
	b.ReportMetric(median(p50), "p50-ms")
	b.ReportMetric(median(p99), "p99-ms")
	b.ReportMetric(median(cpu), "cpu-ms/exec")
}
