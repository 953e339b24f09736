package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlockhq/airlock/internal/store"
)

// defaultEventLimit is the page size of ListEvents when the filter gives none.
const defaultEventLimit = 1000

// AppendEvent implements store.Store. Seq comes from an AUTOINCREMENT key, so it
// grows strictly and is never reused, even after rows are deleted.
func (s *Store) AppendEvent(ctx context.Context, ev *store.Event) error {
	data, err := nullJSON("event data", ev.Data)
	if err != nil {
		return err
	}
	res, err := s.w.ExecContext(ctx,
		`INSERT INTO events (sandbox_id, generation, type, cause, data, time) VALUES (?, ?, ?, ?, ?, ?)`,
		ev.SandboxID, ev.Generation, ev.Type, ev.Cause, data, formatTime(ev.Time))
	if err != nil {
		return fmt.Errorf("append event to %s: %w", ev.SandboxID, err)
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return fmt.Errorf("append event to %s: %w", ev.SandboxID, err)
	}
	ev.Seq = seq
	return nil
}

// ListEvents implements store.Store.
func (s *Store) ListEvents(ctx context.Context, f store.EventFilter) ([]*store.Event, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = defaultEventLimit
	}
	q := `SELECT seq, sandbox_id, generation, type, cause, data, time FROM events WHERE seq > ?`
	args := []any{f.AfterSeq}
	if f.SandboxID != "" {
		q += ` AND sandbox_id = ?`
		args = append(args, f.SandboxID)
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
		var (
			ev   store.Event
			data sql.NullString
			t    string
		)
		if err := rows.Scan(&ev.Seq, &ev.SandboxID, &ev.Generation, &ev.Type, &ev.Cause, &data, &t); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		ev.Data = rawJSON(data)
		if ev.Time, err = parseTime(t); err != nil {
			return nil, fmt.Errorf("list events: %w", err)
		}
		out = append(out, &ev)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list events: %w", err)
	}
	return out, nil
}
