package sandboxlink

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
)

// Repair checks that the table still holds what this Manager wrote: every chain with
// all its rules, and both set elements of every sandbox link. Anything else on the
// host may change the table while the daemon runs (an `nft flush ruleset`, a firewall
// service reloading its rules) and a sandbox whose elements or rules are gone is
// unfiltered, so the daemon calls Repair as soon as the kernel reports a deletion in the
// ruleset (WatchDeletions) and every few seconds besides. If anything is missing it
// writes the table again, chains, rules and elements in one transaction, as New does,
// and reports that it did. After RemoveRules it does nothing.
func (m *Manager) Repair() (repaired bool, err error) {
	m.mu.RLock()
	retired := m.retired
	m.mu.RUnlock()
	if retired {
		return false, nil
	}
	// The first look takes the sandboxes from memory: every link this Manager made or
	// found holds a link index, so what it owns is at least what the links are, and a
	// dump of the host's links (every veth's peer namespace looked up by the kernel
	// among all of them, so its cost grows with the square of the sandboxes) is left
	// for the second look, which only damage, or a link gone under its sandbox, reaches.
	m.mu.RLock()
	counts, owned := m.ruleCounts, m.owned(m.busy)
	m.mu.RUnlock()
	ok, err := m.intact(counts, owned)
	if err != nil || ok {
		return false, err
	}
	// Create and Delete mark their id busy under mu and then work outside it; holding
	// mu here keeps a Delete from starting while its link's elements are put back, and
	// the busy ones are left out (a Create adds its own elements; the next Repair
	// looks at it again).
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retired {
		return false, nil
	}
	// Looked at again with mu held: the first look read the elements, then the links,
	// then who was busy, without it, so a Create that began and ended in between (its
	// link read, its elements not) looked like damage, and a node making sandboxes all
	// the time rewrote its whole table over and over. With mu held no call starts or
	// ends, and what is not busy is as its call left it.
	links, err := m.linkList()
	if err != nil {
		return false, fmt.Errorf("netns: check the table: %w", err)
	}
	linked := m.linked(links, m.busy)
	if ok, err := m.intact(m.ruleCounts, linked); err != nil || ok {
		return false, err
	}
	if err := m.ensureTable(linked...); err != nil {
		return false, err
	}
	return true, nil
}

// intact reports whether every chain has the rules ensureTable gave it (counts) and
// every sandbox in want has both its set elements. A table, chain or
// set that is not there is damage; a read that fails otherwise (a dump the kernel
// interrupted because the ruleset changed under it, which at thousands of elements is
// common) is an error, not damage: the next check reads again.
func (m *Manager) intact(counts map[string]int, want []*Sandbox) (bool, error) {
	c, err := m.nft()
	if err != nil {
		return false, err
	}
	t := m.table()
	for name, want := range counts {
		rules, err := c.GetRules(t, &nftables.Chain{Table: t, Name: name})
		if missing(err) || err == nil && len(rules) != want {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("netns: check the table: %w", err)
		}
	}
	elems, err := m.elements()
	if missing(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("netns: check the table: %w", err)
	}
	have := map[string]bool{}
	for _, e := range elems {
		have[e.set.Name+"\x00"+string(e.Key)] = true
	}
	for _, sb := range want {
		if !have[setIfs+"\x00"+string(ifKey(sb.HostIf))] || !have[setLinks+"\x00"+string(linkKey(sb.HostIf, sb.SandboxAddr, sb.HostAddr))] {
			return false, nil
		}
	}
	return true, nil
}

// owned returns the sandboxes that hold a link index, but for the ids in skip (a
// sandbox whose Create or Delete is under way has its link before, or after, its
// elements: it is that call's to finish, not a damage), with the names and addresses
// their index gives them. The caller holds mu.
func (m *Manager) owned(skip map[string]bool) []*Sandbox {
	out := make([]*Sandbox, 0, len(m.slots))
	for i, id := range m.slots {
		if id == "" || skip[id] {
			continue
		}
		host, sb := m.cfg.slotAddrs(i)
		out = append(out, &Sandbox{ID: id, HostIf: m.cfg.hostIfName(host), HostAddr: host, SandboxAddr: sb})
	}
	return out
}

// missing says whether err is the kernel's answer for a table, chain or set that is
// not there.
func missing(err error) bool { return errors.Is(err, unix.ENOENT) }

// WatchDeletions reports deletions in the host namespace's nftables ruleset as they
// happen: a value on the returned channel (which holds one, so a burst is one value)
// after each batch that deleted a table, chain, rule, set, element or object, of any
// table. The caller runs Repair on it, which looks at this Manager's table only; the
// Manager's own deletions (a sandbox's elements) are reported too. stop ends the watch
// and closes the channel; so does a failure of the kernel's notifications (a full
// receive buffer), after which the caller falls back on checking every few seconds.
func (m *Manager) WatchDeletions() (changes <-chan struct{}, stop func(), _ error) {
	c, err := m.nft()
	if err != nil {
		return nil, nil, err
	}
	// Every event is asked for and the deletions picked out here: the library's filter
	// for deletions only tests bit 0 of its mask (its `flags&1<<type` shifts the masked
	// bit) and so passes nothing, not even the batch ends that carry the events.
	mon := nftables.NewMonitor()
	events, err := c.AddGenerationalMonitor(mon)
	if err != nil {
		return nil, nil, fmt.Errorf("netns: watch the nftables ruleset: %w", err)
	}
	out := make(chan struct{}, 1)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for ev := range events { // until the monitor closes it
			if !deletes(ev) {
				continue
			}
			select {
			case out <- struct{}{}:
			default:
			}
		}
	}()
	return out, func() { mon.Close(); <-done }, nil
}

// deletes reports whether a batch of changes deleted anything, or the monitor failed.
func deletes(ev *nftables.MonitorEvents) bool {
	if ev.GeneratedBy != nil && ev.GeneratedBy.Error != nil {
		return true
	}
	for _, c := range ev.Changes {
		switch c.Type {
		case nftables.MonitorEventTypeDelTable, nftables.MonitorEventTypeDelChain, nftables.MonitorEventTypeDelRule,
			nftables.MonitorEventTypeDelSet, nftables.MonitorEventTypeDelSetElem, nftables.MonitorEventTypeDelObj:
			return true
		}
	}
	return false
}
