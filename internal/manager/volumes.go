package manager

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/failpoint"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/units"
	"github.com/airlockhq/airlock/internal/volume"
)

// A volume is data that outlives a sandbox: an encrypted ext4 filesystem of its own
// (internal/volume) that one of its owner's sandboxes writes and any number read. Its
// record holds its attachments, and with them the writer lease: at most one
// attachment writes. A sandbox's record lists its volumes too (what its start mounts);
// an attach stores the volume's record first and the sandbox's next, a detach the
// other way round, so a crash between leaves at most a volume naming a sandbox that
// does not name it, which recovery drops (reconcileVolumes).
//
// Attach and detach need a suspended sandbox: a running container's mounts are made
// once, at its start. Suspend, resume, restore and daemon restarts keep the volumes;
// snapshots and forks leave them out (a fork gets only what it asks for); a terminated
// sandbox lets go of them and they stay.

// Volume is a volume's record (the edge never shows its sealed key).
type Volume = store.Volume

// Volume kinds.
const (
	VolumeKindVolume   = store.VolumeKindVolume
	VolumeKindSnapshot = store.VolumeKindSnapshot
)

// Volume limits.
const (
	MinVolumeSize = 16 << 20
	// MaxVolumes is how many volumes and volume snapshots one owner may keep.
	MaxVolumes = 100
)

// VolumeMountRequest asks for a volume at a path in a sandbox.
type VolumeMountRequest struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// SetVolumes gives the manager the node's volumes; without them, volume calls are
// refused.
func (m *Manager) SetVolumes(h *volume.Host) { m.vols = h }

func (m *Manager) volumesReady() error {
	if m.vols == nil || m.secrets == nil {
		return errdefs.Unavailable("this node keeps no volumes (they need its state directory and its secret key)")
	}
	return nil
}

// VolumeQuota is the most bytes of volumes and volume snapshots one owner may keep.
func (m *Manager) VolumeQuota() int64 {
	if m.cfg.VolumeQuota > 0 {
		return m.cfg.VolumeQuota
	}
	return 1 << 40
}

// lockVolumeRoom serialises owner's calls that add volumes or volume bytes, from the
// check of its quota (checkVolumeRoom) until the record that takes the room is stored:
// otherwise calls at once would each find the room the others take.
func (m *Manager) lockVolumeRoom(owner string) (unlock func()) {
	return m.locks.lock("volumes of " + owner)
}

// checkVolumeRoom refuses adding size bytes (and, if one is new, one volume) past
// owner's quota; the caller holds lockVolumeRoom.
func (m *Manager) checkVolumeRoom(ctx context.Context, owner string, size int64, oneMore bool) error {
	all, err := m.store.ListVolumes(ctx, owner, "")
	if err != nil {
		return err
	}
	var used int64
	for _, v := range all {
		used += max(v.Size, v.GrowTo)
	}
	if oneMore && len(all) >= MaxVolumes {
		return errdefs.Quota("owner %q already keeps %d volumes and volume snapshots, the cap is %d; remove one first", owner, len(all), MaxVolumes).
			WithDetails(map[string]any{"cap": MaxVolumes, "count": len(all)})
	}
	if q := m.VolumeQuota(); used+size > q {
		return errdefs.Quota("owner %q keeps %s of volumes; %s more would pass the quota of %s", owner,
			units.FormatSize(used), units.FormatSize(size), units.FormatSize(q)).
			WithDetails(map[string]any{"quota_bytes": q, "used_bytes": used, "asked_bytes": size})
	}
	return nil
}

// volumeHere refuses a copy of v (a volume or a volume snapshot) on a node other than
// v's: its files are on v's node alone.
func (m *Manager) volumeHere(v *store.Volume) error {
	if v.Node != m.cfg.NodeName {
		return errdefs.Precondition("%s %q is on node %s, and this is node %s: call its own node", v.Kind, v.Name, v.Node, m.cfg.NodeName).
			WithDetails(map[string]any{"node": v.Node})
	}
	return nil
}

func checkVolumeSize(size, most int64) error {
	if size < MinVolumeSize || size > most {
		return errdefs.Invalid("volume size %d bytes is out of range: give %s to %s (such as 10G)", size,
			units.FormatSize(MinVolumeSize), units.FormatSize(most))
	}
	return nil
}

// GetVolume returns owner's volume named name.
func (m *Manager) GetVolume(ctx context.Context, owner, name string) (*Volume, error) {
	if err := m.volumesReady(); err != nil {
		return nil, err
	}
	v, err := m.store.GetVolumeByName(ctx, owner, store.VolumeKindVolume, name)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil, errdefs.NotFound("volume %q not found", name)
	}
	return v, err
}

// ListVolumes returns owner's volumes, or its volume snapshots (kind snapshot).
func (m *Manager) ListVolumes(ctx context.Context, owner, kind string) ([]*Volume, error) {
	if err := m.volumesReady(); err != nil {
		return nil, err
	}
	return m.store.ListVolumes(ctx, owner, kind)
}

// CreateVolume makes owner's volume name of size bytes, empty or (from, one of owner's
// volume snapshots) a copy of the snapshot, checked against its checksum as it is
// copied. The volume exists on the host before its record does; a crash between leaves
// a directory that recovery removes.
func (m *Manager) CreateVolume(ctx context.Context, owner, name string, size int64, from string) (_ *Volume, retErr error) {
	if err := m.volumesReady(); err != nil {
		return nil, err
	}
	if err := ValidateName(name); err != nil {
		return nil, errdefs.Invalid("invalid volume name %q: a name is %s", name, NameRule)
	}
	var snap *store.Volume
	if from != "" {
		s, err := m.store.GetVolume(ctx, from)
		if err != nil || s.Owner != owner || s.Kind != store.VolumeKindSnapshot {
			return nil, errdefs.NotFound("volume snapshot %q not found", from)
		}
		if err := m.volumeHere(s); err != nil {
			return nil, err
		}
		snap, size = s, max(size, s.Size)
	}
	if err := checkVolumeSize(size, m.cfg.MaxLimits.Disk); err != nil {
		return nil, err
	}
	if _, err := m.store.GetVolumeByName(ctx, owner, store.VolumeKindVolume, name); err == nil {
		return nil, errdefs.Exists("a volume named %q already exists", name)
	}
	defer m.lockVolumeRoom(owner)()
	if err := m.checkVolumeRoom(ctx, owner, size, true); err != nil {
		return nil, err
	}
	now := m.now()
	v := &store.Volume{ID: newID("vol_"), Kind: store.VolumeKindVolume, Owner: owner, Name: name, Node: m.cfg.NodeName,
		Size: size, CreatedAt: now, UpdatedAt: now}
	var key []byte
	var err error
	if snap != nil {
		v.Source, v.KeyID, v.Key = snap.ID, snap.KeyID, snap.Key
		if key, err = m.secrets.OpenKey(snap.KeyID, snap.Key); err != nil {
			return nil, err
		}
	} else {
		key = make([]byte, volume.KeySize)
		rand.Read(key)
		if v.KeyID, v.Key, err = m.secrets.SealKey(key); err != nil {
			return nil, err
		}
	}
	defer clear(key)
	defer func() {
		if retErr != nil {
			if err := m.vols.Remove(v.ID); err != nil {
				m.log.Warn("remove a volume that was not made", "volume", v.ID, "err", err)
			}
		}
	}()
	if snap != nil {
		_, err := m.vols.Copy(ctx, snap.ID, v.ID, snap.Checksum)
		if errors.Is(err, volume.ErrDamaged) {
			return nil, errdefs.Precondition("volume snapshot %s cannot be used", snap.ID).WithCause(err)
		}
		if err != nil {
			return nil, err
		}
		if size > snap.Size {
			if err := m.vols.Grow(ctx, v.ID, size, key); err != nil {
				return nil, err
			}
		}
	} else if err := m.vols.Make(ctx, v.ID, size, key); err != nil {
		return nil, unavailable(err, "volume %q could not be made", name)
	}
	failpoint.Hit("volume.create-made")
	if err := m.store.CreateVolume(ctx, v); err != nil {
		return nil, err
	}
	return v, nil
}

// ResizeVolume grows owner's volume name to size bytes; a volume never shrinks. The new
// size is recorded first (GrowTo) and the host grows next, in place while sandboxes
// use it where the node can; otherwise it grows at its next mount that no running
// sandbox holds (GrowTo stays until then). A crash between is finished by the next
// mount, or by recovery.
func (m *Manager) ResizeVolume(ctx context.Context, owner, name string, size int64) (*Volume, error) {
	defer m.lockVolumeRoom(owner)() // the size it grows from is read under it too
	v, err := m.GetVolume(ctx, owner, name)
	if err != nil {
		return nil, err
	}
	if err := checkVolumeSize(size, m.cfg.MaxLimits.Disk); err != nil {
		return nil, err
	}
	cur := max(v.Size, v.GrowTo)
	if size < cur {
		return nil, errdefs.Invalid("volume %q is %s (%d bytes) and a volume only grows: give a size above it", name, units.FormatSize(cur), cur).
			WithDetails(map[string]any{"size": cur})
	}
	if size == cur {
		return v, nil
	}
	if err := m.checkVolumeRoom(ctx, owner, size-cur, false); err != nil {
		return nil, err
	}
	unlock := m.locks.lock(v.ID)
	defer unlock()
	if v, err = m.store.GetVolume(ctx, v.ID); err != nil {
		return nil, err
	}
	v.GrowTo, v.UpdatedAt = size, m.now()
	if err := m.store.UpdateVolume(ctx, v); err != nil {
		return nil, err
	}
	failpoint.Hit("volume.resize-recorded")
	return v, m.growVolume(ctx, v)
}

// growVolume finishes v's recorded grow on the host and records it done; the caller
// holds v's lock. A grow the node must leave to the next mount is not an error.
func (m *Manager) growVolume(ctx context.Context, v *store.Volume) error {
	if v.GrowTo <= v.Size {
		return nil
	}
	key, err := m.secrets.OpenKey(v.KeyID, v.Key)
	if err != nil {
		return err
	}
	defer clear(key)
	err = m.vols.Grow(ctx, v.ID, v.GrowTo, key)
	if errors.Is(err, volume.ErrGrowsOffline) {
		return nil // GrowTo says it is pending
	}
	if err != nil {
		return unavailable(err, "volume %q could not grow yet; it grows at its next mount", v.Name)
	}
	return m.grown(ctx, v)
}

// grown records that v's filesystem has reached its GrowTo, if it has.
func (m *Manager) grown(ctx context.Context, v *store.Volume) error {
	if v.GrowTo <= v.Size {
		return nil
	}
	if have, err := m.vols.Size(v.ID); err != nil || have < v.GrowTo {
		return err
	}
	v.Size, v.GrowTo, v.UpdatedAt = v.GrowTo, 0, m.now()
	return m.store.UpdateVolume(ctx, v)
}

// DeleteVolume removes owner's volume (or volume snapshot: a "vsnap_" id) name; a
// volume still attached is refused, naming its sandboxes. The record goes first, so a
// crash leaves only files, which recovery removes.
func (m *Manager) DeleteVolume(ctx context.Context, owner, name string) error {
	var v *store.Volume
	var err error
	if strings.HasPrefix(name, "vsnap_") {
		if err = m.volumesReady(); err == nil {
			v, err = m.store.GetVolume(ctx, name)
			if err == nil && v.Owner != owner {
				err = errdefs.NotFound("volume snapshot %q not found", name)
			}
		}
	} else {
		v, err = m.GetVolume(ctx, owner, name)
	}
	if err != nil {
		return err
	}
	unlock := m.locks.lock(v.ID)
	defer unlock()
	if v, err = m.store.GetVolume(ctx, v.ID); err != nil {
		return err
	}
	if len(v.Attachments) > 0 {
		return errdefs.Precondition("volume %q is attached to %s; detach it first", v.Name, m.attachedNames(ctx, v)).
			WithDetails(map[string]any{"sandboxes": attachedIDs(v)})
	}
	if err := m.store.DeleteVolume(ctx, v.ID); err != nil {
		return err
	}
	if err := m.vols.Remove(v.ID); err != nil {
		m.log.Warn("remove a deleted volume's files", "volume", v.ID, "err", err)
	}
	return nil
}

func attachedIDs(v *store.Volume) []string {
	var out []string
	for _, a := range v.Attachments {
		out = append(out, a.SandboxID)
	}
	return out
}

// attachedNames names v's sandboxes for a message.
func (m *Manager) attachedNames(ctx context.Context, v *store.Volume) string {
	var names []string
	for _, a := range v.Attachments {
		n := a.SandboxID
		if sb, err := m.store.GetSandbox(ctx, a.SandboxID); err == nil {
			n = fmt.Sprintf("%q (%s)", sb.Name, sb.ID)
		}
		if !a.ReadOnly {
			n += " as its writer"
		}
		names = append(names, n)
	}
	return strings.Join(names, ", ")
}

// SnapshotVolume copies owner's volume name to a new volume snapshot: byte for byte
// (a volume in use is frozen meanwhile), checksummed, under the volume's data key. Its
// size is the copy's filesystem's, which a grow not yet recorded done has made larger
// than the volume's recorded size.
func (m *Manager) SnapshotVolume(ctx context.Context, owner, name string) (*Volume, error) {
	v, err := m.GetVolume(ctx, owner, name)
	if err == nil {
		err = m.volumeHere(v)
	}
	if err != nil {
		return nil, err
	}
	defer m.lockVolumeRoom(owner)()
	if err := m.checkVolumeRoom(ctx, owner, max(v.Size, v.GrowTo), true); err != nil {
		return nil, err
	}
	id := newID("vsnap_")
	now := m.now()
	s := &store.Volume{ID: id, Kind: store.VolumeKindSnapshot, Owner: owner, Name: id, Node: m.cfg.NodeName,
		KeyID: v.KeyID, Key: v.Key, Source: v.ID, CreatedAt: now, UpdatedAt: now}
	s.Checksum, err = m.vols.Copy(ctx, v.ID, id, "")
	if err == nil {
		s.Size, err = m.vols.Size(id)
	}
	if err != nil {
		m.vols.Remove(id)
		return nil, unavailable(err, "volume %q could not be copied", name)
	}
	if err := m.store.CreateVolume(ctx, s); err != nil {
		m.vols.Remove(id)
		return nil, err
	}
	return s, nil
}
