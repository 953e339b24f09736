package cluster

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// BenchmarkExecForwarded measures an exec (true) sent to node-0's TCP API for a
// sandbox node-0 holds (owning) and for one node-1 holds (forwarded over the nodes'
// own cluster TLS), each node in its own network namespace. The two alternate, so
// that the load of a shared machine weighs on both alike; it reports each one's
// median (owning-p50-µs, forwarded-p50-µs) and 90th percentile, and the difference of
// the medians (added-p50-µs).
func BenchmarkExecForwarded(b *testing.B) {
	c := newCluster(b, Options{Nodes: 2})
	a0 := c.Node(0).As("alice")
	for i, n := range c.Nodes() {
		if _, err := n.As("alice").Create(background, api.CreateSandboxRequest{Name: "on-" + n.Name}); err != nil {
			b.Fatalf("create on node-%d: %v", i, err)
		}
	}
	exec := func(sandbox string) time.Duration {
		start := time.Now()
		res, err := a0.Exec(background, sandbox, api.ExecRequest{Argv: []string{"true"}, Timeout: "30s"})
		if err != nil || res.ExitCode != 0 {
			b.Fatalf("exec in %s through node-0: %+v, %v", sandbox, res, err)
		}
		return time.Since(start)
	}
	exec("on-node-0") // the first of each opens its connections
	exec("on-node-1")
	var owning, forwarded []time.Duration
	for b.Loop() {
		owning = append(owning, exec("on-node-0"))
		forwarded = append(forwarded, exec("on-node-1"))
	}
	pct := func(d []time.Duration, p int) float64 {
		slices.Sort(d)
		return float64(d[len(d)*p/100].Microseconds())
	}
	b.ReportMetric(pct(owning, 50), "owning-p50-µs")
	b.ReportMetric(pct(forwarded, 50), "forwarded-p50-µs")
	b.ReportMetric(pct(forwarded, 50)-pct(owning, 50), "added-p50-µs")
	b.ReportMetric(pct(owning, 90), "owning-p90-µs")
	b.ReportMetric(pct(forwarded, 90), "forwarded-p90-µs")
}

// BenchmarkCreateExecStore measures a create and its first exec (true) on a node of a
// cluster, whose records are in PostgreSQL (placed by manager.Place, admitted against
// its memory), and the same on the same daemon alone, on SQLite, each in a network
// namespace of its own on one network. The two alternate, so that the load of a shared
// machine weighs on both alike; it reports each one's median (postgres-p50-ms,
// sqlite-p50-ms) and their ratio (ratio-p50). Each sandbox is terminated, untimed,
// before the next create.
func BenchmarkCreateExecStore(b *testing.B) {
	c := newCluster(b, Options{Nodes: 1, Alone: 1})
	nodes := []*Node{c.Node(0), c.Alone(0)}
	took := make([][]time.Duration, len(nodes))
	i := 0
	round := func(timed bool) {
		for k, n := range nodes {
			name := fmt.Sprintf("ce-%d", i)
			i++
			start := time.Now()
			if _, err := n.Client.Create(background, api.CreateSandboxRequest{Name: name}); err != nil {
				b.Fatalf("create %s on %s: %v", name, n.Name, err)
			}
			res, err := n.Client.Exec(background, name, api.ExecRequest{Argv: []string{"true"}, Timeout: "30s"})
			if err != nil || res.ExitCode != 0 {
				b.Fatalf("exec in %s on %s: %+v, %v", name, n.Name, res, err)
			}
			if timed {
				took[k] = append(took[k], time.Since(start))
			}
			b.StopTimer()
			if _, err := n.Client.Terminate(background, name); err != nil {
				b.Fatalf("terminate %s on %s: %v", name, n.Name, err)
			}
			b.StartTimer()
		}
	}
	round(false) // the first of each warms its image and disk templates
	for b.Loop() {
		round(true)
	}
	p50 := func(d []time.Duration) float64 {
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds()) / 1000
	}
	pg, lite := p50(took[0]), p50(took[1])
	b.ReportMetric(pg, "postgres-p50-ms")
	b.ReportMetric(lite, "sqlite-p50-ms")
	b.ReportMetric(pg/lite, "ratio-p50")
}
