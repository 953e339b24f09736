package manager

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// countedStore is the SQLite store that counts the writes a manager makes of
// operations, sandbox records and events.
type countedStore struct {
	*sqlite.Store
	writes atomic.Int32
}

func (s *countedStore) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	s.writes.Add(1)
	return s.Store.CreateSandbox(ctx, sb)
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

// newCountedManager is a manager over drv and a countedStore.
func newCountedManager(t *testing.T, drv runtime.Driver) (*Manager, *countedStore) {
	t.Helper()
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
	m := New(DefaultConfig(), st, drv, imgs, nil)
	t.Cleanup(func() { m.Close() })
	return m, st
}

// TestTerminateRecordsInTwoWrites: a terminate's answer waits for two writes (the
// cleanup with the sandbox terminating; the tombstone with the terminate's operation
// ended), and what they store is what separate writes stored: both state events, the
// operation succeeded and readable by its id, the cleanup pending.
func TestTerminateRecordsInTwoWrites(t *testing.T) {
	drv := &heldDelete{Driver: newFake(t)}
	m, st := newCountedManager(t, drv)
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

// TestTerminateFindsACleanupRecordedBefore: a terminate of a sandbox whose cleanup a
// terminate the daemon did not finish recorded (its first write refused as already
// there) goes on with that cleanup, which then succeeds.
func TestTerminateFindsACleanupRecordedBefore(t *testing.T) {
	m, _, st := newTestManager(t)
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := m.recordCleanup(ctx, sb)
	if err != nil {
		t.Fatal(err)
	}
	if _, got, err := m.Terminate(ctx, local, "a"); err != nil || got.State != Terminated {
		t.Fatalf("terminate after an interrupted one: %v (record %+v)", err, got)
	}
	if err := m.WaitCleanups(ctx); err != nil {
		t.Fatal(err)
	}
	if op, err := st.GetOperation(ctx, before.ID); err != nil || op.State != store.OpSucceeded {
		t.Errorf("the cleanup recorded before: %+v, %v; want it succeeded", op, err)
	}
}

// TestTerminateFailedTombstoneWriteLeavesNothing: a tombstone whose write the database
// refuses fails the terminate and stores nothing of that write: the sandbox stays
// terminating (for the sweep), with no terminated event, and the terminate's operation
// is stored failed, not succeeded.
func TestTerminateFailedTombstoneWriteLeavesNothing(t *testing.T) {
	m, _, st, path := newClaimManager(t)
	ctx := context.Background()
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	execBehind(t, path, `CREATE TRIGGER refuse_tombstone BEFORE UPDATE ON sandboxes
		WHEN NEW.state = 'terminated' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
	op, got, err := m.Terminate(ctx, local, "a")
	if err == nil || got == nil || got.State != Terminating {
		t.Fatalf("terminate whose tombstone is refused: %v (record %+v); want an error, the record terminating", err, got)
	}
	if stored, err := st.GetSandbox(ctx, sb.ID); err != nil || stored.State != Terminating || stored.Version != got.Version {
		t.Errorf("the record stored: %+v, %v; want it terminating at version %d", stored, err, got.Version)
	}
	if stored, err := st.GetOperation(ctx, op.ID); err != nil || stored.State != store.OpFailed {
		t.Errorf("the terminate's operation as stored: %+v, %v; want it failed", stored, err)
	}
	evs, err := st.ListEvents(ctx, store.EventFilter{SandboxID: sb.ID})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type == "state" && string(ev.Data) == `{"from":"terminating","to":"terminated"}` {
			t.Errorf("a terminated event was stored with a tombstone that was not")
		}
	}
}
