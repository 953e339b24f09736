package store

import (
	"context"
	"time"
)

// SnapshotRecord is the daemon's own record of a snapshot: who owns it and of which
// sandbox it is. It is what authorises access to the snapshot; a manifest (which an
// object store shared by nodes may hold, and anyone who can write there may forge)
// only describes its content.
type SnapshotRecord struct {
	ID        string    `json:"id"` // "snap_…"
	Owner     string    `json:"owner"`
	SandboxID string    `json:"sandbox_id"`
	Node      string    `json:"node"` // the node that took it
	CreatedAt time.Time `json:"created_at"`
}

// MaxSnapshotList is the most records one ListSnapshotRecords returns.
const MaxSnapshotList = 10_000

// SnapshotListLimit is limit as ListSnapshotRecords applies it.
func SnapshotListLimit(limit int) int {
	if limit <= 0 || limit > MaxSnapshotList {
		return MaxSnapshotList
	}
	return limit
}

// Snapshots is the part of the Store contract that keeps the snapshot records.
type Snapshots interface {
	// CreateSnapshotRecord inserts r; a record with r's id is ErrAlreadyExists and is
	// left as it was.
	CreateSnapshotRecord(ctx context.Context, r *SnapshotRecord) error
	// GetSnapshotRecord returns the record of snapshot id, ErrNotFound without one.
	GetSnapshotRecord(ctx context.Context, id string) (*SnapshotRecord, error)
	// ListSnapshotRecords returns owner's newest limit records (MaxSnapshotList when 0
	// or more), of sandbox sandboxID only when it is set, oldest first.
	ListSnapshotRecords(ctx context.Context, owner, sandboxID string, limit int) ([]*SnapshotRecord, error)
	// DeleteSnapshotRecord removes the record of snapshot id, ErrNotFound without one.
	DeleteSnapshotRecord(ctx context.Context, id string) error
}
