package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	sqlitelib "modernc.org/sqlite/lib"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// CreateIdentity implements store.Store.
func (s *Store) CreateIdentity(ctx context.Context, id *store.Identity) error {
	doc, err := json.Marshal(id)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO identities (name, doc) VALUES (?, ?)`, id.Name, string(doc))
	if c := constraintCode(err); c == sqlitelib.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlitelib.SQLITE_CONSTRAINT_UNIQUE {
		return errdefs.Exists("identity %q already exists", id.Name)
	}
	if err != nil {
		return fmt.Errorf("create identity %s: %w", id.Name, err)
	}
	return nil
}

// UpdateIdentity implements store.Store.
func (s *Store) UpdateIdentity(ctx context.Context, id *store.Identity) error {
	doc, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return s.affectOne(ctx, "identity "+id.Name, `UPDATE identities SET doc = ? WHERE name = ?`, string(doc), id.Name)
}

// GetIdentity implements store.Store.
func (s *Store) GetIdentity(ctx context.Context, name string) (*store.Identity, error) {
	var id store.Identity
	if err := s.getDoc(ctx, "identity "+name, &id, `SELECT doc FROM identities WHERE name = ?`, name); err != nil {
		return nil, err
	}
	return &id, nil
}

// ListIdentities implements store.Store.
func (s *Store) ListIdentities(ctx context.Context) ([]*store.Identity, error) {
	return listDocs[store.Identity](ctx, s, `SELECT doc FROM identities ORDER BY name`)
}

// DeleteIdentity implements store.Store.
func (s *Store) DeleteIdentity(ctx context.Context, name string) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	res, err := tx.ExecContext(ctx, `DELETE FROM identities WHERE name = ?`, name)
	if err != nil {
		return fmt.Errorf("delete identity %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("identity %q not found", name)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM tokens WHERE identity = ?`, name); err != nil {
		return fmt.Errorf("delete the tokens of %s: %w", name, err)
	}
	return tx.Commit()
}

// CreateToken implements store.Store.
func (s *Store) CreateToken(ctx context.Context, t *store.Token) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO tokens (id, hash, identity, doc) VALUES (?, ?, ?, ?)`,
		t.ID, t.Hash, t.Identity, string(doc))
	if c := constraintCode(err); c == sqlitelib.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlitelib.SQLITE_CONSTRAINT_UNIQUE {
		return errdefs.Exists("token %s already exists", t.ID)
	}
	if err != nil {
		return fmt.Errorf("create token %s: %w", t.ID, err)
	}
	return nil
}

// GetTokenByHash implements store.Store.
func (s *Store) GetTokenByHash(ctx context.Context, hash string) (*store.Token, error) {
	var t store.Token
	if err := s.getDoc(ctx, "token", &t, `SELECT doc FROM tokens WHERE hash = ?`, hash); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTokens implements store.Store.
func (s *Store) ListTokens(ctx context.Context, identity string) ([]*store.Token, error) {
	if identity == "" {
		return listDocs[store.Token](ctx, s, `SELECT doc FROM tokens ORDER BY identity, id`)
	}
	return listDocs[store.Token](ctx, s, `SELECT doc FROM tokens WHERE identity = ? ORDER BY id`, identity)
}

// UpdateToken implements store.Store.
func (s *Store) UpdateToken(ctx context.Context, t *store.Token) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.affectOne(ctx, "token "+t.ID, `UPDATE tokens SET doc = ? WHERE id = ?`, string(doc), t.ID)
}

// PutRole implements store.Store.
func (s *Store) PutRole(ctx context.Context, r *store.Role) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO roles (name, doc) VALUES (?, ?)
		ON CONFLICT (name) DO UPDATE SET doc = excluded.doc`, r.Name, string(doc))
	if err != nil {
		return fmt.Errorf("put role %s: %w", r.Name, err)
	}
	return nil
}

// ListRoles implements store.Store.
func (s *Store) ListRoles(ctx context.Context) ([]*store.Role, error) {
	return listDocs[store.Role](ctx, s, `SELECT doc FROM roles ORDER BY name`)
}

// DeleteRole implements store.Store.
func (s *Store) DeleteRole(ctx context.Context, name string) error {
	return s.affectOne(ctx, "role "+name, `DELETE FROM roles WHERE name = ?`, name)
}

// affectOne runs a write that must change exactly one row; none is ErrNotFound.
func (s *Store) affectOne(ctx context.Context, what, q string, args ...any) error {
	res, err := s.w.ExecContext(ctx, q, args...)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("%s not found", what)
	}
	return nil
}

// getDoc reads one JSON document into v; none is ErrNotFound.
func (s *Store) getDoc(ctx context.Context, what string, v any, q string, args ...any) error {
	var doc string
	err := s.queryRow(ctx, s.r, q, args...).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		return errdefs.NotFound("%s not found", what)
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	if err := json.Unmarshal([]byte(doc), v); err != nil {
		return fmt.Errorf("read %s: damaged record: %w", what, err)
	}
	return nil
}

// listDocs reads every JSON document a query returns.
func listDocs[T any](ctx context.Context, s *Store, q string, args ...any) ([]*T, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*T
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return nil, err
		}
		v := new(T)
		if err := json.Unmarshal([]byte(doc), v); err != nil {
			return nil, fmt.Errorf("damaged record: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}
