package manager

import (
	"context"
	"errors"
	"os"
	"slices"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// mountVolumes opens sb's volumes on the host and makes its id-mapped mounts of them,
// for its container to bind; a recorded grow is finished first where it can be. On an
// error nothing of it is left mounted.
func (m *Manager) mountVolumes(ctx context.Context, sb *store.Sandbox) (_ []runtime.Mount, retErr error) {
	if len(sb.Volumes) == 0 {
		return nil, nil
	}
	if err := m.volumesReady(); err != nil {
		return nil, err
	}
	defer func() {
		if retErr != nil {
			m.unmountVolumes(sb.ID)
		}
	}()
	var userns *os.File // taken after the first open: the driver may be making it
	defer func() {
		if userns != nil {
			userns.Close()
		}
	}()
	var out []runtime.Mount
	for _, sv := range sb.Volumes {
		v, err := m.store.GetVolume(ctx, sv.VolumeID)
		if err != nil {
			return nil, errdefs.Precondition("volume %q of sandbox %q is gone", sv.Name, sb.Name).WithCause(err)
		}
		key, err := m.secrets.OpenKey(v.KeyID, v.Key)
		if err != nil {
			return nil, err
		}
		err = m.vols.Open(ctx, v.ID, max(v.Size, v.GrowTo), key)
		clear(key)
		if err != nil {
			return nil, errdefs.Unavailable("volume %q of sandbox %q could not be opened", v.Name, sb.Name).WithCause(err)
		}
		if err := m.grown(ctx, v); err != nil {
			m.log.Warn("record a finished volume grow", "volume", v.ID, "err", err)
		}
		if userns == nil {
			if userns, err = m.volumeUserns(sb); err != nil {
				return nil, errdefs.Unavailable("volume %q of sandbox %q could not be mounted", v.Name, sb.Name).WithCause(err)
			}
		}
		src, err := m.vols.Bind(sb.ID, v.ID, sb.UIDBase, userns, sv.ReadOnly)
		if err != nil {
			return nil, errdefs.Unavailable("volume %q of sandbox %q could not be mounted", v.Name, sb.Name).WithCause(err)
		}
		out = append(out, runtime.Mount{Source: src, Destination: sv.Path, ReadOnly: sv.ReadOnly})
	}
	return out, nil
}

// volumeUserns is the user namespace sb's volumes are id-mapped through: its driver's,
// which its root filesystem is mapped through (no process to start), or nil where the
// driver keeps none (the volumes make their own).
func (m *Manager) volumeUserns(sb *store.Sandbox) (*os.File, error) {
	if un, ok := m.driver(sb).(runtime.UserNamespacer); ok {
		return un.UserNamespace(sb.UIDBase)
	}
	return nil, nil
}

// startVolumes starts mountVolumes for sb and returns its wait, which may be called any
// number of times.
func (m *Manager) startVolumes(ctx context.Context, sb *store.Sandbox) (wait func() ([]runtime.Mount, error)) {
	if len(sb.Volumes) == 0 {
		return func() ([]runtime.Mount, error) { return nil, nil }
	}
	var mounts []runtime.Mount
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		mounts, err = m.mountVolumes(ctx, sb)
	}()
	return func() ([]runtime.Mount, error) { <-done; return mounts, err }
}

// withVolumes makes a start's network hook (nil: none) wait for the volumes' mounts too
// and add them to its own.
func withVolumes(network func() (runtime.NetworkJoin, error), volumes func() ([]runtime.Mount, error)) func() (runtime.NetworkJoin, error) {
	return func() (runtime.NetworkJoin, error) {
		var j runtime.NetworkJoin
		if network != nil {
			var err error
			if j, err = network(); err != nil {
				return j, err
			}
		}
		mounts, err := volumes()
		if err != nil {
			return runtime.NetworkJoin{}, err
		}
		j.Mounts = append(j.Mounts, mounts...)
		return j, nil
	}
}

// unmountVolumes removes sandbox id's volume mounts, and lets go of each volume no
// other sandbox's mount uses.
func (m *Manager) unmountVolumes(id string) {
	if m.vols == nil {
		return
	}
	ids, err := m.vols.Unbind(id)
	if err != nil {
		m.log.Warn("unmount a sandbox's volumes", "sandbox", id, "err", err)
	}
	for _, v := range ids {
		if err := m.vols.Close(v); err != nil {
			m.log.Warn("close a volume", "volume", v, "err", err)
		}
	}
}

// reconcileVolumes makes volume records, sandbox records and the host agree after a
// restart: an attachment whose sandbox is gone, terminated or does not list the volume
// is dropped (an attach or a detach a crash broke off); the mounts of sandboxes that
// do not run are removed; a volume on disk without a record (a create or a delete a
// crash broke off) is removed; a recorded grow is finished when nobody uses the volume.
func (m *Manager) reconcileVolumes(ctx context.Context, cleaning map[string]bool) {
	if m.vols == nil {
		return
	}
	all, err := m.store.ListVolumes(ctx, "", "")
	if err != nil {
		m.log.Warn("reconcile volumes", "err", err)
		return
	}
	known := map[string]bool{}
	for _, v := range all {
		known[v.ID] = true
		if v.Node != m.cfg.NodeName {
			continue
		}
		for _, a := range v.Attachments {
			sb, err := m.store.GetSandbox(ctx, a.SandboxID)
			if err == nil && sb.State != Terminated && slices.ContainsFunc(sb.Volumes, func(sv store.SandboxVolume) bool { return sv.VolumeID == v.ID }) {
				continue
			}
			if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				continue
			}
			m.log.Info("drop a volume attachment of a sandbox that does not hold it", "volume", v.ID, "sandbox", a.SandboxID)
			if err := m.releaseVolume(ctx, v.ID, a.SandboxID); err != nil {
				m.log.Warn("drop a volume attachment", "volume", v.ID, "err", err)
			}
		}
	}
	for _, id := range m.vols.Bound() {
		sb, err := m.store.GetSandbox(ctx, id)
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			// Its container may run on them: their removal would take the volume's
			// key out of the kernel under it. The next restart looks again.
			m.log.Warn("keep the volume mounts of a sandbox whose record cannot be read", "sandbox", id, "err", err)
			continue
		}
		if cleaning[id] || err == nil && slices.Contains([]State{Running, Creating, Resuming}, sb.State) {
			continue
		}
		m.log.Info("remove leftover volume mounts", "sandbox", id)
		m.unmountVolumes(id)
	}
	for _, id := range m.vols.IDs() {
		if !known[id] {
			m.log.Info("remove a volume without a record", "volume", id)
			if err := m.vols.Remove(id); err != nil {
				m.log.Warn("remove a volume without a record", "volume", id, "err", err)
			}
		}
	}
	for _, v := range all {
		if v.Node == m.cfg.NodeName && v.GrowTo > v.Size {
			unlock := m.locks.lock(v.ID)
			// Read again: a dropped attachment above changed the record.
			cur, err := m.store.GetVolume(ctx, v.ID)
			if err == nil {
				err = m.growVolume(ctx, cur)
			}
			if err != nil {
				m.log.Warn("finish a volume grow", "volume", v.ID, "err", err)
			}
			unlock()
		}
	}
}
