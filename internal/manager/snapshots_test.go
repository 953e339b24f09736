package manager

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/objstore"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// snapshotNode is a manager named node over the shared store st, with its own snapshot
// directory kept in the shared bucket objs too.
func snapshotNode(t *testing.T, node string, st store.Store, objs objstore.Store) *Manager {
	t.Helper()
	m := sharedNode(t, node, t.TempDir(), st, objs, newFake(t))
	t.Cleanup(func() { m.Close() })
	return m
}

// sharedNode is a manager named node over the shared store st, on driver drv, with
// its image store and its snapshot directory (kept in the shared bucket objs too) in
// dir. The caller closes it.
func sharedNode(t testing.TB, node, dir string, st store.Store, objs objstore.Store, drv runtime.Driver) *Manager {
	t.Helper()
	imgs, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	snaps, err := snapshot.Open(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	snaps.UseObjects(objs, 0)
	cfg := DefaultConfig()
	cfg.NodeName = node
	m := New(cfg, st, drv, imgs, nil)
	m.SetSnapshots(snaps)
	return m
}

// twoSnapshotNodes is two nodes sharing one store and one bucket.
func twoSnapshotNodes(t *testing.T) (store.Store, objstore.Store, *Manager, *Manager) {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	objs, err := objstore.OpenDir(filepath.Join(t.TempDir(), "bucket"))
	if err != nil {
		t.Fatal(err)
	}
	a := snapshotNode(t, "node-a", st, objs)
	b := snapshotNode(t, "node-b", st, objs)
	return st, objs, a, b
}

// plant puts in the bucket, as anyone who can write there could, the manifest of
// snapshot from under the id id, naming sandboxID as its sandbox.
func plant(t *testing.T, objs objstore.Store, from, id, sandboxID string) {
	t.Helper()
	ctx := context.Background()
	r, err := objs.Get(ctx, "snapshots/manifests/"+from+".json")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	var man map[string]any
	if err := json.Unmarshal(b, &man); err != nil {
		t.Fatal(err)
	}
	man["id"], man["sandbox_id"] = id, sandboxID
	if b, err = json.Marshal(man); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	if err := objs.Put(ctx, "snapshots/manifests/"+id+".json", bytes.NewReader(b), int64(len(b)), hex.EncodeToString(sum[:])); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotOwnerFromRecordNotBucket: who owns a snapshot is the daemon's record of
// it. A manifest planted in the shared bucket naming a victim's sandbox is seen by no
// one and can be neither restored nor forked from, on any node; a recorded snapshot
// whose bucket manifest is rewritten to name another sandbox is refused too; a
// snapshot taken on one node is listed and forked on another sharing store and bucket.
func TestSnapshotOwnerFromRecordNotBucket(t *testing.T) {
	ctx := context.Background()
	st, objs, a, b := twoSnapshotNodes(t)
	alice, bob := Call{Owner: "alice"}, Call{Owner: "bob"}

	_, asb, err := a.Create(ctx, alice, CreateRequest{Name: "work"})
	if err != nil {
		t.Fatal(err)
	}
	_, own, err := a.Snapshot(ctx, alice, "work", SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, victim, err := a.Create(ctx, bob, CreateRequest{Name: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Suspend(ctx, bob, "victim"); err != nil {
		t.Fatal(err)
	}

	planted := snapshot.NewID()
	plant(t, objs, own.ID, planted, victim.ID)
	for _, m := range []*Manager{b, a} {
		for _, c := range []Call{bob, alice} {
			if _, err := m.SnapshotOwned(ctx, c.Owner, planted); !errors.Is(err, errdefs.ErrNotFound) {
				t.Errorf("%s on %s: planted snapshot: %v; want not found", c.Owner, m.cfg.NodeName, err)
			}
			list, err := m.Snapshots(ctx, c.Owner, "")
			if err != nil {
				t.Fatal(err)
			}
			for _, man := range list {
				if man.ID == planted {
					t.Errorf("%s on %s lists the planted snapshot", c.Owner, m.cfg.NodeName)
				}
			}
		}
		if _, _, _, err := m.Restore(ctx, bob, "victim", RestoreRequest{Snapshot: planted, NoSafety: true}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("restore from the planted snapshot on %s: %v; want not found", m.cfg.NodeName, err)
		}
		if _, _, err := m.Fork(ctx, bob, planted, ForkRequest{Name: "stolen-" + m.cfg.NodeName}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("fork of the planted snapshot on %s: %v; want not found", m.cfg.NodeName, err)
		}
	}

	// The snapshot round-trips: node b lists alice's snapshot and forks from it.
	list, err := b.Snapshots(ctx, "alice", "")
	if err != nil || len(list) != 1 || list[0].ID != own.ID {
		t.Fatalf("alice's snapshots on node-b = %v, %v; want [%s]", list, err, own.ID)
	}
	_, forked, err := b.Fork(ctx, alice, own.ID, ForkRequest{Name: "copy"})
	if err != nil {
		t.Fatalf("fork on node-b of a snapshot taken on node-a: %v", err)
	}
	if forked.ForkedFrom != asb.ID || forked.Parent != own.ID {
		t.Fatalf("fork: forked from %s, parent %s; want %s, %s", forked.ForkedFrom, forked.Parent, asb.ID, own.ID)
	}

	// A recorded snapshot whose manifest in the bucket is rewritten to name the victim's
	// sandbox is refused to its owner and to the victim alike on a node that reads it.
	_, second, err := a.Snapshot(ctx, alice, "work", SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	plant(t, objs, second.ID, second.ID, victim.ID)
	c := snapshotNode(t, "node-c", st, objs)
	for _, who := range []string{"alice", "bob"} {
		if _, err := c.SnapshotOwned(ctx, who, second.ID); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("%s: snapshot whose manifest disagrees with its record: %v; want not found", who, err)
		}
	}
}

// TestSnapshotRecordsBackfilled: a snapshot this node took before snapshots had records
// gets one at start, owned by its sandbox's owner; one this node read from the bucket
// gets none.
func TestSnapshotRecordsBackfilled(t *testing.T) {
	ctx := context.Background()
	st, _, a, b := twoSnapshotNodes(t)
	alice := Call{Owner: "alice"}
	if _, _, err := a.Create(ctx, alice, CreateRequest{Name: "work"}); err != nil {
		t.Fatal(err)
	}
	_, old, err := a.Snapshot(ctx, alice, "work", SnapshotRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.SnapshotOwned(ctx, "alice", old.ID); err != nil { // b imports it
		t.Fatal(err)
	}
	if err := st.DeleteSnapshotRecord(ctx, old.ID); err != nil { // as before records
		t.Fatal(err)
	}
	if err := b.backfillSnapshots(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.GetSnapshotRecord(ctx, old.ID); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("record backfilled from an imported manifest: %v; want none", err)
	}
	if err := a.Recover(ctx); err != nil {
		t.Fatal(err)
	}
	rec, err := st.GetSnapshotRecord(ctx, old.ID)
	if err != nil || rec.Owner != "alice" || rec.Node != "node-a" {
		t.Fatalf("backfilled record = %+v, %v; want alice's, of node-a", rec, err)
	}
	if _, err := a.SnapshotOwned(ctx, "alice", old.ID); err != nil {
		t.Fatalf("backfilled snapshot: %v", err)
	}
}
