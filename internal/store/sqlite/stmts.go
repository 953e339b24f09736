package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmts keeps the statements of the queries every request makes (a sandbox by name or
// id, an identity, a token, an audit record) prepared, so that each call does not parse
// and plan its SQL again: with the pure-Go driver that was most of a lookup's cost.
// database/sql prepares a statement once on each connection of its pool that runs it.
type stmts struct {
	mu sync.Mutex
	m  map[stmtKey]*sql.Stmt
}

type stmtKey struct {
	db *sql.DB
	q  string
}

// prepared returns q prepared on db, preparing it on first use. Preparing takes one of
// db's connections: a caller must not hold one of them (an open transaction on the
// writer pool, which has only one), and no lock is held while it waits for one.
func (s *Store) prepared(ctx context.Context, db *sql.DB, q string) (*sql.Stmt, error) {
	k := stmtKey{db, q}
	s.stmts.mu.Lock()
	st, ok := s.stmts.m[k]
	s.stmts.mu.Unlock()
	if ok {
		return st, nil
	}
	st, err := db.PrepareContext(ctx, q)
	if err != nil {
		return nil, err
	}
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	if kept, ok := s.stmts.m[k]; ok { // prepared meanwhile by another call
		st.Close()
		return kept, nil
	}
	if s.stmts.m == nil {
		s.stmts.m = map[stmtKey]*sql.Stmt{}
	}
	s.stmts.m[k] = st
	return st, nil
}

// queryRow is db.QueryRowContext through a kept statement.
func (s *Store) queryRow(ctx context.Context, db *sql.DB, q string, args ...any) *sql.Row {
	st, err := s.prepared(ctx, db, q)
	if err != nil {
		return db.QueryRowContext(ctx, q, args...) // the same error, read through Scan
	}
	return st.QueryRowContext(ctx, args...)
}

// closeStmts closes every kept statement.
func (s *Store) closeStmts() error {
	s.stmts.mu.Lock()
	defer s.stmts.mu.Unlock()
	var first error
	for _, st := range s.stmts.m {
		if err := st.Close(); err != nil && first == nil {
			first = err
		}
	}
	s.stmts.m = nil
	return first
}
