package manager

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/store"
)

// Audit records are written by an audit.Writer: each sandbox has its own rate, queue and
// coalescing table, so a sandbox that floods DNS or the proxy loses its own records
// (counted in records_dropped events) and never another sandbox's.

// EgressAudit records one egress decision as an event of its sandbox ("egress"). It
// never blocks. Refusals of the same host, port and reason coalesce into one summary
// per window; allowed connections are never coalesced, since each carries its own
// byte counts.
func (m *Manager) EgressAudit(rec egress.Record) {
	// A refused CONNECT keeps the target as the sandbox wrote it, and a refusal's reason
	// quotes it: up to the proxy's header limit (1 MiB). Stored rows stay small.
	rec.Host, rec.Addr, rec.Method = audit.Clip(rec.Host), audit.Clip(rec.Addr), audit.Clip(rec.Method)
	rec.Rule, rec.Reason = audit.Clip(rec.Rule), audit.Clip(rec.Reason)
	r := audit.Record{Sandbox: rec.Sandbox, Generation: rec.Generation, Type: "egress", Allowed: rec.Allowed, Data: rec, Time: rec.Time}
	if !rec.Allowed {
		r.Key = fmt.Sprintf("egress\x00%s\x00%d\x00%s\x00%s", rec.Host, rec.Port, rec.Method, rec.Reason)
		r.Subject = fmt.Sprintf("refused connections to %s:%d", rec.Host, rec.Port)
	}
	m.auditW.Add(r)
	verdict := rec.Decision
	if verdict == "" {
		verdict = map[bool]string{true: "allow", false: "deny"}[rec.Allowed]
	}
	m.metrics.Egress(rec.Mode, verdict, rec.BytesUp, rec.BytesDown)
}

// DNSAudit records one DNS query of a sandbox ("dns"). Identical queries (name, type,
// answer) coalesce into one summary per window.
func (m *Manager) DNSAudit(rec egress.DNSRecord) {
	rec.Name, rec.Type, rec.Rcode, rec.Reason = audit.Clip(rec.Name), audit.Clip(rec.Type), audit.Clip(rec.Rcode), audit.Clip(rec.Reason)
	m.auditW.Add(audit.Record{Sandbox: rec.Sandbox, Generation: rec.Generation, Type: "dns", Allowed: rec.Allowed, Data: rec, Time: rec.Time,
		Key:     fmt.Sprintf("dns\x00%s\x00%s\x00%s\x00%t", rec.Name, rec.Type, rec.Rcode, rec.Allowed),
		Subject: fmt.Sprintf("%s queries for %s", rec.Type, rec.Name)})
}

// AuditDropped is how many audit records were not stored since the daemon started.
func (m *Manager) AuditDropped() int64 { return m.auditW.Dropped() }

// pruneEvents applies the retention: the sandboxes that got rows since the last call
// keep their newest EventsPerSandbox, and, once every pruneAgeEvery, events older than
// EventMaxAge go.
func (m *Manager) pruneEvents(ctx context.Context) {
	r := store.EventRetention{MaxPerSandbox: m.cfg.EventsPerSandbox, Sandboxes: m.auditW.Written()}
	if len(r.Sandboxes) == 0 {
		r.MaxPerSandbox = 0
	}
	now := m.now()
	if m.cfg.EventMaxAge > 0 && now.Sub(m.lastAgePrune) >= pruneAgeEvery {
		r.Before, m.lastAgePrune = now.Add(-m.cfg.EventMaxAge), now
	}
	if r.MaxPerSandbox == 0 && r.Before.IsZero() {
		return
	}
	if n, err := m.store.PruneEvents(ctx, r); err != nil {
		m.log.Warn("prune events", "err", err)
	} else if n > 0 {
		m.log.Debug("pruned events", "removed", n)
	}
}

// pruneAgeEvery is how often events past their age are looked for.
const pruneAgeEvery = time.Minute
