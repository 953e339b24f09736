// Package fake is a netattach.Network in memory, for tests of the layers above the
// network without root: no namespace, proxy or file. An attachment gives a container
// the variables a node's network gives, pointing at a proxy address that is no host
// (proxy.invalid), and the network records each sandbox's policy as the proxy would
// hold it, for a test to read back.
package fake

import (
	"context"
	"maps"
	"slices"
	"sync"

	"github.com/airlockhq/airlock/internal/egress"
	"github.com/airlockhq/airlock/internal/netattach"
	"github.com/airlockhq/airlock/internal/store"
)

// ProxyURL is the egress proxy an attachment points clients at.
const ProxyURL = "http://proxy.invalid:3128"

// Sandbox is what the network holds for one attached sandbox.
type Sandbox struct {
	Generation  int64
	Policy      egress.Policy
	Owner, Role string
	// Attaches counts the attaches of the sandbox since it was last detached, the
	// first and any after a restart of the manager; Policies counts SetPolicy calls.
	Attaches, Policies int
}

// Network implements netattach.Network in memory.
type Network struct {
	mu        sync.Mutex
	sandboxes map[string]Sandbox
	failNext  error
}

var (
	_ netattach.Network    = (*Network)(nil)
	_ netattach.Reassigner = (*Network)(nil)
)

// New returns a network with nothing attached.
func New() *Network { return &Network{sandboxes: map[string]Sandbox{}} }

// FailNextAttach makes the next Attach fail with err.
func (n *Network) FailNextAttach(err error) {
	n.mu.Lock()
	n.failNext = err
	n.mu.Unlock()
}

// Sandbox returns what the network holds for sandbox id, and whether it is attached.
func (n *Network) Sandbox(id string) (Sandbox, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	return s, ok
}

// Attach implements netattach.Network.
func (n *Network) Attach(ctx context.Context, sb *store.Sandbox, pol egress.Policy) (*netattach.Attachment, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := n.failNext; err != nil {
		n.failNext = nil
		return nil, err
	}
	s := n.sandboxes[sb.ID]
	s.Generation, s.Policy, s.Owner, s.Role = sb.Generation, pol, sb.Owner, sb.Role
	s.Attaches++
	n.sandboxes[sb.ID] = s
	att := &netattach.Attachment{}
	if pol.Mode != egress.ModeNone {
		att.Env = []string{"HTTP_PROXY=" + ProxyURL, "HTTPS_PROXY=" + ProxyURL, "http_proxy=" + ProxyURL, "https_proxy=" + ProxyURL,
			"AIRLOCK_API=http://" + egress.APIHost, "AIRLOCK_SESSION_TOKEN_FILE=" + netattach.SessionTokenPath}
	}
	return att, nil
}

// Reassign implements netattach.Reassigner.
func (n *Network) Reassign(id, owner, role string, generation int64, pol egress.Policy) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	s, ok := n.sandboxes[id]
	if ok {
		s.Owner, s.Role, s.Generation, s.Policy = owner, role, generation, pol
		n.sandboxes[id] = s
	}
	return ok
}

// Detach implements netattach.Network.
func (n *Network) Detach(ctx context.Context, id string) error {
	n.mu.Lock()
	delete(n.sandboxes, id)
	n.mu.Unlock()
	return nil
}

// SetPolicy implements netattach.Network: like the node's, it changes only a sandbox
// that is attached.
func (n *Network) SetPolicy(id string, generation int64, pol egress.Policy) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if s, ok := n.sandboxes[id]; ok {
		s.Generation, s.Policy = generation, pol
		s.Policies++
		n.sandboxes[id] = s
	}
}

// List implements netattach.Network.
func (n *Network) List() ([]string, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return slices.Sorted(maps.Keys(n.sandboxes)), nil
}
