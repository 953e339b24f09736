package manager

import (
	"context"
	"errors"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// TestColdCreateWritesTwice: a cold create with no idempotency key stores its record
// (creating) before its container is made, then, once it runs, the record running
// with its events and its operation ended, in one write: two writes in all, where it
// made six (the operation, the record, its created event, the record running, the
// state's event, the operation's end).
func TestColdCreateWritesTwice(t *testing.T) {
	m, st := newCountedManager(t, newFake(t))
	if _, _, err := m.Create(context.Background(), local, CreateRequest{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if n := st.writes.Load(); n != 2 {
		t.Errorf("a cold create made %d writes; want 2 (the record, then the record running with its events and operation)", n)
	}
}

// TestColdCreateRecordsAreInTheFileWhenAnswered: once a cold create is answered, its
// operation (succeeded, naming the sandbox), the record running and its created and
// state events are in the database file, as a store opened on it afresh finds them.
func TestColdCreateRecordsAreInTheFileWhenAnswered(t *testing.T) {
	m, _, _, path := newClaimManager(t)
	ctx := context.Background()
	op, sb, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err != nil {
		t.Fatal(err)
	}
	after := reopen(t, path)
	if got, err := after.GetOperation(ctx, op.ID); err != nil || got.State != store.OpSucceeded || got.SandboxID != sb.ID {
		t.Errorf("the create's operation in the file: %+v (%v); want it succeeded, naming %s", got, err, sb.ID)
	}
	if got, err := after.GetSandbox(ctx, sb.ID); err != nil || got.State != Running || got.Version != sb.Version {
		t.Errorf("the record in the file: %+v (%v); want it running at version %d", got, err, sb.Version)
	}
	evs, err := after.ListEvents(ctx, store.EventFilter{SandboxID: sb.ID})
	var types []string
	for _, ev := range evs {
		types = append(types, ev.Type+" "+string(ev.Data))
	}
	if err != nil || len(types) != 2 || types[0] != "created " || types[1] != `state {"from":"creating","to":"running"}` {
		t.Errorf("the sandbox's events in the file: %q (%v); want created, then state creating → running", types, err)
	}
}

// TestColdCreateFailedRunningWriteLeavesNothing: a cold create whose last write is
// refused (the operation's success) fails, and leaves no sandbox, no container and
// the operation stored failed.
func TestColdCreateFailedRunningWriteLeavesNothing(t *testing.T) {
	m, fd, st, path := newClaimManager(t)
	ctx := context.Background()
	execBehind(t, path,
		`CREATE TRIGGER refuse_success_insert BEFORE INSERT ON operations WHEN NEW.state = 'succeeded' BEGIN SELECT RAISE(ABORT, 'refused'); END`,
		`CREATE TRIGGER refuse_success_update BEFORE UPDATE ON operations WHEN NEW.state = 'succeeded' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
	op, sb, err := m.Create(ctx, local, CreateRequest{Name: "a"})
	if err == nil {
		t.Fatalf("create whose success cannot be recorded = %+v, %+v; want an error", op, sb)
	}
	if _, err := m.Resolve(ctx, local.Owner, "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("sandbox a after a failed create: %v; want not found", err)
	}
	if ids, _ := fd.List(ctx); len(ids) != 0 {
		t.Errorf("containers after a failed create: %v; want none", ids)
	}
	if got, err := st.GetOperation(ctx, op.ID); err != nil || got.State != store.OpFailed {
		t.Errorf("the failed create's operation: %+v (%v); want it stored failed", got, err)
	}
}
