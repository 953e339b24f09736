package manager

import (
	"context"
	"maps"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/placement"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/units"
)

// PlaceRequest is what a new sandbox needs of its node: what placement weighs.
type PlaceRequest struct {
	Memory int64   `json:"memory"` // bytes its memory limit reserves
	CPUs   float64 `json:"cpus"`
	// Runtime is the runtime it runs on ("": each node's default).
	Runtime string `json:"runtime,omitempty"`
	// Image is its image: a digest, or a name that Place resolves among the public
	// images (another owner's names are not looked at). A node that holds it is
	// preferred.
	Image string `json:"image,omitempty"`
	// NodeSelector are the labels its node must carry.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
}

// Place names the nodes that can take a sandbox needing req, best first (placement
// decides), or refuses with what each node lacks. Its reservations are read fresh
// from the store, in one query for every node, with one more for the nodes' records.
// Memory and CPUs left at zero are this node's defaults. A node alone places on
// itself, reading nothing: its own create admits the memory.
func (m *Manager) Place(ctx context.Context, req PlaceRequest) ([]string, error) {
	if !m.cfg.SharedStore || m.member == nil {
		return placement.Decide(placement.Request{Runtime: req.Runtime, Selector: req.NodeSelector}, []placement.Node{m.self()})
	}
	if req.Memory == 0 {
		req.Memory = m.cfg.DefaultLimits.Memory
	}
	if req.CPUs == 0 {
		req.CPUs = m.cfg.DefaultLimits.CPU
	}
	if req.Image != "" && !strings.HasPrefix(req.Image, "sha256:") {
		img, err := m.images.Get(image.Scope{}, req.Image)
		req.Image = ""
		if err == nil {
			req.Image = img.Digest
		}
	}
	nodes, err := m.member.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	reserved, err := m.store.ReservedByNode(ctx, reserving, nil, nil)
	if err != nil {
		return nil, err
	}
	cands := make([]placement.Node, len(nodes))
	for i, n := range nodes {
		cands[i] = placement.Node{Name: n.Name, State: string(n.State), Memory: n.Capacity.Memory, CPUs: n.Capacity.CPUs,
			Reserved: reserved[n.Name].Memory, Labels: n.Labels, Runtimes: n.Runtimes, Images: n.Images, Here: n.Self}
	}
	return placement.Decide(placement.Request{Memory: req.Memory, CPUs: req.CPUs, Runtime: req.Runtime, Image: req.Image, Selector: req.NodeSelector}, cands)
}

// self is this node as placement sees it without reading the store: ready, of no
// known size (its own create admits memory), with its labels and runtimes.
func (m *Manager) self() placement.Node {
	return placement.Node{Name: m.cfg.NodeName, State: placement.Ready, Labels: m.cfg.NodeLabels, Runtimes: m.Runtimes()}
}

// selects checks a create's node selector, and that this node, which is to create the
// sandbox, carries its labels.
func (m *Manager) selects(sel map[string]string) error {
	if err := validateSelector(sel); err != nil {
		return err
	}
	if why := placement.Shortfall(placement.Request{Selector: sel}, m.self()); why != "" {
		return errdefs.Precondition("this node cannot hold the sandbox: %s", why).
			WithDetails(map[string]any{"node": m.cfg.NodeName, "reason": "node_selector"})
	}
	return nil
}

// NodeMemory is how much memory this node's sandboxes may reserve between them (0:
// not checked): the node's capacity for placement and admission. It is node.memory
// when set; else, in a cluster (a store other nodes share), the host's memory; else
// nothing: a node alone keeps taking sandboxes by their limits' sum as before (a
// limit is a ceiling, not a use: thousands of idle 1GiB sandboxes fit a 24GiB host),
// bounded by its uid ranges and each owner's cap.
func (m *Manager) NodeMemory() int64 {
	switch {
	case m.cfg.NodeMemory > 0:
		return m.cfg.NodeMemory
	case store.IsShared(m.store):
		return m.cfg.HostMemory
	}
	return 0
}

func validateSelector(sel map[string]string) error {
	if err := validateLabels(sel); err != nil {
		return errdefs.Invalid("node_selector: %s", errdefs.Message(err))
	}
	return nil
}

// admit holds memory bytes of this node's memory for sandbox id until release, or
// refuses when the node's live sandboxes (pool members too) and the containers being
// made would reserve more than the node has. A create, fork, pool refill or resume
// holds it while its container is made, so concurrent ones on this node cannot
// overcommit it: each counts those admitted before it, and one whose record already
// reserves is counted once.
func (m *Manager) admit(ctx context.Context, id string, memory int64) (release func(), err error) {
	capacity := m.NodeMemory()
	if capacity <= 0 {
		return func() {}, nil
	}
	m.mu.Lock()
	inFlight := maps.Clone(m.admitted)
	m.admitted[id] = memory
	m.mu.Unlock()
	release = func() {
		m.mu.Lock()
		delete(m.admitted, id)
		m.mu.Unlock()
	}
	// The records' sum leaves out the sandboxes being made, counted from inFlight.
	except := append(slices.Collect(maps.Keys(inFlight)), id)
	r, err := m.reservedHere(ctx, except)
	if err != nil {
		release()
		return nil, err
	}
	held := r.Memory
	for _, mem := range inFlight {
		held += mem
	}
	if held+memory > capacity {
		release()
		free := max(capacity-held, 0)
		return nil, errdefs.Quota("node %q cannot hold %s more memory: its sandboxes reserve %s of its %s, %s is free",
			m.cfg.NodeName, units.FormatSize(memory), units.FormatSize(held), units.FormatSize(capacity), units.FormatSize(free)).
			WithDetails(map[string]any{"node": m.cfg.NodeName, "memory": memory, "free": free, "capacity": capacity, "reason": "node_memory"})
	}
	return release, nil
}
