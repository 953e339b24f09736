package manager

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// countedStore is the SQLite store that counts the writes a manager makes of
// operations, sandbox records and events.
type countedStore struct {
	*sqlite.Store
	writes atomic.Int32
}

func (s *countedStore) CreateOperation(ctx context.Context, op *store.Operation) (*store.Operation, error) {
	s.writes.Add(1)
	return s.Store.CreateOperation(ctx, op)
}

func (s *countedStore) UpdateOperation(ctx context.Context, op *store.Operation) error {
	s.writes.Add(1)
	return s.Store.UpdateOperation(ctx, op)
}

func (s *countedStore) UpdateSandbox(ctx context.Context, sb *store.Sandbox) error {
	s.writes.Add(1)
	return s.Store.UpdateSandbox(ctx, sb)
}

func (s *countedStore) AppendEvent(ctx context.Context, ev *store.Event) error {
	s.writes.Add(1)
	return s.Store.AppendEvent(ctx, ev)
}

func (s *countedStore) AppendEvents(ctx context.Context, evs []*store.Event) error {
	s.writes.Add(1)
	return s.Store.AppendEvents(ctx, evs)
}

func (s *countedStore) WriteClaim(ctx context.Context, c store.Claim) error {
	s.writes.Add(1)
	return s.Store.WriteClaim(ctx, c)
}

// TestTerminateRecordsInTwoWrites: a terminate's answer waits for two writes (the
// cleanup with the sandbox terminating; the tombstone with the terminate's operation
// ended), and what they store is what separate writes stored: both state events, the
// operation succeeded and readable by its id, the cleanup pending.
func TestTerminateRecordsInTwoWrites(t *testing.T) {
	dir := t.TempDir()
	sq, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sq.Close() })
	imgs, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	st := &countedStore{Store: sq}
	drv := &heldDelete{Driver: newFake(t)}
	m := New(DefaultConfig(), st, drv, imgs, nil)
	t.Cleanup(func() { m.Close() })
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	gate := make(chan struct{})
	drv.set(gate, nil) // the cleanup, and its writes, wait
	defer close(gate)

	st.writes.Store(0)
	op, got, err := m.Terminate(ctx, local, "a")
	if err != nil || got.State != Terminated {
		t.Fatalf("terminate: %v (state %v)", err, got)
	}
	if n := st.writes.Load(); n != 2 {
		t.Errorf("the terminate made %d writes before its answer; want 2", n)
	}
	stored, err := m.Operation(ctx, local.Owner, op.ID)
	if err != nil || stored.State != store.OpSucceeded || stored.SandboxID != sb.ID {
		t.Errorf("the terminate's operation as stored: %+v, %v; want succeeded, of %s", stored, err, sb.ID)
	}
	evs, err := st.ListEvents(ctx, store.EventFilter{SandboxID: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	var to []string
	for _, ev := range evs {
		if ev.Type == "state" {
			to = append(to, string(ev.Data))
		}
	}
	if len(to) < 2 || to[len(to)-2] != `{"from":"running","to":"terminating"}` || to[len(to)-1] != `{"from":"terminating","to":"terminated"}` {
		t.Errorf("state events %q; want running to terminating, then terminating to terminated", to)
	}
	if pending, err := m.Cleanups(ctx); err != nil || len(pending) != 1 || pending[0].SandboxID != sb.ID {
		t.Errorf("cleanups pending: %+v, %v; want the one of %s", pending, err, sb.ID)
	}
}
