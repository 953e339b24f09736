package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// CreateVolume implements store.Store.
func (s *Store) CreateVolume(ctx context.Context, v *store.Volume) error {
	v.Version = 1
	args, err := records.VolumeArgs(v)
	if err != nil {
		return err
	}
	_, err = s.pool.Exec(ctx, `INSERT INTO volumes (`+records.VolumeColumns+`) VALUES ($1, $2, $3, $4, $5, $6)`, args...)
	if code, _ := pgCode(err); code == uniqueViolation {
		return errdefs.Exists("a %s named %q already exists", v.Kind, v.Name)
	}
	if err != nil {
		return fmt.Errorf("create volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume implements store.Store.
func (s *Store) GetVolume(ctx context.Context, id string) (*store.Volume, error) {
	return s.getVolume(ctx, `id = $1`, id)
}

// GetVolumeByName implements store.Store.
func (s *Store) GetVolumeByName(ctx context.Context, owner, kind, name string) (*store.Volume, error) {
	return s.getVolume(ctx, `owner = $1 AND kind = $2 AND name = $3`, owner, kind, name)
}

func (s *Store) getVolume(ctx context.Context, where string, args ...any) (*store.Volume, error) {
	v, err := records.ScanVolume(s.pool.QueryRow(ctx, `SELECT `+records.VolumeColumns+` FROM volumes WHERE `+where, args...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errdefs.NotFound("volume %q not found", args[len(args)-1])
	}
	if err != nil {
		return nil, fmt.Errorf("get volume: %w", err)
	}
	return v, nil
}

// ListVolumes implements store.Store. The doc's created_at is compared as a time: as
// text it does not sort (its fraction of a second has no fixed width).
func (s *Store) ListVolumes(ctx context.Context, owner, kind string) ([]*store.Volume, error) {
	out, err := queryRows(ctx, s, records.ScanVolume, `SELECT `+records.VolumeColumns+` FROM volumes
		WHERE ($1 = '' OR owner = $1) AND ($2 = '' OR kind = $2) ORDER BY (doc::json ->> 'created_at')::timestamptz, id`, owner, kind)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	return out, nil
}

// UpdateVolume implements store.Store.
func (s *Store) UpdateVolume(ctx context.Context, v *store.Volume) error {
	c := *v
	c.Version = v.Version + 1
	args, err := records.VolumeArgs(&c)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx, `UPDATE volumes SET version = $1, doc = $2 WHERE id = $3 AND version = $4`,
		args[4], args[5], v.ID, v.Version)
	if err != nil {
		return fmt.Errorf("update volume %s: %w", v.ID, err)
	}
	if tag.RowsAffected() == 0 {
		if _, err := s.GetVolume(ctx, v.ID); err != nil {
			return err
		}
		return errdefs.VersionConflict("volume %s changed meanwhile", v.Name)
	}
	v.Version = c.Version
	return nil
}

// DeleteVolume implements store.Store.
func (s *Store) DeleteVolume(ctx context.Context, id string) error {
	tag, err := s.pool.Exec(ctx, `DELETE FROM volumes WHERE id = $1`, id)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	if tag.RowsAffected() == 0 {
		return errdefs.NotFound("volume %q not found", id)
	}
	return nil
}
