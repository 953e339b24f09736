package sqlite

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store"
)

// The audit insert and head read are prepared once and run inside a transaction on the writer pool's
// only connection: preparing it must not wait for that connection while the
// transaction holds it.
func TestAppendAuditPreparedOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for seq := int64(1); seq <= 3; seq++ {
		r := &store.AuditRecord{Time: time.Now(), Identity: "alice", Action: "exec", Doc: []byte("{}")}
		seal := func(head store.AuditAnchor, recs []*store.AuditRecord) {
			recs[0].Seq, recs[0].Prev, recs[0].Hash = head.Seq+1, head.Hash, fmt.Sprint("h", head.Seq+1)
		}
		if err := st.AppendAudit(ctx, []*store.AuditRecord{r}, seal); err != nil {
			t.Fatalf("append %d: %v", seq, err)
		}
	}
	if last, err := st.LastAudit(ctx); err != nil || last == nil || last.Seq != 3 || last.Prev != "h2" {
		t.Errorf("last record: %+v, %v; want seq 3 after h2", last, err)
	}
}

// A list's statement is kept prepared only for a bounded number of texts: a caller
// naming one state more times each list (a text of its own each time) adds none.
func TestListStatementsKeptBounded(t *testing.T) {
	ctx := context.Background()
	st, err := Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	kept := func() int {
		st.stmts.mu.Lock()
		defer st.stmts.mu.Unlock()
		return len(st.stmts.m)
	}
	var states []store.State
	for range keptListStates {
		states = append(states, "running")
	}
	before := kept()
	for range 20 {
		states = append(states, "running")
		if _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice", States: states}); err != nil {
			t.Fatal(err)
		}
	}
	if n := kept() - before; n != 0 {
		t.Errorf("lists of %d to %d states kept %d statements more; want none", keptListStates+1, len(states), n)
	}
	if _, err := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice", States: states[:2]}); err != nil {
		t.Fatal(err)
	}
	if n := kept() - before; n != 1 {
		t.Errorf("a list of 2 states kept %d statements more; want 1", n)
	}
}
