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

// PutClusterCAIfAbsent implements store.Store, in one transaction on the one writer
// connection.
func (s *Store) PutClusterCAIfAbsent(ctx context.Context, r *store.ClusterCARecord) (*store.ClusterCARecord, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("put cluster CA: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO cluster_ca (id, `+records.ClusterCAColumns+`) VALUES (1, ?, ?, ?, ?, ?)
		ON CONFLICT (id) DO NOTHING`, records.ClusterCAArgs(r)...); err != nil {
		return nil, fmt.Errorf("put cluster CA: %w", err)
	}
	stored, err := records.ScanClusterCA(tx.QueryRowContext(ctx, `SELECT `+records.ClusterCAColumns+` FROM cluster_ca WHERE id = 1`))
	if err != nil {
		return nil, fmt.Errorf("put cluster CA: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("put cluster CA: %w", err)
	}
	return stored, nil
}

// GetClusterCA implements store.Store.
func (s *Store) GetClusterCA(ctx context.Context) (*store.ClusterCARecord, error) {
	r, err := records.ScanClusterCA(s.r.QueryRowContext(ctx, `SELECT `+records.ClusterCAColumns+` FROM cluster_ca WHERE id = 1`))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("no cluster CA is stored")
	}
	if err != nil {
		return nil, fmt.Errorf("get cluster CA: %w", err)
	}
	return r, nil
}
