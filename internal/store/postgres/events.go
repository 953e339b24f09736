package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// defaultEventLimit is the page size of ListEvents when the filter gives none.
const defaultEventLimit = 1000

// AppendEvent implements store.Store.
func (s *Store) AppendEvent(ctx context.Context, ev *store.Event) error {
	return s.AppendEvents(ctx, []*store.Event{ev})
}

// AppendEvents implements store.Store in one transaction and one round trip. The
// transaction takes eventsLock before it draws seqs, so appends commit in seq order:
// a reader that saw seq N never later finds a new event below N.
func (s *Store) AppendEvents(ctx context.Context, evs []*store.Event) error {
	if len(evs) == 0 {
		return nil
	}
	rows, err := records.EventArgs(evs)
	if err != nil {
		return err
	}
	seqs := make([]int64, len(evs))
	err = s.inTx(ctx, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, eventsLock)
		for i := range evs {
			b.Queue(`INSERT INTO events (`+records.NewEventColumns+`) VALUES ($1, $2, $3, $4, $5, $6) RETURNING seq`, rows[i]...)
		}
		res := tx.SendBatch(ctx, b)
		if _, err := res.Exec(); err != nil {
			res.Close()
			return err
		}
		for i, ev := range evs {
			if err := res.QueryRow().Scan(&seqs[i]); err != nil {
				res.Close()
				return fmt.Errorf("append event to %s: %w", ev.SandboxID, err)
			}
		}
		return res.Close()
	})
	if err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	for i, ev := range evs {
		ev.Seq = seqs[i]
	}
	return nil
}

// PruneEvents implements store.Store. The age pass finds the first event (by Seq) that
// is not older than the cutoff and removes everything before it; the count pass removes,
// in one statement per store.PruneBatch crowded sandboxes, every event past the cap.
func (s *Store) PruneEvents(ctx context.Context, r store.EventRetention) (int64, error) {
	var removed int64
	exec := func(q string, a ...any) error {
		tag, err := s.pool.Exec(ctx, q, a...)
		if err != nil {
			return fmt.Errorf("prune events: %w", err)
		}
		removed += tag.RowsAffected()
		return nil
	}
	if !r.Before.IsZero() {
		var first int64
		err := s.pool.QueryRow(ctx, `SELECT seq FROM events WHERE time >= $1 ORDER BY seq LIMIT 1`,
			records.FormatTime(r.Before)).Scan(&first)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			err = exec(`DELETE FROM events`)
		case err == nil:
			err = exec(`DELETE FROM events WHERE seq < $1`, first)
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
		rows, err := s.pool.Query(ctx, `SELECT sandbox_id FROM events GROUP BY sandbox_id HAVING count(*) > $1`, r.MaxPerSandbox)
		if err != nil {
			return removed, fmt.Errorf("prune events: %w", err)
		}
		if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			return removed, fmt.Errorf("prune events: %w", err)
		}
	}
	for batch := range slices.Chunk(ids, store.PruneBatch) {
		// One statement per batch: every event past the cap of its sandbox goes.
		err := exec(`DELETE FROM events WHERE seq IN (SELECT seq FROM (SELECT seq,
			ROW_NUMBER() OVER (PARTITION BY sandbox_id ORDER BY seq DESC) AS n
			FROM events WHERE sandbox_id = ANY($1)) AS ranked WHERE n > $2)`, batch, r.MaxPerSandbox)
		if err != nil {
			return removed, err
		}
	}
	return removed, nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]*store.Event, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultEventLimit
	}
	var a args
	q := `SELECT ` + records.EventColumns + ` FROM events WHERE seq > ` + a.add(f.AfterSeq)
	if f.SandboxID != "" {
		q += ` AND sandbox_id = ` + a.add(f.SandboxID)
	}
	if f.Owner != "" {
		q += ` AND sandbox_id IN (SELECT id FROM sandboxes WHERE owner = ` + a.add(f.Owner) + `)`
	}
	q += ` ORDER BY seq LIMIT ` + a.add(limit)
	out, err := queryRows(ctx, s, records.ScanEvent, q, a...)
	if err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}
