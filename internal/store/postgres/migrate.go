package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// migrate applies, each in its own transaction, every migration whose version is not
// yet in schema_version. It runs on a connection of its own that holds the session
// advisory lock migrateLock throughout, so nodes that open one database at the same
// moment migrate it one after another: the first applies, the others find the versions
// recorded. Closing the connection releases the lock, whatever happened. It refuses a
// database that a newer Airlock has migrated past what this binary knows.
func migrate(ctx context.Context, cc *pgx.ConnConfig, ms []store.Migration) error {
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrateLock); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	const create = `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		applied_at TEXT NOT NULL
	)`
	if _, err := conn.Exec(ctx, create); err != nil {
		return fmt.Errorf("create schema_version: %w", err)
	}
	var cur int
	if err := conn.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&cur); err != nil {
		return fmt.Errorf("read schema_version: %w", err)
	}
	if cur > len(ms) {
		return fmt.Errorf("database schema version %d is newer than this binary's %d", cur, len(ms))
	}
	for _, m := range ms[cur:] {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.SQL); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_version (version, applied_at) VALUES ($1, $2)`,
				m.Version, records.FormatTime(time.Now()))
			return err
		})
		if err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	return nil
}
