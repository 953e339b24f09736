// Package records encodes store.Store's records the way the SQL implementations keep
// them (store/sqlite, store/postgres): times as fixed-width UTC text, sandboxes as JSON
// documents, operations, events and audit records as columns. It owns that encoding
// and nothing else: no SQL dialect, no connection, no rule about what a record means.
package records

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// Scanner is what a row of database/sql and of pgx have in common.
type Scanner interface {
	Scan(dest ...any) error
}

// timeLayout is fixed-width, so stored times sort as text (bytewise) in the order
// they compare, and keep their nanoseconds.
const timeLayout = "2006-01-02T15:04:05.000000000Z"

// FormatTime returns t as stored.
func FormatTime(t time.Time) string { return t.UTC().Format(timeLayout) }

// ParseTime reads a stored time.
func ParseTime(s string) (time.Time, error) {
	t, err := time.Parse(timeLayout, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("stored time %q: %w", s, err)
	}
	return t, nil
}

// Text returns s as a text column keeps it: valid UTF-8 without NUL (PostgreSQL's text
// refuses both), each NUL and each run of invalid bytes replaced by U+FFFD, as
// encoding/json does in the stored documents. Free text that may come from outside the daemon (an error
// a sandbox's agent reported, an event's cause) goes through it, so every store keeps
// it alike and none refuses the record.
func Text(s string) string {
	if utf8.ValidString(s) && !strings.Contains(s, "\x00") {
		return s
	}
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// NullJSON returns raw for storage as a nullable text column (nil for NULL when
// empty), or an invalid-argument error naming field when it is not valid JSON.
func NullJSON(field string, raw []byte) (any, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	if !json.Valid(raw) {
		return nil, errdefs.Invalid("%s is not valid JSON", field)
	}
	return string(raw), nil
}

// RawJSON turns a stored nullable text back into a json.RawMessage (nil for NULL).
func RawJSON(s sql.NullString) []byte {
	if !s.Valid || s.String == "" {
		return nil
	}
	return []byte(s.String)
}

// EncodeNode returns n as the stored JSON document, its times in UTC.
func EncodeNode(n *store.Node) (string, error) {
	c := *n
	c.LeaseExpires, c.StartedAt, c.RenewedAt = c.LeaseExpires.UTC(), c.StartedAt.UTC(), c.RenewedAt.UTC()
	b, err := json.Marshal(&c)
	return string(b), err
}

// EncodeSandbox returns sb as the stored JSON document, its times in UTC.
func EncodeSandbox(sb *store.Sandbox) (string, error) {
	c := *sb
	c.CreatedAt = c.CreatedAt.UTC()
	c.UpdatedAt = c.UpdatedAt.UTC()
	c.LastActivity = c.LastActivity.UTC()
	c.ExpiresAt = c.ExpiresAt.UTC()
	b, err := json.Marshal(&c)
	if err != nil {
		return "", errdefs.Invalid("sandbox %s cannot be stored: %v", sb.ID, err)
	}
	return string(b), nil
}

// ScanSandbox reads a row of one column, a stored sandbox document.
func ScanSandbox(row Scanner) (*store.Sandbox, error) {
	var doc string
	if err := row.Scan(&doc); err != nil {
		return nil, err
	}
	sb := new(store.Sandbox)
	if err := json.Unmarshal([]byte(doc), sb); err != nil {
		return nil, fmt.Errorf("decode stored sandbox: %w", err)
	}
	return sb, nil
}

// OperationColumns are the columns of an operation, in the order of OperationArgs and
// ScanOperation.
const OperationColumns = `id, kind, owner, sandbox_id, state, idempotency_key, request_hash,
	result, error_code, error_message, created_at, updated_at`

// OperationArgs returns op's values in the order of OperationColumns.
func OperationArgs(op *store.Operation) ([]any, error) {
	result, err := NullJSON("operation result", op.Result)
	if err != nil {
		return nil, err
	}
	return []any{op.ID, op.Kind, op.Owner, op.SandboxID, op.State, op.IdempotencyKey, op.RequestHash,
		result, Text(op.ErrorCode), Text(op.ErrorMessage), FormatTime(op.CreatedAt), FormatTime(op.UpdatedAt)}, nil
}

// ScanOperation reads a row of OperationColumns.
func ScanOperation(row Scanner) (*store.Operation, error) {
	var (
		op               store.Operation
		result           sql.NullString
		created, updated string
	)
	err := row.Scan(&op.ID, &op.Kind, &op.Owner, &op.SandboxID, &op.State, &op.IdempotencyKey,
		&op.RequestHash, &result, &op.ErrorCode, &op.ErrorMessage, &created, &updated)
	if err != nil {
		return nil, err
	}
	op.Result = RawJSON(result)
	if op.CreatedAt, err = ParseTime(created); err != nil {
		return nil, err
	}
	if op.UpdatedAt, err = ParseTime(updated); err != nil {
		return nil, err
	}
	return &op, nil
}

// EventColumns are the columns of a stored event, in the order of ScanEvent; the
// store assigns seq, the rest (NewEventColumns) are EventArgs.
const (
	EventColumns    = `seq, ` + NewEventColumns
	NewEventColumns = `sandbox_id, generation, type, cause, data, time`
)

// EventArgs returns the values of each of evs in the order of NewEventColumns, or an
// invalid-argument error when one's data is not valid JSON.
func EventArgs(evs []*store.Event) ([][]any, error) {
	out := make([][]any, len(evs))
	for i, ev := range evs {
		data, err := NullJSON("event data", ev.Data)
		if err != nil {
			return nil, err
		}
		out[i] = []any{Text(ev.SandboxID), ev.Generation, Text(ev.Type), Text(ev.Cause), data, FormatTime(ev.Time)}
	}
	return out, nil
}

// ScanEvent reads a row of EventColumns.
func ScanEvent(row Scanner) (*store.Event, error) {
	var (
		ev   store.Event
		data sql.NullString
		t    string
	)
	err := row.Scan(&ev.Seq, &ev.SandboxID, &ev.Generation, &ev.Type, &ev.Cause, &data, &t)
	if err != nil {
		return nil, err
	}
	ev.Data = RawJSON(data)
	if ev.Time, err = ParseTime(t); err != nil {
		return nil, err
	}
	return &ev, nil
}

// AuditColumns are the columns of an audit record, in the order of AuditArgs and
// ScanAudit.
const AuditColumns = `seq, time, identity, action, sandbox, doc, prev, hash`

// AuditHead reads the audit log's head, as seq and hash: its newest record, or its
// anchor when it has none (no row: a log never written). One statement, so one
// snapshot: a prune that runs meanwhile is seen whole or not at all.
const AuditHead = `SELECT seq, hash FROM (SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1) AS newest
	UNION ALL SELECT seq, hash FROM audit_anchor WHERE id = 1
	ORDER BY seq DESC LIMIT 1`

// AuditArgs returns r's values in the order of AuditColumns; doc goes as docValue (the
// column type each implementation keeps it in).
func AuditArgs(r *store.AuditRecord, docValue any) []any {
	return []any{r.Seq, FormatTime(r.Time), r.Identity, r.Action, r.Sandbox, docValue, r.Prev, r.Hash}
}

// ScanAudit reads a row of AuditColumns.
func ScanAudit(row Scanner) (*store.AuditRecord, error) {
	var r store.AuditRecord
	var t string
	if err := row.Scan(&r.Seq, &t, &r.Identity, &r.Action, &r.Sandbox, &r.Doc, &r.Prev, &r.Hash); err != nil {
		return nil, err
	}
	var err error
	r.Time, err = ParseTime(t)
	return &r, err
}

// SnapshotColumns are the columns of a snapshot record, in the order of SnapshotArgs
// and ScanSnapshot.
const SnapshotColumns = `id, owner, sandbox_id, node, created_at`

// SnapshotArgs returns r's values in the order of SnapshotColumns.
func SnapshotArgs(r *store.SnapshotRecord) []any {
	return []any{r.ID, r.Owner, r.SandboxID, r.Node, FormatTime(r.CreatedAt)}
}

// ScanSnapshot reads a row of SnapshotColumns.
func ScanSnapshot(row Scanner) (*store.SnapshotRecord, error) {
	var r store.SnapshotRecord
	var created string
	if err := row.Scan(&r.ID, &r.Owner, &r.SandboxID, &r.Node, &created); err != nil {
		return nil, err
	}
	t, err := ParseTime(created)
	if err != nil {
		return nil, fmt.Errorf("decode stored snapshot %s: %w", r.ID, err)
	}
	r.CreatedAt = t
	return &r, nil
}

// ClusterCAColumns are the columns of the cluster CA record, in the order of
// ClusterCAArgs and ScanClusterCA.
const ClusterCAColumns = `cert_pem, sealed_key, salt, verifier, created_at`

// ClusterCAArgs returns r's values in the order of ClusterCAColumns.
func ClusterCAArgs(r *store.ClusterCARecord) []any {
	return []any{r.CertPEM, r.SealedKey, r.Salt, r.Verifier, FormatTime(r.CreatedAt)}
}

// ScanClusterCA reads a row of ClusterCAColumns.
func ScanClusterCA(row Scanner) (*store.ClusterCARecord, error) {
	var r store.ClusterCARecord
	var created string
	if err := row.Scan(&r.CertPEM, &r.SealedKey, &r.Salt, &r.Verifier, &created); err != nil {
		return nil, err
	}
	t, err := ParseTime(created)
	if err != nil {
		return nil, fmt.Errorf("decode stored cluster CA: %w", err)
	}
	r.CreatedAt = t
	return &r, nil
}

// Rows are the rows of a query, as database/sql and pgx both hand them out.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// ScanReserved reads ReservedByNode's rows (node, count, memory, cpu) into its answer.
func ScanReserved(rows Rows) (map[string]store.Resources, error) {
	out := map[string]store.Resources{}
	for rows.Next() {
		var node string
		var r store.Resources
		if err := rows.Scan(&node, &r.Sandboxes, &r.Memory, &r.CPUs); err != nil {
			return nil, fmt.Errorf("sum reservations: %w", err)
		}
		out[node] = r
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sum reservations: %w", err)
	}
	return out, nil
}

// VolumeColumns are the columns of a volume record, in the order of VolumeArgs and
// ScanVolume; doc holds the whole record.
const VolumeColumns = `id, kind, owner, name, version, doc`

// VolumeArgs returns v's values in the order of VolumeColumns.
func VolumeArgs(v *store.Volume) ([]any, error) {
	c := *v
	c.CreatedAt, c.UpdatedAt = c.CreatedAt.UTC(), c.UpdatedAt.UTC()
	b, err := json.Marshal(&c)
	if err != nil {
		return nil, errdefs.Invalid("volume %s cannot be stored: %v", v.ID, err)
	}
	return []any{v.ID, v.Kind, v.Owner, v.Name, v.Version, string(b)}, nil
}

// ScanVolume reads a row of VolumeColumns.
func ScanVolume(row Scanner) (*store.Volume, error) {
	var id, kind, owner, name, doc string
	var version int64
	if err := row.Scan(&id, &kind, &owner, &name, &version, &doc); err != nil {
		return nil, err
	}
	var v store.Volume
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		return nil, fmt.Errorf("decode stored volume %s: %w", id, err)
	}
	v.ID, v.Kind, v.Owner, v.Name, v.Version = id, kind, owner, name, version
	return &v, nil
}
