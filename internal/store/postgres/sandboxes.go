package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/records"
)

// sandboxConflict turns a unique violation on the sandboxes table into
// ErrAlreadyExists; any other error is returned wrapped with what was being done.
func sandboxConflict(err error, sb *store.Sandbox, doing string) error {
	switch code, constraint := pgCode(err); {
	case code == uniqueViolation && constraint == "sandboxes_pkey":
		return errdefs.Exists("sandbox %s already exists", sb.ID)
	case code == uniqueViolation:
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
	_, err = s.pool.Exec(ctx,
		`INSERT INTO sandboxes (id, owner, name, state, version, created_at, doc, node, memory, cpu) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
		c.ID, c.Owner, c.Name, string(c.State), c.Version, records.FormatTime(c.CreatedAt), doc, c.Node, c.Limits.Memory, c.Limits.CPU)
	if err != nil {
		return sandboxConflict(err, sb, "create")
	}
	sb.Version = c.Version
	return nil
}

// getSandbox reads the one sandbox q selects; none is ErrNotFound with notFound's text.
func (s *Store) getSandbox(ctx context.Context, notFound error, q string, a ...any) (*store.Sandbox, error) {
	sb, err := records.ScanSandbox(s.pool.QueryRow(ctx, q, a...))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, notFound
	}
	return sb, err
}

// GetSandbox implements store.Store.
func (s *Store) GetSandbox(ctx context.Context, id string) (*store.Sandbox, error) {
	sb, err := s.getSandbox(ctx, errdefs.NotFound("sandbox %s not found", id), `SELECT doc FROM sandboxes WHERE id = $1`, id)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("get sandbox %s: %w", id, err)
	}
	return sb, err
}

// GetSandboxByName implements store.Store: the live one first, then the terminated
// one created last.
func (s *Store) GetSandboxByName(ctx context.Context, owner, name string) (*store.Sandbox, error) {
	const q = `SELECT doc FROM sandboxes WHERE owner = $1 AND name = $2
		ORDER BY state = $3 ASC, created_at DESC, ord DESC LIMIT 1`
	sb, err := s.getSandbox(ctx, errdefs.NotFound("no sandbox named %q for owner %q", name, owner), q, owner, name, string(store.Terminated))
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return nil, fmt.Errorf("get sandbox %q of %q: %w", name, owner, err)
	}
	return sb, err
}

// ListSandboxes implements store.Store. Labels are matched in SQL against the labels
// object of the stored document, one condition per pair.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]*store.Sandbox, error) {
	var (
		where []string
		a     args
	)
	if f.Owner != "" {
		where = append(where, "owner = "+a.add(f.Owner))
	}
	if f.Node != "" {
		where = append(where, "node IN ("+a.add(f.Node)+", '')")
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, st := range f.States {
			states[i] = string(st)
		}
		where = append(where, "state = ANY("+a.add(states)+")")
	}
	for k, v := range f.Labels {
		where = append(where, "(doc::json -> 'labels' ->> "+a.add(k)+") = "+a.add(v))
	}
	cmp, order := ">", "created_at, id"
	if f.Desc {
		cmp, order = "<", "created_at DESC, id DESC"
	}
	if f.After != nil {
		where = append(where, "(created_at, id) "+cmp+" ("+a.add(records.FormatTime(f.After.CreatedAt))+", "+a.add(f.After.ID)+")")
	}
	q := "SELECT doc FROM sandboxes"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + order
	if f.Limit > 0 {
		q += " LIMIT " + a.add(f.Limit)
	}
	out, err := queryRows(ctx, s, records.ScanSandbox, q, a...)
	if err != nil {
		return nil, fmt.Errorf("list sandboxes: %w", err)
	}
	return out, nil
}

// UpdateSandbox implements store.Store as a compare-and-swap on version: the UPDATE
// locks the row, and one that waited for another writer re-checks the version on the
// row that writer left. On success it sets sb.Version and sb.UpdatedAt to what was
// stored.
func (s *Store) UpdateSandbox(ctx context.Context, sb *store.Sandbox) error {
	c := *sb
	c.Version = sb.Version + 1
	c.UpdatedAt = time.Now().UTC()
	doc, err := records.EncodeSandbox(&c)
	if err != nil {
		return err
	}
	tag, err := s.pool.Exec(ctx,
		`UPDATE sandboxes SET owner = $1, name = $2, state = $3, version = $4, created_at = $5, doc = $6, node = $7, memory = $8, cpu = $9
		WHERE id = $10 AND version = $11`,
		c.Owner, c.Name, string(c.State), c.Version, records.FormatTime(c.CreatedAt), doc, c.Node, c.Limits.Memory, c.Limits.CPU, sb.ID, sb.Version)
	if err != nil {
		return sandboxConflict(err, sb, "update")
	}
	if tag.RowsAffected() == 0 {
		var stored int64
		err := s.pool.QueryRow(ctx, `SELECT version FROM sandboxes WHERE id = $1`, sb.ID).Scan(&stored)
		if errors.Is(err, pgx.ErrNoRows) {
			return errdefs.NotFound("sandbox %s not found", sb.ID)
		}
		if err != nil {
			return fmt.Errorf("update sandbox %s: %w", sb.ID, err)
		}
		return errdefs.VersionConflict("sandbox %s is at version %d, not %d", sb.ID, stored, sb.Version)
	}
	sb.Version, sb.UpdatedAt = c.Version, c.UpdatedAt
	return nil
}

// DeleteSandbox implements store.Store. Deleting a sandbox that is not there is
// ErrNotFound.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	return s.execOne(ctx, "sandbox "+id, `DELETE FROM sandboxes WHERE id = $1`, id)
}

// queryRows runs q and reads each row it returns with scan.
func queryRows[T any](ctx context.Context, s *Store, scan func(records.Scanner) (*T, error), q string, a ...any) ([]*T, error) {
	rows, err := s.pool.Query(ctx, q, a...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (*T, error) { return scan(r) })
}

// ReservedByNode implements store.Store.
func (s *Store) ReservedByNode(ctx context.Context, states []store.State, except, nodes []string) (map[string]store.Resources, error) {
	names := make([]string, len(states))
	for i, st := range states {
		names[i] = string(st)
	}
	if except == nil {
		except = []string{}
	}
	rows, err := s.pool.Query(ctx, `SELECT node, count(*), sum(memory)::bigint, sum(cpu) FROM sandboxes
		WHERE state = ANY($1) AND NOT (id = ANY($2)) AND ($3::text[] IS NULL OR node = ANY($3)) GROUP BY node`, names, except, nodes)
	if err != nil {
		return nil, fmt.Errorf("sum reservations: %w", err)
	}
	defer rows.Close()
	return records.ScanReserved(rows)
}
