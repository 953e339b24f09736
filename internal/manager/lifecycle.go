package manager

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
)

// Suspend stops a sandbox's compute and keeps its handle and upper layer. It is
// idempotent and returns once the kept state is safe and the container is gone.
func (m *Manager) Suspend(ctx context.Context, call Call, ref string) (*store.Operation, *store.Sandbox, error) {
	return m.lifecycleOp(ctx, call, ref, "suspend", func(ctx context.Context, sb *store.Sandbox) error {
		return m.suspend(ctx, sb, "suspend")
	})
}

// Resume starts a fresh container behind a suspended sandbox (generation + 1). A
// suspended sandbox whose node is lost, stopped or drained, or a lost one, moves to
// this node (move.go); the operation's result is then the Move, which says since when
// a lost sandbox's changes are lost.
func (m *Manager) Resume(ctx context.Context, call Call, ref string) (*store.Operation, *store.Sandbox, error) {
	return m.lifecycleOpBody(ctx, call, ref, "resume", nil, func(ctx context.Context, sb *store.Sandbox, op *store.Operation) error {
		mv, err := m.moveHere(ctx, sb, "resume")
		if err != nil || mv != nil {
			if mv != nil {
				op.Result, _ = json.Marshal(mv)
			}
			return err
		}
		return m.resume(ctx, sb, "resume")
	})
}

// lifecycleOp wraps one change of an existing sandbox (a move of its state, its ports,
// its lifetime) in a durable operation that honours Idempotency-Key and If-Match; do runs
// under the sandbox's lock on a fresh read of its record.
func (m *Manager) lifecycleOp(ctx context.Context, call Call, ref, kind string, do func(context.Context, *store.Sandbox) error) (*store.Operation, *store.Sandbox, error) {
	return m.lifecycleOpBody(ctx, call, ref, kind, nil, func(ctx context.Context, sb *store.Sandbox, _ *store.Operation) error {
		return do(ctx, sb)
	})
}

// lifecycleOpBody is lifecycleOp for a request with a body (part of its idempotency).
func (m *Manager) lifecycleOpBody(ctx context.Context, call Call, ref, kind string, body any, do func(context.Context, *store.Sandbox, *store.Operation) error) (*store.Operation, *store.Sandbox, error) {
	sb, err := m.Resolve(ctx, call.Owner, ref)
	if err != nil {
		return nil, nil, err
	}
	if call.IfMatch != 0 && call.IfMatch != sb.Version {
		return nil, nil, errdefs.VersionConflict("sandbox %q is at version %d, not %d", sb.Name, sb.Version, call.IfMatch).
			WithDetails(map[string]any{"version": sb.Version})
	}
	op, replay, err := m.beginOp(ctx, call, kind, sb.ID, map[string]any{"sandbox": sb.ID, "body": body})
	if err != nil {
		return nil, nil, err
	}
	if replay {
		return m.replayed(ctx, op)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	if sb, err = m.store.GetSandbox(ctx, sb.ID); err != nil {
		return op, nil, m.finishOp(op, "", err)
	}
	err = do(ctx, sb, op)
	return op, sb, m.finishOp(op, sb.ID, err)
}

// suspend does the work; the caller holds the sandbox's lock.
func (m *Manager) suspend(ctx context.Context, sb *store.Sandbox, cause string) error {
	if err := m.may(VerbSuspend, sb); err != nil || sb.State == Suspended {
		return err
	}
	if sb.State != Suspending {
		if err := m.setState(ctx, sb, Suspending, cause); err != nil {
			return err
		}
	}
	if err := m.stopKeepingMemory(ctx, sb, cause); err != nil { // memory.go
		return unavailable(err, "sandbox %q could not be suspended", sb.Name)
	}
	m.detach(ctx, sb.ID)
	sb.SuspendedAt = m.now()
	if err := m.setState(ctx, sb, Suspended, cause); err != nil {
		return err
	}
	m.uploadFiles(ctx, sb) // with an object store: another node can resume it
	return nil
}

// resume does the work; the caller holds the sandbox's lock.
func (m *Manager) resume(ctx context.Context, sb *store.Sandbox, cause string) error {
	if err := m.may(VerbResume, sb); err != nil || sb.State == Running {
		return err
	}
	if sb.State == Lost {
		// This node was lost and is back, with the sandbox's layer.
		if err := m.recoverLost(ctx, sb); err != nil {
			return unavailable(err, "sandbox %q could not be taken back", sb.Name)
		}
	}
	if !sb.ExpiresAt.IsZero() && !m.now().Before(sb.ExpiresAt) {
		sb.Failure = "the sandbox reached its maximum lifetime"
		if err := m.terminate(ctx, sb, "max_lifetime"); err != nil {
			return errdefs.Unavailable("sandbox %q reached its maximum lifetime and could not be terminated yet; it will be retried", sb.Name).WithCause(err)
		}
		return errdefs.Precondition("sandbox %q reached its maximum lifetime and was terminated", sb.Name)
	}
	img, err := m.images.ByDigest(sb.ImageDigest)
	if err != nil {
		return errdefs.Precondition("the image %s of sandbox %q is gone", sb.ImageDigest, sb.Name).WithCause(err)
	}
	if err := m.roomToStart(); err != nil {
		return err
	}
	admitted, err := m.admit(ctx, sb.ID, sb.Limits.Memory)
	if err != nil {
		return err
	}
	defer admitted()
	if sb.State != Resuming {
		if err := m.setState(ctx, sb, Resuming, cause); err != nil {
			return err
		}
	}
	sb.Generation++ // the container being built is a new generation
	if err := m.startContainer(ctx, sb, img); err != nil {
		sb.Generation--
		if serr := m.driver(sb).Stop(ctx, sb.ID); serr != nil {
			m.log.Warn("undo a failed resume", "sandbox", sb.ID, "err", serr)
		}
		m.detach(ctx, sb.ID)
		if serr := m.setState(ctx, sb, Suspended, "resume_failed"); serr != nil {
			// Left resuming: recovery and the next call put it back.
			m.log.Warn("record a failed resume", "sandbox", sb.ID, "err", serr)
		}
		return unavailable(err, "sandbox %q could not be resumed", sb.Name)
	}
	sb.LastActivity = m.now()
	return m.setState(ctx, sb, Running, cause)
}

// ensureRunning resumes a suspended sandbox transparently for a call that touches it,
// finishing a suspend under way first; a sandbox the table does not let be used is
// refused.
func (m *Manager) ensureRunning(ctx context.Context, sb *store.Sandbox) (*store.Sandbox, error) {
	away := sb.State == Suspended && !m.ownRecord(sb) // it may move here (move.go)
	if err := m.may(VerbUse, sb); !away && (err != nil || sb.State == Running) {
		return sb, err
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	fresh, err := m.store.GetSandbox(ctx, sb.ID)
	if err != nil {
		return sb, err
	}
	if fresh.State == Suspended && !m.ownRecord(fresh) {
		if mv, err := m.moveHere(ctx, fresh, "touch"); err != nil || mv != nil {
			return fresh, err
		}
	}
	if err := m.may(VerbUse, fresh); err != nil {
		return fresh, err
	}
	if fresh.State == Suspending {
		// A suspend is under way elsewhere; it holds no lock now, so finish it first.
		if err := m.suspend(ctx, fresh, "suspend"); err != nil {
			return fresh, err
		}
	}
	if err := m.resume(ctx, fresh, "touch"); err != nil {
		return fresh, err
	}
	return fresh, nil
}

// sweep applies the timers: idle suspension, maximum lifetime and TTL of suspended
// sandboxes. Reading status never counts as activity; inbound traffic does, and so does
// work in progress (a running exec, an open PTY, a session's reply).
func (m *Manager) sweep(ctx context.Context) {
	if m.acting() != nil {
		return // another instance holds this node's name, and its sandboxes
	}
	m.WatchNodes(ctx)
	m.retryDeletes(ctx)
	m.retryCleanups(ctx)
	list, err := m.store.ListSandboxes(ctx, m.here(store.SandboxFilter{States: []store.State{Running, Suspended}}))
	if err != nil {
		m.log.Warn("sweep", "err", err)
		return
	}
	now := m.now()
	for _, sb := range list {
		m.overlayActivity(sb)
		var do func(context.Context, *store.Sandbox) error
		switch {
		case !sb.ExpiresAt.IsZero() && !now.Before(sb.ExpiresAt):
			do = func(ctx context.Context, sb *store.Sandbox) error {
				sb.Failure = "the sandbox reached its maximum lifetime"
				return m.terminate(ctx, sb, "max_lifetime")
			}
		case sb.State == Running && sb.IdleSuspend > 0 && now.Sub(sb.LastActivity) >= sb.IdleSuspend && !m.busy(sb.ID):
			do = func(ctx context.Context, sb *store.Sandbox) error {
				if m.busy(sb.ID) || m.now().Sub(sb.LastActivity) < sb.IdleSuspend {
					return nil // work started meanwhile
				}
				return m.suspend(ctx, sb, "idle")
			}
		case sb.State == Suspended && sb.TTL > 0 && now.Sub(sb.SuspendedAt) >= sb.TTL:
			do = func(ctx context.Context, sb *store.Sandbox) error {
				sb.Failure = "the sandbox stayed suspended past its TTL"
				return m.terminate(ctx, sb, "ttl")
			}
		default:
			continue
		}
		m.sweepOne(ctx, sb.ID, sb.State, do)
	}
}

func (m *Manager) sweepOne(ctx context.Context, id string, state State, do func(context.Context, *store.Sandbox) error) {
	unlock := m.locks.lock(id)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, id)
	if err != nil || sb.State != state {
		return // changed meanwhile; the next sweep looks again
	}
	m.overlayActivity(sb)
	if err := do(ctx, sb); err != nil && !errors.Is(err, context.Canceled) {
		m.log.Warn("timer action", "sandbox", id, "err", err)
	}
}

// Sweep runs the timers once (tests drive it with an injected clock).
func (m *Manager) Sweep(ctx context.Context) { m.sweep(ctx) }

// sweepEvery is how often the timers run.
const sweepEvery = 5 * time.Second

// SetLifetime moves the end of a sandbox's maximum lifetime to d from now (the E2B
// "timeout"), earlier or later. A running sandbox's agent, which enforces the end on its
// own clock, is told first; a suspended sandbox's next start carries the new end.
func (m *Manager) SetLifetime(ctx context.Context, call Call, ref string, d time.Duration) (*store.Operation, *store.Sandbox, error) {
	if d < m.cfg.MinMaxLifetime || d > m.cfg.MaxMaxLifetime {
		return nil, nil, errdefs.Invalid("a lifetime of %s is out of range: from %s to %s", d, m.cfg.MinMaxLifetime, m.cfg.MaxMaxLifetime)
	}
	return m.lifecycleOpBody(ctx, call, ref, "lifetime", d.String(), func(ctx context.Context, sb *store.Sandbox, _ *store.Operation) error {
		if err := m.may(VerbLifetime, sb); err != nil {
			return err
		}
		end := m.now().Add(d)
		if sb.State == Running {
			// Rounded up to the second, as the agent's start-up deadline is.
			if err := m.agentClient(sb).SetLifetime(ctx, end.Add(time.Second-1)); err != nil {
				return errdefs.Unavailable("sandbox %q: its agent did not take the new lifetime; nothing changed", sb.Name).WithCause(err)
			}
		}
		sb.ExpiresAt = end
		if err := m.store.UpdateSandbox(ctx, sb); err != nil {
			return err
		}
		m.event(sb, "lifetime", "set_lifetime", map[string]any{"expires_at": end})
		return nil
	})
}
