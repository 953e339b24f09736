package manager

import (
	"context"
	"encoding/json"
	"sync/atomic"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/store"
)

// auditQueue holds egress decisions on their way to the store, so the proxy never
// waits on a database write.
const auditQueue = 4096

// EgressAudit records one egress decision as an event of its sandbox ("egress"). It
// never blocks: when the queue is full the record is counted as dropped.
func (m *Manager) EgressAudit(rec egress.Record) {
	select {
	case m.audit <- auditItem{typ: "egress", sandbox: rec.Sandbox, gen: rec.Generation, allowed: rec.Allowed, data: rec}:
	default:
		m.auditDropped.Add(1)
	}
}

// DNSAudit records one DNS query of a sandbox ("dns").
func (m *Manager) DNSAudit(rec egress.DNSRecord) {
	select {
	case m.audit <- auditItem{typ: "dns", sandbox: rec.Sandbox, gen: rec.Generation, allowed: rec.Allowed, data: rec}:
	default:
		m.auditDropped.Add(1)
	}
}

type auditItem struct {
	typ, sandbox string
	gen          int64
	allowed      bool
	data         any
}

type auditState struct {
	audit        chan auditItem
	auditDropped atomic.Int64
}

func (m *Manager) writeAudit(it auditItem) {
	cause := "deny"
	if it.allowed {
		cause = "allow"
	}
	data, _ := json.Marshal(it.data)
	ev := &store.Event{SandboxID: it.sandbox, Generation: it.gen, Type: it.typ, Cause: cause, Data: data, Time: m.now()}
	if err := m.store.AppendEvent(context.Background(), ev); err != nil {
		m.log.Warn("record audit", "sandbox", it.sandbox, "err", err)
		return
	}
	m.notifyEvents()
}

// AuditDropped is how many egress records were dropped because the queue was full.
func (m *Manager) AuditDropped() int64 { return m.auditDropped.Load() }
