package postgres

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// operationConflict turns a unique violation on the operations table into
// ErrAlreadyExists; any other error is returned wrapped with what was being done.
func operationConflict(err error, op *store.Operation, doing string) error {
	switch code, constraint := pgCode(err); {
	case code == uniqueViolation && constraint == "operations_pkey":
		return errdefs.Exists("operation %s already exists", op.ID)
	case code == uniqueViolation:
		return errdefs.Exists("an operation with idempotency key %q already exists for owner %q", op.IdempotencyKey, op.Owner)
	}
	return fmt.Errorf("%s operation %s: %w", doing, op.ID, err)
}

// An idempotency key is whatever bytes its maker chose (the manager's own keys start
// with a NUL, which no HTTP header can carry), and PostgreSQL's text refuses NUL and
// invalid UTF-8: the column keeps the key hex-encoded, which is exact and keeps keys
// apart exactly as they were.

// opArgs returns op's values in the order of records.OperationColumns, its key
// hex-encoded.
func opArgs(op *store.Operation) ([]any, error) {
	a, err := records.OperationArgs(op)
	if err != nil {
		return nil, err
	}
	a[5] = hex.EncodeToString([]byte(op.IdempotencyKey))
	return a, nil
}

// scanOperation reads a row of records.OperationColumns, decoding its key.
func scanOperation(row records.Scanner) (*store.Operation, error) {
	op, err := records.ScanOperation(row)
	if err != nil {
		return nil, err
	}
	key, err := hex.DecodeString(op.IdempotencyKey)
	if err != nil {
		return nil, fmt.Errorf("operation %s: stored idempotency key is not hex: %w", op.ID, err)
	}
	op.IdempotencyKey = string(key)
	return op, nil
}

// CreateOperation implements store.Store. An insert whose (owner, key) is taken does
// nothing (ON CONFLICT on the partial unique index; it waits for an insert of the same
// key still in flight to commit or roll back), and the operation that holds the key is
// read back. Should that one vanish in between, the insert is tried again.
func (s *Store) CreateOperation(ctx context.Context, op *store.Operation) (*store.Operation, error) {
	a, err := opArgs(op)
	if err != nil {
		return nil, err
	}
	const insert = `INSERT INTO operations (` + records.OperationColumns + `) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)`
	if op.IdempotencyKey == "" {
		if _, err := s.pool.Exec(ctx, insert, a...); err != nil {
			return nil, operationConflict(err, op, "create")
		}
		return op, nil
	}
	for range 3 {
		tag, err := s.pool.Exec(ctx, insert+` ON CONFLICT (owner, idempotency_key) WHERE idempotency_key <> '' DO NOTHING`, a...)
		if err != nil {
			return nil, operationConflict(err, op, "create")
		}
		if tag.RowsAffected() == 1 {
			return op, nil
		}
		prev, err := scanOperation(s.pool.QueryRow(ctx,
			`SELECT `+records.OperationColumns+` FROM operations WHERE owner = $1 AND idempotency_key = $2`, op.Owner, a[5]))
		switch {
		case err == nil:
			return prev, errdefs.Exists("an operation with idempotency key %q already exists for owner %q",
				op.IdempotencyKey, op.Owner)
		case !errors.Is(err, pgx.ErrNoRows):
			return nil, fmt.Errorf("create operation %s: %w", op.ID, err)
		}
	}
	return nil, errdefs.Unavailable("create operation %s: the operation holding idempotency key %q kept changing; try again", op.ID, op.IdempotencyKey)
}

// UpdateOperation implements store.Store; an operation that is not there is
// ErrNotFound.
func (s *Store) UpdateOperation(ctx context.Context, op *store.Operation) error {
	a, err := opArgs(op)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx,
		`UPDATE operations SET kind = $2, owner = $3, sandbox_id = $4, state = $5, idempotency_key = $6,
		request_hash = $7, result = $8, error_code = $9, error_message = $10, created_at = $11, updated_at = $12
		WHERE id = $1`, a...)
	if err != nil {
		return operationConflict(err, op, "update")
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("operation %s not found", op.ID)
	}
	return nil
}

// GetOperation implements store.Store.
func (s *Store) GetOperation(ctx context.Context, id string) (*store.Operation, error) {
	op, err := scanOperation(s.pool.QueryRow(ctx, `SELECT `+records.OperationColumns+` FROM operations WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("operation %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// ListOperations implements store.Store.
func (s *Store) ListOperations(ctx context.Context, f store.OperationFilter) ([]*store.Operation, error) {
	var a args
	q := `SELECT ` + records.OperationColumns + ` FROM operations WHERE id > ` + a.add(f.AfterID)
	if len(f.States) > 0 {
		q += " AND state = ANY(" + a.add(f.States) + ")"
	}
	if f.Kind != "" {
		q += " AND kind = " + a.add(f.Kind)
	}
	if f.Node != "" {
		q += ` AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = operations.sandbox_id AND s.node NOT IN ('', ` + a.add(f.Node) + `))`
	}
	q += " ORDER BY id LIMIT " + a.add(f.PageLimit())
	out, err := queryRows(ctx, s, scanOperation, q, a...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	return out, nil
}
