package manager

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
)

// SetSnapshots gives the manager its snapshot store; without one, snapshot, restore and
// fork are unavailable.
func (m *Manager) SetSnapshots(s *snapshot.Store) { m.snaps = s }

func (m *Manager) storage(sb *store.Sandbox) (runtime.Storage, error) {
	st, ok := m.driver(sb).(runtime.Storage)
	if !ok || m.snaps == nil {
		return nil, errdefs.Unavailable("snapshots are not available on this node")
	}
	return st, nil
}

// SnapshotRequest says what a snapshot keeps: its labels, and with Memory the
// sandbox's memory and processes too (memsnap.go).
type SnapshotRequest struct {
	Labels map[string]string `json:"labels"`
	Memory bool              `json:"memory"`
}

// Snapshot takes an immutable snapshot of a sandbox's upper layer: frozen for a
// crash-consistent copy while it runs, or as it is while suspended; with req.Memory,
// its memory image too.
func (m *Manager) Snapshot(ctx context.Context, call Call, ref string, req SnapshotRequest) (*store.Operation, *snapshot.Manifest, error) {
	if err := validateLabels(req.Labels); err != nil {
		return nil, nil, err
	}
	var body any = req.Labels // the request as recorded before memory snapshots, for replays
	if req.Memory {
		body = req
	}
	var man *snapshot.Manifest
	op, _, err := m.lifecycleOpBody(ctx, call, ref, "snapshot", body, func(ctx context.Context, sb *store.Sandbox, op *store.Operation) error {
		var err error
		if man, err = m.snapshotWith(ctx, sb, req.Labels, req.Memory); err == nil {
			op.Result, _ = json.Marshal(man.ID)
		}
		return err
	})
	if err == nil && man == nil && op != nil && len(op.Result) > 0 {
		var id string
		json.Unmarshal(op.Result, &id)
		man, err = m.snaps.Get(id) // a replayed request
	}
	return op, man, err
}

// snapshot does the work; the caller holds the sandbox's lock.
func (m *Manager) snapshot(ctx context.Context, sb *store.Sandbox, labels map[string]string) (*snapshot.Manifest, error) {
	return m.snapshotWith(ctx, sb, labels, false)
}

// snapshotWith is snapshot, with the sandbox's memory image too when memory is set.
func (m *Manager) snapshotWith(ctx context.Context, sb *store.Sandbox, labels map[string]string, memory bool) (_ *snapshot.Manifest, retErr error) {
	stg, err := m.storage(sb)
	if err != nil {
		return nil, err
	}
	meta := snapshot.Manifest{SandboxID: sb.ID, ImageDigest: sb.ImageDigest, Parent: sb.Parent, Labels: labels,
		Consistency: snapshot.Stopped}
	if err := m.may(VerbSnapshot, sb); err != nil {
		return nil, err
	}
	meta.ID = snapshot.NewID()
	switch {
	case memory:
		// memsnap.go: frozen at the point its memory was saved, as a Freeze leaves it.
		thaw, mi, err := m.saveMemoryFrozen(ctx, sb, meta.ID)
		if err != nil {
			return nil, err
		}
		defer thaw()
		defer func() {
			if retErr != nil {
				m.dropSnapshotMemory(meta.ID)
			}
		}()
		meta.Memory = mi
		meta.Consistency = snapshot.CrashConsistent
	case sb.State == Running:
		fz, ok := m.driver(sb).(runtime.Freezer)
		if !ok {
			return nil, errdefs.Unavailable("this runtime cannot freeze a running sandbox; suspend it first")
		}
		if err := fz.Freeze(ctx, sb.ID); err != nil {
			return nil, errdefs.Unavailable("could not freeze sandbox %q", sb.Name).WithCause(err)
		}
		defer fz.Thaw(context.WithoutCancel(ctx), sb.ID)
		meta.Consistency = snapshot.CrashConsistent
	}
	// The record that says whose snapshot it is comes first, so no snapshot is ever
	// ready without one; a failed Create takes it back.
	rec := &store.SnapshotRecord{ID: meta.ID, Owner: sb.Owner, SandboxID: sb.ID, Node: m.cfg.NodeName, CreatedAt: m.now()}
	if err := m.store.CreateSnapshotRecord(ctx, rec); err != nil {
		return nil, err
	}
	var man *snapshot.Manifest
	err = stg.ReadLayer(ctx, sb.ID, sb.Limits.Disk, func(upper string) error {
		var err error
		man, err = m.snaps.Create(ctx, upper, sb.UIDBase, meta)
		return err
	})
	if err != nil {
		if derr := m.store.DeleteSnapshotRecord(context.WithoutCancel(ctx), rec.ID); derr != nil {
			m.log.Warn("remove the record of a failed snapshot", "snapshot", rec.ID, "err", derr)
		}
		return nil, err
	}
	details := map[string]any{"snapshot": man.ID, "stored_size": man.StoredSize, "consistency": man.Consistency}
	if man.Memory != nil {
		details["memory_bytes"] = man.Memory.Bytes
	}
	m.event(sb, "snapshot", "snapshot", details)
	return man, nil
}

// SnapshotOwned checks that owner may see the snapshot and returns it. Who owns a
// snapshot is the daemon's own record of it; the manifest (which a shared object store
// may hold, and anyone who can write there may forge) must agree with that record, or
// the snapshot is not found.
func (m *Manager) SnapshotOwned(ctx context.Context, owner, id string) (*snapshot.Manifest, error) {
	if m.snaps == nil {
		return nil, errdefs.Unavailable("snapshots are not available on this node")
	}
	rec, err := m.store.GetSnapshotRecord(ctx, id)
	if errors.Is(err, errdefs.ErrNotFound) || err == nil && rec.Owner != owner {
		return nil, errdefs.NotFound("snapshot %q not found", id)
	}
	if err != nil {
		return nil, err
	}
	man, err := m.snaps.Get(id)
	if errors.Is(err, errdefs.ErrNotFound) && rec.Node != "" && rec.Node != m.cfg.NodeName && !m.snaps.Shared() {
		return nil, errdefs.Precondition("snapshot %s is on node %q, which took it, and this node (%q) shares no object store with it (objects: is not set): it is read, forked and restored on that node",
			id, rec.Node, m.cfg.NodeName).WithDetails(map[string]any{"node": rec.Node, "reason": "snapshot_on_other_node"})
	}
	if err != nil {
		return nil, err
	}
	if err := m.agrees(rec, man); err != nil {
		return nil, err
	}
	return man, nil
}

// SnapshotNode is the node that took owner's snapshot id ("" when it is not owner's,
// or this node's), and whether the cluster's nodes share snapshots (an object store),
// so that any node may answer for it.
func (m *Manager) SnapshotNode(ctx context.Context, owner, id string) (node string, shared bool, err error) {
	if m.snaps == nil {
		return "", false, nil
	}
	rec, err := m.store.GetSnapshotRecord(ctx, id)
	if err != nil || rec.Owner != owner || rec.Node == m.cfg.NodeName {
		return "", m.snaps.Shared(), err
	}
	return rec.Node, m.snaps.Shared(), nil
}

// agrees refuses, as not found, a manifest that disagrees with the record of its
// snapshot about whose sandbox it is.
func (m *Manager) agrees(rec *store.SnapshotRecord, man *snapshot.Manifest) error {
	if man.ID == rec.ID && man.SandboxID == rec.SandboxID {
		return nil
	}
	m.log.Error("snapshot manifest disagrees with its record; refused", "snapshot", rec.ID,
		"manifest_id", man.ID, "manifest_sandbox", man.SandboxID, "record_sandbox", rec.SandboxID, "location", man.Location)
	return errdefs.NotFound("snapshot %q not found", rec.ID)
}

// Snapshots lists owner's snapshots, of one sandbox when ref is set, from the daemon's
// records of them (the newest store.MaxSnapshotList); a snapshot whose manifest cannot be read or disagrees with its
// record is left out.
func (m *Manager) Snapshots(ctx context.Context, owner, ref string) ([]*snapshot.Manifest, error) {
	if m.snaps == nil {
		return nil, errdefs.Unavailable("snapshots are not available on this node")
	}
	sandboxID := ""
	if ref != "" {
		sb, err := m.Resolve(ctx, owner, ref)
		if err != nil {
			return nil, err
		}
		sandboxID = sb.ID
	}
	recs, err := m.store.ListSnapshotRecords(ctx, owner, sandboxID, 0)
	if err != nil {
		return nil, err
	}
	var out []*snapshot.Manifest
	for _, rec := range recs {
		man, err := m.snaps.Get(rec.ID)
		if err != nil {
			m.log.Warn("list a recorded snapshot", "snapshot", rec.ID, "err", err)
			continue
		}
		if m.agrees(rec, man) != nil {
			continue
		}
		man.Entries = nil
		out = append(out, man)
	}
	return out, nil
}

// backfillSnapshots records, once, the snapshots this node took before snapshots had
// records: from its own state directory only, never a manifest read from the object
// store, and only of a sandbox of this node, owned by that sandbox's owner.
func (m *Manager) backfillSnapshots(ctx context.Context) error {
	if m.snaps == nil {
		return nil
	}
	all, err := m.snaps.List("")
	if err != nil {
		return err
	}
	for _, man := range all {
		if man.Imported || man.SandboxID == "" {
			continue
		}
		if _, err := m.store.GetSnapshotRecord(ctx, man.ID); err == nil || !errors.Is(err, errdefs.ErrNotFound) {
			continue
		}
		sb, err := m.store.GetSandbox(ctx, man.SandboxID)
		if err != nil || !m.ownRecord(sb) {
			continue
		}
		rec := &store.SnapshotRecord{ID: man.ID, Owner: sb.Owner, SandboxID: sb.ID, Node: m.cfg.NodeName, CreatedAt: man.Created}
		if err := m.store.CreateSnapshotRecord(ctx, rec); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			return err
		}
	}
	return nil
}

// DeleteSnapshot removes a snapshot unless a live sandbox still comes from it.
func (m *Manager) DeleteSnapshot(ctx context.Context, owner, id string) error {
	if _, err := m.SnapshotOwned(ctx, owner, id); err != nil {
		return err
	}
	err := m.snaps.Delete(id, func(id string) []string {
		list, _ := m.store.ListSandboxes(ctx, store.SandboxFilter{})
		var deps []string
		for _, sb := range list {
			if sb.Parent == id && sb.State != Terminated {
				deps = append(deps, sb.Name)
			}
		}
		return deps
	})
	if err != nil {
		return err
	}
	m.dropSnapshotMemory(id) // memsnap.go
	if err := m.store.DeleteSnapshotRecord(ctx, id); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return err
	}
	return nil
}

// RestoreRequest says which snapshot to restore and whether to keep a safety copy.
type RestoreRequest struct {
	Snapshot string `json:"snapshot"`
	NoSafety bool   `json:"no_safety"`
}

// Restore replaces a suspended sandbox's upper layer with a snapshot's, after checking
// the snapshot's integrity and image, and after a safety snapshot unless told not to.
// A snapshot taken with its memory gives the sandbox its memory image too, which its
// resume restores (runsc).
// It returns the safety snapshot (nil without one), which the operation's result names.
func (m *Manager) Restore(ctx context.Context, call Call, ref string, req RestoreRequest) (*store.Operation, *store.Sandbox, *snapshot.Manifest, error) {
	if _, err := m.SnapshotOwned(ctx, call.Owner, req.Snapshot); err != nil {
		return nil, nil, nil, err
	}
	op, sb, err := m.lifecycleOpBody(ctx, call, ref, "restore", req, func(ctx context.Context, sb *store.Sandbox, op *store.Operation) error {
		stg, err := m.storage(sb)
		if err != nil {
			return err
		}
		if err := m.may(VerbRestore, sb); err != nil {
			return err
		}
		if err := m.roomToStart(); err != nil {
			return err
		}
		man, err := m.SnapshotOwned(ctx, call.Owner, req.Snapshot)
		if err != nil {
			return err
		}
		if man.ImageDigest != sb.ImageDigest {
			return errdefs.Precondition("snapshot %s was taken on image %s; sandbox %q runs %s", man.ID, man.ImageDigest, sb.Name, sb.ImageDigest).
				WithDetails(map[string]any{"reason": "incompatible_image"})
		}
		if err := m.snaps.Verify(ctx, man.ID); err != nil {
			return corruptErr(err)
		}
		if err := m.verifySnapshotMemory(man); errors.Is(err, snapshot.ErrCorrupt) { // memsnap.go
			return corruptErr(err)
		}
		if !req.NoSafety {
			safety, err := m.snapshot(ctx, sb, map[string]string{"airlock.safety": "before-restore-" + man.ID})
			if err != nil {
				return err
			}
			m.event(sb, "safety_snapshot", "restore", map[string]any{"snapshot": safety.ID})
			op.Result, _ = json.Marshal(safety.ID)
		}
		if err := m.forgetMemory(ctx, sb, "restore", "its files were replaced by a snapshot's"); err != nil { // memory.go
			return err
		}
		err = stg.ReplaceLayer(ctx, sb.ID, sb.Limits.Disk, func(upper string) error {
			return m.snaps.Restore(ctx, man.ID, upper, sb.UIDBase)
		})
		if err != nil {
			return corruptErr(err)
		}
		sb.Parent = man.ID
		m.restoreSnapshotMemory(sb, man) // memsnap.go
		if err := m.store.UpdateSandbox(ctx, sb); err != nil {
			m.dropMemory(sb)
			return err
		}
		m.event(sb, "restored", "restore", map[string]any{"snapshot": man.ID})
		return nil
	})
	var safety *snapshot.Manifest
	if err == nil && op != nil && len(op.Result) > 0 { // the first answer or a replay
		var id string
		json.Unmarshal(op.Result, &id)
		safety, _ = m.snaps.Get(id) // deleted since a replayed restore: none to report
	}
	return op, sb, safety, err
}

func corruptErr(err error) error {
	if errors.Is(err, snapshot.ErrCorrupt) {
		return &errdefs.Error{Class: errdefs.ErrFailedPrecondition, Msg: err.Error(), Cause: err,
			Details: map[string]any{"reason": "corrupt"}}
	}
	return err
}

// ForkRequest names the new sandbox.
type ForkRequest struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels"`
	// Volumes are volumes to attach to the fork: it gets none of its source's.
	Volumes []VolumeMountRequest `json:"volumes,omitempty"`
}

// Fork makes a new, independent sandbox from a snapshot ("snap_…") or from a sandbox
// (live or suspended: a snapshot of it is taken first). Nothing writable is shared;
// lineage is recorded.
func (m *Manager) Fork(ctx context.Context, call Call, src string, req ForkRequest) (*store.Operation, *store.Sandbox, error) {
	if err := ValidateName(req.Name); err != nil {
		return nil, nil, err
	}
	if err := validateLabels(req.Labels); err != nil {
		return nil, nil, err
	}
	if m.snaps == nil {
		return nil, nil, errdefs.Unavailable("snapshots are not available on this node")
	}
	var parent *store.Sandbox
	var man *snapshot.Manifest
	var err error
	if strings.HasPrefix(src, "snap_") {
		if man, err = m.SnapshotOwned(ctx, call.Owner, src); err != nil {
			return nil, nil, err
		}
		if parent, err = m.store.GetSandbox(ctx, man.SandboxID); err != nil {
			return nil, nil, err
		}
	} else if parent, err = m.Resolve(ctx, call.Owner, src); err != nil {
		return nil, nil, err
	}
	img, err := m.images.ByDigest(parent.ImageDigest)
	if err != nil {
		return nil, nil, errdefs.Precondition("the image of %q is gone", parent.Name).WithCause(err)
	}
	stg, err := m.storage(parent) // a fork runs on its parent's runtime
	if err != nil {
		return nil, nil, err
	}
	if err := m.roomToStart(); err != nil {
		return nil, nil, err
	}
	if err := m.placeHere(); err != nil {
		return nil, nil, err
	}
	op, replay, err := m.beginOp(ctx, call, "fork", "", map[string]any{"src": src, "req": req})
	if err != nil {
		return nil, nil, err
	}
	if replay {
		return m.replayed(ctx, op)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	cloner, canClone := m.driver(parent).(runtime.StorageCloner)
	clone := man == nil && canClone && parent.Limits.Disk > 0
	// Why the fork keeps no memory ("": it does, memsnap.go); said in an event. A
	// snapshot's own says it for a fork of a snapshot, below.
	var noMemory string
	if man == nil {
		noMemory = m.memoryRefused(ctx, parent)
	}
	if man == nil && !clone {
		unlock := m.locks.lock(parent.ID)
		fresh, err := m.store.GetSandbox(ctx, parent.ID)
		if err == nil {
			man, err = m.snapshotWith(ctx, fresh, map[string]string{"airlock.fork": req.Name}, noMemory == "")
			if err != nil && noMemory == "" {
				noMemory = memoryFailure(err)
				man, err = m.snapshot(ctx, fresh, map[string]string{"airlock.fork": req.Name})
			}
		}
		unlock()
		if err != nil {
			return op, nil, m.finishOp(op, "", err)
		}
	} else if man != nil {
		if err := m.snaps.Verify(ctx, man.ID); err != nil {
			return op, nil, m.finishOp(op, "", corruptErr(err))
		}
		noMemory = "the snapshot keeps files only"
		if man.Memory != nil {
			noMemory = ""
			if err := m.verifySnapshotMemory(man); errors.Is(err, snapshot.ErrCorrupt) {
				return op, nil, m.finishOp(op, "", corruptErr(err))
			} else if err != nil {
				noMemory = err.Error()
			}
		}
	}
	if len(req.Volumes) > 0 && noMemory == "" {
		noMemory = "volumes are attached to the fork: its processes would see other files than they opened"
	}
	id := newID("sb_")
	release, err := m.reserveLive(ctx, call.Owner, id)
	if err != nil {
		return op, nil, m.finishOp(op, "", err)
	}
	admitted, err := m.admit(ctx, id, parent.Limits.Memory)
	if err != nil {
		release()
		return op, nil, m.finishOp(op, "", err)
	}
	defer admitted()
	now := m.now()
	sb := &store.Sandbox{
		CreatedBy: creatorOf(ctx),
		ID:        id, Name: req.Name, Owner: call.Owner, State: Creating,
		Image: parent.Image, ImageDigest: parent.ImageDigest, Limits: parent.Limits, Env: parent.Env, Labels: req.Labels,
		CreatedAt: now, UpdatedAt: now, LastActivity: now, ExpiresAt: now.Add(parent.ExpiresAt.Sub(parent.CreatedAt)),
		IdleSuspend: parent.IdleSuspend, TTL: parent.TTL, ForkedFrom: parent.ID, Network: parent.Network,
		Runtime: parent.Runtime, Role: parent.Role, NodeSelector: parent.NodeSelector,
	}
	if man != nil {
		sb.Parent = man.ID
	} else {
		sb.Parent = parent.Parent
	}
	op.SandboxID = sb.ID
	if err := m.insertSandbox(ctx, sb, release); err != nil {
		return op, nil, m.finishOp(op, "", err)
	}
	unlock := m.locks.lock(sb.ID)
	defer unlock()
	m.event(sb, "created", "fork", map[string]any{"from": parent.ID, "snapshot": sb.Parent})
	durable := func() error { return nil }
	err = m.attachVolumes(ctx, sb, req.Volumes)
	switch {
	case err != nil:
	case clone:
		durable, err = m.cloneFrom(ctx, parent.ID, sb, cloner, &noMemory)
	default:
		err = stg.ReplaceLayer(ctx, sb.ID, sb.Limits.Disk, func(upper string) error {
			return m.snaps.Restore(ctx, man.ID, upper, sb.UIDBase)
		})
		if err == nil && noMemory == "" {
			if lerr := m.linkSnapshotMemory(sb, man); lerr != nil {
				noMemory = memoryFailure(lerr)
			}
		}
	}
	sb.Generation = 1
	if err == nil && noMemory != "" {
		m.event(sb, "memory_not_kept", "fork", map[string]string{"reason": noMemory})
	}
	if err == nil {
		if err = m.startContainer(ctx, sb, img); err != nil {
			err = unavailable(err, "sandbox %q could not start", req.Name)
		}
		// The copy reaches stable storage while the container starts; the fork is done
		// only when both are.
		if derr := durable(); err == nil {
			err = derr
		}
	}
	if err != nil {
		m.rollbackCreate(sb)
		return op, nil, m.finishOp(op, "", corruptErr(err))
	}
	if err := m.setState(ctx, sb, Running, "fork"); err != nil {
		m.rollbackCreate(sb)
		return op, nil, m.finishOp(op, "", err)
	}
	return op, sb, m.finishOp(op, sb.ID, nil)
}

// cloneFrom copies a parent sandbox's writable layer into sb directly: frozen while it
// runs, so the copy is crash-consistent, as a snapshot would be. The parent runs again
// (and its lock is released) as soon as its layer is copied, while the copy is made
// ready; durable also waits for that.
//
// Unless *noMemory says why not, the parent's memory is saved at the point it is
// frozen, into sb's memory image, which sb's start restores; a save that fails keeps
// files only and says why in *noMemory.
func (m *Manager) cloneFrom(ctx context.Context, parentID string, sb *store.Sandbox, cloner runtime.StorageCloner, noMemory *string) (durable func() error, err error) {
	unlock := m.locks.lock(parentID)
	thaw := func() {}
	released := make(chan struct{})
	letGo := sync.OnceFunc(func() {
		go func() {
			defer close(released)
			defer unlock()
			thaw()
		}()
	})
	defer letGo()
	parent, err := m.store.GetSandbox(ctx, parentID)
	if err != nil {
		return nil, err
	}
	if err := m.may(VerbFork, parent); err != nil {
		return nil, err
	}
	if *noMemory == "" {
		*noMemory = m.memoryRefused(ctx, parent) // as it is now, under its lock
	}
	if *noMemory == "" {
		t, err := m.checkpointFrozen(ctx, parent, m.memoryDir(sb.ID)) // memsnap.go
		if err == nil {
			thaw = t
			setMemory(sb, &MemoryState{Kept: true, Generation: parent.Generation, Bytes: diskBytes(m.memoryDir(sb.ID)), At: m.now()})
		} else {
			*noMemory = memoryFailure(err)
		}
	}
	if parent.State == Running && !MemoryOf(sb).Kept {
		fz, ok := m.driver(parent).(runtime.Freezer)
		if !ok {
			return nil, errdefs.Unavailable("this runtime cannot freeze a running sandbox; suspend it first")
		}
		if err := fz.Freeze(ctx, parent.ID); err != nil {
			return nil, errdefs.Unavailable("could not freeze sandbox %q", parent.Name).WithCause(err)
		}
		thaw = func() { fz.Thaw(context.WithoutCancel(ctx), parent.ID) }
	}
	flushed, err := cloner.CloneStorage(ctx, parent.ID, sb.ID, parent.UIDBase, sb.UIDBase, letGo)
	if err != nil {
		letGo()
		<-released
		return nil, err
	}
	return func() error {
		<-released
		return flushed()
	}, nil
}
