package sqlite

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/store/records"
)

// ClaimClusterKey implements store.Store, in one transaction on the one writer
// connection.
func (s *Store) ClaimClusterKey(ctx context.Context, name, fingerprint string) (string, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("cluster key %s: %w", name, err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO cluster_keys (name, fingerprint, created_at) VALUES (?, ?, ?)
		ON CONFLICT (name) DO NOTHING`, name, fingerprint, records.FormatTime(time.Now())); err != nil {
		return "", fmt.Errorf("cluster key %s: %w", name, err)
	}
	var stored string
	if err := tx.QueryRowContext(ctx, `SELECT fingerprint FROM cluster_keys WHERE name = ?`, name).Scan(&stored); err != nil {
		return "", fmt.Errorf("cluster key %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return "", fmt.Errorf("cluster key %s: %w", name, err)
	}
	return stored, nil
}
