package manager

import (
	"context"
	"fmt"
	"slices"
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
// record owns: what a crash or a failed delete left behind, and the resources of
// terminated sandboxes whose cleanup is pending (which it runs now, unless it is
// running already).
func (m *Manager) GC(ctx context.Context, dryRun bool) ([]Leftover, error) {
	out, pending, err := m.collectCleanups(ctx, dryRun)
	if err != nil {
		return nil, err
	}
	err = m.eachDriverIDs(ctx, func(drv runtime.Driver, ids []string) {
		ids = slices.DeleteFunc(ids, func(id string) bool { return pending[id] })
		sort.Strings(ids)
		out = append(out, m.collect(ctx, drv, ids, dryRun)...)
	})
	if err != nil {
		return nil, err
	}
	orphans := m.orphanMembers(ctx, dryRun)
	if !dryRun && len(orphans) > 0 {
		// Each retired member's cleanup (its container, network, uid range and record)
		// has started; gc answers once they are done, as for the cleanups above.
		if err := m.WaitCleanups(ctx); err != nil {
			return nil, err
		}
	}
	return append(out, orphans...), nil
}

// collectCleanups reports the pending cleanups and, unless dryRun, waits for the
// running ones and runs the others now; pending holds their sandboxes' ids.
func (m *Manager) collectCleanups(ctx context.Context, dryRun bool) (out []Leftover, pending map[string]bool, err error) {
	list, err := m.Cleanups(ctx)
	if err != nil {
		return nil, nil, err
	}
	if !dryRun {
		if err := m.WaitCleanups(ctx); err != nil {
			return nil, nil, err
		}
	}
	pending = map[string]bool{}
	for _, cl := range list {
		pending[cl.SandboxID] = true
		reason := "the sandbox is terminated and its cleanup is pending"
		if cl.Attempts > 0 {
			reason += fmt.Sprintf(" (%d failed attempts, the last: %s)", cl.Attempts, cl.LastError)
		}
		if !dryRun {
			reason += m.finishCleanup(ctx, cl)
		}
		out = append(out, Leftover{SandboxID: cl.SandboxID, Reason: reason})
	}
	return out, pending, nil
}

// finishCleanup runs a pending cleanup now, unless it finished or runs meanwhile, and
// says how that went.
func (m *Manager) finishCleanup(ctx context.Context, cl Cleanup) string {
	op, err := m.store.GetOperation(ctx, cl.Operation)
	if err == nil && op.State != store.OpRunning {
		return "; it has finished"
	}
	running := false
	if err == nil {
		running, err = m.cleanupNow(ctx, cl.SandboxID, op)
	}
	switch {
	case err != nil:
		return "; it failed again: " + err.Error()
	case running:
		return "; it is running"
	}
	return "; it has finished"
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
	list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: []store.State{Terminating, Failed}}))
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
	wait     time.Duration
	next     time.Time
	attempts int    // failed so far (cleanups)
	err      string // the last failure (cleanups)
}
