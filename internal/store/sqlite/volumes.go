package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	sqlitelib "modernc.org/sqlite/lib"

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
	_, err = s.w.ExecContext(ctx, `INSERT INTO volumes (`+records.VolumeColumns+`) VALUES (?, ?, ?, ?, ?, ?)`, args...)
	if c := constraintCode(err); c == sqlitelib.SQLITE_CONSTRAINT_PRIMARYKEY || c == sqlitelib.SQLITE_CONSTRAINT_UNIQUE {
		return errdefs.Exists("a %s named %q already exists", v.Kind, v.Name)
	}
	if err != nil {
		return fmt.Errorf("create volume %s: %w", v.ID, err)
	}
	return nil
}

// GetVolume implements store.Store.
func (s *Store) GetVolume(ctx context.Context, id string) (*store.Volume, error) {
	return s.getVolume(ctx, `id = ?`, id)
}

// GetVolumeByName implements store.Store.
func (s *Store) GetVolumeByName(ctx context.Context, owner, kind, name string) (*store.Volume, error) {
	return s.getVolume(ctx, `owner = ? AND kind = ? AND name = ?`, owner, kind, name)
}

func (s *Store) getVolume(ctx context.Context, where string, args ...any) (*store.Volume, error) {
	v, err := records.ScanVolume(s.r.QueryRowContext(ctx, `SELECT `+records.VolumeColumns+` FROM volumes WHERE `+where, args...))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("volume %q not found", args[len(args)-1])
	}
	if err != nil {
		return nil, fmt.Errorf("get volume: %w", err)
	}
	return v, nil
}

// ListVolumes implements store.Store.
func (s *Store) ListVolumes(ctx context.Context, owner, kind string) ([]*store.Volume, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT `+records.VolumeColumns+` FROM volumes
		WHERE (? = '' OR owner = ?) AND (? = '' OR kind = ?) ORDER BY rowid`, owner, owner, kind, kind)
	if err != nil {
		return nil, fmt.Errorf("list volumes: %w", err)
	}
	defer rows.Close()
	var out []*store.Volume
	for rows.Next() {
		v, err := records.ScanVolume(rows)
		if err != nil {
			return nil, fmt.Errorf("list volumes: %w", err)
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// UpdateVolume implements store.Store.
func (s *Store) UpdateVolume(ctx context.Context, v *store.Volume) error {
	c := *v
	c.Version = v.Version + 1
	args, err := records.VolumeArgs(&c)
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx, `UPDATE volumes SET version = ?, doc = ? WHERE id = ? AND version = ?`,
		args[4], args[5], v.ID, v.Version)
	if err != nil {
		return fmt.Errorf("update volume %s: %w", v.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
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
	res, err := s.w.ExecContext(ctx, `DELETE FROM volumes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete volume %s: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return errdefs.NotFound("volume %q not found", id)
	}
	return nil
}
