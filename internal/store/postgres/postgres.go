// Package postgres is the implementation of store.Store that several nodes share: one
// PostgreSQL database, reached through a bounded pgx connection pool, with its schema
// migrations embedded and applied on Open under an advisory lock, so nodes that start
// at the same moment migrate it once. It owns the database's schema and the SQL that
// reads and writes it; it must not hold any rule about sandboxes beyond what
// store.Store documents (the state machine, caps and timers belong to the manager).
//
// Concurrency: transactions run at READ COMMITTED. Every rule of the contract is either
// a compare-and-swap on one row (UpdateSandbox's version, UpdateSecret's rev: a
// conditional UPDATE takes the row's lock, and a writer that waited re-reads the row
// before it decides) or a uniqueness that an index enforces (live names, idempotency
// keys), so SERIALIZABLE would add aborts and retries and no guarantee. Where an order
// spans rows, a transaction-scoped advisory lock serializes the writers: event appends
// (so seqs become visible in the order they are assigned and a reader paging with
// AfterSeq never skips one that commits late) and audit pruning (so the anchor is the
// last pruned record). A deadlock or serialization failure reported by the server is
// retried a few times.
//
// Hostile surface it guards: the DSN may carry a password; no error, log line or status
// this package writes contains it (Redact).
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

var _ store.Store = (*Store)(nil)

// migrationFS holds the schema migrations, named NNNN_what.sql and numbered from 1
// without gaps.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// connectTimeout bounds each connection attempt whose DSN names no connect_timeout,
// so a node whose database is unreachable fails to start instead of hanging.
const connectTimeout = 10 * time.Second

// Advisory lock keys (one int64 space per database): migration holds migrateLock for
// the whole session that migrates; appends and prunes take theirs per transaction.
const (
	migrateLock     int64 = 0x6169726c6f636b01 // "airlock" 1
	eventsLock      int64 = 0x6169726c6f636b02
	auditPruneLock  int64 = 0x6169726c6f636b03
	auditAppendLock int64 = 0x6169726c6f636b04
)

// Store is a store.Store kept in a PostgreSQL database.
type Store struct {
	pool     *pgxpool.Pool
	redacted string

	closeOnce sync.Once
}

// Open connects to the database dsn names (a postgres:// URL or key=value pairs, as
// libpq reads them; pool_max_conns bounds the pool, by default the larger of 4 and the
// number of CPUs) and applies any embedded migration it has not seen yet. ctx bounds
// the connecting and migrating, not the store's life.
func Open(ctx context.Context, dsn string) (*Store, error) {
	red := Redact(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		// pgx's parse errors quote the DSN; say only what is wrong with it.
		return nil, errdefs.Invalid("postgres dsn %s cannot be read: it must be a postgres:// URL or key=value pairs, as libpq reads them", red)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = connectTimeout
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["application_name"]; !ok {
		cfg.ConnConfig.RuntimeParams["application_name"] = "airlock"
	}
	ms, err := store.LoadMigrations(migrationFS, "migrations")
	if err != nil {
		return nil, err
	}
	if err := migrate(ctx, cfg.ConnConfig, ms); err != nil {
		return nil, fmt.Errorf("open %s: %w", red, scrub(err, dsn, red))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", red, scrub(err, dsn, red))
	}
	return &Store{pool: pool, redacted: red}, nil
}

// Close closes the pool, waiting for connections in use to be released. It is safe to
// call more than once.
func (s *Store) Close() error {
	s.closeOnce.Do(s.pool.Close)
	return nil
}

// String says what the store is, for the node's administrators: the DSN without its
// password.
func (s *Store) String() string { return "PostgreSQL " + s.redacted }

// Redact returns dsn with any password in it replaced by "xxxxx": the URL's userinfo,
// a password query parameter, or a password=... pair of the key=value form.
func Redact(dsn string) string {
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		if q.Has("password") {
			q.Set("password", "xxxxx")
			u.RawQuery = q.Encode()
		}
		return u.Redacted()
	}
	if cfg, err := pgconn.ParseConfig(dsn); err == nil && cfg.Password == "" {
		return dsn
	}
	// Key=value pairs (or something unreadable that may hold a password): keep no
	// value at all.
	return "(a key=value DSN)"
}

// scrub takes dsn and its password out of err's message (pgx's errors about a
// connection may quote what it was given); the result keeps err's class.
func scrub(err error, dsn, redacted string) error {
	if err == nil {
		return nil
	}
	msg := strings.ReplaceAll(err.Error(), dsn, redacted)
	if cfg, perr := pgconn.ParseConfig(dsn); perr == nil && cfg.Password != "" {
		msg = strings.ReplaceAll(msg, cfg.Password, "xxxxx")
	}
	if msg == err.Error() {
		return err
	}
	return &scrubbed{msg: msg, err: err}
}

// scrubbed is an error whose message had a password taken out; Unwrap keeps its class
// for errors.Is and As, while its message is safe to log.
type scrubbed struct {
	msg string
	err error
}

func (e *scrubbed) Error() string { return e.msg }
func (e *scrubbed) Unwrap() error { return e.err }

// pgCode returns the SQLSTATE of a server error, and the constraint it names.
func pgCode(err error) (code, constraint string) {
	var e *pgconn.PgError
	if errors.As(err, &e) {
		return e.Code, e.ConstraintName
	}
	return "", ""
}

// SQLSTATEs the store acts on.
const (
	uniqueViolation      = "23505"
	serializationFailure = "40001"
	deadlockDetected     = "40P01"
)

// inTx runs fn in a transaction and commits it, retrying the whole transaction (at
// most three times in all) when the server aborts it for a deadlock or a
// serialization failure.
func (s *Store) inTx(ctx context.Context, fn func(pgx.Tx) error) error {
	for attempt := 1; ; attempt++ {
		err := pgx.BeginFunc(ctx, s.pool, fn)
		code, _ := pgCode(err)
		if attempt < 3 && (code == serializationFailure || code == deadlockDetected) && ctx.Err() == nil {
			continue
		}
		return err
	}
}

// execOne runs a write that must change exactly one row; none is ErrNotFound.
func (s *Store) execOne(ctx context.Context, what, q string, args ...any) error {
	tag, err := s.pool.Exec(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("%s not found", what)
	}
	return nil
}

// args collects the arguments of a query built piece by piece and names each one's
// placeholder.
type args []any

// add appends v and returns its placeholder ($1, $2, ...).
func (a *args) add(v any) string {
	*a = append(*a, v)
	return fmt.Sprintf("$%d", len(*a))
}
