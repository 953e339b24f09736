package manager

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/failpoint"
	"github.com/airlockhq/airlock/internal/store"
)

// Attaching and detaching volumes, and the writer lease (volumes.go).

// reservedPaths are where a volume may not go in a sandbox.
var reservedPaths = []string{"/proc", "/sys", "/dev", "/run", "/tmp", "/.airlock", "/etc", "/usr", "/bin", "/sbin", "/lib", "/lib64", WorkspaceMountPoint}

// checkVolumePath refuses a mount path that is not absolute and clean, or is the root
// or a reserved place.
func checkVolumePath(p string) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return errdefs.Invalid("volume path %q must be an absolute, clean path below / (such as /data)", p)
	}
	for _, r := range reservedPaths {
		if p == r || strings.HasPrefix(p, r+"/") {
			return errdefs.Invalid("volume path %q is in %s, which a volume may not cover; these are reserved: %v", p, r, reservedPaths)
		}
	}
	return nil
}

// AttachVolume attaches owner's volume to one of owner's suspended sandboxes at path.
// A second writer is refused, naming the one that holds the lease.
func (m *Manager) AttachVolume(ctx context.Context, owner, name, ref string, req VolumeMountRequest) (*store.Sandbox, error) {
	sb, unlock, err := m.lockSuspended(ctx, owner, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	req.Name = name
	if err := m.attachVolumes(ctx, sb, []VolumeMountRequest{req}); err != nil {
		return nil, err
	}
	return sb, nil
}

// lockSuspended resolves owner's sandbox ref and locks it, if volumes may be attached
// to or detached from it now.
func (m *Manager) lockSuspended(ctx context.Context, owner, ref string) (_ *store.Sandbox, unlock func(), err error) {
	if err := m.volumesReady(); err != nil {
		return nil, nil, err
	}
	sb, err := m.Resolve(ctx, owner, ref)
	if err != nil {
		return nil, nil, err
	}
	unlock = m.locks.lock(sb.ID)
	if sb, err = m.store.GetSandbox(ctx, sb.ID); err == nil {
		err = m.may(VerbVolume, sb)
	}
	if err != nil {
		unlock()
		return nil, nil, err
	}
	return sb, unlock, nil
}

// checkVolumeMounts checks a create's (or an attach's) volume requests against each
// other and sb's volumes, before anything is stored.
func (m *Manager) checkVolumeMounts(sb *store.Sandbox, reqs []VolumeMountRequest) error {
	if len(reqs) == 0 {
		return nil
	}
	if err := m.volumesReady(); err != nil {
		return err
	}
	if !m.mountsWorkspace(sb.Runtime) {
		return errdefs.Invalid("the runtime %q cannot mount volumes; of this node's runtimes, these can: %v", sb.Runtime, m.workspaceRuntimes())
	}
	paths, names := map[string]bool{}, map[string]bool{}
	for _, v := range sb.Volumes {
		paths[v.Path], names[v.Name] = true, true
	}
	for _, r := range reqs {
		if err := checkVolumePath(r.Path); err != nil {
			return err
		}
		if paths[r.Path] {
			return errdefs.Invalid("two volumes at %s", r.Path)
		}
		if names[r.Name] {
			return errdefs.Invalid("volume %q is attached to sandbox %q once already", r.Name, sb.Name)
		}
		paths[r.Path], names[r.Name] = true, true
	}
	return nil
}

// attachVolumes records reqs on their volumes (taking the writer lease of each one
// written) and then on sb. The caller holds sb's lock; on an error nothing is left
// recorded.
func (m *Manager) attachVolumes(ctx context.Context, sb *store.Sandbox, reqs []VolumeMountRequest) error {
	done, err := m.leaseVolumes(ctx, sb, reqs)
	if err != nil || len(done) == 0 {
		return err
	}
	failpoint.Hit("volume.attach-leased")
	sb.Volumes = append(slices.Clip(sb.Volumes), done...)
	dropped, undo := m.unkeepMemory(sb, "volume", memoryOverOtherMounts) // memory.go
	if err := m.store.UpdateSandbox(ctx, sb); err != nil {
		undo()
		sb.Volumes = sb.Volumes[:len(sb.Volumes)-len(done)]
		m.releaseLeases(ctx, sb.ID, done)
		return err
	}
	dropped()
	return nil
}

// memoryOverOtherMounts is why a suspended sandbox's memory image goes when its volumes
// change: its processes hold files (and the engine cached pages) of the mounts it was
// saved with, which a restore over other mounts would mix up with what is there now.
const memoryOverOtherMounts = "its volumes changed while it was suspended: its saved processes would find other files than they had open"

// leaseVolumes records reqs on their volumes, taking the writer lease of each one
// written, for sb (whose record may not exist yet: recovery drops an attachment whose
// sandbox does not list it). On an error none is left recorded.
func (m *Manager) leaseVolumes(ctx context.Context, sb *store.Sandbox, reqs []VolumeMountRequest) ([]store.SandboxVolume, error) {
	if len(reqs) == 0 {
		return nil, nil
	}
	if err := m.checkVolumeMounts(sb, reqs); err != nil {
		return nil, err
	}
	var done []store.SandboxVolume
	for _, r := range reqs {
		sv, err := m.leaseVolume(ctx, sb, r)
		if err != nil {
			m.releaseLeases(ctx, sb.ID, done)
			return nil, err
		}
		done = append(done, sv)
	}
	return done, nil
}

// releaseLeases drops sandbox's attachments to the volumes of done.
func (m *Manager) releaseLeases(ctx context.Context, sandbox string, done []store.SandboxVolume) {
	for _, sv := range done {
		if err := m.releaseVolume(context.WithoutCancel(ctx), sv.VolumeID, sandbox); err != nil {
			m.log.Warn("release a volume lease (recovery finishes it)", "volume", sv.VolumeID, "sandbox", sandbox, "err", err)
		}
	}
}

// leaseVolume records sb's attachment on the volume r names.
func (m *Manager) leaseVolume(ctx context.Context, sb *store.Sandbox, r VolumeMountRequest) (store.SandboxVolume, error) {
	v, err := m.GetVolume(ctx, sb.Owner, r.Name)
	if err != nil {
		return store.SandboxVolume{}, err
	}
	if v.Node != m.cfg.NodeName {
		return store.SandboxVolume{}, errdefs.Precondition("volume %q is on node %s and sandbox %q on %s: a volume is attached on its own node", v.Name, v.Node, sb.Name, m.cfg.NodeName)
	}
	unlock := m.locks.lock(v.ID)
	defer unlock()
	if v, err = m.store.GetVolume(ctx, v.ID); err != nil {
		return store.SandboxVolume{}, err
	}
	if !r.ReadOnly {
		for _, a := range v.Attachments {
			if !a.ReadOnly {
				holder := a.SandboxID
				if h, err := m.store.GetSandbox(ctx, a.SandboxID); err == nil {
					holder = fmt.Sprintf("%q (%s)", h.Name, h.ID)
				}
				return store.SandboxVolume{}, errdefs.Precondition("volume %q has a writer already: sandbox %s holds its writer lease; "+
					"attach it read-only, or detach it from that sandbox first", v.Name, holder).
					WithDetails(map[string]any{"writer": a.SandboxID})
			}
		}
	}
	v.Attachments = append(v.Attachments, store.VolumeAttachment{SandboxID: sb.ID, Path: r.Path, ReadOnly: r.ReadOnly})
	v.UpdatedAt = m.now()
	if err := m.store.UpdateVolume(ctx, v); err != nil {
		return store.SandboxVolume{}, err
	}
	return store.SandboxVolume{VolumeID: v.ID, Name: v.Name, Path: r.Path, ReadOnly: r.ReadOnly}, nil
}

// releaseVolume drops sandbox's attachments from volume id's record.
func (m *Manager) releaseVolume(ctx context.Context, id, sandbox string) error {
	unlock := m.locks.lock(id)
	defer unlock()
	for {
		v, err := m.store.GetVolume(ctx, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		n := len(v.Attachments)
		v.Attachments = slices.DeleteFunc(v.Attachments, func(a store.VolumeAttachment) bool { return a.SandboxID == sandbox })
		if len(v.Attachments) == n {
			return nil
		}
		v.UpdatedAt = m.now()
		err = m.store.UpdateVolume(ctx, v)
		if !errors.Is(err, errdefs.ErrVersionConflict) {
			return err
		}
	}
}

// DetachVolume detaches owner's volume from one of owner's suspended sandboxes.
func (m *Manager) DetachVolume(ctx context.Context, owner, name, ref string) (*store.Sandbox, error) {
	sb, unlock, err := m.lockSuspended(ctx, owner, ref)
	if err != nil {
		return nil, err
	}
	defer unlock()
	i := slices.IndexFunc(sb.Volumes, func(v store.SandboxVolume) bool { return v.Name == name })
	if i < 0 {
		return nil, errdefs.NotFound("volume %q is not attached to sandbox %q", name, sb.Name)
	}
	id := sb.Volumes[i].VolumeID
	sb.Volumes = slices.Delete(slices.Clone(sb.Volumes), i, i+1)
	dropped, undo := m.unkeepMemory(sb, "volume", memoryOverOtherMounts) // memory.go
	if err := m.store.UpdateSandbox(ctx, sb); err != nil {
		undo()
		return nil, err
	}
	dropped()
	failpoint.Hit("volume.detach-recorded")
	if err := m.releaseVolume(ctx, id, sb.ID); err != nil {
		m.log.Warn("release a volume lease (recovery finishes it)", "volume", id, "sandbox", sb.ID, "err", err)
	}
	return sb, nil
}

// releaseVolumes lets go of every volume of sb (terminated): the volumes stay.
func (m *Manager) releaseVolumes(ctx context.Context, sb *store.Sandbox) {
	m.releaseLeases(ctx, sb.ID, sb.Volumes)
}
