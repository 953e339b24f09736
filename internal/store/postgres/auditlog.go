package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// AppendAudit implements store.Store, in one transaction. A sealed append takes
// auditAppendLock and reads the head in one round trip, then inserts in another: the
// lock is held until commit, so two nodes' appends follow each other in one chain.
func (s *Store) AppendAudit(ctx context.Context, recs []*store.AuditRecord, seal store.AuditSeal) error {
	if len(recs) == 0 {
		return nil
	}
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if seal != nil {
			head, err := s.lockedAuditHead(ctx, tx)
			if err != nil {
				return err
			}
			seal(head, recs)
		}
		b := &pgx.Batch{}
		for _, r := range recs {
			b.Queue(`INSERT INTO audit_log (`+records.AuditColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
				records.AuditArgs(r, r.Doc)...)
		}
		res := tx.SendBatch(ctx, b)
		for _, r := range recs {
			if _, err := res.Exec(); err != nil {
				res.Close()
				return fmt.Errorf("append audit record %d: %w", r.Seq, err)
			}
		}
		return res.Close()
	})
}

// lockedAuditHead takes auditAppendLock for tx and then reads the log's head.
func (s *Store) lockedAuditHead(ctx context.Context, tx pgx.Tx) (store.AuditAnchor, error) {
	var head store.AuditAnchor
	b := &pgx.Batch{}
	b.Queue(`SELECT pg_advisory_xact_lock($1)`, auditAppendLock)
	b.Queue(records.AuditHead)
	res := tx.SendBatch(ctx, b)
	defer res.Close()
	if _, err := res.Exec(); err != nil {
		return head, fmt.Errorf("lock the audit log: %w", err)
	}
	if err := res.QueryRow().Scan(&head.Seq, &head.Hash); err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return head, fmt.Errorf("read the audit log's head: %w", err)
	}
	return head, res.Close()
}

// LastAudit implements store.Store.
func (s *Store) LastAudit(ctx context.Context) (*store.AuditRecord, error) {
	r, err := records.ScanAudit(s.pool.QueryRow(ctx, `SELECT `+records.AuditColumns+` FROM audit_log ORDER BY seq DESC LIMIT 1`))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	return r, err
}

// ListAudit implements store.Store.
func (s *Store) ListAudit(ctx context.Context, f store.AuditFilter) ([]*store.AuditRecord, error) {
	var a args
	where := []string{"seq > " + a.add(f.After)}
	if f.Identity != "" {
		where = append(where, "identity = "+a.add(f.Identity))
	}
	if f.Action != "" {
		where = append(where, "action = "+a.add(f.Action))
	}
	if f.Sandbox != "" {
		where = append(where, "sandbox = "+a.add(f.Sandbox))
	}
	if !f.Since.IsZero() {
		where = append(where, "time >= "+a.add(records.FormatTime(f.Since)))
	}
	limit := f.Limit
	if limit <= 0 {
		limit = 1000
	}
	q := `SELECT ` + records.AuditColumns + ` FROM audit_log WHERE ` + strings.Join(where, " AND ") + ` ORDER BY seq LIMIT ` + a.add(limit)
	return queryRows(ctx, s, records.ScanAudit, q, a...)
}

// PruneAudit implements store.Store. Prunes take auditPruneLock, so two of them at
// once (two nodes) cannot leave the anchor at the earlier one's record after the later
// one removed more.
func (s *Store) PruneAudit(ctx context.Context, before int64) error {
	return s.inTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, auditPruneLock); err != nil {
			return err
		}
		var seq int64
		var hash string
		err := tx.QueryRow(ctx, `SELECT seq, hash FROM audit_log WHERE seq < $1 ORDER BY seq DESC LIMIT 1`, before).Scan(&seq, &hash)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM audit_log WHERE seq <= $1`, seq); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO audit_anchor (id, seq, hash) VALUES (1, $1, $2)
			ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, hash = excluded.hash`, seq, hash)
		return err
	})
}

// AuditAnchor implements store.Store.
func (s *Store) AuditAnchor(ctx context.Context) (store.AuditAnchor, error) {
	var a store.AuditAnchor
	err := s.pool.QueryRow(ctx, `SELECT seq, hash FROM audit_anchor WHERE id = 1`).Scan(&a.Seq, &a.Hash)
	if errors.Is(err, pgx.ErrNoRows) {
		return a, nil
	}
	return a, err
}
