package audit

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// writeCounter counts the store's audit writes.
type writeCounter struct {
	store.Store
	writes [][]string // the actions of each write
}

func (w *writeCounter) AppendAudit(ctx context.Context, recs []*store.AuditRecord, seal store.AuditSeal) error {
	var actions []string
	for _, r := range recs {
		actions = append(actions, r.Action)
	}
	w.writes = append(w.writes, actions)
	return w.Store.AppendAudit(ctx, recs, seal)
}

// A request's context holds nothing until its handler says so; then its records wait
// for the request's own record and go with it in one write, first; after that, records
// are written at once again.
func TestHoldWritesWithTheRequest(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	w := &writeCounter{Store: st}
	c, err := OpenChain(ctx, w, testKey)
	if err != nil {
		t.Fatal(err)
	}
	rctx := Hold(ctx)
	if err := c.Append(rctx, Entry{Identity: "alice", Action: "before", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	if len(w.writes) != 1 {
		t.Fatalf("a record before Holding: %d writes, want 1 (written at once)", len(w.writes))
	}
	Holding(rctx)
	for _, a := range []string{"exec", "exec2"} {
		if err := c.Append(rctx, Entry{Identity: "alice", Action: a, Result: "ok"}); err != nil {
			t.Fatal(err)
		}
	}
	if len(w.writes) != 1 {
		t.Fatalf("records held: %d writes, want still 1", len(w.writes))
	}
	if err := c.Release(rctx, Entry{Identity: "alice", Action: "POST", Result: "200"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Append(rctx, Entry{Identity: "alice", Action: "after", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	want := [][]string{{"before"}, {"exec", "exec2", "POST"}, {"after"}}
	if !slices.EqualFunc(w.writes, want, slices.Equal[[]string]) {
		t.Fatalf("writes %v, want %v", w.writes, want)
	}
	if res, err := c.Verify(ctx); err != nil || !res.OK || res.Records != 5 {
		t.Errorf("the log after held writes: %+v, %v; want 5 records that verify", res, err)
	}
}
