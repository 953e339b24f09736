package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// CreateSnapshotRecord implements store.Store.
func (s *Store) CreateSnapshotRecord(ctx context.Context, r *store.SnapshotRecord) error {
	tag, err := s.pool.Exec(ctx, `INSERT INTO snapshots (`+records.SnapshotColumns+`) VALUES ($1, $2, $3, $4, $5)
		ON CONFLICT (id) DO NOTHING`, records.SnapshotArgs(r)...)
	if err != nil {
		return fmt.Errorf("record snapshot %s: %w", r.ID, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.Exists("snapshot %s is already recorded", r.ID)
	}
	return nil
}

// GetSnapshotRecord implements store.Store.
func (s *Store) GetSnapshotRecord(ctx context.Context, id string) (*store.SnapshotRecord, error) {
	r, err := records.ScanSnapshot(s.pool.QueryRow(ctx, `SELECT `+records.SnapshotColumns+` FROM snapshots WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("snapshot %q not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get snapshot %s: %w", id, err)
	}
	return r, nil
}

// ListSnapshotRecords implements store.Store.
func (s *Store) ListSnapshotRecords(ctx context.Context, owner, sandboxID string, limit int) ([]*store.SnapshotRecord, error) {
	out, err := queryRows(ctx, s, records.ScanSnapshot, `SELECT `+records.SnapshotColumns+` FROM (SELECT * FROM snapshots
		WHERE owner = $1 AND ($2 = '' OR sandbox_id = $2) ORDER BY created_at DESC, id DESC LIMIT $3) AS newest ORDER BY created_at, id`,
		owner, sandboxID, store.SnapshotListLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("list snapshots: %w", err)
	}
	return out, nil
}

// DeleteSnapshotRecord implements store.Store.
func (s *Store) DeleteSnapshotRecord(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM snapshots WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete snapshot %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("snapshot %q not found", id)
	}
	return nil
}
