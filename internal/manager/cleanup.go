package manager

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// A terminate is acknowledged in two steps, so that the caller waits only for what it
// needs:
//
//  1. the ack: a cleanup operation is recorded, every process of the container is
//     killed (runtime.Killer), and the record becomes a tombstone (terminated: no plane
//     reaches it and its name is free);
//  2. the cleanup, in the background: the container's record, mounts, upper layer and
//     cgroups (Driver.Delete), the network (veth, addresses, nftables set entries),
//     secret bindings, and last the uid range. The operation then succeeds.
//
// The cleanup operation is the durable part: it is stored before anything is killed, so
// a daemon that dies at any point finds it at its next start (Recover) and finishes the
// terminate; a cleanup that fails stays running with a message that says so and is
// retried by the sweep with a backoff; gc and the node's health show the pending ones.
// Everything a cleanup frees is named by the sandbox's id and stays taken until it is
// freed, so a new sandbox of the same name (a new id) never meets it.

// cleanupKind is the kind of the operation that records a terminated sandbox's cleanup.
const cleanupKind = "cleanup"

// cleanupWorkers bounds the cleanups that run at once.
const cleanupWorkers = 4

// cleanupKey is the idempotency key of a sandbox's cleanup operation: one per sandbox.
// A NUL cannot come in an HTTP header, so no caller's key is ever equal to it.
func cleanupKey(id string) string { return "\x00cleanup/" + id }

// A terminate's records are two writes when the store can make each one
// (store.ClaimWriter, the write a pool claim makes): before the kill, the cleanup
// operation with the sandbox terminating and its state event; after it, the tombstone
// with its state event and, for a terminate asked for, its operation ended (stored only
// then when it has no idempotency key). Stores without it write each record on its own.

// recordTerminating stores the cleanup operation of sb (or finds the one stored
// before) and sb terminating; the caller holds its lock.
func (m *Manager) recordTerminating(ctx context.Context, sb *store.Sandbox, cause string) (*store.Operation, error) {
	if w, one := m.store.(store.ClaimWriter); one && sb.State != Terminating && transition(sb.State, Terminating) == nil {
		op := m.newCleanupOp(sb)
		ev, from := m.moveState(sb, Terminating, cause)
		err := w.WriteClaim(ctx, store.Claim{Sandbox: sb, Op: op, NewOp: true, Events: []*store.Event{ev}})
		if err == nil {
			m.notifyEvents()
			return op, nil
		}
		sb.State = from
		if !errors.Is(err, errdefs.ErrAlreadyExists) {
			return nil, err
		}
		// A cleanup recorded before (a terminate the daemon did not finish): found next.
	}
	op, err := m.recordCleanup(ctx, sb)
	if err != nil {
		return nil, err
	}
	if sb.State != Terminating {
		if err := m.setState(ctx, sb, Terminating, cause); err != nil {
			return nil, err
		}
	}
	return op, nil
}

// newCleanupOp is the cleanup operation of sb, running, not yet stored.
func (m *Manager) newCleanupOp(sb *store.Sandbox) *store.Operation {
	now := m.now()
	return &store.Operation{
		ID: newID("op_"), Kind: cleanupKind, Owner: sb.Owner, SandboxID: sb.ID, State: store.OpRunning,
		IdempotencyKey: cleanupKey(sb.ID), RequestHash: requestHash(cleanupKind, sb.ID),
		CreatedAt: now, UpdatedAt: now,
	}
}

// moveState sets sb's state to to, not stored, and returns the state event that goes
// with it and the state it had.
func (m *Manager) moveState(sb *store.Sandbox, to State, cause string) (*store.Event, State) {
	from := sb.State
	sb.State = to
	return m.newEvent(sb, "state", cause, map[string]string{"from": string(from), "to": string(to)}), from
}

// recordCleanup stores the cleanup operation of sb, or finds the one stored before.
func (m *Manager) recordCleanup(ctx context.Context, sb *store.Sandbox) (*store.Operation, error) {
	op := m.newCleanupOp(sb)
	existing, err := m.store.CreateOperation(ctx, op)
	if errors.Is(err, errdefs.ErrAlreadyExists) && existing != nil {
		return existing, nil
	}
	return op, err
}

// recordTerminated stores sb terminated, with end's operation ended in the same write
// if there is one and the store can.
func (m *Manager) recordTerminated(ctx context.Context, sb *store.Sandbox, cause string, end *endOp) error {
	w, one := m.store.(store.ClaimWriter)
	if end == nil || !one || transition(sb.State, Terminated) != nil {
		return m.setState(ctx, sb, Terminated, cause)
	}
	ev, from := m.moveState(sb, Terminated, cause)
	if err := end.write(ctx, m, w, sb, ev); err != nil {
		sb.State = from
		return err
	}
	return nil
}

// tombstone kills sb's processes and records it terminated (with end, if not nil:
// recordTerminated); the caller holds its lock and has recorded its cleanup. A kill
// that fails leaves it terminating, for the sweep.
func (m *Manager) tombstone(ctx context.Context, sb *store.Sandbox, cause string, end *endOp) error {
	var err error
	if k, ok := m.driver(sb).(runtime.Killer); ok {
		err = k.Kill(ctx, sb.ID)
	} else {
		err = m.driver(sb).Delete(ctx, sb.ID) // no way to kill alone: remove it all now
	}
	if err != nil {
		if sb.State != Terminating {
			if serr := m.setState(ctx, sb, Terminating, cause); serr != nil {
				m.log.Warn("record a terminate to retry", "sandbox", sb.ID, "err", serr)
			}
		}
		return unavailable(err, "sandbox %q could not be stopped yet; it will be retried", sb.Name)
	}
	if err := m.recordTerminated(ctx, sb, cause, end); err != nil {
		return err
	}
	m.mu.Lock()
	delete(m.activity, sb.ID)
	m.mu.Unlock()
	return nil
}

// startCleanup runs the cleanup op of sandbox id in the background, unless it runs
// already; at most cleanupWorkers run at once.
func (m *Manager) startCleanup(id string, op *store.Operation) {
	if !m.claimCleanup(id) {
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		// A cleanup asked for runs even if the manager closes meanwhile: Close waits
		// for it (a daemon killed instead resumes it at its next start).
		m.cleanSem <- struct{}{}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(m.ctx), opTimeout)
		err := m.cleanup(ctx, id, op)
		cancel()
		<-m.cleanSem
		m.endCleanup(id, op, err)
	}()
}

// claimCleanup marks the cleanup of sandbox id as running, unless it is already.
func (m *Manager) claimCleanup(id string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cleaning[id] {
		return false
	}
	m.cleaning[id] = true
	return true
}

// cleanupNow runs the cleanup op of sandbox id and waits for it (gc); running is true
// when it was running in the background already (and has not been waited for).
func (m *Manager) cleanupNow(ctx context.Context, id string, op *store.Operation) (running bool, err error) {
	if !m.claimCleanup(id) {
		return true, nil
	}
	err = m.cleanup(ctx, id, op)
	m.endCleanup(id, op, err)
	return false, err
}

// cleanup takes sandbox id's lock and runs its cleanup.
func (m *Manager) cleanup(ctx context.Context, id string, op *store.Operation) error {
	unlock := m.locks.lock(id)
	defer unlock()
	return m.cleanupLocked(ctx, id, op)
}

// cleanupLocked removes what a terminated sandbox left and closes its cleanup op; the
// caller holds the sandbox's lock. A sandbox not yet tombstoned (the daemon died
// between the record and the kill) is terminated first: the operation stands for the
// terminate that was asked for.
func (m *Manager) cleanupLocked(ctx context.Context, id string, op *store.Operation) error {
	sb, err := m.store.GetSandbox(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) {
		return m.closeCleanup(op, nil) // nothing of the record to clean; gc finds host leftovers
	}
	if err != nil {
		return err
	}
	if sb.State != Terminated {
		if err := m.tombstone(ctx, sb, "recover", nil); err != nil {
			return err
		}
	}
	if err := m.driver(sb).Delete(ctx, sb.ID); err != nil {
		return err
	}
	m.dropMemory(sb) // memory.go
	if err := m.detach(ctx, sb.ID); err != nil {
		return err
	}
	if m.secrets != nil {
		if err := m.secrets.Forget(ctx, sb.Owner, sb.ID); err != nil {
			return err
		}
	}
	m.dropFiles(ctx, sb)
	m.freeSlot(sb.UIDBase, sb.ID)
	if _, ok := poolOf(sb); ok {
		// A retired pool member was nobody's sandbox: its tombstone goes with the rest.
		if err := m.store.DeleteSandbox(ctx, sb.ID); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return m.closeCleanup(op, nil)
}

// closeCleanup records a finished cleanup.
func (m *Manager) closeCleanup(op *store.Operation, err error) error {
	op.ErrorCode, op.ErrorMessage = "", ""
	return m.finishOp(op, op.SandboxID, err)
}

// endCleanup notes how a cleanup run ended: a failure is logged, written on the
// operation (still running) and retried by the sweep after a backoff. The run counts
// as running until all of that is recorded.
func (m *Manager) endCleanup(id string, op *store.Operation, err error) {
	if err != nil {
		m.log.Warn("clean up a terminated sandbox; it will be retried", "sandbox", id, "op", op.ID, "err", err)
		op.ErrorCode = "unavailable"
		op.ErrorMessage = "removing the terminated sandbox's resources failed; it is retried, and the daemon's log says what failed"
		op.UpdatedAt = m.now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if uerr := m.store.UpdateOperation(ctx, op); uerr != nil {
			m.log.Warn("record a failed cleanup", "op", op.ID, "err", uerr)
		}
		cancel()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err == nil {
		delete(m.retries, id)
	} else {
		r := m.retries[id]
		r.wait = min(max(r.wait*2, sweepEvery), 10*time.Minute)
		r.next = m.now().Add(r.wait)
		r.attempts++
		r.err = err.Error()
		m.retries[id] = r
	}
	delete(m.cleaning, id)
	close(m.cleanDone)
	m.cleanDone = make(chan struct{})
}

// pendingCleanups lists this node's cleanup operations not finished yet, at most
// store.MaxOperationPage of them (the rest come up as those finish), in one query.
func (m *Manager) pendingCleanups(ctx context.Context) ([]*store.Operation, error) {
	return m.store.ListOperations(ctx, store.OperationFilter{States: []string{store.OpRunning}, Kind: cleanupKind, Node: m.cfg.NodeName})
}

// retryCleanups starts the pending cleanups whose backoff has passed (and, after a
// restart, every one).
func (m *Manager) retryCleanups(ctx context.Context) {
	ops, err := m.pendingCleanups(ctx)
	if err != nil {
		m.log.Warn("list pending cleanups", "err", err)
		return
	}
	now := m.now()
	for _, op := range ops {
		m.mu.Lock()
		r := m.retries[op.SandboxID]
		m.mu.Unlock()
		if r.next.IsZero() || !now.Before(r.next) {
			m.startCleanup(op.SandboxID, op)
		}
	}
}

// Cleanup is a terminated sandbox whose resources are not all removed yet.
type Cleanup struct {
	SandboxID string    `json:"sandbox_id"`
	Operation string    `json:"operation_id"`
	Since     time.Time `json:"since"`
	Attempts  int       `json:"failed_attempts"`
	LastError string    `json:"last_error,omitempty"`
}

// Cleanups lists the node's pending cleanups, with the failures of each so far.
func (m *Manager) Cleanups(ctx context.Context) ([]Cleanup, error) {
	ops, err := m.pendingCleanups(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]Cleanup, 0, len(ops))
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, op := range ops {
		r := m.retries[op.SandboxID]
		out = append(out, Cleanup{SandboxID: op.SandboxID, Operation: op.ID, Since: op.CreatedAt, Attempts: r.attempts, LastError: r.err})
	}
	return out, nil
}

// WaitCleanups returns once no cleanup is running (one that failed waits for its retry
// and does not count), or when ctx is done.
func (m *Manager) WaitCleanups(ctx context.Context) error {
	for {
		m.mu.Lock()
		n, done := len(m.cleaning), m.cleanDone
		m.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// cleanupCheck is the node health line about pending cleanups: not OK once one has
// failed, so that an operator sees a leak in the making.
func (m *Manager) cleanupCheck(ctx context.Context) runtime.Check {
	list, err := m.Cleanups(ctx)
	c := runtime.Check{Name: "cleanups", OK: err == nil, Detail: fmt.Sprintf("%d pending", len(list))}
	if err != nil {
		c.Detail = err.Error()
		c.Degrades = "terminated sandboxes' resources may not be freed"
		return c
	}
	for _, cl := range list {
		if cl.Attempts > 0 {
			c.OK = false
			c.Detail = fmt.Sprintf("%d pending; sandbox %s failed %d times: %s", len(list), cl.SandboxID, cl.Attempts, cl.LastError)
			c.Degrades = "a terminated sandbox's resources (disk, network, uid range) are not freed yet; they are retried, `airlock gc` retries now"
			break
		}
	}
	return c
}
