package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// testSnapshotRecords: a record is kept as given, a second with its id is refused and
// changes nothing, lists are the owner's only (of one sandbox when asked), the newest
// up to the limit, oldest first, and a deleted record is gone.
func testSnapshotRecords(t *testing.T, open func(t *testing.T) store.Store) {
	ctx := context.Background()
	s := open(t)
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	recs := []*store.SnapshotRecord{
		{ID: "snap_b", Owner: "alice", SandboxID: "sb_1", Node: "n1", CreatedAt: at},
		{ID: "snap_a", Owner: "alice", SandboxID: "sb_2", Node: "n2", CreatedAt: at.Add(time.Second)},
		{ID: "snap_c", Owner: "bob", SandboxID: "sb_3", Node: "n1", CreatedAt: at},
	}
	for _, r := range recs {
		if err := s.CreateSnapshotRecord(ctx, r); err != nil {
			t.Fatalf("CreateSnapshotRecord(%s): %v", r.ID, err)
		}
	}
	forged := &store.SnapshotRecord{ID: "snap_b", Owner: "bob", SandboxID: "sb_3", Node: "n9", CreatedAt: at}
	if err := s.CreateSnapshotRecord(ctx, forged); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("second record of snap_b: %v; want already exists", err)
	}
	got, err := s.GetSnapshotRecord(ctx, "snap_b")
	if err != nil || got.ID != "snap_b" || got.Owner != "alice" || got.SandboxID != "sb_1" || got.Node != "n1" || !got.CreatedAt.Equal(at) {
		t.Fatalf("GetSnapshotRecord(snap_b) = %+v, %v; want %+v", got, err, recs[0])
	}
	ids := func(owner, sandboxID string, limit ...int) []string {
		t.Helper()
		list, err := s.ListSnapshotRecords(ctx, owner, sandboxID, append(limit, 0)[0])
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range list {
			out = append(out, r.ID)
		}
		return out
	}
	if got := ids("alice", ""); !slices.Equal(got, []string{"snap_b", "snap_a"}) {
		t.Fatalf("alice's snapshots = %v; want [snap_b snap_a]", got)
	}
	if got := ids("alice", "", 1); !slices.Equal(got, []string{"snap_a"}) {
		t.Fatalf("alice's newest snapshot = %v; want [snap_a]", got)
	}
	if got := ids("alice", "sb_2"); !slices.Equal(got, []string{"snap_a"}) {
		t.Fatalf("alice's snapshots of sb_2 = %v; want [snap_a]", got)
	}
	if got := ids("alice", "sb_3"); len(got) != 0 {
		t.Fatalf("alice's snapshots of bob's sb_3 = %v; want none", got)
	}
	if err := s.DeleteSnapshotRecord(ctx, "snap_b"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetSnapshotRecord(ctx, "snap_b"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleted record: %v; want not found", err)
	}
	if err := s.DeleteSnapshotRecord(ctx, "snap_b"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("deleting it again: %v; want not found", err)
	}
	if got := ids("alice", ""); !slices.Equal(got, []string{"snap_a"}) {
		t.Fatalf("alice's snapshots after delete = %v; want [snap_a]", got)
	}
}
