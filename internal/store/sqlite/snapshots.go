package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// CreateSnapshotRecord implements store.Store.
func (s *Store) CreateSnapshotRecord(ctx context.Context, r *store.SnapshotRecord) error {
	res, err := s.w.ExecContext(ctx, `INSERT INTO snapshots (`+records.SnapshotColumns+`) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`, records.SnapshotArgs(r)...)
	if err != nil {
		return fmt.Errorf("record snapshot %s: %w", r.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.Exists("snapshot %s is already recorded", r.ID)
	}
	return nil
}

// GetSnapshotRecord implements store.Store.
func (s *Store) GetSnapshotRecord(ctx context.Context, id string) (*store.SnapshotRecord, error) {
	r, err := records.ScanSnapshot(s.r.QueryRowContext(ctx, `SELECT `+records.SnapshotColumns+` FROM snapshots WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("snapshot %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return r, nil
}

// ListSnapshotRecords implements store.Store.
func (s *Store) ListSnapshotRecords(ctx context.Context, owner, sandboxID string, limit int) ([]*store.SnapshotRecord, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+records.SnapshotColumns+` FROM (SELECT * FROM snapshots
		WHERE owner = ? AND (? = '' OR sandbox_id = ?) ORDER BY created_at DESC, id DESC LIMIT ?) ORDER BY created_at, id`,
		owner, sandboxID, sandboxID, store.SnapshotListLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	defer rows.Close()
	var out []*store.SnapshotRecord
	for rows.Next() {
		r, err := records.ScanSnapshot(rows)
		if err != nil {
			return nil, fmt.Errorf("list snapshots: %w", err)
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// DeleteSnapshotRecord implements store.Store.
func (s *Store) DeleteSnapshotRecord(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("snapshot %q not found", id)
	}
	return nil
}
