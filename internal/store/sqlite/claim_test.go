package sqlite

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// A claim's write stores the member's record, the operation and the event together,
// durably (they are in the file after a reopen), or nothing of them: a claim that loses
// the member's compare-and-swap, or whose operation cannot be stored, leaves no trace.
func TestWriteClaimIsAllOrNothing(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "airlock.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { st.Close() }()
	now := time.Now().UTC().Truncate(time.Second)
	mem := &store.Sandbox{ID: "sb_m", Name: "pool-m", Owner: store.PoolOwner("warm"), State: "running", CreatedAt: now, UpdatedAt: now}
	if err := st.CreateSandbox(ctx, mem); err != nil {
		t.Fatal(err)
	}
	taken := &store.Operation{ID: "op_taken", Kind: "create", Owner: "bob", State: store.OpSucceeded, CreatedAt: now, UpdatedAt: now}
	if _, err := st.CreateOperation(ctx, taken); err != nil {
		t.Fatal(err)
	}
	claimOf := func(owner, opID string, version int64) store.Claim {
		c := *mem
		c.Owner, c.Name, c.Version = owner, "a", version
		return store.Claim{
			Sandbox: &c, NewOp: true,
			Op:     &store.Operation{ID: opID, Kind: "create", Owner: owner, SandboxID: c.ID, State: store.OpSucceeded, CreatedAt: now, UpdatedAt: now},
			Events: []*store.Event{{SandboxID: c.ID, Generation: 1, Type: "created", Cause: "create", Time: now}},
		}
	}
	nothingOf := func(what string, c store.Claim) {
		t.Helper()
		if got, err := st.GetSandbox(ctx, mem.ID); err != nil || got.Owner != mem.Owner || got.Version != mem.Version {
			t.Errorf("%s: the member is %+v (%v); want it unchanged", what, got, err)
		}
		if c.Op.ID != taken.ID {
			if _, err := st.GetOperation(ctx, c.Op.ID); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("%s: its operation is stored (%v)", what, err)
			}
		}
		if evs, err := st.ListEvents(ctx, store.EventFilter{SandboxID: mem.ID}); err != nil || len(evs) != 0 {
			t.Errorf("%s: events %v (%v); want none", what, evs, err)
		}
	}
	stale := claimOf("carol", "op_stale", mem.Version+1)
	if err := st.WriteClaim(ctx, stale); !errors.Is(err, errdefs.ErrVersionConflict) {
		t.Errorf("a claim at a version not stored: %v; want a version conflict", err)
	}
	nothingOf("a claim that lost the compare-and-swap", stale)
	dup := claimOf("bob", taken.ID, mem.Version)
	if err := st.WriteClaim(ctx, dup); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("a claim whose operation cannot be inserted: %v; want it to fail as already exists", err)
	}
	nothingOf("a claim whose operation failed", dup)

	ok := claimOf("alice", "op_ok", mem.Version)
	if err := st.WriteClaim(ctx, ok); err != nil {
		t.Fatal(err)
	}
	if ok.Sandbox.Version != mem.Version+1 || ok.Events[0].Seq == 0 {
		t.Errorf("after the claim: version %d, event seq %d; want %d and a seq", ok.Sandbox.Version, ok.Events[0].Seq, mem.Version+1)
	}
	st.Close()
	if st, err = Open(path); err != nil {
		t.Fatal(err)
	}
	got, err := st.GetSandbox(ctx, mem.ID)
	if err != nil || got.Owner != "alice" || got.Version != mem.Version+1 {
		t.Errorf("after a reopen the member is %+v (%v); want alice's, at version %d", got, err, mem.Version+1)
	}
	if op, err := st.GetOperation(ctx, "op_ok"); err != nil || op.State != store.OpSucceeded || op.SandboxID != mem.ID {
		t.Errorf("after a reopen the operation is %+v (%v); want it succeeded, naming the member", op, err)
	}
	if evs, err := st.ListEvents(ctx, store.EventFilter{SandboxID: mem.ID}); err != nil || len(evs) != 1 || evs[0].Type != "created" {
		t.Errorf("after a reopen the events are %v (%v); want the created one", evs, err)
	}
	// An operation stored before (a create with an idempotency key) is overwritten.
	keyed := &store.Operation{ID: "op_keyed", Kind: "create", Owner: "dave", IdempotencyKey: "k", State: store.OpRunning, CreatedAt: now, UpdatedAt: now}
	if _, err := st.CreateOperation(ctx, keyed); err != nil {
		t.Fatal(err)
	}
	again := claimOf("dave", keyed.ID, got.Version)
	again.NewOp, again.Op.IdempotencyKey = false, "k"
	again.Sandbox.Name = "d"
	if err := st.WriteClaim(ctx, again); err != nil {
		t.Fatal(err)
	}
	if op, err := st.GetOperation(ctx, keyed.ID); err != nil || op.State != store.OpSucceeded {
		t.Errorf("a stored operation after its claim: %+v (%v); want it succeeded", op, err)
	}
}
