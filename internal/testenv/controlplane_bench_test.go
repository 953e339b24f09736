package testenv

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
	"github.com/airlockhq/airlock/internal/testenv/testca"
)

// BenchmarkControlPlane measures the cluster's control plane alone: b.N creates sent,
// by AIRLOCK_BENCH_CLIENTS clients at once (default 8), each through a node picked at
// random among AIRLOCK_BENCH_NODES fake nodes (default 50) that share one PostgreSQL
// database, each with its own cluster TLS, placing with manager.Place and admitting
// against a node.memory of 64GiB (each sandbox asks 64MiB), with no live_cap (one
// owner makes them all). It reports the creates'
// latency (p50-ms, p99-ms, max-ms), creates/s, and PostgreSQL round trips per create
// (roundtrips/create, everything the nodes sent during the creates, leases and loops
// included; idle-roundtrips/s is what the nodes send with no create under way). Run it
// as
//
//	go test -run '^$' -bench BenchmarkControlPlane -benchtime 10000x -timeout 30m ./internal/testenv/
//
// (the testing package runs it once with b.N = 1 first: the nodes start twice).
func BenchmarkControlPlane(b *testing.B) {
	nodes, clients := envInt(b, "AIRLOCK_BENCH_NODES", 50), envInt(b, "AIRLOCK_BENCH_CLIENTS", 8)
	tc, dsn := countTrips(b, pgtest.Start(b).CreateDatabase(b))
	keys := b.TempDir()
	if err := os.Chmod(keys, 0o700); err != nil {
		b.Fatal(err)
	}
	ca := testca.New(b)
	fleet := make([]*FakeNode, nodes)
	for i := range fleet {
		name := fmt.Sprintf("node-%02d", i)
		fleet[i] = NewFakeNode(b, FakeOptions{StoreDSN: dsn, NodeName: name, KeysDir: keys, ClusterTLS: ca.Node(b, name),
			Config: func(c *manager.Config) { c.NodeMemory, c.LiveCap = 64<<30, 0 }})
	}
	idle := tc.trips.Load()
	time.Sleep(5 * time.Second)
	idleRate := float64(tc.trips.Load()-idle) / 5

	ctx := context.Background()
	var next atomic.Int64
	took := make([][]time.Duration, clients)
	b.ResetTimer()
	before, began := tc.trips.Load(), time.Now()
	var wg sync.WaitGroup
	for w := range clients {
		wg.Go(func() {
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				n := fleet[rand.IntN(len(fleet))]
				start := time.Now()
				if _, err := n.Client.Create(ctx, api.CreateSandboxRequest{Name: fmt.Sprintf("cp-%d", i), Limits: api.Limits{Memory: 64 << 20}}); err != nil {
					b.Errorf("create %d through %s: %v", i, n.Config.Node.Name, err)
					return
				}
				took[w] = append(took[w], time.Since(start))
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(began)
	trips := tc.trips.Load() - before
	b.StopTimer()
	all := slices.Concat(took...)
	if len(all) == 0 {
		b.Fatal("no create succeeded")
	}
	slices.Sort(all)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(all[len(all)/2]), "p50-ms")
	b.ReportMetric(ms(all[len(all)*99/100]), "p99-ms")
	b.ReportMetric(ms(all[len(all)-1]), "max-ms")
	b.ReportMetric(float64(len(all))/elapsed.Seconds(), "creates/s")
	b.ReportMetric(float64(trips)/float64(len(all)), "roundtrips/create")
	b.ReportMetric(idleRate, "idle-roundtrips/s")
}

// envInt is the positive integer the environment variable name holds, or def.
func envInt(tb testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		tb.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return v
}
