package storetest

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/store"
)

// testAppendEventsBatch: a batch is stored in its order with increasing Seqs, and a
// batch with one bad event stores none of it.
func testAppendEventsBatch(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	before := newEvent("sb_1", "first", 0)
	ok(t, s.AppendEvent(ctx, before), "AppendEvent")
	var batch []*store.Event
	for i := range 5 {
		batch = append(batch, newEvent([]string{"sb_1", "sb_2"}[i%2], "batch", i+1))
	}
	ok(t, s.AppendEvents(ctx, batch), "AppendEvents")
	prev := before.Seq
	for i, ev := range batch {
		if ev.Seq <= prev {
			t.Errorf("AppendEvents[%d]: got Seq %d, want more than %d", i, ev.Seq, prev)
		}
		prev = ev.Seq
	}
	got, err := s.ListEvents(ctx, store.EventFilter{})
	ok(t, err, "ListEvents")
	if len(got) != 6 {
		t.Fatalf("ListEvents: got %d events, want 6", len(got))
	}
	for i, ev := range batch {
		same(t, got[i+1], ev, fmt.Sprintf("ListEvents[%d]", i+1))
	}

	bad := []*store.Event{newEvent("sb_1", "ok", 10), newEvent("sb_1", "bad", 11)}
	bad[1].Data = json.RawMessage(`{"not json`)
	if err := s.AppendEvents(ctx, bad); err == nil {
		t.Errorf("AppendEvents with bad data: got no error, want one")
	}
	got, err = s.ListEvents(ctx, store.EventFilter{})
	ok(t, err, "ListEvents after a refused batch")
	if len(got) != 6 {
		t.Errorf("ListEvents after a refused batch: got %d events, want the 6 from before", len(got))
	}
	ok(t, s.AppendEvents(ctx, nil), "AppendEvents(nil)")
}

// testPruneEventsPerSandbox: the cap keeps each sandbox's newest events and touches
// no other sandbox; with Sandboxes set, only those are trimmed.
func testPruneEventsPerSandbox(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	seqs := map[string][]int64{}
	var batch []*store.Event
	for i := range 30 {
		id := "sb_flood"
		if i%10 == 0 {
			id = "sb_quiet"
		}
		batch = append(batch, newEvent(id, "dns", i))
	}
	ok(t, s.AppendEvents(ctx, batch), "AppendEvents")
	for _, ev := range batch {
		seqs[ev.SandboxID] = append(seqs[ev.SandboxID], ev.Seq)
	}
	left := func(id string) []int64 {
		t.Helper()
		evs, err := s.ListEvents(ctx, store.EventFilter{SandboxID: id})
		ok(t, err, "ListEvents")
		return eventSeqs(evs)
	}

	n, err := s.PruneEvents(ctx, store.EventRetention{MaxPerSandbox: 5, Sandboxes: []string{"sb_quiet"}})
	ok(t, err, "PruneEvents of one sandbox")
	if n != 0 || len(left("sb_flood")) != 27 {
		t.Errorf("PruneEvents of sb_quiet (under its cap): removed %d, sb_flood has %d; want 0 and 27 untouched", n, len(left("sb_flood")))
	}

	n, err = s.PruneEvents(ctx, store.EventRetention{MaxPerSandbox: 5})
	ok(t, err, "PruneEvents")
	if n != 22 {
		t.Errorf("PruneEvents: removed %d, want 22", n)
	}
	if got, want := left("sb_flood"), seqs["sb_flood"][22:]; !slices.Equal(got, want) {
		t.Errorf("sb_flood after the cap: got seqs %v, want its newest %v", got, want)
	}
	if got, want := left("sb_quiet"), seqs["sb_quiet"]; !slices.Equal(got, want) {
		t.Errorf("sb_quiet after sb_flood was trimmed: got seqs %v, want all of %v", got, want)
	}
}

// testPruneEventsByAge: events before the cutoff go, the rest stay.
func testPruneEventsByAge(t *testing.T, open func(t *testing.T) store.Store) {
	s, ctx := open(t), t.Context()
	var batch []*store.Event
	for i := range 10 {
		batch = append(batch, newEvent([]string{"sb_1", "sb_2"}[i%2], "tick", i))
	}
	ok(t, s.AppendEvents(ctx, batch), "AppendEvents")
	n, err := s.PruneEvents(ctx, store.EventRetention{Before: at(4)})
	ok(t, err, "PruneEvents")
	got, err := s.ListEvents(ctx, store.EventFilter{})
	ok(t, err, "ListEvents")
	if want := eventSeqs(batch[4:]); n != 4 || !slices.Equal(eventSeqs(got), want) {
		t.Errorf("PruneEvents before at(4): removed %d leaving %v, want 4 removed leaving %v", n, eventSeqs(got), want)
	}
	n, err = s.PruneEvents(ctx, store.EventRetention{Before: at(100)})
	ok(t, err, "PruneEvents of everything")
	if got, _ := s.ListEvents(ctx, store.EventFilter{}); n != 6 || len(got) != 0 {
		t.Errorf("PruneEvents before a time after every event: removed %d leaving %d, want 6 and none", n, len(got))
	}
	next := newEvent("sb_1", "after", 200)
	ok(t, s.AppendEvent(ctx, next), "AppendEvent after a prune")
	if next.Seq <= batch[9].Seq {
		t.Errorf("AppendEvent after a prune: got Seq %d, want more than %d", next.Seq, batch[9].Seq)
	}
}
