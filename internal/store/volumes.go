package store

import (
	"context"
	"time"
)

// Volume kinds: a volume, or a snapshot of one (an immutable copy that only a new
// volume is made from).
const (
	VolumeKindVolume   = "volume"
	VolumeKindSnapshot = "snapshot"
)

// Volume is the record of a volume (or of a volume snapshot): a named, hard-capacity
// ext4 filesystem on a node, encrypted at rest under a data key of its own, which is
// kept sealed under the node's secret key.
type Volume struct {
	ID    string `json:"id"` // "vol_…", or "vsnap_…" for a snapshot
	Kind  string `json:"kind"`
	Owner string `json:"owner"`
	Name  string `json:"name"` // unique per owner and kind; a snapshot's is its id
	Node  string `json:"node"`
	// Size is the capacity in bytes. GrowTo, when above it, is a resize that was
	// recorded but not yet finished on the host: whoever opens the volume next
	// finishes it, and then Size takes its value.
	Size   int64 `json:"size"`
	GrowTo int64 `json:"grow_to,omitempty"`
	// KeyID names the node key that seals Key, the volume's data key.
	KeyID string `json:"key_id"`
	Key   []byte `json:"key"`
	// Source is the snapshot a volume was made from, or the volume a snapshot copies.
	Source string `json:"source,omitempty"`
	// Checksum is a snapshot's SHA-256 over its image's data extents and their offsets.
	Checksum string `json:"checksum,omitempty"`
	// Attachments are the sandboxes the volume is attached to; at most one of them
	// writes (the writer lease).
	Attachments []VolumeAttachment `json:"attachments,omitempty"`
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
	// Version is the optimistic-concurrency version; UpdateVolume bumps it.
	Version int64 `json:"version"`
}

// VolumeAttachment is a volume attached to a sandbox at a path.
type VolumeAttachment struct {
	SandboxID string `json:"sandbox_id"`
	Path      string `json:"path"`
	ReadOnly  bool   `json:"read_only,omitempty"`
}

// SandboxVolume is a volume as a sandbox's record holds it: what to mount where.
type SandboxVolume struct {
	VolumeID string `json:"volume_id"`
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Volumes is the part of the Store contract that keeps volume records.
type Volumes interface {
	// CreateVolume inserts v; an id, or an owner's name of the kind, already taken is
	// ErrAlreadyExists and changes nothing.
	CreateVolume(ctx context.Context, v *Volume) error
	// GetVolume returns volume id, ErrNotFound without one.
	GetVolume(ctx context.Context, id string) (*Volume, error)
	// GetVolumeByName returns owner's volume (or snapshot) of kind named name.
	GetVolumeByName(ctx context.Context, owner, kind, name string) (*Volume, error)
	// ListVolumes returns owner's records of kind ("" every owner's; kind "" every
	// kind), oldest first.
	ListVolumes(ctx context.Context, owner, kind string) ([]*Volume, error)
	// UpdateVolume stores v if the stored version is still v.Version, and bumps it;
	// otherwise ErrVersionConflict (ErrNotFound if it is gone).
	UpdateVolume(ctx context.Context, v *Volume) error
	// DeleteVolume removes volume id, ErrNotFound without one.
	DeleteVolume(ctx context.Context, id string) error
}
