package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// workers is how many goroutines each concurrency test runs at once.
const workers = 50

// parallel runs fn(0) ... fn(workers-1) at once and returns their errors by index.
func parallel(fn func(i int) error) []error {
	errs := make([]error, workers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() {
			<-start
			errs[i] = fn(i)
		})
	}
	close(start)
	wg.Wait()
	return errs
}

// countErrs returns how many errs are nil and how many are of class want; any other
// error fails the test.
func countErrs(t *testing.T, errs []error, want error, what string) (nils, wanted int) {
	t.Helper()
	for i, err := range errs {
		switch {
		case err == nil:
			nils++
		case errors.Is(err, want):
			wanted++
		default:
			t.Errorf("%s #%d: got error %v, want none or %q", what, i, err, want)
		}
	}
	return nils, wanted
}

func testConcurrentCreates(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	errs := parallel(func(i int) error {
		id := fmt.Sprintf("sb_%02d", i)
		if err := s.CreateSandbox(ctx, newSandbox(id, "alice", id, i)); err != nil {
			return err
		}
		sb, err := s.GetSandbox(ctx, id)
		if err != nil {
			return err
		}
		sb.State = "suspended"
		if err := s.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		_, err = s.ListSandboxes(ctx, store.SandboxFilter{Owner: "alice"})
		return err
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: got error %v, want none", i, err)
		}
	}
	list, err := s.ListSandboxes(ctx, store.SandboxFilter{States: []store.State{"suspended"}})
	ok(t, err, "ListSandboxes")
	if len(list) != workers {
		t.Errorf("ListSandboxes after %d concurrent creates: got %d sandboxes, want %d", workers, len(list), workers)
	}
}

func testConcurrentCreatesSameName(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	errs := parallel(func(i int) error {
		return s.CreateSandbox(ctx, newSandbox(fmt.Sprintf("sb_%02d", i), "alice", "web", i))
	})
	nils, exists := countErrs(t, errs, errdefs.ErrAlreadyExists, "CreateSandbox(alice/web)")
	if nils != 1 || exists != workers-1 {
		t.Errorf("%d concurrent creates of one name: got %d created and %d already exists, want 1 and %d",
			workers, nils, exists, workers-1)
	}
	list, err := s.ListSandboxes(ctx, store.SandboxFilter{})
	ok(t, err, "ListSandboxes")
	if len(list) != 1 {
		t.Errorf("ListSandboxes: got %d sandboxes, want 1", len(list))
	}
}

func testConcurrentUpdates(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	sb := newSandbox("sb_1", "alice", "web", 0)
	ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")
	errs := parallel(func(i int) error {
		c := *sb
		c.Generation = int64(100 + i)
		return s.UpdateSandbox(ctx, &c)
	})
	nils, conflicts := countErrs(t, errs, errdefs.ErrVersionConflict, "UpdateSandbox")
	if nils != 1 || conflicts != workers-1 {
		t.Errorf("%d concurrent updates at version 1: got %d written and %d conflicts, want 1 and %d",
			workers, nils, conflicts, workers-1)
	}
	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox")
	if got.Version != 2 {
		t.Errorf("GetSandbox after concurrent updates: got Version %d, want 2", got.Version)
	}
	if winner := slices.Index(errs, nil); winner >= 0 && got.Generation != int64(100+winner) {
		t.Errorf("GetSandbox after concurrent updates: got Generation %d, want the winner's %d", got.Generation, 100+winner)
	}
}

func testConcurrentIdempotencyKey(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	ops := make([]*store.Operation, workers)
	errs := parallel(func(i int) error {
		op, err := s.CreateOperation(ctx, newOperation(fmt.Sprintf("op_%02d", i), "alice", "key-1", i))
		ops[i] = op
		return err
	})
	nils, exists := countErrs(t, errs, errdefs.ErrAlreadyExists, "CreateOperation(key-1)")
	if nils != 1 || exists != workers-1 {
		t.Errorf("%d concurrent creates with one key: got %d created and %d replays, want 1 and %d",
			workers, nils, exists, workers-1)
	}
	winner := slices.Index(errs, nil)
	if winner < 0 {
		return
	}
	for i, op := range ops {
		if op == nil || op.ID != ops[winner].ID {
			t.Errorf("CreateOperation #%d with key-1: got %+v, want operation %s", i, op, ops[winner].ID)
		}
	}
}

func testConcurrentEvents(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	const each = 10
	errs := parallel(func(i int) error {
		for j := range each {
			if err := s.AppendEvent(ctx, newEvent(fmt.Sprintf("sb_%02d", i), "tick", j)); err != nil {
				return err
			}
		}
		return nil
	})
	for i, err := range errs {
		if err != nil {
			t.Errorf("worker %d: got error %v, want none", i, err)
		}
	}
	got, err := s.ListEvents(ctx, store.EventFilter{})
	ok(t, err, "ListEvents")
	if len(got) != workers*each {
		t.Errorf("ListEvents: got %d events, want %d", len(got), workers*each)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Seq <= got[i-1].Seq {
			t.Fatalf("ListEvents: got Seq %d after %d, want strictly increasing", got[i].Seq, got[i-1].Seq)
		}
	}
}

func testReopen(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	sb := newSandbox("sb_1", "alice", "web", 0)
	ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")
	sb.State = "suspended"
	ok(t, s.UpdateSandbox(ctx, sb), "UpdateSandbox")
	op := newOperation("op_1", "alice", "key-1", 1)
	_, err := s.CreateOperation(ctx, op)
	ok(t, err, "CreateOperation")
	ev := newEvent("sb_1", "suspended", 2)
	ok(t, s.AppendEvent(ctx, ev), "AppendEvent")
	ok(t, s.Close(), "Close")

	s = open(t)
	got, err := s.GetSandbox(ctx, "sb_1")
	ok(t, err, "GetSandbox after re-open")
	same(t, got, sb, "GetSandbox after re-open")
	gotOp, err := s.GetOperation(ctx, "op_1")
	ok(t, err, "GetOperation after re-open")
	same(t, gotOp, op, "GetOperation after re-open")
	evs, err := s.ListEvents(ctx, store.EventFilter{})
	ok(t, err, "ListEvents after re-open")
	if len(evs) != 1 {
		t.Fatalf("ListEvents after re-open: got %d events, want 1", len(evs))
	}
	same(t, evs[0], ev, "ListEvents[0] after re-open")

	// The rules hold across the re-open too.
	err = s.CreateSandbox(ctx, newSandbox("sb_2", "alice", "web", 3))
	isErr(t, err, errdefs.ErrAlreadyExists, "CreateSandbox(alice/web) after re-open")
	_, err = s.CreateOperation(ctx, newOperation("op_2", "alice", "key-1", 4))
	isErr(t, err, errdefs.ErrAlreadyExists, "CreateOperation(key-1) after re-open")
	next := newEvent("sb_1", "resumed", 5)
	ok(t, s.AppendEvent(ctx, next), "AppendEvent after re-open")
	if next.Seq <= ev.Seq {
		t.Errorf("AppendEvent after re-open: got Seq %d, want more than %d", next.Seq, ev.Seq)
	}
}

// testConcurrentAuditAppends: sealed appends from many writers at once (as from several
// nodes) each read the head inside their transaction, so they form one unbroken chain:
// every seq once, each record naming the one before it.
func testConcurrentAuditAppends(t *testing.T, open func(t *testing.T) store.Store) {
	s, bg := open(t), context.Background()
	seal := func(head store.AuditAnchor, recs []*store.AuditRecord) {
		for _, r := range recs {
			r.Seq, r.Prev = head.Seq+1, head.Hash
			r.Hash = fmt.Sprintf("h%d", r.Seq)
			head = store.AuditAnchor{Seq: r.Seq, Hash: r.Hash}
		}
	}
	errs := parallel(func(i int) error {
		recs := []*store.AuditRecord{
			{Time: at(i), Identity: fmt.Sprint("w", i), Action: "exec", Doc: []byte("{}")},
			{Time: at(i), Identity: fmt.Sprint("w", i), Action: "request", Doc: []byte("{}")},
		}
		return s.AppendAudit(bg, recs, seal)
	})
	if nils, _ := countErrs(t, errs, errdefs.ErrAlreadyExists, "append"); nils != workers {
		t.Fatalf("%d of %d appends went in", nils, workers)
	}
	list, err := s.ListAudit(bg, store.AuditFilter{Limit: 10 * workers})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2*workers {
		t.Fatalf("%d records; want %d", len(list), 2*workers)
	}
	prev := ""
	for i, r := range list {
		if r.Seq != int64(i+1) || r.Prev != prev || r.Hash != fmt.Sprintf("h%d", r.Seq) {
			t.Fatalf("record %d: seq %d prev %q hash %q; want seq %d after %q", i, r.Seq, r.Prev, r.Hash, i+1, prev)
		}
		if i%2 == 1 && (r.Identity != list[i-1].Identity || r.Action != "request") {
			t.Fatalf("record %d (%s %s) does not follow its batch's first (%s)", r.Seq, r.Identity, r.Action, list[i-1].Identity)
		}
		prev = r.Hash
	}
}
