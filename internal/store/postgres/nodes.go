package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// changeNode reads name's record (nil: none) under a row lock, asks change what to
// store instead, and stores it, in one transaction. Two nodes inserting one new name
// at once: the loser's insert violates the key, and it runs again to find the winner's
// record.
func (s *Store) changeNode(ctx context.Context, name string, change func(old *store.Node) (*store.Node, error)) (*store.Node, error) {
	var out *store.Node
	for attempt := 1; ; attempt++ {
		err := s.inTx(ctx, func(tx pgx.Tx) error {
			old, err := scanDoc[store.Node](tx.QueryRow(ctx, `SELECT doc FROM nodes WHERE name = $1 FOR UPDATE`, name))
			if errors.Is(err, pgx.ErrNoRows) {
				old = nil
			} else if err != nil {
				return err
			}
			n, err := change(old)
			if err != nil {
				return err
			}
			doc, err := records.EncodeNode(n)
			if err != nil {
				return err
			}
			if old == nil {
				_, err = tx.Exec(ctx, `INSERT INTO nodes (name, epoch, doc) VALUES ($1, $2, $3)`, n.Name, n.Epoch, doc)
			} else {
				_, err = tx.Exec(ctx, `UPDATE nodes SET epoch = $2, doc = $3 WHERE name = $1`, n.Name, n.Epoch, doc)
			}
			out = n
			return err
		})
		if code, _ := pgCode(err); code == uniqueViolation && attempt < 3 {
			continue
		}
		if err != nil && errdefs.Code(err) == "internal" {
			return nil, fmt.Errorf("node %s: %w", name, err)
		}
		return out, err
	}
}

// AcquireNode implements store.Store.
func (s *Store) AcquireNode(ctx context.Context, n *store.Node, now time.Time) error {
	return store.AcquireNodeBy(ctx, s.changeNode, n, now)
}

// RenewNode implements store.Store.
func (s *Store) RenewNode(ctx context.Context, n *store.Node) error {
	return store.RenewNodeBy(ctx, s.changeNode, n)
}

// ReleaseNode implements store.Store.
func (s *Store) ReleaseNode(ctx context.Context, name string, epoch int64) error {
	return store.ReleaseNodeBy(ctx, s.changeNode, name, epoch)
}

// SetNodeDraining implements store.Store.
func (s *Store) SetNodeDraining(ctx context.Context, name string, draining bool) (*store.Node, error) {
	return store.SetNodeDrainingBy(ctx, s.changeNode, name, draining)
}

// GetNode implements store.Store.
func (s *Store) GetNode(ctx context.Context, name string) (*store.Node, error) {
	n, err := scanDoc[store.Node](s.pool.QueryRow(ctx, `SELECT doc FROM nodes WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.NodeMissing(name)
	}
	return n, err
}

// ListNodes implements store.Store.
func (s *Store) ListNodes(ctx context.Context) ([]*store.Node, error) {
	out, err := queryRows(ctx, s, scanDoc[store.Node], `SELECT doc FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	return out, nil
}

// FenceNode implements store.Store: the node's row lock holds off an AcquireNode of
// the name until the sandboxes are marked.
func (s *Store) FenceNode(ctx context.Context, name string, epoch int64, now time.Time, states []store.State, mark func(*store.Sandbox)) ([]*store.Sandbox, error) {
	var out []*store.Sandbox
	err := s.inTx(ctx, func(tx pgx.Tx) error {
		out = nil
		old, err := scanDoc[store.Node](tx.QueryRow(ctx, `SELECT doc FROM nodes WHERE name = $1 FOR UPDATE`, name))
		if errors.Is(err, pgx.ErrNoRows) {
			return store.NodeMissing(name)
		} else if err != nil {
			return err
		}
		n, done, err := store.FencedNode(old, epoch, now)
		if err != nil || done {
			return err
		}
		names := make([]string, len(states))
		for i, st := range states {
			names[i] = string(st)
		}
		rows, err := tx.Query(ctx, `SELECT doc FROM sandboxes WHERE node = $1 AND state = ANY($2) ORDER BY created_at, id FOR UPDATE`, name, names)
		if err != nil {
			return err
		}
		list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (*store.Sandbox, error) { return records.ScanSandbox(r) })
		if err != nil {
			return err
		}
		for _, sb := range list {
			store.FencedSandbox(sb, mark)
			doc, err := records.EncodeSandbox(sb)
			if err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `UPDATE sandboxes SET state = $1, version = $2, doc = $3, node = $4 WHERE id = $5`,
				string(sb.State), sb.Version, doc, sb.Node, sb.ID); err != nil {
				return err
			}
		}
		doc, err := records.EncodeNode(n)
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE nodes SET doc = $2 WHERE name = $1`, name, doc); err != nil {
			return err
		}
		out = list
		return nil
	})
	if err != nil && errdefs.Code(err) == "internal" {
		return nil, fmt.Errorf("fence node %s: %w", name, err)
	}
	return out, err
}
