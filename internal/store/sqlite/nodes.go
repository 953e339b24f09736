package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// changeNode reads name's record (nil: none), asks change what to store instead, and
// stores it, in one transaction on the one writer connection.
func (s *Store) changeNode(ctx context.Context, name string, change func(old *store.Node) (*store.Node, error)) (*store.Node, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	defer tx.Rollback()
	old, err := scanNode(tx.QueryRowContext(ctx, `SELECT doc FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		old = nil
	} else if err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	n, err := change(old)
	if err != nil {
		return nil, err
	}
	doc, err := records.EncodeNode(n)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO nodes (name, epoch, doc) VALUES (?, ?, ?)
		ON CONFLICT (name) DO UPDATE SET epoch = excluded.epoch, doc = excluded.doc`, n.Name, n.Epoch, doc); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("node %s: %w", name, err)
	}
	return n, nil
}

func scanNode(row interface{ Scan(...any) error }) (*store.Node, error) {
	var doc string
	if err := row.Scan(&doc); err != nil {
		return nil, err // sql.ErrNoRows: none
	}
	n := new(store.Node)
	if err := json.Unmarshal([]byte(doc), n); err != nil {
		return nil, fmt.Errorf("decode stored node: %w", err)
	}
	return n, nil
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
	n, err := scanNode(s.r.QueryRowContext(ctx, `SELECT doc FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NodeMissing(name)
	}
	return n, err
}

// ListNodes implements store.Store.
func (s *Store) ListNodes(ctx context.Context) ([]*store.Node, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT doc FROM nodes ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	defer rows.Close()
	var out []*store.Node
	for rows.Next() {
		n, err := scanNode(rows)
		if err != nil {
			return nil, fmt.Errorf("list nodes: %w", err)
		}
		out = append(out, n)
	}
	return out, rows.Err()
}

// FenceNode implements store.Store, in one transaction on the one writer connection.
func (s *Store) FenceNode(ctx context.Context, name string, epoch int64, now time.Time, states []store.State, mark func(*store.Sandbox)) ([]*store.Sandbox, error) {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("fence node %s: %w", name, err)
	}
	defer tx.Rollback()
	old, err := scanNode(tx.QueryRowContext(ctx, `SELECT doc FROM nodes WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, store.NodeMissing(name)
	} else if err != nil {
		return nil, fmt.Errorf("fence node %s: %w", name, err)
	}
	n, done, err := store.FencedNode(old, epoch, now)
	if err != nil || done {
		return nil, err
	}
	args := []any{name}
	for _, st := range states {
		args = append(args, string(st))
	}
	rows, err := tx.QueryContext(ctx, `SELECT doc FROM sandboxes WHERE node = ? AND state IN (?`+strings.Repeat(", ?", len(states)-1)+`) ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, fmt.Errorf("fence node %s: %w", name, err)
	}
	var list []*store.Sandbox
	for rows.Next() {
		sb, err := records.ScanSandbox(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("fence node %s: %w", name, err)
		}
		list = append(list, sb)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("fence node %s: %w", name, err)
	}
	for _, sb := range list {
		store.FencedSandbox(sb, mark)
		doc, err := records.EncodeSandbox(sb)
		if err != nil {
			return nil, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE sandboxes SET state = ?, version = ?, doc = ?, node = ? WHERE id = ?`,
			sb.State, sb.Version, doc, sb.Node, sb.ID); err != nil {
			return nil, fmt.Errorf("fence node %s: %w", name, err)
		}
	}
	doc, err := records.EncodeNode(n)
	if err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE nodes SET doc = ? WHERE name = ?`, doc, name); err != nil {
		return nil, fmt.Errorf("fence node %s: %w", name, err)
	}
	if err := tx.Commit(); err != nil {
		return nil, fmt.Errorf("fence node %s: %w", name, err)
	}
	return list, nil
}
