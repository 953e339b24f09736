package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/store/records"
)

// ClaimClusterKey implements store.Store. Of two nodes inserting one name at once, the
// second's insert waits for the first's to commit and then does nothing; its read, a
// statement of its own, sees the first's row.
func (s *Store) ClaimClusterKey(ctx context.Context, name, fingerprint string) (string, error) {
	if _, err := s.pool.Exec(ctx, `INSERT INTO cluster_keys (name, fingerprint, created_at) VALUES ($1, $2, $3)
		ON CONFLICT (name) DO NOTHING`, name, fingerprint, records.FormatTime(time.Now())); err != nil {
		return "", fmt.Errorf("cluster key %s: %w", name, err)
	}
	var stored string
	if err := s.pool.QueryRow(ctx, `SELECT fingerprint FROM cluster_keys WHERE name = $1`, name).Scan(&stored); err != nil {
		return "", fmt.Errorf("cluster key %s: %w", name, err)
	}
	return stored, nil
}
