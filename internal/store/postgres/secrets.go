package postgres

import (
	"context"
	"encoding/json"
	"fmt"

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
	return s.insertDoc(ctx, errdefs.Exists("secret %q already exists", sec.Name), "secret "+sec.Name,
		`INSERT INTO secrets (owner, name, rev, doc) VALUES ($1, $2, $3, $4)`, sec.Owner, sec.Name, sec.Rev, string(doc))
}

// UpdateSecret implements store.Store as a compare-and-swap on rev.
func (s *Store) UpdateSecret(ctx context.Context, sec *store.Secret) error {
	prev := sec.Rev
	sec.Rev++
	doc, err := json.Marshal(sec)
	if err != nil {
		sec.Rev = prev
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE secrets SET doc = $1, rev = $2 WHERE owner = $3 AND name = $4 AND rev = $5`,
		string(doc), sec.Rev, sec.Owner, sec.Name, prev)
	if err != nil {
		sec.Rev = prev
		return fmt.Errorf("update secret %s: %w", sec.Name, err)
	}
	if tag.RowsAffected() == 0 {
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
	return getDoc[store.Secret](ctx, s, "secret "+name, `SELECT doc FROM secrets WHERE owner = $1 AND name = $2`, owner, name)
}

// ListSecrets implements store.Store.
func (s *Store) ListSecrets(ctx context.Context, owner string) ([]*store.Secret, error) {
	if owner == "" {
		return queryRows(ctx, s, scanDoc[store.Secret], `SELECT doc FROM secrets ORDER BY owner, name`)
	}
	return queryRows(ctx, s, scanDoc[store.Secret], `SELECT doc FROM secrets WHERE owner = $1 ORDER BY name`, owner)
}

// DeleteSecret implements store.Store.
func (s *Store) DeleteSecret(ctx context.Context, owner, name string) error {
	return s.execOne(ctx, "secret "+name, `DELETE FROM secrets WHERE owner = $1 AND name = $2`, owner, name)
}
