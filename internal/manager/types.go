package manager

import (
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
)

// The records the manager hands its callers, named here so that a caller (the HTTP
// edge) depends on the manager alone and never on the stores behind it. They are those
// stores' own types today; one can become the manager's own view without its callers
// importing anything new.
type (
	Sandbox       = store.Sandbox
	SandboxFilter = store.SandboxFilter
	Limits        = store.Limits
	NetworkPolicy = store.Network
	Port          = store.Port
	Operation     = store.Operation
	Event         = store.Event
	Image         = image.Image
	Snapshot      = snapshot.Manifest
)

// The values of those records a caller compares against.
const (
	// HostImage is the name of the image that is the host's own root, read-only.
	HostImage = image.HostName
	// SnapshotReady is the state of a snapshot whose files are complete and checksummed.
	SnapshotReady = snapshot.StateReady
)

// ListPlace is a place in list order, after which a page of sandboxes starts.
type ListPlace = store.ListPlace

// PlaceOf is the place of sb in list order.
func PlaceOf(sb *Sandbox) *ListPlace { return store.PlaceOf(sb) }
