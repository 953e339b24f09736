package sqlite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/storetest"
)

// openTest opens a store on a file named for the running test, so a second call in
// the same test reaches the same file (storetest.Run's re-open check relies on it).
func openTest(t *testing.T, dir string) *Store {
	t.Helper()
	name := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-':
			return r
		}
		return '_'
	}, t.Name())
	path := filepath.Join(dir, name+".db")
	s, err := Open(path)
	if err != nil {
		t.Fatalf("Open(%s): got error %v, want none", path, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close(%s): got error %v, want none", path, err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	dir := t.TempDir()
	storetest.Run(t, func(t *testing.T) store.Store { return openTest(t, dir) })
}

// TestManyWriters checks that writers queue on the one write connection instead of
// failing with SQLITE_BUSY.
func TestManyWriters(t *testing.T) {
	s, ctx := openTest(t, t.TempDir()), t.Context()
	const n = 100
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("sb_%03d", i)
			sb := &store.Sandbox{ID: id, Owner: "alice", Name: id, State: "running", CreatedAt: time.Now()}
			if errs[i] = s.CreateSandbox(ctx, sb); errs[i] != nil {
				return
			}
			errs[i] = s.AppendEvent(ctx, &store.Event{SandboxID: id, Type: "created", Time: time.Now()})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("writer %d: got error %v, want none", i, err)
		}
	}
	list, err := s.ListSandboxes(ctx, store.SandboxFilter{})
	if err != nil {
		t.Fatalf("ListSandboxes: got error %v, want none", err)
	}
	if len(list) != n {
		t.Errorf("ListSandboxes: got %d sandboxes, want %d", len(list), n)
	}
}

func TestPragmas(t *testing.T) {
	s, ctx := openTest(t, t.TempDir()), t.Context()
	tests := []struct {
		pragma string
		want   string
	}{
		{"journal_mode", "wal"},
		{"foreign_keys", "1"},
		{"synchronous", "1"}, // NORMAL
		{"busy_timeout", fmt.Sprint(busyTimeout.Milliseconds())},
	}
	for _, tt := range tests {
		var got string
		if err := s.w.QueryRowContext(ctx, "PRAGMA "+tt.pragma).Scan(&got); err != nil {
			t.Fatalf("PRAGMA %s: got error %v, want none", tt.pragma, err)
		}
		if got != tt.want {
			t.Errorf("PRAGMA %s on the writer: got %q, want %q", tt.pragma, got, tt.want)
		}
	}
	if _, err := s.r.ExecContext(ctx, `DELETE FROM sandboxes`); err == nil {
		t.Errorf("DELETE on a reader connection: got no error, want it refused")
	}
}

// TestInvalidJSON checks that a raw JSON field that is not JSON is refused before
// anything is written.
func TestInvalidJSON(t *testing.T) {
	s, ctx := openTest(t, t.TempDir()), t.Context()
	bad := json.RawMessage(`{"unterminated"`)
	err := s.CreateSandbox(ctx, &store.Sandbox{ID: "sb_1", Owner: "alice", Name: "web", State: "running", Extra: bad})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CreateSandbox with a bad Extra: got error %v, want %q", err, errdefs.ErrInvalidArgument)
	}
	_, err = s.CreateOperation(ctx, &store.Operation{ID: "op_1", Owner: "alice", Result: bad})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CreateOperation with a bad Result: got error %v, want %q", err, errdefs.ErrInvalidArgument)
	}
	err = s.AppendEvent(ctx, &store.Event{SandboxID: "sb_1", Type: "created", Data: bad})
	if !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("AppendEvent with bad Data: got error %v, want %q", err, errdefs.ErrInvalidArgument)
	}
	if _, err := s.GetSandbox(ctx, "sb_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetSandbox after a refused create: got error %v, want %q", err, errdefs.ErrNotFound)
	}
	if _, err := s.GetOperation(ctx, "op_1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetOperation after a refused create: got error %v, want %q", err, errdefs.ErrNotFound)
	}
}

func TestOpenRefusesBadPath(t *testing.T) {
	for _, path := range []string{"", ":memory:", filepath.Join(t.TempDir(), "a?mode=ro")} {
		if s, err := Open(path); err == nil {
			s.Close()
			t.Errorf("Open(%q): got no error, want one", path)
		}
	}
}

// version returns the schema version of the store and how many migrations it recorded.
func version(t *testing.T, ctx context.Context, s *Store) (v, rows int) {
	t.Helper()
	v, err := schemaVersion(ctx, s.r)
	if err != nil {
		t.Fatalf("schemaVersion: got error %v, want none", err)
	}
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM schema_version`).Scan(&rows); err != nil {
		t.Fatalf("count schema_version: got error %v, want none", err)
	}
	return v, rows
}

func TestMigrations(t *testing.T) {
	ctx := t.Context()
	ms, err := loadMigrations()
	if err != nil {
		t.Fatalf("loadMigrations: got error %v, want none", err)
	}
	if len(ms) == 0 {
		t.Fatalf("loadMigrations: got no migrations, want at least one")
	}
	path := filepath.Join(t.TempDir(), "airlock.db")
	open := func() *Store {
		t.Helper()
		s, err := Open(path)
		if err != nil {
			t.Fatalf("Open: got error %v, want none", err)
		}
		return s
	}

	s := open()
	if v, rows := version(t, ctx, s); v != len(ms) || rows != len(ms) {
		t.Errorf("new database: got version %d with %d rows, want %d with %d", v, rows, len(ms), len(ms))
	}
	s.Close()

	s = open()
	if v, rows := version(t, ctx, s); v != len(ms) || rows != len(ms) {
		t.Errorf("re-opened database: got version %d with %d rows, want %d with %d", v, rows, len(ms), len(ms))
	}

	// A later release adds a migration: only it is applied.
	next := append(ms, store.Migration{Version: len(ms) + 1, Name: "next.sql", SQL: `
		CREATE TABLE later_things (id TEXT PRIMARY KEY);
		CREATE INDEX later_things_id ON later_things (id);`})
	for range 2 {
		if err := migrate(ctx, s.w, next); err != nil {
			t.Fatalf("migrate with a new migration: got error %v, want none", err)
		}
	}
	if v, rows := version(t, ctx, s); v != len(next) || rows != len(next) {
		t.Errorf("after a new migration: got version %d with %d rows, want %d with %d", v, rows, len(next), len(next))
	}
	if _, err := s.w.ExecContext(ctx, `INSERT INTO later_things (id) VALUES ('v1')`); err != nil {
		t.Errorf("insert into the new table: got error %v, want none", err)
	}

	// A migration that fails leaves nothing behind.
	bad := append(next, store.Migration{Version: len(next) + 1, Name: "bad.sql", SQL: `
		CREATE TABLE half (id TEXT);
		THIS IS NOT SQL;`})
	if err := migrate(ctx, s.w, bad); err == nil {
		t.Errorf("migrate with a broken migration: got no error, want one")
	}
	if v, _ := version(t, ctx, s); v != len(next) {
		t.Errorf("after a broken migration: got version %d, want %d", v, len(next))
	}
	var tables int
	if err := s.r.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE name = 'half'`).Scan(&tables); err != nil {
		t.Fatalf("look for table half: got error %v, want none", err)
	}
	if tables != 0 {
		t.Errorf("after a broken migration: got table half, want it rolled back")
	}
	s.Close()

	// This binary knows fewer migrations than the file has: it refuses the file.
	if s, err := Open(path); err == nil {
		s.Close()
		t.Errorf("Open of a database migrated past this binary: got no error, want one")
	}
}
