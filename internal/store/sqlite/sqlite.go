// Package sqlite is the embedded implementation of store.Store: one SQLite file in WAL
// mode, opened with the pure-Go modernc.org/sqlite driver, with its schema migrations
// embedded and applied on Open. It owns the file's schema and the SQL that reads and
// writes it; it must not hold any rule about sandboxes beyond what store.Store documents
// (the state machine, caps and timers belong to the manager).
//
// Hostile surface it guards: the database file and its -wal and -shm are 0600 whatever
// the umask, since they hold every owner's records and exposed ports' tokens.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	sqlitedrv "modernc.org/sqlite"
	sqlitelib "modernc.org/sqlite/lib"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for a lock held by another connection
// (another process, or a reader during a checkpoint) before it gives up.
const busyTimeout = 10 * time.Second

// Store is a store.Store kept in one SQLite file. Every write goes through a single
// connection, so writers queue in the database/sql pool instead of failing with
// SQLITE_BUSY; reads use a separate pool of read-only connections, which WAL lets run
// beside the writer.
type Store struct {
	w    *sql.DB // exactly one connection; every write and every read-modify-write
	r    *sql.DB // read-only connections
	path string

	stmts   stmts   // the hot queries, prepared once
	decoded decoded // sandbox records a list decoded, by id and version
	group   group   // writes waiting to be committed together (group.go)

	closeOnce sync.Once
	closeErr  error
}

// Open opens (creating if needed) the database file at path and applies any embedded
// migration it has not seen yet. path names a file; ":memory:" is not supported,
// because the reader and writer pools must share one database.
func Open(path string) (*Store, error) {
	if path == "" || path == ":memory:" || strings.ContainsAny(path, "?#") {
		return nil, errdefs.Invalid("sqlite store path %q must name a file and contain no '?' or '#'", path)
	}
	ms, err := loadMigrations()
	if err != nil {
		return nil, err
	}

	w, err := openPool(path, true)
	if err != nil {
		return nil, err
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)

	ctx := context.Background()
	var mode string
	if err := w.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if !strings.EqualFold(mode, "wal") {
		w.Close()
		return nil, fmt.Errorf("open %s: journal mode is %q, want wal", path, mode)
	}
	if err := migrate(ctx, w, ms); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// The file holds every owner's records and exposed ports' tokens: the daemon's alone,
	// whatever the umask it was made under.
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if err := os.Chmod(p, 0o600); err != nil && !errors.Is(err, fs.ErrNotExist) {
			w.Close()
			return nil, fmt.Errorf("open %s: %w", path, err)
		}
	}

	r, err := openPool(path, false)
	if err != nil {
		w.Close()
		return nil, err
	}
	n := max(4, runtime.GOMAXPROCS(0))
	r.SetMaxOpenConns(n)
	r.SetMaxIdleConns(n)
	return &Store{w: w, r: r, path: path}, nil
}

// openPool opens a connection pool on path. The writer pool turns on WAL, makes every
// transaction BEGIN IMMEDIATE (so a read-then-write transaction never has to upgrade
// its lock and fail) and relaxes fsync to NORMAL, which WAL keeps safe against
// corruption; reader connections refuse writes.
func openPool(path string, writer bool) (*sql.DB, error) {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "foreign_keys(1)")
	if writer {
		q.Add("_pragma", "journal_mode(WAL)")
		q.Add("_pragma", "synchronous(NORMAL)")
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	db, err := sql.Open("sqlite", path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return db, nil
}

// String says what the store is, for the node's administrators.
func (s *Store) String() string { return "SQLite " + s.path }

// Close closes both pools. It is safe to call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.closeErr = errors.Join(s.closeStmts(), s.r.Close(), s.w.Close())
	})
	return s.closeErr
}

// constraintCode returns the extended SQLite result code of a constraint violation
// (SQLITE_CONSTRAINT_UNIQUE, ..._PRIMARYKEY, ...), or 0 when err is something else.
func constraintCode(err error) int {
	var e *sqlitedrv.Error
	if errors.As(err, &e) && e.Code()&0xff == sqlitelib.SQLITE_CONSTRAINT {
		return e.Code()
	}
	return 0
}

// querier is what *sql.DB and *sql.Tx have in common.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}
