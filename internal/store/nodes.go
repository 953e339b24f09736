package store

import (
	"context"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// NodeState is what a node's membership record says of it, at a given time.
type NodeState string

// The states of a node. Ready and draining are held under a live lease; a node whose
// lease lapsed unrenewed is lost, and one that gave its lease back on a clean shutdown
// is stopped.
const (
	NodeReady    NodeState = "ready"
	NodeDraining NodeState = "draining"
	NodeLost     NodeState = "lost"
	NodeStopped  NodeState = "stopped"
)

// Resources are amounts of a node's memory, CPU and sandboxes: what it has
// (capacity) or what its live sandboxes reserve.
type Resources struct {
	Memory    int64   `json:"memory"`    // bytes
	CPUs      float64 `json:"cpus"`      // cores
	Sandboxes int     `json:"sandboxes"` // sandbox slots, or live sandboxes
}

// MaxNodeImages bounds the images a node's record lists: past it, placement does not
// know which node holds an image, and only loses its preference.
const MaxNodeImages = 256

// Node is the membership record of one node of a cluster: a lease it renews while it
// runs, under a name that no other live node may take.
type Node struct {
	Name string `json:"name"`
	// Instance identifies the node's state directory: a node that restarts on the same
	// state takes its own lease back before the old one lapses; any other instance
	// must wait for it to lapse.
	Instance string `json:"instance"`
	// Address is where the other nodes reach it (HOST:PORT; "" when it does not listen).
	Address string `json:"address,omitempty"`
	// Draining is the administrators' word: no new sandbox is placed on the node. It
	// outlasts the node's restarts; AcquireNode keeps it.
	Draining bool      `json:"draining,omitempty"`
	Capacity Resources `json:"capacity"`
	Reserved Resources `json:"reserved"`
	// Labels are the operators' words on the node (config node.labels), which a
	// create's node selector matches; Runtimes are the runtimes it can run, and Images
	// the digests of images it holds (at most MaxNodeImages): what placement weighs.
	Labels   map[string]string `json:"labels,omitempty"`
	Runtimes []string          `json:"runtimes,omitempty"`
	Images   []string          `json:"images,omitempty"`
	// Epoch grows by one each time a node acquires the name; a renewal or release that
	// carries an older epoch is refused, so a node that lost its lease cannot act on it.
	Epoch int64 `json:"epoch"`
	// FencedEpoch is the last epoch whose sandboxes were marked lost once its lease
	// lapsed (FenceNode): they are marked once per epoch.
	FencedEpoch int64 `json:"fenced_epoch,omitempty"`
	// LeaseExpires is when the node is lost unless it renews; zero once released.
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
	StartedAt    time.Time `json:"started_at"`
	RenewedAt    time.Time `json:"renewed_at"`
}

// StateAt is the node's state at now.
func (n *Node) StateAt(now time.Time) NodeState {
	switch {
	case n.LeaseExpires.IsZero():
		return NodeStopped
	case !now.Before(n.LeaseExpires):
		return NodeLost
	case n.Draining:
		return NodeDraining
	}
	return NodeReady
}

// Nodes is the membership part of the Store contract. Times are the caller's: each
// node compares leases on its own clock, so the nodes' clocks must agree to well
// within a lease.
type Nodes interface {
	// AcquireNode takes n.Name's lease until n.LeaseExpires, for n.Instance. It succeeds
	// when no record has the name, when the record's lease is released or lapsed at now,
	// or when the record is n.Instance's own; otherwise it is ErrFailedPrecondition
	// naming the holder's address and when its lease ends. On success n holds the stored
	// record: Epoch one past the last, Draining as it was.
	AcquireNode(ctx context.Context, n *Node, now time.Time) error
	// RenewNode extends n's lease to n.LeaseExpires and stores its address, capacity,
	// reservations, labels, runtimes, images and RenewedAt, if the stored epoch is
	// still n.Epoch; otherwise ErrVersionConflict (the name was taken over), or
	// ErrNotFound. It sets n.Draining from the record.
	RenewNode(ctx context.Context, n *Node) error
	// ReleaseNode gives the lease of name back (a clean shutdown), if the stored epoch
	// is still epoch; otherwise ErrVersionConflict, or ErrNotFound.
	ReleaseNode(ctx context.Context, name string, epoch int64) error
	// SetNodeDraining records the administrators' word on name; ErrNotFound if no node
	// has that name.
	SetNodeDraining(ctx context.Context, name string, draining bool) (*Node, error)
	// GetNode returns name's record, or ErrNotFound.
	GetNode(ctx context.Context, name string) (*Node, error)
	// ListNodes returns every node's record, by name.
	ListNodes(ctx context.Context) ([]*Node, error)
	// FenceNode marks the sandboxes of a lost node, in one transaction with its record:
	// if name's record is still at epoch and lost at now (FencedNode), each sandbox
	// whose record names the node and is in one of states becomes what mark makes of it
	// (its Version bumped), and the record remembers epoch as fenced. It returns the
	// sandboxes it changed: none when epoch was fenced already, so nodes that fence at
	// once each change a sandbox at most once between them. A node that acquires the
	// name again waits for the transaction, and one that did first is refused here.
	FenceNode(ctx context.Context, name string, epoch int64, now time.Time, states []State, mark func(*Sandbox)) ([]*Sandbox, error)
}

// FencedSandbox is what FenceNode stores of sb, one of the fenced node's sandboxes:
// mark's change, at the next version.
func FencedSandbox(sb *Sandbox, mark func(*Sandbox)) {
	mark(sb)
	sb.Version++
	sb.UpdatedAt = time.Now().UTC()
}

// FencedNode is what FenceNode stores for old when it fences epoch at now; done says
// epoch was fenced already (nothing to change), and an error refuses the fence: the
// node is not lost at now, or holds another epoch.
func FencedNode(old *Node, epoch int64, now time.Time) (n *Node, done bool, err error) {
	if old.Epoch != epoch {
		return nil, false, errdefs.VersionConflict("node %q is at epoch %d, not %d", old.Name, old.Epoch, epoch)
	}
	if st := old.StateAt(now); st != NodeLost {
		return nil, false, errdefs.Precondition("node %q is %s, not %s", old.Name, st, NodeLost)
	}
	if old.FencedEpoch >= epoch {
		return nil, true, nil
	}
	c := *old
	c.FencedEpoch = epoch
	return &c, false, nil
}

// AcquiredNode is what AcquireNode stores when n takes the lease of a name whose record
// is old (nil: none), or the error that refuses it; every implementation decides by it.
func AcquiredNode(old, n *Node, now time.Time) (*Node, error) {
	c := *n
	if old != nil {
		if old.Instance != n.Instance && old.StateAt(now) != NodeLost && old.StateAt(now) != NodeStopped {
			return nil, errdefs.Precondition("node name %q is held by another live node (address %s) whose lease ends at %s; choose another node.name, or stop that node",
				n.Name, orNone(old.Address), old.LeaseExpires.UTC().Format(time.RFC3339)).
				WithDetails(map[string]any{"node": n.Name, "holder_address": old.Address, "lease_expires": old.LeaseExpires.UTC()})
		}
		c.Epoch, c.Draining, c.FencedEpoch = old.Epoch, old.Draining, old.FencedEpoch
	} else {
		c.Epoch, c.Draining = 0, false
	}
	c.Epoch++
	return &c, nil
}

// RenewedNode is what RenewNode stores when n renews the record old, or the error that
// refuses it.
func RenewedNode(old, n *Node) (*Node, error) {
	if old.Epoch != n.Epoch {
		return nil, errdefs.VersionConflict("the lease of node %q was taken over (epoch %d, this node holds %d)", n.Name, old.Epoch, n.Epoch)
	}
	c := *old
	c.Address, c.Capacity, c.Reserved = n.Address, n.Capacity, n.Reserved
	c.Labels, c.Runtimes, c.Images = n.Labels, n.Runtimes, n.Images
	c.LeaseExpires, c.RenewedAt = n.LeaseExpires, n.RenewedAt
	return &c, nil
}

func orNone(addr string) string {
	if addr == "" {
		return "none advertised"
	}
	return addr
}

// ReleasedNode is what ReleaseNode stores when the holder of epoch gives old's lease
// back, or the error that refuses it.
func ReleasedNode(old *Node, epoch int64) (*Node, error) {
	if old.Epoch != epoch {
		return nil, errdefs.VersionConflict("the lease of node %q was taken over (epoch %d, not %d)", old.Name, old.Epoch, epoch)
	}
	c := *old
	c.LeaseExpires = time.Time{}
	return &c, nil
}

// ChangeNode reads name's record (nil: none), asks change what to store instead, and
// stores it, in one transaction; each implementation has its own.
type ChangeNode func(ctx context.Context, name string, change func(old *Node) (*Node, error)) (*Node, error)

// NodeMissing is ErrNotFound for a node name.
func NodeMissing(name string) error { return errdefs.NotFound("no node is named %q", name) }

// AcquireNodeBy is AcquireNode over an implementation's ChangeNode.
func AcquireNodeBy(ctx context.Context, cn ChangeNode, n *Node, now time.Time) error {
	got, err := cn(ctx, n.Name, func(old *Node) (*Node, error) { return AcquiredNode(old, n, now) })
	if err != nil {
		return err
	}
	*n = *got
	return nil
}

// RenewNodeBy is RenewNode over an implementation's ChangeNode.
func RenewNodeBy(ctx context.Context, cn ChangeNode, n *Node) error {
	got, err := cn(ctx, n.Name, func(old *Node) (*Node, error) {
		if old == nil {
			return nil, NodeMissing(n.Name)
		}
		return RenewedNode(old, n)
	})
	if err != nil {
		return err
	}
	n.Draining = got.Draining
	return nil
}

// ReleaseNodeBy is ReleaseNode over an implementation's ChangeNode.
func ReleaseNodeBy(ctx context.Context, cn ChangeNode, name string, epoch int64) error {
	_, err := cn(ctx, name, func(old *Node) (*Node, error) {
		if old == nil {
			return nil, NodeMissing(name)
		}
		return ReleasedNode(old, epoch)
	})
	return err
}

// SetNodeDrainingBy is SetNodeDraining over an implementation's ChangeNode.
func SetNodeDrainingBy(ctx context.Context, cn ChangeNode, name string, draining bool) (*Node, error) {
	return cn(ctx, name, func(old *Node) (*Node, error) {
		if old == nil {
			return nil, NodeMissing(name)
		}
		c := *old
		c.Draining = draining
		return &c, nil
	})
}
