package sqlite

import (
	"context"
	"encoding/json"
	"fmt"

	sqlitelib "modernc.org/sqlite/lib"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// CreateSecret implements store.Store.
func (s *Store) CreateSecret(ctx context.Context, sec *store.Secret) error {
	sec.Rev = 1
	doc, err := json.Marshal(sec)
	if err != nil {
		return err
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO secrets (owner, name, doc) VALUES (?, ?, ?)`, sec.Owner, sec.Name, string(doc))
	if constraintCode(err) == sqlitelib.SQLITE_CONSTRAINT_PRIMARYKEY {
		return errdefs.Exists("secret %q already exists", sec.Name)
	}
	if err != nil {
		return fmt.Errorf("create secret %s: %w", sec.Name, err)
	}
	return nil
}

// UpdateSecret implements store.Store: the update applies only to the revision it
// was read at.
func (s *Store) UpdateSecret(ctx context.Context, sec *store.Secret) error {
	prev := sec.Rev
	sec.Rev++
	doc, err := json.Marshal(sec)
	if err != nil {
		sec.Rev = prev
		return err
	}
	res, err := s.w.ExecContext(ctx, `UPDATE secrets SET doc = ? WHERE owner = ? AND name = ? AND json_extract(doc, '$.rev') = ?`,
		string(doc), sec.Owner, sec.Name, prev)
	if err != nil {
		sec.Rev = prev
		return fmt.Errorf("update secret %s: %w", sec.Name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		sec.Rev = prev
		if _, err := s.GetSecret(ctx, sec.Owner, sec.Name); err != nil {
			return err
		}
		return errdefs.VersionConflict("secret %q was changed meanwhile; read it again", sec.Name)
	}
	return nil
}

// GetSecret implements store.Store.
func (s *Store) GetSecret(ctx context.Context, owner, name string) (*store.Secret, error) {
	var sec store.Secret
	if err := s.getDoc(ctx, "secret "+name, &sec, `SELECT doc FROM secrets WHERE owner = ? AND name = ?`, owner, name); err != nil {
		return nil, err
	}
	return &sec, nil
}

// ListSecrets implements store.Store.
func (s *Store) ListSecrets(ctx context.Context, owner string) ([]*store.Secret, error) {
	if owner == "" {
		return listDocs[store.Secret](ctx, s, `SELECT doc FROM secrets ORDER BY owner, name`)
	}
	return listDocs[store.Secret](ctx, s, `SELECT doc FROM secrets WHERE owner = ? ORDER BY name`, owner)
}

// DeleteSecret implements store.Store.
func (s *Store) DeleteSecret(ctx context.Context, owner, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM secrets WHERE owner = ? AND name = ?`, owner, name)
	if err != nil {
		return fmt.Errorf("delete secret %s: %w", name, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("secret %q not found", name)
	}
	return nil
}
