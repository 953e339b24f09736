package sandboxlink

import (
	"fmt"

	"github.com/google/nftables"
)

// Repair checks that the table still holds what this Manager wrote: every chain with
// all its rules, and both set elements of every sandbox link. Anything else on the
// host may change the table while the daemon runs (an `nft flush ruleset`, a firewall
// service reloading its rules) and a sandbox whose elements or rules are gone is
// unfiltered, so the daemon calls Repair every few seconds. If anything is missing it
// writes the table again, chains, rules and elements in one transaction, as New does,
// and reports that it did.
func (m *Manager) Repair() (repaired bool, err error) {
	ok, err := m.intact()
	if err != nil || ok {
		return false, err
	}
	// Create and Delete mark their id busy under mu and then work outside it; holding
	// mu here keeps a Delete from starting while its link's elements are put back, and
	// the busy ones are left out (a Create adds its own elements; the next Repair
	// looks at it again).
	m.mu.Lock()
	defer m.mu.Unlock()
	links, err := m.linkList()
	if err != nil {
		return false, err
	}
	if err := m.ensureTable(m.linked(links, m.busy)...); err != nil {
		return false, err
	}
	return true, nil
}

// intact reports whether every chain has the rules ensureTable gave it and every
// labelled link has both its set elements.
func (m *Manager) intact() (bool, error) {
	c, err := m.nft()
	if err != nil {
		return false, err
	}
	t := m.table()
	m.mu.RLock()
	counts := m.ruleCounts
	m.mu.RUnlock()
	for name, want := range counts {
		rules, err := c.GetRules(t, &nftables.Chain{Table: t, Name: name})
		if err != nil || len(rules) != want {
			return false, nil // a missing table or chain is an error here
		}
	}
	elems, err := m.elements()
	if err != nil {
		return false, nil
	}
	have := map[string]bool{}
	for _, e := range elems {
		have[e.set.Name+"\x00"+string(e.Key)] = true
	}
	links, err := m.linkList()
	if err != nil {
		return false, fmt.Errorf("netns: check the table: %w", err)
	}
	for _, sb := range m.linked(links, nil) {
		if !have[setIfs+"\x00"+string(ifKey(sb.HostIf))] || !have[setLinks+"\x00"+string(linkKey(sb.HostIf, sb.SandboxAddr, sb.HostAddr))] {
			return false, nil
		}
	}
	return true, nil
}
