package manager

import (
	"context"
	"testing"
)

// BenchmarkColdCreateAnswer measures a cold create's answer on the daemon's side
// (Manager.Create with no pool: its records around the fake driver's start) over a
// SQLite store on disk, so each write pays its commit. Each round creates a sandbox
// and terminates it (not timed). Reported: p50-ms and p90-ms of the answers.
func BenchmarkColdCreateAnswer(b *testing.B) {
	ctx := context.Background()
	m, _ := newManagerWith(b, DefaultConfig(), newFake(b))
	timeAnswers(b, func() error { return nil }, func() error {
		_, _, err := m.Create(ctx, local, CreateRequest{Name: "c"})
		return err
	}, func() error {
		if _, _, err := m.Terminate(ctx, local, "c"); err != nil {
			return err
		}
		return m.WaitCleanups(ctx)
	})
}
