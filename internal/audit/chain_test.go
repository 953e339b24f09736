package audit

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// TestChainFindsTampering edits, deletes and inserts rows of the stored log behind the
// chain's back, and expects Verify to name the first record at fault each time.
func TestChainFindsTampering(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name, sql string
		seq       int64
		want      string
	}{
		{"edited body", `UPDATE audit_log SET doc = replace(doc, '"ok"', '"denied"') WHERE seq = 5`, 5, "edited"},
		{"replaced", `UPDATE audit_log SET doc = (SELECT doc FROM audit_log WHERE seq = 2), hash = (SELECT hash FROM audit_log WHERE seq = 2), prev = (SELECT prev FROM audit_log WHERE seq = 2) WHERE seq = 8`, 8, "edited or inserted"},
		{"edited column", `UPDATE audit_log SET identity = 'mallory' WHERE seq = 7`, 7, "edited"},
		{"deleted", `DELETE FROM audit_log WHERE seq = 4`, 4, "deleted"},
		{"deleted at the end", `DELETE FROM audit_log WHERE seq >= 9`, 9, "deleted from the end"},
		{"inserted", `UPDATE audit_log SET seq = seq + 1 WHERE seq >= 6;
			INSERT INTO audit_log SELECT 6, time, identity, action, sandbox, doc, prev, hash FROM audit_log WHERE seq = 3`, 6, "edited or inserted"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			st, err := sqlite.Open(filepath.Join(dir, "db"))
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			c, err := OpenChain(ctx, st, testKey)
			if err != nil {
				t.Fatal(err)
			}
			for i := range 10 {
				if err := c.Append(ctx, Entry{Identity: "alice", Action: "exec", Sandbox: "sb_1", Result: "ok", Detail: map[string]any{"i": i}}); err != nil {
					t.Fatal(err)
				}
			}
			if res, err := c.Verify(ctx); err != nil || !res.OK || res.Records != 10 {
				t.Fatalf("untouched log: %+v, %v", res, err)
			}
			db, err := sql.Open("sqlite", filepath.Join(dir, "db"))
			if err != nil {
				t.Fatal(err)
			}
			// Stored seqs shift one at a time so the primary key holds during the move.
			stmts := strings.Split(tc.sql, ";")
			for _, q := range stmts {
				if strings.Contains(q, "seq = seq + 1") {
					for s := 10; s >= 6; s-- {
						if _, err := db.Exec(`UPDATE audit_log SET seq = seq + 1 WHERE seq = ?`, s); err != nil {
							t.Fatal(err)
						}
					}
					continue
				}
				if _, err := db.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			db.Close()
			res, err := c.Verify(ctx)
			if err != nil || res.OK || res.Seq != tc.seq || !strings.Contains(res.Problem, tc.want) {
				t.Errorf("after the tampering: %+v, %v; want record %d named, %q", res, err, tc.seq, tc.want)
			}
		})
	}
}

// Pruning keeps the rest of the log verifiable from its anchor.
func TestChainPruneKeepsItVerifiable(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, _ := OpenChain(ctx, st, testKey)
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 20 {
		c.Append(ctx, Entry{Time: start.Add(time.Duration(i) * time.Hour), Identity: "bob", Action: "exec", Result: "ok"})
	}
	if err := c.Prune(ctx, start.Add(12*time.Hour), 0); err != nil {
		t.Fatal(err)
	}
	res, err := c.Verify(ctx)
	if err != nil || !res.OK || res.Records != 8 {
		t.Fatalf("after pruning 12 of 20: %+v, %v; want 8 records, verified from the anchor", res, err)
	}
	c2, _ := OpenChain(ctx, st, testKey) // a restart continues the chain
	c2.Append(ctx, Entry{Identity: "bob", Action: "exec", Result: "ok"})
	if res, err := c2.Verify(ctx); err != nil || !res.OK || res.Records != 9 {
		t.Fatalf("after a restart and one more record: %+v, %v", res, err)
	}
	// The count bound keeps the newest: 9 records, 5 kept.
	if err := c2.Prune(ctx, time.Time{}, 5); err != nil {
		t.Fatal(err)
	}
	res, err = c2.Verify(ctx)
	if recs, _ := st.ListAudit(ctx, LogFilter{}); err != nil || !res.OK || res.Records != 5 || len(recs) != 5 || recs[4].Seq != 21 {
		t.Fatalf("after keeping 5: %+v, %v", res, err)
	}
}

var testKey = []byte("0123456789abcdef0123456789abcdef")

// The egress decisions and DNS answers the writer stores are chained too.
func TestWriterChainsItsRecords(t *testing.T) {
	ctx := context.Background()
	st := openStore(t)
	c, err := OpenChain(ctx, st, testKey)
	if err != nil {
		t.Fatal(err)
	}
	w := New(Config{Rate: 1e9, Burst: 1e9, Queue: 100}, st, Options{})
	w.SetChain(c)
	for i := range 5 {
		w.Add(denied("sb_a", i))
	}
	w.Add(Record{Sandbox: "sb_a", Generation: 1, Type: "dns", Allowed: true, Data: map[string]any{"name": "pypi.org"}})
	w.Close()
	recs, err := st.ListAudit(ctx, LogFilter{Sandbox: "sb_a"})
	if err != nil || len(recs) != 6 {
		t.Fatalf("chained records of sb_a: %d, %v; want 6", len(recs), err)
	}
	if recs[0].Action != "egress" || !strings.Contains(string(recs[0].Doc), `"deny"`) || !strings.Contains(string(recs[0].Doc), "denied-0.example") {
		t.Errorf("first record: %s %s", recs[0].Action, recs[0].Doc)
	}
	if res, err := c.Verify(ctx); err != nil || !res.OK || res.Records != 6 {
		t.Errorf("verify: %+v, %v", res, err)
	}
}

// failingStore fails every audit append while fail is set, as a full disk does.
type failingStore struct {
	store.Store
	fail bool
}

func (f *failingStore) AppendAudit(ctx context.Context, recs []*store.AuditRecord, seal store.AuditSeal) error {
	if f.fail {
		return errors.New("database or disk is full")
	}
	return f.Store.AppendAudit(ctx, recs, seal)
}

// TestChainHealsOnceItCanWrite: a log that could not be written refuses mutating calls
// while it still cannot, and lets the first one through once it can, having recorded
// why it was unwritable; the chain stays verifiable.
func TestChainHealsOnceItCanWrite(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	fs := &failingStore{Store: st}
	c, err := OpenChain(ctx, fs, testKey)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Append(ctx, Entry{Identity: "alice", Action: "before", Result: "ok"}); err != nil {
		t.Fatal(err)
	}
	fs.fail = true
	if err := c.Append(ctx, Entry{Identity: "alice", Action: "lost", Result: "ok"}); err == nil {
		t.Fatal("append to a failing store succeeded")
	}
	if err := c.Healthy(); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("Healthy while the store still fails = %v; want unavailable", err)
	}
	fs.fail = false
	if err := c.Healthy(); err != nil {
		t.Errorf("Healthy once the store can be written = %v; want nil", err)
	}
	recs, err := c.List(ctx, store.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(recs); n != 2 || recs[1].Action != "audit.resumed" || !strings.Contains(string(recs[1].Doc), "disk is full") {
		t.Errorf("records = %d, last %+v; want the first append and a record of why the log was unwritable", n, recs[n-1])
	}
	if res, err := c.Verify(ctx); err != nil || !res.OK {
		t.Errorf("Verify = %+v, %v; want ok", res, err)
	}
}

// Appends sent at once (the requests of a burst, whose records the store commits
// together) make one chain: every record is there, numbered without a gap, and the
// chain verifies.
func TestConcurrentAppendsMakeOneChain(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c, err := OpenChain(ctx, st, testKey)
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			entries := []Entry{{Identity: "bob", Action: "exec", Result: "ok"}}
			if i%2 == 0 {
				entries = append(entries, Entry{Identity: "bob", Action: "exec", Result: "ok"})
			}
			if err := c.AppendBatch(ctx, entries); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	want := int64(n + n/2)
	res, err := c.Verify(ctx)
	if err != nil || !res.OK || res.Records != want {
		t.Fatalf("after %d appends at once: %+v, %v; want %d records that verify", n, res, err, want)
	}
	c.mu.Lock()
	seq := c.seq
	c.mu.Unlock()
	if seq != want {
		t.Errorf("the chain's newest record is %d, want %d", seq, want)
	}
}
