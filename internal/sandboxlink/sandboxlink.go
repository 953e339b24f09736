// Package sandboxlink owns each sandbox's link to the node, its network plumbing: a named network
// namespace (a file bind-mounted under Config.RunDir), a veth pair whose host side
// stays in the host namespace, the link's addresses and default route, and the
// "inet airlock" nftables table that lets a sandbox reach only the node's egress proxy
// and DNS server (port 80 and 443 traffic is redirected to the proxy's transparent
// ports). It also tells the proxy which sandbox an address belongs to (Lookup) and
// where a redirected connection was headed (OriginalDst).
//
// It must not touch any other table, chain, interface, route or sysctl of the host,
// must not set up forwarding or NAT to the outside world, and knows nothing of
// policies, containers or the store: the egress package decides what a sandbox may
// reach through the proxy, and the runtime driver runs the container in NetnsPath.
//
// Hostile surfaces it guards: a sandbox owns only its side of its veth; the nftables
// rules let it reach the node's proxy and DNS ports and nothing else (not another
// sandbox, not the host's other services), and Lookup maps a source address to a
// sandbox only for addresses this package assigned.
package sandboxlink

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ModeNone is the egress mode whose sandbox has loopback only: no veth, no rules.
// Every other mode gets the same link and rules; the egress proxy tells them apart.
const ModeNone = "none"

// Sandbox is one sandbox's network as Create made it. For ModeNone only ID, NetnsPath
// and Mode are set.
type Sandbox struct {
	ID        string
	NetnsPath string // the namespace to pass to the OCI runtime
	HostIf    string // host-side veth, in the host namespace
	SandboxIf string // sandbox-side veth, inside NetnsPath
	// HostAddr is the node's address on the link (proxy, DNS, default gateway);
	// SandboxAddr is the sandbox's own, the source of all its traffic.
	HostAddr, SandboxAddr netip.Addr
	Mode                  string
}

// Manager makes and removes sandbox networks. Its methods are safe for concurrent use;
// calls for one id must not overlap (the second gets an unavailable error).
type Manager struct {
	cfg    Config
	hostNS vnetns.NsHandle
	nl     *netlink.Handle // rtnetlink in the host namespace

	// failAfter, set by tests only, makes Create fail after the named step.
	failAfter func(step string) error
	// dumps counts the dumps of the host's links, for tests.
	dumps atomic.Int64

	mu   sync.RWMutex
	busy map[string]bool // ids with a Create or Delete in progress
	// slots maps every link index that has any resource (or a Create under way) to its
	// sandbox; a new sandbox gets an index not in it, so its names and set keys are new.
	slots  map[int]string
	byAddr map[netip.Addr]string // sandbox-side address → id, for Lookup

	// ruleCounts is how many rules each chain of the table got when it was last
	// written, by chain name: what Repair checks the table against.
	ruleCounts map[string]int
	// retired is set by RemoveRules: the table is gone for good and Repair leaves it so.
	retired bool
}

// New validates cfg, creates the nftables table with its sets and chains (rewriting the
// chains and keeping the sets' elements if it exists) and learns the links that already
// exist from their interfaces and set elements, so that Lookup and address allocation
// survive a restart.
func New(cfg Config) (_ *Manager, retErr error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	if cfg.ListenerMark == 0 {
		mark, release, err := ReserveMark(cfg.HostNetns, cfg.Table)
		if err != nil {
			return nil, err
		}
		defer release()
		cfg.ListenerMark = mark
	}
	hostPath := cfg.HostNetns
	if hostPath == "" {
		hostPath = "/proc/self/ns/net"
	}
	hostNS, err := vnetns.GetFromPath(hostPath)
	if err != nil {
		return nil, fmt.Errorf("netns: host namespace %s: %w", hostPath, err)
	}
	m := &Manager{cfg: cfg, hostNS: hostNS, busy: map[string]bool{},
		slots: map[int]string{}, byAddr: map[netip.Addr]string{}}
	defer func() {
		if retErr != nil {
			m.Close()
		}
	}()
	if m.nl, err = netlink.NewHandleAt(hostNS, unix.NETLINK_ROUTE); err != nil {
		return nil, fmt.Errorf("netns: netlink in host namespace: %w", err)
	}
	// The links that survive (their sandboxes may still run) are listed before the
	// table is written, so that the same transaction gives each its elements back: a
	// table that was lost (an `nft flush ruleset`, a reboot of the firewall service)
	// would otherwise come back empty and leave those links unfiltered.
	all, err := m.linkList()
	if err != nil {
		return nil, err
	}
	restore := m.linked(all, nil)
	if err := m.ensureTable(restore...); err != nil {
		return nil, err
	}
	for _, sb := range restore {
		i, _ := cfg.slotOfIf(sb.HostIf)
		m.own(i, sb.ID)
	}
	elems, err := m.elements()
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		if i, ok := cfg.slotOfIf(e.ifName()); ok && validID(e.Comment) == nil {
			m.own(i, e.Comment)
		}
	}
	if err := m.dropOrphans(all); err != nil {
		return nil, err
	}
	return m, nil
}

// dropOrphans deletes the host-side veths named like this Manager's that neither carry
// a sandbox's label nor have set elements: left by a crash between creating a veth and
// labelling it, after the table was lost too. Nothing filters them and nobody owns
// them, so they must not stay.
func (m *Manager) dropOrphans(links []netlink.Link) error {
	for _, l := range links {
		name := l.Attrs().Name
		if i, ours := m.cfg.slotOfIf(name); ours && m.slots[i] == "" {
			if err := m.delLink(name); err != nil {
				return err
			}
		}
	}
	return nil
}

// own records that link i belongs to sandbox id (unless it already has an owner).
func (m *Manager) own(i int, id string) {
	if _, taken := m.slots[i]; taken {
		return
	}
	m.slots[i] = id
	_, sb := m.cfg.slotAddrs(i)
	m.byAddr[sb] = id
}

// ListenerMark is the mark the node's listeners must carry (MarkSocket) for the rules
// to keep every interface but the sandboxes' out.
func (m *Manager) ListenerMark() uint32 { return m.cfg.ListenerMark }

// Close releases the Manager's handles. Sandboxes, links and rules stay.
func (m *Manager) Close() error {
	if m.nl != nil {
		m.nl.Close()
	}
	if !m.hostNS.IsOpen() {
		return nil
	}
	return m.hostNS.Close()
}

// Create makes sandbox id's network for mode: the namespace (lo up, IPv6 off) and,
// unless mode is ModeNone, the rules' set elements, a veth pair with the link's
// addresses and the default route via the host side. The rules exist before the link
// does, so a sandbox is never on the network unfiltered. If a step fails Create undoes
// the steps before it. An id with any leftover resource is refused (already exists):
// Delete it first.
func (m *Manager) Create(ctx context.Context, id, mode string) (_ *Sandbox, retErr error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	if mode == "" {
		return nil, errdefs.Invalid("netns: empty egress mode")
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	slot, err := m.claim(id, mode != ModeNone)
	if err != nil {
		return nil, err
	}
	sb := &Sandbox{ID: id, NetnsPath: m.cfg.netnsPath(id), Mode: mode}
	if slot >= 0 {
		sb.HostAddr, sb.SandboxAddr = m.cfg.slotAddrs(slot)
		sb.HostIf, sb.SandboxIf = m.cfg.hostIfName(sb.HostAddr), sandboxIf
	}
	var undo []func() error
	defer func() {
		if retErr != nil {
			for _, u := range slices.Backward(undo) {
				retErr = errors.Join(retErr, u())
			}
		}
		m.release(id, slot, retErr == nil)
	}()
	steps := []struct {
		name     string
		do, undo func() error
	}{
		{"netns", func() error { return newNamed(sb.NetnsPath) }, func() error { return removeNamed(sb.NetnsPath) }},
		{"rules", func() error { return m.addElements(sb) }, func() error { return m.deleteElements(id, nil) }},
		{"veth", func() error { return m.addVeth(sb) }, func() error { return m.delLink(sb.HostIf) }},
		{"link", func() error { return m.setupLink(ctx, sb) }, nil},
	}
	if mode == ModeNone {
		steps = steps[:1]
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := s.do(); err != nil {
			return nil, err
		}
		if s.undo != nil {
			undo = append(undo, s.undo)
		}
		if m.failAfter != nil {
			if err := m.failAfter(s.name); err != nil {
				return nil, err
			}
		}
	}
	return sb, nil
}

// claim marks id busy and, for a sandbox with a link, takes a free link index (-1
// otherwise), trying the id's first choice and then the ones after it.
func (m *Manager) claim(id string, needSlot bool) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.busy[id] {
		return -1, errdefs.Unavailable("netns: sandbox %s has a network operation in progress", id)
	}
	if slices.Contains(slices.Collect(maps.Values(m.slots)), id) {
		return -1, errdefs.Exists("netns: sandbox %s already has a link", id)
	}
	slot := -1
	if needSlot {
		n, first := m.cfg.slots(), m.cfg.firstSlot(id)
		for k := range n {
			if i := (first + k) % n; m.slots[i] == "" {
				slot = i
				break
			}
		}
		if slot < 0 {
			return -1, errdefs.Unavailable("netns: no free sandbox link left in %v", m.cfg.Subnet)
		}
		m.slots[slot] = id
	}
	m.busy[id] = true
	return slot, nil
}

// release ends a Create: it publishes the sandbox address to Lookup if Create
// succeeded and frees the link index if it failed.
func (m *Manager) release(id string, slot int, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.busy, id)
	switch {
	case ok && slot >= 0:
		_, sb := m.cfg.slotAddrs(slot)
		m.byAddr[sb] = id
	case !ok && slot >= 0:
		delete(m.slots, slot)
	}
}

// Delete removes everything sandbox id has: its veth pairs first (which cuts the
// sandbox off at once), then the rules' elements, then the namespace file. Deleting
// what does not exist is not an error.
func (m *Manager) Delete(ctx context.Context, id string) error {
	if err := validID(id); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	m.mu.Lock()
	if m.busy[id] {
		m.mu.Unlock()
		return errdefs.Unavailable("netns: sandbox %s has a network operation in progress", id)
	}
	m.busy[id] = true
	var slots []int
	for i, owner := range m.slots {
		if owner == id {
			slots = append(slots, i)
		}
	}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.busy, id)
		m.mu.Unlock()
	}()

	// The elements name the links too: they exist whenever a link does.
	elems, err := m.elements()
	if err != nil {
		return err
	}
	m.mu.RLock()
	for _, e := range elems {
		i, ok := m.cfg.slotOfIf(e.ifName())
		if owner := m.slots[i]; ok && e.Comment == id && (owner == "" || owner == id) {
			slots = append(slots, i)
		}
	}
	m.mu.RUnlock()
	for _, i := range slots {
		host, _ := m.cfg.slotAddrs(i)
		if err := m.delLink(m.cfg.hostIfName(host)); err != nil {
			return err
		}
	}
	if err := m.deleteElements(id, elems); err != nil {
		return err
	}
	m.mu.Lock()
	for _, i := range slots {
		if m.slots[i] == id {
			_, sb := m.cfg.slotAddrs(i)
			delete(m.slots, i)
			delete(m.byAddr, sb)
		}
	}
	m.mu.Unlock()
	return removeNamed(m.cfg.netnsPath(id))
}

// List returns, sorted, the ids that have any resource here: a namespace file, a
// host-side veth labelled with the id, or an nftables element. The reconcile loop
// deletes those without a live sandbox.
func (m *Manager) List() ([]string, error) {
	var ids []string
	entries, err := os.ReadDir(m.cfg.RunDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("netns: %w", err)
	}
	for _, e := range entries {
		if validID(e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	links, err := m.ourLinks()
	if err != nil {
		return nil, err
	}
	for id := range links {
		ids = append(ids, id)
	}
	elems, err := m.elements()
	if err != nil {
		return nil, err
	}
	for _, e := range elems {
		if validID(e.Comment) == nil {
			ids = append(ids, e.Comment)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// Lookup returns the sandbox whose link has addr as its sandbox-side address. The
// proxy and the DNS server identify callers this way; an IPv4-mapped IPv6 address is
// taken as the IPv4 address.
func (m *Manager) Lookup(addr netip.Addr) (id string, ok bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	id, ok = m.byAddr[addr.Unmap()]
	return id, ok
}

// linkList lists the host namespace's links; a dump that raced with a change is retried.
func (m *Manager) linkList() ([]netlink.Link, error) {
	var links []netlink.Link
	var err error
	for range 5 {
		m.dumps.Add(1)
		if links, err = m.nl.LinkList(); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("netns: list links: %w", err)
	}
	return links, nil
}

// ourLinks returns the host-side veths that Create labelled, by sandbox id.
func (m *Manager) ourLinks() (map[string]netlink.Link, error) {
	links, err := m.linkList()
	if err != nil {
		return nil, err
	}
	return m.labelled(links), nil
}

// linked returns the sandboxes whose labelled host-side veths are among links, but for
// the ids in skip, with the addresses their set elements hold.
func (m *Manager) linked(links []netlink.Link, skip map[string]bool) []*Sandbox {
	var out []*Sandbox
	for id, l := range m.labelled(links) {
		if i, ok := m.cfg.slotOfIf(l.Attrs().Name); ok && !skip[id] {
			host, sb := m.cfg.slotAddrs(i)
			out = append(out, &Sandbox{ID: id, HostIf: l.Attrs().Name, HostAddr: host, SandboxAddr: sb})
		}
	}
	return out
}

// labelled picks, from links, the host-side veths that Create labelled, by sandbox id.
func (m *Manager) labelled(links []netlink.Link) map[string]netlink.Link {
	out := map[string]netlink.Link{}
	for _, l := range links {
		a := l.Attrs()
		id, ok := strings.CutPrefix(a.Alias, aliasPrefix)
		if _, ours := m.cfg.slotOfIf(a.Name); ok && ours && validID(id) == nil {
			out[id] = l
		}
	}
	return out
}
