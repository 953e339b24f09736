package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	sqlitelib "modernc.org/sqlite/lib"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// sandboxConflict turns a constraint violation on the sandboxes table into
// ErrAlreadyExists; any other error is returned wrapped with what was being done.
func sandboxConflict(err error, sb *store.Sandbox, doing string) error {
	switch constraintCode(err) {
	case sqlitelib.SQLITE_CONSTRAINT_PRIMARYKEY:
		return errdefs.Exists("sandbox %s already exists", sb.ID)
	case sqlitelib.SQLITE_CONSTRAINT_UNIQUE:
		return errdefs.Exists("a live sandbox named %q already exists for owner %q", sb.Name, sb.Owner)
	}
	return fmt.Errorf("%s sandbox %s: %w", doing, sb.ID, err)
}

// CreateSandbox implements store.Store.
func (s *Store) CreateSandbox(ctx context.Context, sb *store.Sandbox) error {
	c := *sb
	c.Version = 1
	doc, err := records.EncodeSandbox(&c)
	if err != nil {
		return err
	}
	err = s.inTx(ctx, func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx,
			`INSERT INTO sandboxes (id, owner, name, state, version, created_at, doc, node, memory, cpu) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			c.ID, c.Owner, c.Name, c.State, c.Version, records.FormatTime(c.CreatedAt), doc, c.Node, c.Limits.Memory, c.Limits.CPU)
		return err
	})
	if err != nil {
		return sandboxConflict(err, sb, "create")
	}
	sb.Version = c.Version
	return nil
}

// GetSandbox implements store.Store.
func (s *Store) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	sb, err := records.ScanSandbox(s.queryRow(ctx, s.r, `SELECT doc FROM sandboxes WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("sandbox %s not found", id)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, nil
}

// GetSandboxByName implements store.Store: the live one first, then the terminated
// one created last.
func (s *Store) GetSandboxByName(ctx context.Context, owner, name string) (*store.Sandbox, error) {
	const q = `SELECT doc FROM sandboxes WHERE owner = ? AND name = ?
		ORDER BY state = ? ASC, created_at DESC, rowid DESC LIMIT 1`
	sb, err := records.ScanSandbox(s.queryRow(ctx, s.r, q, owner, name, store.Terminated))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, errdefs.NotFound("no sandbox named %q for owner %q", name, owner)
	}
	if err != nil {
		return nil, fmt.Errorf("get sandbox %q of %q: %w", name, owner, err)
	}
	return sb, nil
}

// ListSandboxes implements store.Store. Labels are matched in SQL against the labels
// object of the stored document, one EXISTS per pair. The list reads ids and versions
// first and the documents only of the records not already decoded at that version
// (reading and copying each row's document was a large part of a long list's time), both in
// one read transaction, so the documents are those of the versions listed.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	list, err := s.listShared(ctx, f)
	if err != nil {
		return nil, err
	}
	for i, sb := range list {
		list[i] = sb.Clone()
	}
	return list, nil
}

// ViewSandboxes implements store.SandboxViewer: ListSandboxes without the copies.
func (s *Store) ViewSandboxes(ctx context.Context, f store.SandboxFilter, fn func(*store.Sandbox) error) error {
	list, err := s.listShared(ctx, f)
	if err != nil {
		return err
	}
	return store.ViewList(list, fn)
}

var _ store.SandboxViewer = (*Store)(nil)

// keptListStates bounds the states of a list whose statement is kept prepared: a
// caller may name a state any number of times, and each count is a text of its own.
const keptListStates = 16

// listShared is what ListSandboxes lists, as the records kept decoded: nobody may
// change them.
func (s *Store) listShared(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	q, args := listQuery(f)
	// A list without labels, of at most keptListStates states, has one of a few hundred
	// texts (which filters are set, how many states): kept prepared, as a lookup's
	// statement is. Prepared before the transaction, which holds a reader connection
	// (preparing may wait for one).
	var st *sql.Stmt
	if len(f.Labels) == 0 && len(f.States) <= keptListStates {
		st, _ = s.prepared(ctx, s.r, q) // on failure, the query below says why
	}
	tx, err := s.r.BeginTx(ctx, nil)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer tx.Rollback()
	var rows *sql.Rows
	if st != nil {
		rows, err = tx.StmtContext(ctx, st).QueryContext(ctx, args...)
	} else {
		rows, err = tx.QueryContext(ctx, q, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	defer rows.Close()
	var (
		out     []*store.Sandbox
		missing map[string]int // id → its place in out
	)
	if f.Limit > 0 {
		out = make([]*store.Sandbox, 0, f.Limit)
	}
	for rows.Next() {
		var id string
		var version int64
		if err := rows.Scan(&id, &version); err != nil {
			return nil, fmt.Errorf("list sandboxes: %w", err)
		}
		sb := s.decoded.get(id, version)
		if sb == nil {
			if missing == nil {
				missing = map[string]int{}
			}
			missing[id] = len(out)
		}
		out = append(out, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	rows.Close()
	if err := s.readDocs(ctx, tx, missing, out); err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// docBatch is how many documents one query of readDocs asks for (SQLite allows 32,766
// parameters).
const docBatch = 500

// readDocs decodes the stored documents of the ids in missing into their places in
// out, and keeps them decoded (out's records are then the kept ones).
func (s *Store) readDocs(ctx context.Context, tx *sql.Tx, missing map[string]int, out []*store.Sandbox) error {
	ids := make([]any, 0, min(len(missing), docBatch))
	flush := func() error {
		if len(ids) == 0 {
			return nil
		}
		rows, err := tx.QueryContext(ctx, "SELECT id, doc FROM sandboxes WHERE id IN (?"+strings.Repeat(", ?", len(ids)-1)+")", ids...)
		if err != nil {
			return err
		}
		defer rows.Close()
		n := 0
		for rows.Next() {
			var id string
			var doc sql.RawBytes
			if err := rows.Scan(&id, &doc); err != nil {
				return err
			}
			sb := new(store.Sandbox)
			if err := json.Unmarshal(doc, sb); err != nil {
				return fmt.Errorf("decode stored sandbox: %w", err)
			}
			if sb.ID != id {
				return fmt.Errorf("stored sandbox %s: its document names %s", id, sb.ID)
			}
			i, ok := missing[id]
			if !ok || out[i] != nil {
				return fmt.Errorf("stored sandbox %s read twice or unasked", id)
			}
			out[i] = sb
			s.decoded.put(sb, len(doc))
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n != len(ids) {
			return fmt.Errorf("%d of %d listed sandboxes vanished while read", len(ids)-n, len(ids))
		}
		ids = ids[:0]
		return nil
	}
	for id := range missing {
		ids = append(ids, id)
		if len(ids) == docBatch {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// listQuery is ListSandboxes's query and its arguments.
func listQuery(f store.SandboxFilter) (string, []any) {
	var (
		where []string
		args  []any
	)
	if f.Owner != "" {
		where = append(where, "owner = ?")
		args = append(args, f.Owner)
	}
	if f.Node != "" {
		where = append(where, "node IN (?, '')")
		args = append(args, f.Node)
	}
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, st := range f.States {
			args = append(args, st)
		}
	}
	for k, v := range f.Labels {
		where = append(where, `EXISTS (SELECT 1 FROM json_each(sandboxes.doc, '$.labels') AS l
			WHERE l.key = ? AND l.type = 'text' AND l.value = ?)`)
		args = append(args, k, v)
	}
	cmp, order := ">", "created_at, id"
	if f.Desc {
		cmp, order = "<", "created_at DESC, id DESC"
	}
	if f.After != nil {
		where = append(where, "(created_at, id) "+cmp+" (?, ?)")
		args = append(args, records.FormatTime(f.After.CreatedAt), f.After.ID)
	}
	q := "SELECT id, version FROM sandboxes"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + order
	if f.Limit > 0 {
		q += " LIMIT ?"
		args = append(args, f.Limit)
	}
	return q, args
}

// UpdateSandbox implements store.Store as a compare-and-swap on version. On success
// it sets sb.Version and sb.UpdatedAt to what was stored.
func (s *Store) UpdateSandbox(ctx context.Context, sb *store.Sandbox) error {
	u, err := newSandboxUpdate(sb)
	if err != nil {
		return err
	}
	if err := s.inTx(ctx, u.write); err != nil {
		return err
	}
	u.done()
	return nil
}

// sandboxUpdate is one compare-and-swap of a sandbox record, encoded ahead of the
// transaction that writes it.
type sandboxUpdate struct {
	sb, c *store.Sandbox // the caller's record, and what is stored
	doc   string
}

func newSandboxUpdate(sb *store.Sandbox) (*sandboxUpdate, error) {
	c := *sb
	c.Version = sb.Version + 1
	c.UpdatedAt = time.Now().UTC()
	doc, err := records.EncodeSandbox(&c)
	if err != nil {
		return nil, err
	}
	return &sandboxUpdate{sb: sb, c: &c, doc: doc}, nil
}

// write makes the update in tx, or fails with ErrVersionConflict or ErrNotFound.
func (u *sandboxUpdate) write(ctx context.Context, tx *sql.Tx) error {
	sb, c := u.sb, u.c
	res, err := tx.ExecContext(ctx,
		`UPDATE sandboxes SET owner = ?, name = ?, state = ?, version = ?, created_at = ?, doc = ?, node = ?, memory = ?, cpu = ?
		WHERE id = ? AND version = ?`,
		c.Owner, c.Name, c.State, c.Version, records.FormatTime(c.CreatedAt), u.doc, c.Node, c.Limits.Memory, c.Limits.CPU, sb.ID, sb.Version)
	if err != nil {
		return sandboxConflict(err, sb, "update")
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
	}
	if n == 0 {
		var stored int64
		err := tx.QueryRowContext(ctx, `SELECT version FROM sandboxes WHERE id = ?`, sb.ID).Scan(&stored)
		if errors.Is(err, sql.ErrNoRows) {
			return errdefs.NotFound("sandbox %s not found", sb.ID)
		}
		if err != nil {
			return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
		}
		return errdefs.VersionConflict("sandbox %s is at version %d, not %d", sb.ID, stored, sb.Version)
	}
	return nil
}

// done gives the caller's record the version and update time stored, once committed.
func (u *sandboxUpdate) done() { u.sb.Version, u.sb.UpdatedAt = u.c.Version, u.c.UpdatedAt }

// DeleteSandbox implements store.Store. Deleting a sandbox that is not there is
// ErrNotFound.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("delete sandbox %s: %w", id, err)
	}
	if n == 0 {
		return errdefs.NotFound("sandbox %s not found", id)
	}
	s.decoded.forget(id)
	return nil
}

// ReservedByNode implements store.Store.
func (s *Store) ReservedByNode(ctx context.Context, states []store.State, except, nodes []string) (map[string]store.Resources, error) {
	if len(states) == 0 || (nodes != nil && len(nodes) == 0) {
		return map[string]store.Resources{}, nil
	}
	var args []any
	for _, st := range states {
		args = append(args, string(st))
	}
	q := `SELECT node, count(*), sum(memory), sum(cpu) FROM sandboxes WHERE state IN (?` + strings.Repeat(", ?", len(states)-1) + `)`
	if len(except) > 0 {
		q += ` AND id NOT IN (?` + strings.Repeat(", ?", len(except)-1) + `)`
		for _, id := range except {
			args = append(args, id)
		}
	}
	if nodes != nil {
		q += ` AND node IN (?` + strings.Repeat(", ?", len(nodes)-1) + `)`
		for _, n := range nodes {
			args = append(args, n)
		}
	}
	rows, err := s.r.QueryContext(ctx, q+` GROUP BY node`, args...)
	if err != nil {
		return nil, fmt.Errorf("sum reservations: %w", err)
	}
	defer rows.Close()
	return records.ScanReserved(rows)
}
