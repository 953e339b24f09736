package manager

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/store"
)

func eventsOf(t *testing.T, st store.Store, id string) map[string][]*store.Event {
	t.Helper()
	out := map[string][]*store.Event{}
	var after int64
	for {
		evs, err := st.ListEvents(context.Background(), store.EventFilter{SandboxID: id, AfterSeq: after})
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			out[ev.Type] = append(out[ev.Type], ev)
			after = ev.Seq
		}
		if len(evs) == 0 {
			return out
		}
	}
}

// A sandbox flooding DNS and the proxy loses its own records, counted; a quiet sandbox
// beside it keeps every record, and repeats of one refusal become one summary.
func TestAuditFloodCostsOnlyTheFlooder(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Audit = audit.Config{Rate: 10, Burst: 50, Queue: 100, Coalesce: time.Hour}
	m, st := newManagerWith(t, cfg, newFake(t))

	const flood = 5000
	for i := range flood {
		m.DNSAudit(egress.DNSRecord{Sandbox: "sb_flooder", Generation: 1, Name: fmt.Sprintf("n%d.example", i), Type: "A", Rcode: "REFUSED"})
		if i%250 == 0 {
			m.EgressAudit(egress.Record{Sandbox: "sb_quiet", Generation: 1, Host: fmt.Sprintf("h%d.example", i), Port: 443, Method: "CONNECT", Allowed: true})
		}
	}
	for range 300 {
		m.EgressAudit(egress.Record{Sandbox: "sb_quiet", Generation: 1, Host: "blocked.example", Port: 443, Method: "CONNECT", Reason: "not allowed"})
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}

	quiet := eventsOf(t, st, "sb_quiet")
	var allowed, refused, repeats int64
	for _, ev := range quiet["egress"] {
		var d struct {
			Allowed bool
			Repeats int64 `json:"repeats"`
		}
		json.Unmarshal(ev.Data, &d)
		if d.Allowed {
			allowed++
		} else {
			refused++
			repeats += d.Repeats
		}
	}
	if allowed != flood/250 || refused != 2 || repeats != 299 || len(quiet[audit.DroppedType]) != 0 {
		t.Fatalf("quiet sandbox: %d allowed (want %d), %d refusal records (want 2) standing for %d repeats (want 299), %d drop notes (want 0)",
			allowed, flood/250, refused, repeats, len(quiet[audit.DroppedType]))
	}

	loud := eventsOf(t, st, "sb_flooder")
	stored := int64(len(loud["dns"]))
	var dropped int64
	for _, ev := range loud[audit.DroppedType] {
		var d struct{ Dropped int64 }
		json.Unmarshal(ev.Data, &d)
		dropped += d.Dropped
	}
	if stored > 100 || stored+dropped != flood {
		t.Fatalf("flooder: %d stored and %d counted as dropped; want at most 100 stored and the two adding up to %d", stored, dropped, flood)
	}
	if m.AuditDropped() != dropped {
		t.Fatalf("AuditDropped %d, the drop notes say %d", m.AuditDropped(), dropped)
	}
}

// Retention keeps each sandbox's newest events and removes old ones.
func TestAuditEventsArePruned(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Audit = audit.Config{Rate: 1e6, Burst: 1e6, Queue: 1 << 16}
	cfg.EventsPerSandbox = 100
	m, st := newManagerWith(t, cfg, newFake(t))
	for i := range 500 {
		m.EgressAudit(egress.Record{Sandbox: "sb_busy", Host: fmt.Sprintf("h%d", i), Port: 80, Allowed: true})
	}
	m.EgressAudit(egress.Record{Sandbox: "sb_other", Host: "x", Port: 80, Allowed: true})
	if err := m.auditW.Close(); err != nil {
		t.Fatal(err)
	}
	m.pruneEvents(context.Background())
	busy := eventsOf(t, st, "sb_busy")["egress"]
	if len(busy) != 100 {
		t.Fatalf("busy sandbox keeps %d events, want its newest 100", len(busy))
	}
	var last struct{ Host string }
	json.Unmarshal(busy[len(busy)-1].Data, &last)
	if last.Host != "h499" {
		t.Fatalf("newest kept event is %q, want h499", last.Host)
	}
	if n := len(eventsOf(t, st, "sb_other")["egress"]); n != 1 {
		t.Fatalf("other sandbox keeps %d events, want 1", n)
	}

	m.cfg.EventMaxAge = time.Hour
	m.lastAgePrune = time.Time{}
	m.SetClock(func() time.Time { return time.Now().Add(2 * time.Hour) })
	m.pruneEvents(context.Background())
	if n := len(eventsOf(t, st, "sb_busy")["egress"]) + len(eventsOf(t, st, "sb_other")["egress"]); n != 0 {
		t.Fatalf("%d events older than event_max_age are still kept", n)
	}
}

// What a sandbox writes into a record (a CONNECT target up to the proxy's header limit)
// is cut before it is queued or stored.
func TestAuditRecordsAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	m, st := newManagerWith(t, cfg, newFake(t))
	huge := strings.Repeat("a", 1<<20)
	m.EgressAudit(egress.Record{Sandbox: "sb_big", Host: huge, Port: 443, Method: "CONNECT", Reason: "host name " + huge + " is too long"})
	m.DNSAudit(egress.DNSRecord{Sandbox: "sb_big", Name: huge, Type: "A", Rcode: "REFUSED", Reason: huge})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	evs := eventsOf(t, st, "sb_big")
	if len(evs["egress"]) != 1 || len(evs["dns"]) != 1 {
		t.Fatalf("stored %d egress and %d dns events, want one of each", len(evs["egress"]), len(evs["dns"]))
	}
	for _, ev := range append(evs["egress"], evs["dns"]...) {
		if len(ev.Data) > 4<<10 || !strings.Contains(string(ev.Data), "(1048576 bytes)") {
			t.Errorf("%s event of %d bytes; want the sandbox's text cut, saying how long it was", ev.Type, len(ev.Data))
		}
	}
}
