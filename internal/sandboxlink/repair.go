package sandboxlink

import (
	"errors"
	"fmt"
	"maps"

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
	m.mu.RLock()
	counts, busy := m.ruleCounts, maps.Clone(m.busy)
	m.mu.RUnlock()
	ok, err := m.intact(counts, busy)
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
	if ok, err := m.intact(m.ruleCounts, m.busy); err != nil || ok {
		return false, err
	}
	links, err := m.linkList()
	if err != nil {
		return false, err
	}
	if err := m.ensureTable(m.linked(links, m.busy)...); err != nil {
		return false, err
	}
	return true, nil
}

// intact reports whether every chain has the rules ensureTable gave it (counts) and
// every labelled link but the busy ones' has both its set elements. A table, chain or
// set that is not there is damage; a read that fails otherwise (a dump the kernel
// interrupted because the ruleset changed under it, which at thousands of elements is
// common) is an error, not damage: the next check reads again.
func (m *Manager) intact(counts map[string]int, busy map[string]bool) (bool, error) {
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
	links, err := m.linkList()
	if err != nil {
		return false, fmt.Errorf("netns: check the table: %w", err)
	}
	// A sandbox whose Create or Delete is under way has its link before (or after) its
	// elements: it is that call's to finish, not a damage.
	for _, sb := range m.linked(links, busy) {
		if !have[setIfs+"\x00"+string(ifKey(sb.HostIf))] || !have[setLinks+"\x00"+string(linkKey(sb.HostIf, sb.SandboxAddr, sb.HostAddr))] {
			return false, nil
		}
	}
	return true, nil
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
