package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// defaultEventLimit is the page size of ListEvents when the filter gives none.
const defaultEventLimit = 1000

// AppendEvent implements store.Store. Seq comes from an AUTOINCREMENT key, so it
// grows strictly and is never reused, even after rows are deleted.
func (s *Store) AppendEvent(ctx context.Context, ev *store.Event) error {
	return s.AppendEvents(ctx, []*store.Event{ev})
}

// AppendEvents implements store.Store.
func (s *Store) AppendEvents(ctx context.Context, evs []*store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows, err := records.EventArgs(evs)
	if err != nil {
		return err
	}
	seqs := make([]int64, len(evs))
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return appendEvents(ctx, tx, evs, rows, seqs)
	})
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	for i, ev := range evs {
		ev.Seq = seqs[i]
	}
	return nil
}

// appendEvents inserts evs (rows: their columns) in tx and sets seqs to their Seqs.
func appendEvents(ctx context.Context, tx *sql.Tx, evs []*store.Event, rows [][]any, seqs []int64) error {
	st, err := tx.PrepareContext(ctx,
		`INSERT INTO events (`+records.NewEventColumns+`) VALUES (?, ?, ?, ?, ?, ?)`)
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	defer st.Close()
	for i, ev := range evs {
		res, err := st.ExecContext(ctx, rows[i]...)
		if err != nil {
			return fmt.Errorf("append event to %s: %w", ev.SandboxID, err)
		}
		if seqs[i], err = res.LastInsertId(); err != nil {
			return fmt.Errorf("append event to %s: %w", ev.SandboxID, err)
		}
	}
	return nil
}

// PruneEvents implements store.Store. The age pass finds the first event (by Seq) that
// is not older than the cutoff and removes everything before it, so it reads only the
// rows it removes; the count pass removes, in one statement per store.PruneBatch
// sandboxes, every event past the cap of its sandbox.
func (s *Store) PruneEvents(ctx context.Context, r store.EventRetention) (int64, error) {
	var removed int64
	exec := func(q string, args ...any) error {
		res, err := s.w.ExecContext(ctx, q, args...)
		if err != nil {
			return fmt.Errorf("prune events: %w", err)
		}
		n, _ := res.RowsAffected()
		removed += n
		return nil
	}
	if !r.Before.IsZero() {
		var first sql.NullInt64
		err := s.w.QueryRowContext(ctx, `SELECT seq FROM events WHERE time >= ? ORDER BY seq LIMIT 1`,
			records.FormatTime(r.Before)).Scan(&first)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			err = exec(`DELETE FROM events`)
		case err == nil:
			err = exec(`DELETE FROM events WHERE seq < ?`, first.Int64)
		default:
			err = fmt.Errorf("prune events: %w", err)
		}
		if err != nil {
			return removed, err
		}
	}
	if r.MaxPerSandbox <= 0 {
		return removed, nil
	}
	ids := r.Sandboxes
	if ids == nil {
		var err error
		if ids, err = s.crowdedSandboxes(ctx, r.MaxPerSandbox); err != nil {
			return removed, err
		}
	}
	for batch := range slices.Chunk(ids, store.PruneBatch) {
		// One statement per batch: every event past the cap of its sandbox goes.
		q := `DELETE FROM events WHERE seq IN (SELECT seq FROM (SELECT seq,
			ROW_NUMBER() OVER (PARTITION BY sandbox_id ORDER BY seq DESC) AS n
			FROM events WHERE sandbox_id IN (?` + strings.Repeat(", ?", len(batch)-1) + `)) WHERE n > ?)`
		args := make([]any, 0, len(batch)+1)
		for _, id := range batch {
			args = append(args, id)
		}
		if err := exec(q, append(args, r.MaxPerSandbox)...); err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// crowdedSandboxes lists the sandboxes with more than max events.
func (s *Store) crowdedSandboxes(ctx context.Context, max int) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT sandbox_id FROM events GROUP BY sandbox_id HAVING count(*) > ?`, max)
	if err != nil {
		return nil, fmt.Errorf("prune events: %w", err)
	}
	defer rows.Close()
	ids := []string{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("prune events: %w", err)
		}
		ids = append(ids, id)
	}
	return ids, rows.Err()
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]*store.Event, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultEventLimit
	}
	q := `SELECT ` + records.EventColumns + ` FROM events WHERE seq > ?`
	args := []any{f.AfterSeq}
	if f.SandboxID != "" {
		q += ` AND sandbox_id = ?`
		args = append(args, f.SandboxID)
	}
	if f.Owner != "" {
		q += ` AND sandbox_id IN (SELECT id FROM sandboxes WHERE owner = ?)`
		args = append(args, f.Owner)
	}
	q += ` ORDER BY seq LIMIT ?`
	args = append(args, limit)

	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	defer rows.Close()
	var out []*store.Event
	for rows.Next() {
		ev, err := records.ScanEvent(rows)
		if err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}
