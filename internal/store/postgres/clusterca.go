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

// PutClusterCAIfAbsent implements store.Store. Of two nodes inserting at once, the
// second's insert waits for the first's to commit and then does nothing; its read, a
// statement of its own, sees the first's row.
func (s *Store) PutClusterCAIfAbsent(ctx context.Context, r *store.ClusterCARecord) (*store.ClusterCARecord, error) {
	if _, err := s.pool.Exec(ctx, `INSERT INTO cluster_ca (id, `+records.ClusterCAColumns+`) VALUES (1, $1, $2, $3, $4, $5)
		ON CONFLICT (id) DO NOTHING`, records.ClusterCAArgs(r)...); err != nil {
		return nil, fmt.Errorf("put cluster CA: %w", err)
	}
	stored, err := s.GetClusterCA(ctx)
	if err != nil {
		return nil, fmt.Errorf("put cluster CA: %w", err)
	}
	return stored, nil
}

// GetClusterCA implements store.Store.
func (s *Store) GetClusterCA(ctx context.Context) (*store.ClusterCARecord, error) {
	r, err := records.ScanClusterCA(s.pool.QueryRow(ctx, `SELECT `+records.ClusterCAColumns+` FROM cluster_ca WHERE id = 1`))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("no cluster CA is stored")
	}
	if err != nil {
		return nil, fmt.Errorf("get cluster CA: %w", err)
	}
	return r, nil
}

// SharedByNodes implements store.Shared: every node that names the database reaches it.
func (s *Store) SharedByNodes() bool { return true }
