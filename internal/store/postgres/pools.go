package postgres

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/airlockhq/airlock/internal/store"
)

// PutPool implements store.Store.
func (s *Store) PutPool(ctx context.Context, p *store.Pool) error {
	doc, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO pools (name, doc) VALUES ($1, $2) ON CONFLICT (name) DO UPDATE SET doc = excluded.doc`,
		p.Name, string(doc))
	if err != nil {
		return fmt.Errorf("put pool %s: %w", p.Name, err)
	}
	return nil
}

// ListPools implements store.Store.
func (s *Store) ListPools(ctx context.Context) ([]*store.Pool, error) {
	out, err := queryRows(ctx, s, scanDoc[store.Pool], `SELECT doc FROM pools ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	return out, nil
}

// DeletePool implements store.Store.
func (s *Store) DeletePool(ctx context.Context, name string) error {
	return s.execOne(ctx, fmt.Sprintf("pool %q", name), `DELETE FROM pools WHERE name = $1`, name)
}
