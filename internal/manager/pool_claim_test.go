package manager

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// newClaimManager is a manager over a SQLite store in a file the test can open again
// (as the next start after a crash does) or change behind the store's back.
func newClaimManager(t *testing.T) (m *Manager, fd *fake.Driver, st *sqlite.Store, path string) {
	t.Helper()
	dir := t.TempDir()
	fd = newFake(t)
	m, st = newManagerIn(t, dir, DefaultConfig(), fd)
	return m, fd, st, filepath.Join(dir, "db")
}

// execBehind runs qs on the database file at path, behind its store's back.
func execBehind(t *testing.T, path string, qs ...string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range qs {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// reopen is a store opened afresh on the database file at path, as the next start
// after a crash opens it.
func reopen(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// TestPoolClaimRecordsAreInTheFileWhenAnswered: once a create served from the pool is
// answered, its operation (succeeded, naming the sandbox), the member's record made
// the caller's and the `created` event are all in the database file: a store opened
// on it afresh, as after a crash right after the answer, finds them.
func TestPoolClaimRecordsAreInTheFileWhenAnswered(t *testing.T) {
	m, _, _, path := newClaimManager(t)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 1)
	op, sb, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "a"})
	if err != nil || len(members) != 1 || sb.ID != members[0] {
		t.Fatalf("create = %+v, %v; want pool member %v", sb, err, members)
	}
	after := reopen(t, path)
	if got, err := after.GetOperation(ctx, op.ID); err != nil || got.State != store.OpSucceeded || got.SandboxID != sb.ID {
		t.Errorf("the create's operation in the file: %+v (%v); want it succeeded, naming %s", got, err, sb.ID)
	}
	if got, err := after.GetSandbox(ctx, sb.ID); err != nil || got.Owner != "alice" || got.Name != "a" || got.State != Running {
		t.Errorf("the claimed record in the file: %+v (%v); want alice's running sandbox a", got, err)
	}
	evs, err := after.ListEvents(ctx, store.EventFilter{SandboxID: sb.ID})
	created := 0
	for _, ev := range evs {
		if ev.Type == "created" && string(ev.Data) == `{"pool":"warm"}` {
			created++
		}
	}
	if err != nil || created != 1 {
		t.Errorf("the claimed sandbox's events in the file: %+v (%v); want one created from pool warm", evs, err)
	}
}

// TestPoolFailedClaimWriteLeavesNothing: a claim whose records cannot be stored (here
// the operation's success is refused by the database) fails the create and leaves no
// part of it: the member is still an untouched member of its pool, under its pool
// identity on the host too, and no sandbox of the caller exists.
func TestPoolFailedClaimWriteLeavesNothing(t *testing.T) {
	m, fd, st, path := newClaimManager(t)
	ctx := context.Background()
	members := fillPool(t, m, "warm", 1)
	mem, err := st.GetSandbox(ctx, members[0])
	if err != nil {
		t.Fatal(err)
	}
	execBehind(t, path,
		`CREATE TRIGGER refuse_success_insert BEFORE INSERT ON operations WHEN NEW.state = 'succeeded' BEGIN SELECT RAISE(ABORT, 'refused'); END`,
		`CREATE TRIGGER refuse_success_update BEFORE UPDATE ON operations WHEN NEW.state = 'succeeded' BEGIN SELECT RAISE(ABORT, 'refused'); END`)
	op, sb, err := m.Create(ctx, Call{Owner: "alice"}, CreateRequest{Name: "a"})
	if err == nil {
		t.Fatalf("create whose success cannot be recorded = %+v, %+v; want an error", op, sb)
	}
	if got, err := st.GetSandbox(ctx, mem.ID); err != nil || got.Owner != mem.Owner || got.Name != mem.Name || got.Version != mem.Version {
		t.Errorf("the member after a failed claim: %+v (%v); want it unchanged", got, err)
	}
	if h := fd.Hostname(mem.ID); h != mem.Name {
		t.Errorf("the member's host name after a failed claim = %q; want its pool name %q back", h, mem.Name)
	}
	if _, err := m.Resolve(ctx, "alice", "a"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("alice's sandbox a after a failed create: %v; want not found", err)
	}
	if left := memberIDs(t, m, "warm"); len(left) != 1 || left[0] != mem.ID || !m.untouched(mem) {
		t.Errorf("pool members after a failed claim = %v; want the untouched %s", left, mem.ID)
	}
}
