package audit

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// gatedStore holds every write until the gate opens, the way a busy disk would.
type gatedStore struct {
	*sqlite.Store
	gate chan struct{}
}

func (g *gatedStore) AppendEvents(ctx context.Context, evs []*store.Event) error {
	<-g.gate
	return g.Store.AppendEvents(ctx, evs)
}

func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	st, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// events returns every stored event of sandbox id, split into the records and the
// records_dropped events, with the sum of what those say was dropped.
func events(t *testing.T, st store.Store, id string) (recs, notes []*store.Event, dropped int64) {
	t.Helper()
	evs, err := st.ListEvents(t.Context(), store.EventFilter{SandboxID: id, Limit: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Type != DroppedType {
			recs = append(recs, ev)
			continue
		}
		notes = append(notes, ev)
		var d struct{ Dropped int64 }
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			t.Fatalf("records_dropped data %s: %v", ev.Data, err)
		}
		dropped += d.Dropped
	}
	return recs, notes, dropped
}

func denied(sandbox string, i int) Record {
	return Record{Sandbox: sandbox, Generation: 1, Type: "egress", Data: map[string]any{"host": fmt.Sprintf("denied-%d.example", i)}}
}

// TestFloodKeepsOtherSandboxesRecords: while the store is slow and one sandbox floods,
// the flood fills only its own queue: every record of the other sandbox is stored, and
// every record of the flooder is either stored or counted in a records_dropped event
// of the flooder.
func TestFloodKeepsOtherSandboxesRecords(t *testing.T) {
	st := &gatedStore{Store: openStore(t), gate: make(chan struct{})}
	w := New(Config{Rate: 1e9, Burst: 1e9, Queue: 100}, st, Options{})
	const flood, quiet = 20000, 50
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < flood; i += 8 {
				w.Add(Record{Sandbox: "sb_flood", Type: "dns", Data: map[string]any{"name": fmt.Sprintf("x%d.flood.example", i)}})
			}
		}()
	}
	for i := range quiet {
		w.Add(denied("sb_quiet", i))
	}
	wg.Wait()
	close(st.gate)
	w.Close()

	recs, notes, _ := events(t, st, "sb_quiet")
	if len(recs) != quiet || len(notes) != 0 {
		t.Errorf("the quiet sandbox: %d records and %d records_dropped events stored, want all %d and none", len(recs), len(notes), quiet)
	}
	recs, notes, dropped := events(t, st, "sb_flood")
	if len(notes) == 0 || dropped == 0 {
		t.Fatalf("the flooder: no records_dropped event (%d records stored of %d)", len(recs), flood)
	}
	if int64(len(recs))+dropped != flood {
		t.Errorf("the flooder: %d stored + %d reported dropped = %d, want every one of the %d accounted for",
			len(recs), dropped, int64(len(recs))+dropped, flood)
	}
	if notes[0].Cause != causeQueue {
		t.Errorf("records_dropped cause %q, want %q", notes[0].Cause, causeQueue)
	}
	if w.Dropped() != dropped {
		t.Errorf("Dropped() = %d, want the %d the events report", w.Dropped(), dropped)
	}
}

// TestRateLimit: a sandbox gets Burst records at once and Rate a second after that;
// the rest are counted in its records_dropped events, and another sandbox has a
// bucket of its own.
func TestRateLimit(t *testing.T) {
	st := openStore(t)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	w := New(Config{Rate: 10, Burst: 20}, st, Options{Now: clock})
	for i := range 50 {
		w.Add(denied("sb_a", i))
	}
	w.Add(denied("sb_b", 0))
	mu.Lock()
	now = now.Add(time.Second)
	mu.Unlock()
	for i := range 15 {
		w.Add(denied("sb_a", 100+i))
	}
	w.Close()

	recs, notes, dropped := events(t, st, "sb_a")
	if len(recs) != 30 || dropped != 35 {
		t.Errorf("sb_a: %d stored and %d reported dropped, want 30 (a burst of 20, then 10 in a second) and 35", len(recs), dropped)
	}
	for _, n := range notes {
		if n.Cause != causeRate {
			t.Errorf("records_dropped cause %q, want %q", n.Cause, causeRate)
		}
	}
	if recs, notes, _ := events(t, st, "sb_b"); len(recs) != 1 || len(notes) != 0 {
		t.Errorf("sb_b: %d stored, %d records_dropped events; want its one record and no drop", len(recs), len(notes))
	}
}

// TestCoalesce: identical records within the window are one record plus one summary
// that counts the rest; a record after the window starts a new run; records of other
// keys are stored as they come.
func TestCoalesce(t *testing.T) {
	st := openStore(t)
	var mu sync.Mutex
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	w := New(Config{Rate: 1, Burst: 5, Coalesce: 10 * time.Second}, st, Options{Now: clock})
	same := Record{Sandbox: "sb_a", Type: "dns", Key: "x.example|A|deny", Subject: "denied queries for x.example",
		Data: map[string]any{"name": "x.example"}}
	for range 1000 {
		w.Add(same)
	}
	w.Add(Record{Sandbox: "sb_a", Type: "dns", Key: "y.example|A|deny", Data: map[string]any{"name": "y.example"}})
	mu.Lock()
	now = now.Add(11 * time.Second)
	mu.Unlock()
	w.Add(same)
	w.Close()

	recs, notes, _ := events(t, st, "sb_a")
	if len(notes) != 0 {
		t.Errorf("%d records_dropped events, want none: repeats are counted, not dropped", len(notes))
	}
	var names []string
	var repeats int64
	for _, ev := range recs {
		var d struct {
			Name    string
			Repeats int64
			Summary string
		}
		json.Unmarshal(ev.Data, &d)
		names = append(names, d.Name)
		if d.Repeats > 0 {
			repeats += d.Repeats
			if d.Summary == "" || ev.Cause != "deny" {
				t.Errorf("summary %s (cause %q): want a sentence and the cause of its records", ev.Data, ev.Cause)
			}
		}
	}
	// x.example, y.example, the summary of 999 x.example, then x.example again.
	if want := []string{"x.example", "y.example", "x.example", "x.example"}; fmt.Sprint(names) != fmt.Sprint(want) || repeats != 999 {
		t.Errorf("stored %v with %d repeats, want %v with 999", names, repeats, want)
	}
}

// TestNoSandboxNoRecord: a record from a source that is no sandbox is not stored (no
// owner could see it, and it would grow the database).
func TestNoSandboxNoRecord(t *testing.T) {
	st := openStore(t)
	w := New(Config{}, st, Options{})
	for i := range 10 {
		w.Add(denied("", i))
	}
	w.Close()
	evs, err := st.ListEvents(t.Context(), store.EventFilter{})
	if err != nil || len(evs) != 0 {
		t.Errorf("stored %d events (%v), want none", len(evs), err)
	}
}
