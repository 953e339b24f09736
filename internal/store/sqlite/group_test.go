package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// insertRow is a write that stores a sandbox id named id, without the store's checks.
func insertRow(id string) func(context.Context, *sql.Tx) error {
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO sandboxes (id, owner, name, state, version, created_at, doc, node, memory, cpu)
			VALUES (?, 'alice', ?, 'running', 1, '2026-12-06T00:00:00Z', json_object('id', ?), '', 0, 0)`, id, id, id)
		return err
	}
}

// Writes committed together stay apart: one that fails after it wrote is undone
// alone, the others before and after it are committed and see each other's rows, and
// one whose caller went away is not run.
func TestGroupCommitKeepsWritesApart(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "airlock.db")
	st, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	failed := errors.New("failed after its insert")
	gone, cancel := context.WithCancel(ctx)
	cancel()
	var seen int
	batch := []*groupWrite{
		{ctx: ctx, fn: insertRow("sb_1")},
		{ctx: ctx, fn: func(ctx context.Context, tx *sql.Tx) error {
			if err := insertRow("sb_2")(ctx, tx); err != nil {
				return err
			}
			return failed
		}},
		{ctx: gone, fn: insertRow("sb_4")},
		{ctx: ctx, fn: func(ctx context.Context, tx *sql.Tx) error {
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes`).Scan(&seen); err != nil {
				return err
			}
			return insertRow("sb_3")(ctx, tx)
		}},
	}
	st.commitBatch(batch)
	for i, want := range []error{nil, failed, context.Canceled, nil} {
		if !errors.Is(batch[i].err, want) || (want == nil && batch[i].err != nil) {
			t.Errorf("write %d of the batch: %v, want %v", i, batch[i].err, want)
		}
	}
	if seen != 1 {
		t.Errorf("the last write saw %d rows, want 1 (the first write's)", seen)
	}
	st.Close()
	st, err = Open(path) // what was acknowledged is in the file
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for id, want := range map[string]bool{"sb_1": true, "sb_2": false, "sb_3": true, "sb_4": false} {
		_, err := st.GetSandbox(ctx, id)
		if got := err == nil; got != want {
			t.Errorf("after the batch, %s stored = %v (%v), want %v", id, got, err, want)
		}
	}
}

// Writes sent at once are committed in batches, each as its own transaction would
// be: of many claims of one record at one version exactly one wins, and of many
// creates of one name exactly one is made, whatever batches they fall in.
func TestGroupCommitUnderConcurrentWrites(t *testing.T) {
	ctx := context.Background()
	st := openTest(t, t.TempDir())
	now := time.Now().UTC()
	member := &store.Sandbox{ID: "sb_m", Name: "m", Owner: "@pool:warm", State: "running", CreatedAt: now}
	if err := st.CreateSandbox(ctx, member); err != nil {
		t.Fatal(err)
	}
	const n = 64
	claims, creates := make([]error, n), make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			c := *member
			c.Owner, c.Name = "alice", fmt.Sprintf("c%d", i)
			claims[i] = st.UpdateSandbox(ctx, &c)
		})
		wg.Go(func() {
			creates[i] = st.CreateSandbox(ctx, &store.Sandbox{ID: fmt.Sprintf("sb_%d", i), Name: "same", Owner: "bob", State: "running", CreatedAt: now})
		})
	}
	wg.Wait()
	won, made := 0, 0
	for i := range n {
		switch {
		case claims[i] == nil:
			won++
		case !errors.Is(claims[i], errdefs.ErrVersionConflict):
			t.Errorf("claim %d: %v, want a version conflict or success", i, claims[i])
		}
		switch {
		case creates[i] == nil:
			made++
		case !errors.Is(creates[i], errdefs.ErrAlreadyExists):
			t.Errorf("create %d: %v, want already exists or success", i, creates[i])
		}
	}
	if won != 1 || made != 1 {
		t.Errorf("%d claims of one member won and %d creates of one name were made; want 1 and 1", won, made)
	}
	got, err := st.GetSandbox(ctx, "sb_m")
	if err != nil || got.Version != 2 || got.Owner != "alice" {
		t.Errorf("the member after the claims: %+v, %v; want version 2, owner alice", got, err)
	}
}

// A write that panics panics in its own caller, its write not made, and writes after
// it are still committed: the leader that ran it passes the lead on and wakes the
// others of its batch.
func TestGroupCommitAfterAPanic(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	panicking := func(id string) func(context.Context, *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if err := insertRow(id)(ctx, tx); err != nil {
				return err
			}
			panic("broken write")
		}
	}
	func() {
		defer func() {
			if p := recover(); p != "broken write" {
				t.Errorf("the panicking write's caller recovered %v, want its panic", p)
			}
		}()
		st.inTx(ctx, panicking("sb_p1"))
	}()
	done := make(chan error, 1)
	go func() { done <- st.inTx(ctx, insertRow("sb_1")) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("a write after a panicking one: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a write after a panicking one still waits after 10s")
	}
	batch := []*groupWrite{{ctx: ctx, fn: insertRow("sb_2")}, {ctx: ctx, fn: panicking("sb_p2")}, {ctx: ctx, fn: insertRow("sb_3")}}
	st.commitBatch(batch)
	if batch[1].panicked != "broken write" || batch[0].err != nil || batch[2].err != nil {
		t.Errorf("batch with a panicking write: errors %v, %v (panicked %v), %v", batch[0].err, batch[1].err, batch[1].panicked, batch[2].err)
	}
	for id, want := range map[string]bool{"sb_p1": false, "sb_1": true, "sb_2": true, "sb_p2": false, "sb_3": true} {
		_, err := st.GetSandbox(ctx, id)
		if got := err == nil; got != want {
			t.Errorf("%s stored = %v (%v), want %v", id, got, err, want)
		}
	}
}

// When a batch's commit fails, none of its writes is made, and each caller hears that
// failure: also one whose write failed on its own, on a row of the batch that is not
// committed after all (here: "already exists" of a row never stored, which an
// idempotent create would answer with the operation that row was).
func TestGroupCommitFailedCommitFailsEveryWrite(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	batch := []*groupWrite{
		{ctx: ctx, fn: insertRow("sb_1")},
		{ctx: ctx, fn: func(ctx context.Context, tx *sql.Tx) error {
			var n int
			if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM sandboxes WHERE name = 'sb_1'`).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return errdefs.Exists("a sandbox named sb_1 already exists")
			}
			return nil
		}},
		{ctx: ctx, fn: func(ctx context.Context, tx *sql.Tx) error {
			// A deferred foreign key left broken: the commit fails.
			for _, q := range []string{
				`CREATE TABLE parent (id INTEGER PRIMARY KEY)`,
				`CREATE TABLE child (p INTEGER REFERENCES parent (id) DEFERRABLE INITIALLY DEFERRED)`,
				`INSERT INTO child VALUES (1)`,
			} {
				if _, err := tx.ExecContext(ctx, q); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	st.commitBatch(batch)
	for i, w := range batch {
		if w.err == nil || errors.Is(w.err, errdefs.ErrAlreadyExists) {
			t.Errorf("write %d of a batch whose commit failed: %v, want the commit's error", i, w.err)
		}
	}
	if _, err := st.GetSandbox(ctx, "sb_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("sb_1 of a batch whose commit failed: %v, want not found", err)
	}
	// The store still writes.
	if err := st.inTx(ctx, insertRow("sb_2")); err != nil {
		t.Errorf("a write after a failed commit: %v", err)
	}
}
