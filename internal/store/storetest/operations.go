package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

func testOperationRoundTrip(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	op := newOperation("op_1", "alice", "key-1", 0)
	op.Result = json.RawMessage(`{"sandbox":{"id":"sb_1"}}`)
	want := *op
	got, err := s.CreateOperation(ctx, op)
	ok(t, err, "CreateOperation")
	same(t, got, &want, "CreateOperation's result")

	got, err = s.GetOperation(ctx, "op_1")
	ok(t, err, "GetOperation")
	same(t, got, &want, "GetOperation")

	_, err = s.GetOperation(ctx, "op_missing")
	isErr(t, err, errdefs.ErrNotFound, "GetOperation(op_missing)")

	_, err = s.CreateOperation(ctx, newOperation("op_1", "bob", "", 1))
	isErr(t, err, errdefs.ErrAlreadyExists, "CreateOperation with a used id")
}

func testIdempotencyKeyReplay(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	first := newOperation("op_1", "alice", "key-1", 0)
	_, err := s.CreateOperation(ctx, first)
	ok(t, err, "CreateOperation(first)")

	got, err := s.CreateOperation(ctx, newOperation("op_2", "alice", "key-1", 1))
	isErr(t, err, errdefs.ErrAlreadyExists, "CreateOperation with a seen key")
	if got == nil {
		t.Fatalf("CreateOperation with a seen key: got no operation, want the first one")
	}
	same(t, got, first, "CreateOperation with a seen key")
	_, err = s.GetOperation(ctx, "op_2")
	isErr(t, err, errdefs.ErrNotFound, "GetOperation of the replayed request's id")

	// The replay returns the operation as it is now, not as it was created.
	first.State, first.Result, first.UpdatedAt = store.OpSucceeded, json.RawMessage(`{"ok":true}`), at(5)
	ok(t, s.UpdateOperation(ctx, first), "UpdateOperation(first)")
	got, err = s.CreateOperation(ctx, newOperation("op_3", "alice", "key-1", 6))
	isErr(t, err, errdefs.ErrAlreadyExists, "CreateOperation with a seen key after an update")
	same(t, got, first, "CreateOperation with a seen key after an update")

	// Keys are per owner, and an empty key is no key.
	_, err = s.CreateOperation(ctx, newOperation("op_4", "bob", "key-1", 7))
	ok(t, err, "CreateOperation(bob, key-1)")
	for i := range 3 {
		_, err = s.CreateOperation(ctx, newOperation(fmt.Sprintf("op_nokey_%d", i), "alice", "", 8+i))
		ok(t, err, "CreateOperation without a key")
	}
	all, err := s.ListOperations(ctx, store.OperationFilter{})
	ok(t, err, "ListOperations")
	if len(all) != 5 {
		t.Errorf("ListOperations: got %d operations, want 5", len(all))
	}
}

func testUpdateOperation(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	op := newOperation("op_1", "alice", "key-1", 0)
	_, err := s.CreateOperation(ctx, op)
	ok(t, err, "CreateOperation")

	op.State = store.OpFailed
	op.ErrorCode = "quota_exceeded"
	op.ErrorMessage = "too many sandboxes"
	op.Result = json.RawMessage(`{"limit":10}`)
	op.UpdatedAt = at(30)
	ok(t, s.UpdateOperation(ctx, op), "UpdateOperation")
	got, err := s.GetOperation(ctx, "op_1")
	ok(t, err, "GetOperation")
	same(t, got, op, "GetOperation after UpdateOperation")

	op.Result = nil
	ok(t, s.UpdateOperation(ctx, op), "UpdateOperation clearing the result")
	got, err = s.GetOperation(ctx, "op_1")
	ok(t, err, "GetOperation")
	same(t, got, op, "GetOperation after clearing the result")

	isErr(t, s.UpdateOperation(ctx, newOperation("op_missing", "alice", "", 0)), errdefs.ErrNotFound,
		"UpdateOperation(op_missing)")
}

func testListOperations(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	got, err := s.ListOperations(ctx, store.OperationFilter{})
	ok(t, err, "ListOperations on an empty store")
	if len(got) != 0 {
		t.Errorf("ListOperations on an empty store: got %d operations, want 0", len(got))
	}

	states := []string{store.OpPending, store.OpRunning, store.OpSucceeded, store.OpFailed, store.OpRunning}
	for i, st := range states {
		op := newOperation(fmt.Sprintf("op_%d", i), "alice", "", i)
		op.State = st
		_, err := s.CreateOperation(ctx, op)
		ok(t, err, "CreateOperation")
	}
	tests := []struct {
		states []string
		want   []string
	}{
		{nil, []string{"op_0", "op_1", "op_2", "op_3", "op_4"}},
		{[]string{store.OpRunning}, []string{"op_1", "op_4"}},
		{[]string{store.OpPending, store.OpRunning}, []string{"op_0", "op_1", "op_4"}},
		{[]string{store.OpSucceeded, store.OpFailed}, []string{"op_2", "op_3"}},
		{[]string{"unknown"}, nil},
	}
	for _, tt := range tests {
		got, err := s.ListOperations(ctx, store.OperationFilter{States: tt.states})
		ok(t, err, fmt.Sprintf("ListOperations(%v)", tt.states))
		sameIDs(t, opIDs(got), tt.want, fmt.Sprintf("ListOperations(%v)", tt.states))
	}
}

func opIDs(ops []*store.Operation) []string {
	var ids []string
	for _, op := range ops {
		ids = append(ids, op.ID)
	}
	return ids
}

// testListOperationsFilters: kind and node narrow the list (an operation whose sandbox
// has no record, or a record of no node, is every node's), and pages in id order
// follow each other, at most the limit each and never more than MaxOperationPage.
func testListOperationsFilters(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	for i, node := range []string{"n1", "n2", ""} {
		sb := newSandbox(fmt.Sprintf("sb_op_%d", i), "alice", fmt.Sprintf("op-%d", i), i)
		sb.Node = node
		ok(t, s.CreateSandbox(ctx, sb), "CreateSandbox")
	}
	for i, c := range []struct{ kind, sandbox string }{
		{"cleanup", "sb_op_0"}, {"create", "sb_op_1"}, {"cleanup", "sb_op_2"}, {"cleanup", "sb_gone"}, {"gc", ""},
	} {
		op := newOperation(fmt.Sprintf("op_%d", i), "alice", "", i)
		op.Kind, op.SandboxID = c.kind, c.sandbox
		_, err := s.CreateOperation(ctx, op)
		ok(t, err, "CreateOperation")
	}
	for _, tt := range []struct {
		f    store.OperationFilter
		want []string
	}{
		{store.OperationFilter{Kind: "cleanup"}, []string{"op_0", "op_2", "op_3"}},
		{store.OperationFilter{Node: "n1"}, []string{"op_0", "op_2", "op_3", "op_4"}},
		{store.OperationFilter{Node: "n2", Kind: "cleanup"}, []string{"op_2", "op_3"}},
		{store.OperationFilter{Limit: 2}, []string{"op_0", "op_1"}},
		{store.OperationFilter{AfterID: "op_1", Limit: 2}, []string{"op_2", "op_3"}},
		{store.OperationFilter{AfterID: "op_3", Limit: 2}, []string{"op_4"}},
	} {
		got, err := s.ListOperations(ctx, tt.f)
		ok(t, err, fmt.Sprintf("ListOperations(%+v)", tt.f))
		if ids := opIDs(got); !slices.Equal(ids, tt.want) {
			t.Errorf("ListOperations(%+v) = %v; want %v", tt.f, ids, tt.want)
		}
	}
	for i := range store.MaxOperationPage {
		_, err := s.CreateOperation(ctx, newOperation(fmt.Sprintf("op_x%04d", i), "alice", "", i))
		ok(t, err, "CreateOperation")
	}
	got, err := s.ListOperations(ctx, store.OperationFilter{Limit: store.MaxOperationPage + 10})
	ok(t, err, "ListOperations past the page")
	if len(got) != store.MaxOperationPage {
		t.Errorf("ListOperations asking for %d returned %d; want at most %d", store.MaxOperationPage+10, len(got), store.MaxOperationPage)
	}
}

func testEventsInSeqOrder(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	var want []*store.Event
	for i := range 6 {
		ev := newEvent([]string{"sb_1", "sb_2"}[i%2], fmt.Sprintf("type_%d", i), i)
		ev.Seq = 1000 // the store assigns Seq, whatever the caller put there
		ok(t, s.AppendEvent(ctx, ev), "AppendEvent")
		if len(want) > 0 && ev.Seq <= want[len(want)-1].Seq {
			t.Errorf("AppendEvent #%d: got Seq %d, want more than the previous %d", i, ev.Seq, want[len(want)-1].Seq)
		}
		want = append(want, ev)
	}
	got, err := s.ListEvents(ctx, store.EventFilter{})
	ok(t, err, "ListEvents")
	if len(got) != len(want) {
		t.Fatalf("ListEvents: got %d events, want %d", len(got), len(want))
	}
	for i := range got {
		same(t, got[i], want[i], fmt.Sprintf("ListEvents[%d]", i))
	}
}

// eventSeqs returns the Seq of each event in order.
func eventSeqs(evs []*store.Event) []int64 {
	seqs := make([]int64, 0, len(evs))
	for _, ev := range evs {
		seqs = append(seqs, ev.Seq)
	}
	return seqs
}

func testListEventsFilter(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_1", "alice", "one", 1)), "CreateSandbox")
	ok(t, s.CreateSandbox(ctx, newSandbox("sb_2", "bob", "two", 2)), "CreateSandbox")
	seqs := map[string][]int64{}
	for i := range 10 {
		id := []string{"sb_1", "sb_2"}[i%2]
		ev := newEvent(id, "tick", i)
		ok(t, s.AppendEvent(ctx, ev), "AppendEvent")
		seqs[id] = append(seqs[id], ev.Seq)
		seqs[""] = append(seqs[""], ev.Seq)
	}
	all, one := seqs[""], seqs["sb_1"]
	tests := []struct {
		name   string
		filter store.EventFilter
		want   []int64
	}{
		{"all", store.EventFilter{}, all},
		{"sandbox", store.EventFilter{SandboxID: "sb_1"}, one},
		{"unknown sandbox", store.EventFilter{SandboxID: "sb_9"}, nil},
		{"after", store.EventFilter{AfterSeq: all[3]}, all[4:]},
		{"after the last", store.EventFilter{AfterSeq: all[9]}, nil},
		{"limit", store.EventFilter{Limit: 3}, all[:3]},
		{"after and limit", store.EventFilter{AfterSeq: all[2], Limit: 4}, all[3:7]},
		{"sandbox, after and limit", store.EventFilter{SandboxID: "sb_1", AfterSeq: one[1], Limit: 2}, one[2:4]},
		{"limit above count", store.EventFilter{SandboxID: "sb_1", Limit: 50}, one},
		{"owner", store.EventFilter{Owner: "alice"}, one},
		{"owner and limit", store.EventFilter{Owner: "alice", Limit: 2}, one[:2]},
		{"owner and another's sandbox", store.EventFilter{Owner: "bob", SandboxID: "sb_1"}, nil},
		{"owner without sandboxes", store.EventFilter{Owner: "carol"}, nil},
	}
	for _, tt := range tests {
		got, err := s.ListEvents(ctx, tt.filter)
		ok(t, err, "ListEvents("+tt.name+")")
		if g := eventSeqs(got); !slices.Equal(g, tt.want) {
			t.Errorf("ListEvents(%s): got seqs %v, want %v", tt.name, g, tt.want)
		}
	}
}

func testListEventsDefaultLimit(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	const n = 1001
	var first int64
	for i := range n {
		ev := newEvent("sb_1", "tick", i)
		ok(t, s.AppendEvent(ctx, ev), "AppendEvent")
		if i == 0 {
			first = ev.Seq
		}
	}
	got, err := s.ListEvents(ctx, store.EventFilter{SandboxID: "sb_1"})
	ok(t, err, "ListEvents")
	if len(got) != 1000 {
		t.Fatalf("ListEvents with no limit: got %d events, want the default 1000", len(got))
	}
	if got[0].Seq != first {
		t.Errorf("ListEvents with no limit: got first Seq %d, want %d", got[0].Seq, first)
	}
	rest, err := s.ListEvents(ctx, store.EventFilter{SandboxID: "sb_1", AfterSeq: got[len(got)-1].Seq})
	ok(t, err, "ListEvents after the first page")
	if len(rest) != 1 {
		t.Errorf("ListEvents after the first page: got %d events, want 1", len(rest))
	}
}

// testForeignText: text from outside the daemon with NUL and invalid UTF-8 in it (an
// error a sandbox's agent reported) is stored, and reads back with U+FFFD in their place.
func testForeignText(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	const foreign, kept = "exit\x00ed \xff\xfeok", "exit\uFFFDed \uFFFDok"
	op := newOperation("op_1", "alice", "", 0)
	op.State, op.ErrorCode, op.ErrorMessage = store.OpFailed, "failed_precondition", foreign
	_, err := s.CreateOperation(ctx, op)
	ok(t, err, "CreateOperation with foreign text")
	op.ErrorCode = "internal\x00"
	ok(t, s.UpdateOperation(ctx, op), "UpdateOperation with foreign text")
	got, err := s.GetOperation(ctx, "op_1")
	ok(t, err, "GetOperation")
	if got.ErrorMessage != kept || got.ErrorCode != "internal\uFFFD" {
		t.Errorf("GetOperation: got error code %q, message %q; want %q, %q", got.ErrorCode, got.ErrorMessage, "internal\uFFFD", kept)
	}

	ev := newEvent("sb_1", "exec\x00", 1)
	ev.Cause = foreign
	ok(t, s.AppendEvent(ctx, ev), "AppendEvent with foreign text")
	evs, err := s.ListEvents(ctx, store.EventFilter{SandboxID: "sb_1"})
	ok(t, err, "ListEvents")
	if len(evs) != 1 || evs[0].Cause != kept || evs[0].Type != "exec\uFFFD" {
		t.Fatalf("ListEvents: got %+v; want one event of type %q with cause %q", evs, "exec\uFFFD", kept)
	}
}

// testIdempotencyKeyBytes: a key is kept byte for byte, whatever bytes it holds (the
// manager's own keys start with a NUL, which no client can send): it replays, and keys
// that differ only in bytes that are not valid UTF-8 are different keys.
func testIdempotencyKeyBytes(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	keys := []string{"\x00cleanup/sb_1", "k\xff", "k\xfe", "k\uFFFD"}
	for i, key := range keys {
		_, err := s.CreateOperation(ctx, newOperation(fmt.Sprintf("op_%d", i), "alice", key, i))
		ok(t, err, fmt.Sprintf("CreateOperation with key %q", key))
	}
	for i, key := range keys {
		got, err := s.CreateOperation(ctx, newOperation(fmt.Sprintf("op_again_%d", i), "alice", key, 10+i))
		isErr(t, err, errdefs.ErrAlreadyExists, fmt.Sprintf("CreateOperation with key %q again", key))
		if want := fmt.Sprintf("op_%d", i); got == nil || got.ID != want || got.IdempotencyKey != key {
			t.Errorf("CreateOperation with key %q again: got %+v, want operation %s with that key", key, got, want)
		}
	}
	got, err := s.GetOperation(ctx, "op_0")
	ok(t, err, "GetOperation")
	if got.IdempotencyKey != keys[0] {
		t.Errorf("GetOperation: got key %q, want %q", got.IdempotencyKey, keys[0])
	}
}
