package testenv

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/forward"
)

// BenchmarkExecForwarded measures an exec sent to node-a for a sandbox on node-a itself
// (owning) and for one on node-b (forwarded over mutual TLS), reporting each one's
// median as p50-µs.
func BenchmarkExecForwarded(b *testing.B) {
	byLabel := func(_ context.Context, r forward.PlaceRequest) (string, error) { return r.Labels["node"], nil }
	c := newCluster(b, byLabel)
	ctx := context.Background()
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := c.alice.Create(ctx, api.CreateSandboxRequest{Name: "on-" + n, Labels: map[string]string{"node": n}}); err != nil {
			b.Fatal(err)
		}
	}
	for _, bc := range []struct{ name, sandbox string }{{"owning", "on-node-a"}, {"forwarded", "on-node-b"}} {
		b.Run(bc.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				start := time.Now()
				if _, err := c.alice.Exec(ctx, bc.sandbox, api.ExecRequest{Argv: []string{"true"}}); err != nil {
					b.Fatal(err)
				}
				took = append(took, time.Since(start))
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds()), "p50-µs")
		})
	}
}
