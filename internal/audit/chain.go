package audit

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/airlockhq/airlock/internal/clip"
	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// The hash-chained log of who did what. Every API request and every exec becomes an
// Entry; each stored record's hash (an HMAC-SHA256 under the node's audit key, a file
// outside the database) covers its columns, its body and the hash of the record before
// it, so Verify finds the first record that was edited, inserted or deleted, and one
// who can write the database but not read the key cannot forge a replacement. Each append
// is numbered and chained inside the store's transaction, after the newest record any
// node wrote, so several nodes on one store write one chain (under one key). Appends are
// synchronous: a record
// that cannot be written makes the log unhealthy, and the HTTP edge then refuses
// mutating calls until a write succeeds again, rather than act without a record.

// Entry is one audit record's body.
type Entry struct {
	Time     time.Time      `json:"time"`
	Identity string         `json:"identity"`
	Action   string         `json:"action"` // a route ("POST /v1/sandboxes/{ref}/exec") or "exec"
	Resource string         `json:"resource,omitempty"`
	Sandbox  string         `json:"sandbox,omitempty"`
	Result   string         `json:"result"`
	Source   string         `json:"source,omitempty"`
	Detail   map[string]any `json:"detail,omitempty"`
	// Data is a stored event's data, as it is (egress decisions, DNS answers).
	Data json.RawMessage `json:"data,omitempty"`
}

// Chain appends entries to the hash-chained log.
type Chain struct {
	st  store.Store
	key []byte
	now func() time.Time

	mu     sync.Mutex
	seq    int64  // the newest record this chain wrote or started from
	last   string // its hash
	failed error
}

// OpenChain continues the log in st, chained under key, from its newest record (or its
// anchor).
func OpenChain(ctx context.Context, st store.Store, key []byte) (*Chain, error) {
	if len(key) < 32 {
		return nil, errors.New("audit log: the key must be at least 32 bytes")
	}
	c := &Chain{st: st, key: key, now: time.Now}
	last, err := st.LastAudit(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	if last != nil {
		c.seq, c.last = last.Seq, last.Hash
		return c, nil
	}
	a, err := st.AuditAnchor(ctx)
	if err != nil {
		return nil, fmt.Errorf("audit log: %w", err)
	}
	c.seq, c.last = a.Seq, a.Hash
	return c, nil
}

// hashOf is a record's hash: HMAC-SHA256 under key over the previous hash and every
// stored field.
func hashOf(key []byte, prev string, seq int64, t time.Time, identity, action, sandbox string, doc []byte) string {
	h := hmac.New(sha256.New, key)
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(seq))
	h.Write(n[:])
	for _, f := range []string{prev, t.UTC().Format(time.RFC3339Nano), identity, action, sandbox} {
		binary.BigEndian.PutUint64(n[:], uint64(len(f)))
		h.Write(n[:])
		h.Write([]byte(f))
	}
	h.Write(doc)
	return hex.EncodeToString(h.Sum(nil))
}

// Append records e. An error leaves the log unhealthy until an append succeeds. Under
// a ctx that holds records (Hold), e is written by Release instead.
func (c *Chain) Append(ctx context.Context, e Entry) error {
	if c.hold(ctx, e) {
		return nil
	}
	return c.AppendBatch(ctx, []Entry{e})
}

// AppendBatch records entries in order, in one write.
func (c *Chain) AppendBatch(ctx context.Context, entries []Entry) error {
	docs := make([][]byte, len(entries))
	for i := range entries {
		e := &entries[i]
		if e.Time.IsZero() {
			e.Time = c.now()
		}
		e.Time = e.Time.UTC().Round(time.Microsecond)
		doc, err := json.Marshal(e)
		if err != nil {
			return err
		}
		docs[i] = doc
	}
	recs := make([]*store.AuditRecord, len(entries))
	for i, e := range entries {
		recs[i] = &store.AuditRecord{Time: e.Time, Identity: e.Identity, Action: e.Action, Sandbox: e.Sandbox, Doc: docs[i]}
	}
	// The store reads the head inside its transaction, so every node writing the same
	// store continues one chain, and appends of this node's requests sent at once are
	// chained in the order the store commits them: they are not held to one at a time
	// here, so the store can commit them together.
	err := c.st.AppendAudit(context.WithoutCancel(ctx), recs, c.seal)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.failed = err
		return fmt.Errorf("audit log: %w", err)
	}
	if last := recs[len(recs)-1]; last.Seq > c.seq {
		c.seq, c.last = last.Seq, last.Hash
	}
	c.failed = nil
	return nil
}

// seal numbers and hashes recs to follow head.
func (c *Chain) seal(head store.AuditAnchor, recs []*store.AuditRecord) {
	seq, prev := head.Seq, head.Hash
	for _, r := range recs {
		seq++
		r.Seq, r.Prev = seq, prev
		r.Hash = hashOf(c.key, r.Prev, r.Seq, r.Time, r.Identity, r.Action, r.Sandbox, r.Doc)
		prev = r.Hash
	}
}

// Healthy says whether the log can be written; a mutating call is refused while not.
// After a failed append it tries again, with a record saying the log could not be
// written and why, so that the first call after the cause is gone (a full disk that
// was freed) goes through rather than being refused once more.
func (c *Chain) Healthy() error {
	c.mu.Lock()
	failed := c.failed
	c.mu.Unlock()
	if failed == nil {
		return nil
	}
	err := c.Append(context.Background(), Entry{Identity: "node", Action: "audit.resumed", Result: "ok",
		Detail: map[string]any{"after": clip.Text(failed.Error(), 1024)}})
	if err != nil {
		return errdefs.Unavailable("the audit log cannot be written (%v); calls that change anything are refused until it can", failed)
	}
	return nil
}

// Prune removes the records older than before (zero: no age limit) and all but the
// newest keep (0: no count limit), keeping the chain verifiable from an anchor (the last
// removed record's seq and hash).
func (c *Chain) Prune(ctx context.Context, before time.Time, keep int64) error {
	c.mu.Lock()
	head := c.seq
	c.mu.Unlock()
	end := int64(0) // the first record kept
	if keep > 0 {
		end = head + 1 - keep
	}
	if !before.IsZero() {
		first, err := c.st.ListAudit(ctx, store.AuditFilter{Since: before, Limit: 1})
		if err != nil {
			return err
		}
		newer := head + 1 // none is newer: all go
		if len(first) > 0 {
			newer = first[0].Seq
		}
		end = max(end, newer)
	}
	if end <= 1 {
		return nil
	}
	return c.st.PruneAudit(ctx, end)
}

// VerifyResult is what Verify found.
type VerifyResult struct {
	Records int64  `json:"records"`
	OK      bool   `json:"ok"`
	Seq     int64  `json:"seq,omitempty"` // the first record at fault
	Problem string `json:"problem,omitempty"`

	last int64 // the seq of the newest record walked
}

// Verify checks the log up to the newest record this chain wrote: records removed from
// its end are found too.
func (c *Chain) Verify(ctx context.Context) (VerifyResult, error) {
	c.mu.Lock()
	head := c.seq
	c.mu.Unlock()
	res, err := Verify(ctx, c.st, c.key)
	if err == nil && res.OK && res.last < head {
		res.OK, res.Seq = false, res.last+1
		res.Problem = fmt.Sprintf("records %d to %d are missing: deleted from the end of the log", res.last+1, head)
	}
	return res, err
}

// Verify walks the whole log from its anchor and reports the first record that was
// edited (its hash no longer matches), inserted or reordered (it does not follow the
// record before), or deleted (a gap in the sequence).
func Verify(ctx context.Context, st store.Store, key []byte) (VerifyResult, error) {
	a, err := st.AuditAnchor(ctx)
	if err != nil {
		return VerifyResult{}, err
	}
	var res VerifyResult
	seq, prev := a.Seq, a.Hash
	for {
		page, err := st.ListAudit(ctx, store.AuditFilter{After: seq, Limit: 10000})
		if err != nil {
			return res, err
		}
		for _, r := range page {
			switch {
			case r.Seq != seq+1:
				res.Seq, res.Problem = seq+1, fmt.Sprintf("record %d is missing: deleted (the next one is %d)", seq+1, r.Seq)
			case hashOf(key, r.Prev, r.Seq, r.Time, r.Identity, r.Action, r.Sandbox, r.Doc) != r.Hash:
				res.Seq, res.Problem = r.Seq, fmt.Sprintf("record %d was edited or inserted: its contents do not match its hash", r.Seq)
			case r.Prev != prev:
				res.Seq, res.Problem = r.Seq, fmt.Sprintf("record %d does not follow record %d: inserted, replaced or reordered", r.Seq, seq)
			}
			if res.Problem != "" {
				return res, nil
			}
			seq, prev = r.Seq, r.Hash
			res.Records++
		}
		if len(page) < 10000 {
			res.OK, res.last = true, seq
			return res, nil
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
	}
}

// LoadKey reads the audit key at path, making a new random one (0600) if there is none.
func LoadKey(path string) ([]byte, error) {
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		rand.Read(key)
		// Whole or not at all: a key cut short by a crash would refuse every later start.
		if err := durable.WriteFile(path, key, 0o600); err != nil {
			return nil, fmt.Errorf("audit key: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return nil, fmt.Errorf("audit key: %w", err)
	}
	if len(key) < 32 {
		return nil, fmt.Errorf("audit key %s is damaged: %d bytes, want 32", path, len(key))
	}
	return key, nil
}

// List returns matching records in order.
func (c *Chain) List(ctx context.Context, f store.AuditFilter) ([]*store.AuditRecord, error) {
	return c.st.ListAudit(ctx, f)
}

// The log's records and filter, named here so that callers (the HTTP edge) need not
// import the store.
type (
	LogRecord = store.AuditRecord
	LogFilter = store.AuditFilter
)

// MaxField bounds each text field a caller or a sandbox puts into an audit record:
// longer than any host name (253) or reason the node writes itself.
const MaxField = 512

// Clip cuts s to MaxField bytes, on a character boundary, and says how long it was.
func Clip(s string) string { return clip.Text(s, MaxField) }

// ClipList clips each of list and keeps at most 32 of them, saying how many it left out.
func ClipList(list []string) []string {
	out := make([]string, 0, min(len(list), 33))
	for i, s := range list {
		if i == 32 {
			out = append(out, fmt.Sprintf("… (%d more)", len(list)-32))
			break
		}
		out = append(out, Clip(s))
	}
	return out
}
