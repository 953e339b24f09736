package manager

import (
	"context"
	"sort"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// Leftover is a host resource that carries Airlock's name but has no live record.
type Leftover struct {
	SandboxID string `json:"sandbox_id"`
	Reason    string `json:"reason"`
}

// GC finds (and unless dryRun, removes) sandbox resources on the host that no live
// record owns: what a crash or a failed delete left behind.
func (m *Manager) GC(ctx context.Context, dryRun bool) ([]Leftover, error) {
	var out []Leftover
	err := m.eachDriverIDs(ctx, func(drv runtime.Driver, ids []string) {
		sort.Strings(ids)
		out = append(out, m.collect(ctx, drv, ids, dryRun)...)
	})
	if err != nil {
		return nil, err
	}
	return append(out, m.orphanMembers(ctx, dryRun)...), nil
}

// collect handles the leftovers among ids, which drv has resources for.
func (m *Manager) collect(ctx context.Context, drv runtime.Driver, ids []string, dryRun bool) []Leftover {
	var out []Leftover
	for _, id := range ids {
		unlock := m.locks.lock(id)
		sb, err := m.store.GetSandbox(ctx, id)
		reason := ""
		switch {
		case err != nil:
			reason = "no record"
		case sb.State == Terminated:
			reason = "the sandbox is terminated"
		}
		if reason != "" {
			out = append(out, Leftover{SandboxID: id, Reason: reason})
			if !dryRun {
				if err := drv.Delete(ctx, id); err != nil {
					m.log.Warn("gc", "sandbox", id, "err", err)
				}
			}
		}
		unlock()
	}
	return out
}

// retryDeletes retries terminates that failed, with exponential backoff per sandbox;
// the record stays (terminating or failed) until the delete succeeds.
func (m *Manager) retryDeletes(ctx context.Context) {
	list, err := m.store.ListSandboxes(ctx, store.SandboxFilter{States: []store.State{Terminating, Failed}})
	if err != nil {
		return
	}
	now := m.now()
	for _, sb := range list {
		m.mu.Lock()
		r := m.retries[sb.ID]
		due := r.next.IsZero() || !now.Before(r.next)
		m.mu.Unlock()
		if !due {
			continue
		}
		m.sweepOne(ctx, sb.ID, sb.State, func(ctx context.Context, sb *store.Sandbox) error {
			err := m.terminate(ctx, sb, "retry")
			m.mu.Lock()
			defer m.mu.Unlock()
			if err == nil {
				delete(m.retries, sb.ID)
				return nil
			}
			wait := max(r.wait*2, sweepEvery)
			m.retries[sb.ID] = retry{wait: min(wait, 10*time.Minute), next: now.Add(min(wait, 10*time.Minute))}
			return err
		})
	}
}

type retry struct {
	wait time.Duration
	next time.Time
}
