package manager

import (
	"context"
	"slices"
	"testing"
	"time"
)

// BenchmarkTerminateAnswer measures a terminate's answer (Manager.Terminate: its records
// and the kill, not the cleanup that follows in the background) over the fake driver and
// a SQLite store on disk, so each write pays its commit. Each round creates a sandbox
// (not timed) and terminates it. Reported: p50-ms and p90-ms of the answers.
func BenchmarkTerminateAnswer(b *testing.B) {
	ctx := context.Background()
	m, _ := newManagerWith(b, DefaultConfig(), newFake(b))
	var took []time.Duration
	for b.Loop() {
		b.StopTimer()
		if _, _, err := m.Create(ctx, local, CreateRequest{Name: "t"}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		_, sb, err := m.Terminate(ctx, local, "t")
		took = append(took, time.Since(start))
		b.StopTimer()
		if err != nil || sb.State != Terminated {
			b.Fatalf("terminate: %v", err)
		}
		if err := m.WaitCleanups(ctx); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1000, "p90-ms")
}
