package server_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// BenchmarkPoolBurst sends 100 creates at once to a node whose warm pool holds 100
// ready members, as bench/run.sh -burst-pool does, but over the fake runtime: what it
// times is the daemon's own part of a claim (HTTP, audit, store writes, the claim's
// compare-and-swap), which a real node adds to the runtime's. It reports the creates'
// p50 and p99 and the CPU the process spent on the burst.
//
//	go test -run '^$' -bench BenchmarkPoolBurst -benchtime 3x ./internal/server/
func BenchmarkPoolBurst(b *testing.B) {
	const n = 100
	node := testenv.NewFakeNode(b, testenv.FakeOptions{})
	ctx := context.Background()
	c := node.Client
	b.Cleanup(func() { c.DeletePool(context.Background(), "warm") }) // before the node's own
	var p50, p99, cpu []float64
	for round := range b.N {
		b.StopTimer()
		if round == 0 {
			if _, err := c.SetPool(ctx, "warm", api.PoolRequest{Size: n}); err != nil {
				b.Fatal(err)
			}
		}
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if pools, _ := c.Pools(ctx); len(pools) == 1 && pools[0].Ready == n {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("the pool has not %d ready members after 60s", n)
			}
		}
		b.StartTimer()
		c0 := processCPU(b)
		took := timedAtOnce(n, func(i int) {
			resp, err := c.Create(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("r%d-%d", round, i)})
			if err != nil {
				b.Error(err)
			} else if resp.Sandbox == nil || resp.Operation.State != "succeeded" {
				b.Errorf("create %d: %+v", i, resp.Operation)
			}
		})
		cpu = append(cpu, float64(processCPU(b)-c0)/float64(time.Millisecond))
		b.StopTimer()
		if pools, _ := c.Pools(ctx); len(pools) != 1 || pools[0].Hits != int64(n*(round+1)) {
			b.Fatalf("after the burst the pool is %+v; want %d hits", pools, n*(round+1))
		}
		p50, p99 = append(p50, quantile(took, 0.5)), append(p99, quantile(took, 0.99))
		for i := range n { // the owner's cap is 100 live
			if _, err := c.Terminate(ctx, fmt.Sprintf("r%d-%d", round, i)); err != nil {
				b.Fatal(err)
			}
		}
		b.StartTimer()
	}
	b.ReportMetric(median(p50), "p50-ms")
	b.ReportMetric(median(p99), "p99-ms")
	b.ReportMetric(median(cpu), "cpu-ms")
}

// timedAtOnce runs call(0) … call(n-1) side by side and returns how long each took, in ms.
func timedAtOnce(n int, call func(i int)) []float64 {
	took := make([]float64, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			t0 := time.Now()
			call(i)
			took[i] = float64(time.Since(t0)) / float64(time.Millisecond)
		})
	}
	wg.Wait()
	return took
}

func quantile(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
