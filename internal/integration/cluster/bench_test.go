package cluster

import (
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
