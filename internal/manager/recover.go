package manager

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// Recover makes the store and the host agree after a (re)start: running sandboxes whose
// containers live are kept as they are, ones that ended are recorded and cleaned, ones
// marked lost while the node was away are suspended again, containers of sandboxes
// that moved to another node meanwhile are deleted (lost.go), creates
// and terminates that were in flight are finished or rolled back, the cleanups of
// terminated sandboxes that were pending start again (in the background), operations
// left running are closed, and any host resource with Airlock's name but no live
// record is removed.
func (m *Manager) Recover(ctx context.Context) error {
	if err := m.backfillSnapshots(ctx); err != nil {
		return fmt.Errorf("record snapshots: %w", err)
	}
	m.recoverSnapshotMemory() // memsnap.go
	all, err := m.ownSandboxes(ctx)
	if err != nil {
		return err
	}
	cleanups, err := m.pendingCleanups(ctx)
	if err != nil {
		return err
	}
	cleaning := map[string]bool{}
	for _, op := range cleanups {
		cleaning[op.SandboxID] = true
	}
	live := map[string]bool{}
	for _, sb := range all {
		if sb.State != Terminated || cleaning[sb.ID] {
			// A uid range is free only once its sandbox's cleanup has run.
			m.mu.Lock()
			m.slots[sb.UIDBase] = sb.ID
			m.mu.Unlock()
		}
		if sb.State != Terminated {
			live[sb.ID] = true
		}
	}
	for _, sb := range all {
		if !live[sb.ID] {
			continue
		}
		m.recoverOne(ctx, sb)
	}
	if err := m.closeInterrupted(ctx); err != nil {
		return err
	}
	m.retryCleanups(ctx) // their sandboxes' resources are theirs, not leftovers
	for _, id := range m.networkLeftovers(ctx) {
		if cleaning[id] {
			continue
		}
		m.log.Info("remove leftover sandbox network", "sandbox", id)
		m.detach(ctx, id)
	}
	for _, id := range m.workspaceLeftovers(ctx) {
		if cleaning[id] {
			continue
		}
		m.log.Info("remove leftover workspace mount", "sandbox", id)
		m.unmountWorkspace(id)
	}
	m.reconcileVolumes(ctx, cleaning)
	return m.eachDriverIDs(ctx, func(drv runtime.Driver, ids []string) {
		for _, id := range ids {
			sb, err := m.store.GetSandbox(ctx, id)
			if err == nil && !m.ownRecord(sb) {
				m.removeStale(ctx, drv, sb) // it moved while this node was away
				continue
			}
			if err == nil && (sb.State != Terminated || cleaning[id]) {
				continue
			}
			m.log.Info("remove leftover sandbox resources", "sandbox", id)
			if err := drv.Delete(ctx, id); err != nil {
				m.log.Warn("remove leftover", "sandbox", id, "err", err)
			}
		}
	})
}

// closeInterrupted fails the node's operations that a restart interrupted (all but
// cleanups, which are resumed), a page at a time.
func (m *Manager) closeInterrupted(ctx context.Context) error {
	f := store.OperationFilter{States: []string{store.OpPending, store.OpRunning}, Node: m.cfg.NodeName}
	for {
		ops, err := m.store.ListOperations(ctx, f)
		if err != nil {
			return err
		}
		for _, op := range ops {
			if op.Kind == cleanupKind {
				continue
			}
			m.releaseInterrupted(ctx, op)
			op.State = store.OpFailed
			op.ErrorCode = "unavailable"
			op.ErrorMessage = "interrupted by a daemon restart; the sandbox's state shows the outcome"
			op.UpdatedAt = m.now()
			if err := m.store.UpdateOperation(ctx, op); err != nil {
				m.log.Warn("close interrupted operation", "op", op.ID, "err", err)
			}
		}
		if len(ops) < f.PageLimit() {
			return nil
		}
		f.AfterID = ops[len(ops)-1].ID
	}
}

func (m *Manager) recoverOne(ctx context.Context, sb *store.Sandbox) {
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	log := m.log.With("sandbox", sb.ID, "state", sb.State)
	defer m.recoverMemory(ctx, sb) // memory.go, once the state is settled
	switch sb.State {
	case Creating:
		log.Info("roll back interrupted create")
		m.rollbackCreate(sb)
	case Lost:
		if err := m.recoverLost(ctx, sb); err != nil {
			log.Warn("take back a sandbox lost with this node", "err", err)
		}
	case Terminating, Failed:
		if err := m.terminate(ctx, sb, "recover"); err != nil {
			log.Warn("retry delete", "err", err)
		}
	case Suspending:
		if err := m.suspend(ctx, sb, "recover"); err != nil {
			log.Warn("finish interrupted suspend", "err", err)
		}
	case Resuming:
		// The resume did not finish: put it back to suspended; the next call resumes it.
		if err := m.driver(sb).Stop(ctx, sb.ID); err != nil {
			log.Warn("undo interrupted resume", "err", err)
			return
		}
		if err := m.setState(ctx, sb, Suspended, "recover"); err != nil {
			log.Warn("record an undone resume", "err", err)
		}
	case Running:
		st, err := m.driver(sb).Status(ctx, sb.ID)
		if err != nil {
			log.Warn("read status", "err", err)
			return
		}
		if st == runtime.StatusPaused {
			// Only a snapshot freezes a sandbox, and it thaws it before it ends: a frozen
			// sandbox here is one whose snapshot the crash interrupted.
			if fz, ok := m.driver(sb).(runtime.Freezer); ok {
				if err := fz.Thaw(ctx, sb.ID); err != nil {
					log.Warn("thaw after interrupted snapshot", "err", err)
				}
			}
			st = runtime.StatusRunning
		}
		if st == runtime.StatusRunning {
			if _, err := m.deliverSecrets(ctx, sb, true); err != nil { // files in place, substitutions again
				log.Warn("redeliver secrets", "err", err)
			}
			if m.net != nil {
				if pol, err := parsePolicy(sb.Network); err == nil {
					if _, err := m.net.Attach(ctx, sb, pol); err != nil {
						log.Warn("reattach network", "err", err)
					}
				}
			}
			log.Info("reattached")
			return
		}
		m.containerGone(ctx, sb, "the sandbox's container ended while the daemon was down")
	}
}

// releaseInterrupted lets go of the storage of a suspended sandbox whose operation a
// crash interrupted: a snapshot or a restore mounts a suspended sandbox's disk for the
// while, and nothing else would unmount it before the sandbox's next start.
func (m *Manager) releaseInterrupted(ctx context.Context, op *store.Operation) {
	if op.SandboxID == "" {
		return
	}
	unlock := m.locks.lock(op.SandboxID)
	defer unlock()
	sb, err := m.store.GetSandbox(ctx, op.SandboxID)
	if err != nil || sb.State != Suspended {
		return
	}
	if err := m.driver(sb).Stop(ctx, sb.ID); err != nil {
		m.log.Warn("release the storage of an interrupted operation", "sandbox", sb.ID, "op", op.ID, "err", err)
	}
}
