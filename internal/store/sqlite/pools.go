package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// PutPool implements store.Store.
func (s *Store) PutPool(ctx context.Context, p *store.Pool) error {
	doc, err := json.Marshal(p)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO pools (name, doc) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET doc = excluded.doc`,
		p.Name, string(doc))
	if err != nil {
		return fmt.Errorf("put pool %s: %w", p.Name, err)
	}
	return nil
}

// ListPools implements store.Store.
func (s *Store) ListPools(ctx context.Context) ([]*store.Pool, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT doc FROM pools ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list pools: %w", err)
	}
	defer rows.Close()
	var out []*store.Pool
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("list pools: %w", err)
		}
		p := new(store.Pool)
		if err := json.Unmarshal([]byte(doc), p); err != nil {
			return nil, fmt.Errorf("decode stored pool: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

// DeletePool implements store.Store.
func (s *Store) DeletePool(ctx context.Context, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM pools WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete pool %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("pool %q not found", name)
	}
	return nil
}
