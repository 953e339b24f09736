package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	sqlitelib "modernc.org/sqlite/lib"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// operationConflict turns a constraint violation on the operations table into
// ErrAlreadyExists; any other error is returned wrapped with what was being done.
func operationConflict(err error, op *store.Operation, doing string) error {
	switch constraintCode(err) {
	case sqlitelib.SQLITE_CONSTRAINT_PRIMARYKEY:
		return errdefs.Exists("operation %s already exists", op.ID)
	case sqlitelib.SQLITE_CONSTRAINT_UNIQUE:
		return errdefs.Exists("an operation with idempotency key %q already exists for owner %q", op.IdempotencyKey, op.Owner)
	}
	return fmt.Errorf("%s operation %s: %w", doing, op.ID, err)
}

// CreateOperation implements store.Store. The look-up of the idempotency key and the
// insert share one write transaction, so two requests with the same key cannot both
// insert.
func (s *Store) CreateOperation(ctx context.Context, op *store.Operation) (*store.Operation, error) {
	args, err := records.OperationArgs(op)
	if err != nil {
		return nil, err
	}
	var prev *store.Operation
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) (err error) {
		prev, err = createOperation(ctx, tx, op, args)
		return err
	})
	if prev != nil {
		return prev, err
	}
	if err != nil {
		return nil, err
	}
	return op, nil
}

// createOperation inserts op (args: its columns) in tx; an operation of its owner with
// its idempotency key is returned with ErrAlreadyExists.
func createOperation(ctx context.Context, tx *sql.Tx, op *store.Operation, args []any) (*store.Operation, error) {
	if op.IdempotencyKey != "" {
		p, err := records.ScanOperation(tx.QueryRowContext(ctx,
			`SELECT `+records.OperationColumns+` FROM operations WHERE owner = ? AND idempotency_key = ?`,
			op.Owner, op.IdempotencyKey))
		switch {
		case err == nil:
			return p, errdefs.Exists("an operation with idempotency key %q already exists for owner %q",
				op.IdempotencyKey, op.Owner)
		case !errors.Is(err, sql.ErrNoRows):
			return nil, fmt.Errorf("create operation %s: %w", op.ID, err)
		}
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO operations (`+records.OperationColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, args...); err != nil {
		return nil, operationConflict(err, op, "create")
	}
	return nil, nil
}

// UpdateOperation implements store.Store; an operation that is not there is
// ErrNotFound.
func (s *Store) UpdateOperation(ctx context.Context, op *store.Operation) error {
	args, err := records.OperationArgs(op)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return updateOperation(ctx, tx, op, args)
	})
}

// updateOperation overwrites op (args: its columns) in tx.
func updateOperation(ctx context.Context, tx *sql.Tx, op *store.Operation, args []any) error {
	res, err := tx.ExecContext(ctx,
		`UPDATE operations SET kind = ?, owner = ?, sandbox_id = ?, state = ?, idempotency_key = ?,
		request_hash = ?, result = ?, error_code = ?, error_message = ?, created_at = ?, updated_at = ?
		WHERE id = ?`, append(args[1:], op.ID)...)
	if err != nil {
		return operationConflict(err, op, "update")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update operation %s: %w", op.ID, err)
	}
	if n == 0 {
		return errdefs.NotFound("operation %s not found", op.ID)
	}
	return nil
}

// GetOperation implements store.Store.
func (s *Store) GetOperation(ctx context.Context, id string) (*store.Operation, error) {
	op, err := records.ScanOperation(s.r.QueryRowContext(ctx, `SELECT `+records.OperationColumns+` FROM operations WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("operation %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get operation %s: %w", id, err)
	}
	return op, nil
}

// ListOperations implements store.Store.
func (s *Store) ListOperations(ctx context.Context, f store.OperationFilter) ([]*store.Operation, error) {
	q := `SELECT ` + records.OperationColumns + ` FROM operations WHERE id > ?`
	args := []any{f.AfterID}
	if len(f.States) > 0 {
		q += " AND state IN (?" + strings.Repeat(", ?", len(f.States)-1) + ")"
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	if f.Kind != "" {
		q += " AND kind = ?"
		args = append(args, f.Kind)
	}
	if f.Node != "" {
		q += ` AND NOT EXISTS (SELECT 1 FROM sandboxes s WHERE s.id = operations.sandbox_id AND s.node NOT IN ('', ?))`
		args = append(args, f.Node)
	}
	q += " ORDER BY id LIMIT ?"
	args = append(args, f.PageLimit())

	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	defer rows.Close()
	var out []*store.Operation
	for rows.Next() {
		op, err := records.ScanOperation(rows)
		if err != nil {
			return nil, fmt.Errorf("list operations: %w", err)
		}
		out = append(out, op)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list operations: %w", err)
	}
	return out, nil
}
