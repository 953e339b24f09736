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
	timeAnswers(b, func() error {
		_, _, err := m.Create(ctx, local, CreateRequest{Name: "t"})
		return err
	}, func() error {
		_, sb, err := m.Terminate(ctx, local, "t")
		if err == nil && sb.State != Terminated {
			b.Fatalf("terminate left %s", sb.State)
		}
		return err
	}, func() error { return m.WaitCleanups(ctx) })
}

// timeAnswers runs b's rounds: before, then answer, timed, then after; the first
// error of any fails b. It reports the answers' p50-ms and p90-ms.
func timeAnswers(b *testing.B, before, answer, after func() error) {
	var took []time.Duration
	for b.Loop() {
		b.StopTimer()
		if err := before(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		err := answer()
		took = append(took, time.Since(start))
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		if err := after(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	slices.Sort(took)
	b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(took[len(took)*9/10].Microseconds())/1000, "p90-ms")
}
