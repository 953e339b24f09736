package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// AppendAudit implements store.Store. The writer pool's one connection serialises
// appends; the head is read in the same transaction as the inserts.
func (s *Store) AppendAudit(ctx context.Context, recs []*store.AuditRecord, seal store.AuditSeal) error {
	// Prepared before the transaction takes the writer pool's only connection.
	ins, err := s.prepared(ctx, s.w, `INSERT INTO audit_log (`+records.AuditColumns+`)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return err
	}
	head, err := s.prepared(ctx, s.w, records.AuditHead)
	if err != nil {
		return err
	}
	return s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if seal != nil {
			var h store.AuditAnchor
			if err := tx.StmtContext(ctx, head).QueryRowContext(ctx).Scan(&h.Seq, &h.Hash); err != nil && !errors.Is(err, sql.ErrNoRows) {
				return fmt.Errorf("read the audit log's head: %w", err)
			}
			seal(h, recs)
		}
		stmt := tx.StmtContext(ctx, ins)
		defer stmt.Close()
		for _, r := range recs {
			if _, err := stmt.ExecContext(ctx, records.AuditArgs(r, string(r.Doc))...); err != nil {
				return fmt.Errorf("append audit record %d: %w", r.Seq, err)
			}
		}
		return nil
	})
}

// LastAudit implements store.Store.
func (s *Store) LastAudit(ctx context.Context) (*store.AuditRecord, error) {
	r, err := records.ScanAudit(s.w.QueryRowContext(ctx, `SELECT `+records.AuditColumns+` FROM audit_log ORDER BY seq DESC LIMIT 1`))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]*store.AuditRecord, error) {
	where, args := []string{"seq > ?"}, []any{f.After}
	if f.Identity != "" {
		where, args = append(where, "identity = ?"), append(args, f.Identity)
	}
	if f.Action != "" {
		where, args = append(where, "action = ?"), append(args, f.Action)
	}
	if f.Sandbox != "" {
		where, args = append(where, "sandbox = ?"), append(args, f.Sandbox)
	}
	if !f.Since.IsZero() {
		where, args = append(where, "time >= ?"), append(args, records.FormatTime(f.Since))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+records.AuditColumns+` FROM audit_log WHERE `+strings.Join(where, " AND ")+
		` ORDER BY seq LIMIT ?`, append(args, limit)...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*store.AuditRecord
	for rows.Next() {
		r, err := records.ScanAudit(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// PruneAudit implements store.Store.
func (s *Store) PruneAudit(ctx context.Context, before int64) error {
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	var seq int64
	var hash string
	err = tx.QueryRowContext(ctx, `SELECT seq, hash FROM audit_log WHERE seq < ? ORDER BY seq DESC LIMIT 1`, before).Scan(&seq, &hash)
	if errors.Is(err, sql.ErrNoRows) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM audit_log WHERE seq <= ?`, seq); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO audit_anchor (id, seq, hash) VALUES (1, ?, ?)
		ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash`, seq, hash); err != nil {
		return err
	}
	return tx.Commit()
}

// AuditAnchor implements store.Store.
func (s *Store) AuditAnchor(ctx context.Context) (store.AuditAnchor, error) {
	var a store.AuditAnchor
	err := s.r.QueryRowContext(ctx, `SELECT seq, hash FROM audit_anchor WHERE id = 1`).Scan(&a.Seq, &a.Hash)
	if errors.Is(err, sql.ErrNoRows) {
		return a, nil
	}
	return a, err
}
