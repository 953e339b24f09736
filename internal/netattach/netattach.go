// Package netattach owns the contract between the sandbox manager and the node's
// network: the Network a sandbox's container is attached to, and the Attachment that
// says how the container joins it. It sits beside the runtime contract (internal/runtime);
// the node's egress assembly (internal/network) implements it and a fake (netattach/fake)
// stands in for it in tests. It must not know about the manager, HTTP or the kernel.
//
// Hostile surfaces of the contract: the policy the manager passes is already validated;
// what the network puts in an Attachment is host paths and environment the sandbox gets,
// so an implementation keeps every host path it names out of the sandbox's write reach.
package netattach

import (
	"context"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// Network gives containers their network: a namespace wired to the node's DNS and
// egress proxy, the environment and files that point clients at them, and the policy
// the proxy enforces.
type Network interface {
	// Attach makes (or, after a restart, finds again) the sandbox's network and says
	// how its container joins it.
	Attach(ctx context.Context, sb *store.Sandbox, pol egress.Policy) (*Attachment, error)
	// Detach removes the sandbox's network; it is idempotent.
	Detach(ctx context.Context, id string) error
	// SetPolicy changes the policy new connections of a sandbox follow.
	SetPolicy(id string, generation int64, pol egress.Policy)
	// List returns the ids of every sandbox with network resources on the host.
	List() ([]string, error)
}

// Reassigner is implemented by networks that can hand an attached sandbox to another
// owner and role in place, with a new policy (a claimed pool member): its session
// credential is minted for them from then on, and its traffic counts as theirs. It
// reports false when id is not attached, and changes nothing then.
type Reassigner interface {
	Reassign(id, owner, role string, generation int64, pol egress.Policy) bool
}

// Joiner is implemented by networks that keep a sandbox's network namespace alive by a
// host mount until its container joins it. Joined says the container now runs in it:
// the mount goes, the record of the namespace (a file) stays, and the namespace lives
// as long as the container. Deleting the sandbox's network works the same either way.
type Joiner interface {
	Joined(id string) error
}

// SessionTokenPath is where every sandbox finds its session credential for the API: a
// placeholder, which the egress proxy swaps for a short-lived token in requests to
// egress.APIHost.
const SessionTokenPath = "/run/airlock/session/token"

// Attachment is how a container joins its network.
type Attachment struct {
	NetnsPath string
	Env       []string
	Mounts    []runtime.Mount
}

// Traffic is what a sandbox's network has carried since it was attached: RxBytes came
// in to the sandbox, TxBytes went out of it.
type Traffic struct {
	RxBytes, TxBytes uint64
}

// TrafficCounter is implemented by networks that count each sandbox's traffic where the
// sandbox cannot reach (the host side of its link), for every sandbox in one read.
type TrafficCounter interface {
	Traffic() (map[string]Traffic, error)
}
