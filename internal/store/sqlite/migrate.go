package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// migrationFS holds the schema migrations, named NNNN_what.sql and numbered from 1
// without gaps. A migration, once released, is never edited; a change is a new file.
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// loadMigrations reads the embedded migrations in version order.
func loadMigrations() ([]store.Migration, error) {
	return store.LoadMigrations(migrationFS, "migrations")
}

// migrate applies, each in its own transaction, every migration whose version is not
// yet in schema_version. It refuses a database that a newer Airlock has migrated past
// what this binary knows.
func migrate(ctx context.Context, db *sql.DB, ms []store.Migration) error {
	const create = `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		applied_at TEXT NOT NULL
	)`
	if _, err := db.ExecContext(ctx, create); err != nil {
		return fmt.Errorf("create schema_version: %w", err)
	}
	cur, err := schemaVersion(ctx, db)
	if err != nil {
		return err
	}
	if cur > len(ms) {
		return fmt.Errorf("database schema version %d is newer than this binary's %d", cur, len(ms))
	}
	for _, m := range ms[cur:] {
		if err := apply(ctx, db, m); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}

// apply runs one migration and records it, all or nothing. The transaction is
// BEGIN IMMEDIATE, so a second process migrating the same file waits and then finds
// the version already recorded.
func apply(ctx context.Context, db *sql.DB, m store.Migration) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()

	var seen int
	if err := tx.QueryRowContext(ctx, `SELECT count(*) FROM schema_version WHERE version = ?`, m.Version).Scan(&seen); err != nil {
		return err
	}
	if seen > 0 {
		return nil
	}
	if _, err := tx.ExecContext(ctx, m.SQL); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_at) VALUES (?, ?)`,
		m.Version, records.FormatTime(time.Now())); err != nil {
		return err
	}
	return tx.Commit()
}

// schemaVersion returns the highest applied migration, 0 for a new database.
func schemaVersion(ctx context.Context, q querier) (int, error) {
	var v int
	if err := q.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return 0, fmt.Errorf("read schema_version: %w", err)
	}
	return v, nil
}
