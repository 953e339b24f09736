package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// insertDoc runs an insert of a JSON document; a unique violation is ErrAlreadyExists
// with exists's text.
func (s *Store) insertDoc(ctx context.Context, exists error, what, q string, a ...any) error {
	_, err := s.pool.Exec(ctx, q, a...)
	if code, _ := pgCode(err); code == uniqueViolation {
		return exists
	}
	if err != nil {
		return fmt.Errorf("create %s: %w", what, err)
	}
	return nil
}

// CreateIdentity implements store.Store.
func (s *Store) CreateIdentity(ctx context.Context, id *store.Identity) error {
	doc, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return s.insertDoc(ctx, errdefs.Exists("identity %q already exists", id.Name), "identity "+id.Name,
		`INSERT INTO identities (name, doc) VALUES ($1, $2)`, id.Name, string(doc))
}

// UpdateIdentity implements store.Store.
func (s *Store) UpdateIdentity(ctx context.Context, id *store.Identity) error {
	doc, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return s.execOne(ctx, "identity "+id.Name, `UPDATE identities SET doc = $1 WHERE name = $2`, string(doc), id.Name)
}

// GetIdentity implements store.Store.
func (s *Store) GetIdentity(ctx context.Context, name string) (*store.Identity, error) {
	return getDoc[store.Identity](ctx, s, "identity "+name, `SELECT doc FROM identities WHERE name = $1`, name)
}

// ListIdentities implements store.Store.
func (s *Store) ListIdentities(ctx context.Context) ([]*store.Identity, error) {
	return queryRows(ctx, s, scanDoc[store.Identity], `SELECT doc FROM identities ORDER BY name`)
}

// DeleteIdentity implements store.Store.
func (s *Store) DeleteIdentity(ctx context.Context, name string) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM identities WHERE name = $1`, name)
		if err != nil {
			return fmt.Errorf("delete identity %s: %w", name, err)
		}
		if tag.RowsAffected() == 0 {
			return errdefs.NotFound("identity %q not found", name)
		}
		if _, err := tx.Exec(ctx, `DELETE FROM tokens WHERE identity = $1`, name); err != nil {
			return fmt.Errorf("delete the tokens of %s: %w", name, err)
		}
		return nil
	})
}

// CreateToken implements store.Store.
func (s *Store) CreateToken(ctx context.Context, t *store.Token) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.insertDoc(ctx, errdefs.Exists("token %s already exists", t.ID), "token "+t.ID,
		`INSERT INTO tokens (id, hash, identity, doc) VALUES ($1, $2, $3, $4)`, t.ID, t.Hash, t.Identity, string(doc))
}

// GetTokenByHash implements store.Store.
func (s *Store) GetTokenByHash(ctx context.Context, hash string) (*store.Token, error) {
	return getDoc[store.Token](ctx, s, "token", `SELECT doc FROM tokens WHERE hash = $1`, hash)
}

// ListTokens implements store.Store.
func (s *Store) ListTokens(ctx context.Context, identity string) ([]*store.Token, error) {
	if identity == "" {
		return queryRows(ctx, s, scanDoc[store.Token], `SELECT doc FROM tokens ORDER BY identity, id`)
	}
	return queryRows(ctx, s, scanDoc[store.Token], `SELECT doc FROM tokens WHERE identity = $1 ORDER BY id`, identity)
}

// UpdateToken implements store.Store.
func (s *Store) UpdateToken(ctx context.Context, t *store.Token) error {
	doc, err := json.Marshal(t)
	if err != nil {
		return err
	}
	return s.execOne(ctx, "token "+t.ID, `UPDATE tokens SET doc = $1 WHERE id = $2`, string(doc), t.ID)
}

// PutRole implements store.Store.
func (s *Store) PutRole(ctx context.Context, r *store.Role) error {
	doc, err := json.Marshal(r)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO roles (name, doc) VALUES ($1, $2)
		ON CONFLICT (name) DO UPDATE SET doc = excluded.doc`, r.Name, string(doc))
	if err != nil {
		return fmt.Errorf("put role %s: %w", r.Name, err)
	}
	return nil
}

// ListRoles implements store.Store.
func (s *Store) ListRoles(ctx context.Context) ([]*store.Role, error) {
	return queryRows(ctx, s, scanDoc[store.Role], `SELECT doc FROM roles ORDER BY name`)
}

// DeleteRole implements store.Store.
func (s *Store) DeleteRole(ctx context.Context, name string) error {
	return s.execOne(ctx, "role "+name, `DELETE FROM roles WHERE name = $1`, name)
}

// scanDoc reads a row of one column, a stored JSON document.
func scanDoc[T any](row records.Scanner) (*T, error) {
	var doc string
	if err := row.Scan(&doc); err != nil {
		return nil, err
	}
	v := new(T)
	if err := json.Unmarshal([]byte(doc), v); err != nil {
		return nil, fmt.Errorf("damaged record: %w", err)
	}
	return v, nil
}

// getDoc reads the one JSON document q selects; none is ErrNotFound.
func getDoc[T any](ctx context.Context, s *Store, what, q string, a ...any) (*T, error) {
	v, err := scanDoc[T](s.pool.QueryRow(ctx, q, a...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("%s not found", what)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", what, err)
	}
	return v, nil
}
