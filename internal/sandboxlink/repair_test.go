package sandboxlink

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/nftables"
)

// TestRepairPutsTheTableBack removes parts of the table as other programs on a host do
// (the whole table, one sandbox's elements, one chain's rules): each time the sandbox
// reaches a forbidden listener until Repair, which says it repaired, and never after.
func TestRepairPutsTheTableBack(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	svc := startServices(t, node)
	a := create(t, m, "sb_a", "baseline")
	create(t, m, "sb_b", "baseline")

	// A forbidden TCP listener of the node's, and its forbidden UDP port on the link.
	reaches := func() bool {
		got, _ := tcpFrom(a.NetnsPath, ap(otherAddr, forbiddenPort))
		before := svc.forbidden.Load()
		udpFrom(a.NetnsPath, ap(a.HostAddr, forbiddenPort))
		return got == "forbidden" || svc.forbidden.Load() > before
	}
	nft := func(change func(c *nftables.Conn)) func() error {
		return func() error {
			c, err := m.nft()
			if err != nil {
				return err
			}
			change(c)
			return c.Flush()
		}
	}
	for _, s := range []struct {
		name string
		do   func() error
	}{
		{"table deleted", nft(func(c *nftables.Conn) { c.DelTable(m.table()) })},
		{"a's elements deleted", func() error { return m.deleteElements(a.ID, nil) }},
		{"sandbox_in flushed", nft(func(c *nftables.Conn) { c.FlushChain(&nftables.Chain{Table: m.table(), Name: chainIn}) })},
		{"the rate rule deleted", nft(func(c *nftables.Conn) {
			rules, _ := c.GetRules(m.table(), &nftables.Chain{Table: m.table(), Name: chainIn})
			if len(rules) > 1 {
				c.DelRule(rules[1])
			}
		})},
	} {
		if repaired, err := m.Repair(); err != nil || repaired {
			t.Fatalf("before %s: Repair() = %v, %v; want nothing to repair", s.name, repaired, err)
		}
		if err := s.do(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if s.name != "the rate rule deleted" && !reaches() {
			t.Errorf("%s: the sandbox was still kept from the forbidden port; the step removed nothing", s.name)
		}
		if repaired, err := m.Repair(); err != nil || !repaired {
			t.Errorf("%s: Repair() = %v, %v; want repaired", s.name, repaired, err)
		}
		if reaches() {
			t.Errorf("%s: after Repair the sandbox reaches the forbidden port", s.name)
		}
	}
}

// TestWatchDeletions: deleting the table is reported at once, and stop ends the watch.
func TestWatchDeletions(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	create(t, m, "sb_a", "baseline")
	changes, stop, err := m.WatchDeletions()
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.nft()
	if err != nil {
		t.Fatal(err)
	}
	c.DelTable(m.table())
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changes:
	case <-time.After(5 * time.Second):
		t.Error("the table's deletion was not reported")
	}
	if repaired, err := m.Repair(); err != nil || !repaired {
		t.Errorf("Repair() = %v, %v; want repaired", repaired, err)
	}
	stop()
	for range changes { // closed by stop
	}
	// A node going away for good: its table stays gone.
	if err := m.RemoveRules(); err != nil {
		t.Fatal(err)
	}
	if repaired, err := m.Repair(); err != nil || repaired {
		t.Errorf("Repair() after RemoveRules = %v, %v; want nothing done", repaired, err)
	}
}

// TestRestoreOfManyElements: a rewrite of the table that puts back the elements of
// thousands of sandboxes succeeds (in one transaction it was more than a netlink
// message holds, and the rewrite failed with EMSGSIZE, leaving them unfiltered).
func TestRestoreOfManyElements(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	const n = 1500 // one message each set and sandbox: about 300 KiB in one transaction
	if m.cfg.slots() < n {
		t.Skipf("the test subnet has %d slots, fewer than %d", m.cfg.slots(), n)
	}
	var restore []*Sandbox
	for i := range n {
		host, sb := m.cfg.slotAddrs(i)
		restore = append(restore, &Sandbox{ID: fmt.Sprintf("sb_many%08d", i), HostIf: m.cfg.hostIfName(host), HostAddr: host, SandboxAddr: sb})
	}
	t.Cleanup(func() { // at once, before the node's sweep deletes sandbox by sandbox
		c, err := m.nft()
		if err != nil {
			t.Error(err)
			return
		}
		ifs, links := sets(m.table())
		for i := 0; i < n; i += elementBatch {
			var ie, le []nftables.SetElement
			for _, sb := range restore[i:min(n, i+elementBatch)] {
				ie = append(ie, nftables.SetElement{Key: ifKey(sb.HostIf)})
				le = append(le, nftables.SetElement{Key: linkKey(sb.HostIf, sb.SandboxAddr, sb.HostAddr)})
			}
			if err := c.SetDeleteElements(ifs, ie); err != nil {
				t.Error(err)
			}
			if err := c.SetDeleteElements(links, le); err != nil {
				t.Error(err)
			}
			if err := c.Flush(); err != nil {
				t.Error(err)
			}
		}
	})
	m.mu.Lock()
	err := m.ensureTable(restore...)
	m.mu.Unlock()
	if err != nil {
		t.Fatalf("ensureTable with %d sandboxes' elements: %v", n, err)
	}
	elems, err := m.elements()
	if err != nil {
		t.Fatal(err)
	}
	if len(elems) != 2*n {
		t.Errorf("the sets hold %d elements; want %d (two for each of %d sandboxes)", len(elems), 2*n, n)
	}
}

// TestRepairLeavesABusyCreate: a sandbox whose Create has made its link but not yet its
// elements is that Create's to finish: Repair finds nothing to repair (it rewrote the
// whole table each time, and its own flush started the next rewrite).
func TestRepairLeavesABusyCreate(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	a := create(t, m, "sb_a", "baseline")
	if err := m.deleteElements(a.ID, nil); err != nil { // as between a Create's link and its elements
		t.Fatal(err)
	}
	m.mu.Lock()
	m.busy[a.ID] = true
	m.mu.Unlock()
	if repaired, err := m.Repair(); err != nil || repaired {
		t.Errorf("Repair() with a Create under way = %v, %v; want nothing to repair", repaired, err)
	}
	m.mu.Lock()
	delete(m.busy, a.ID)
	m.mu.Unlock()
	if repaired, err := m.Repair(); err != nil || !repaired {
		t.Errorf("Repair() once the Create is no longer under way = %v, %v; want repaired", repaired, err)
	}
}

// TestRepairOfAnIntactTableListsNoLinks: the periodic check of an intact table takes
// the sandboxes from memory, not from a dump of the host's links (whose kernel cost
// grows with the square of the sandboxes); a link removed from under its sandbox, its
// elements with it, is looked at with a dump and is not damage to put back.
func TestRepairOfAnIntactTableListsNoLinks(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	create(t, m, "sb_a", "baseline")
	b := create(t, m, "sb_b", "baseline")
	before := m.dumps.Load()
	for range 3 {
		if repaired, err := m.Repair(); err != nil || repaired {
			t.Fatalf("Repair() = %v, %v; want nothing to repair", repaired, err)
		}
	}
	if n := m.dumps.Load() - before; n != 0 {
		t.Errorf("three checks of an intact table dumped the host's links %d times; want none", n)
	}

	// b's veth and its elements go, as a `ip link del` and an `nft delete element` would.
	link, err := m.nl.LinkByName(b.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.nl.LinkDel(link); err != nil {
		t.Fatal(err)
	}
	if err := m.deleteElements(b.ID, nil); err != nil {
		t.Fatal(err)
	}
	if repaired, err := m.Repair(); err != nil || repaired {
		t.Errorf("Repair() after b's link and elements went = %v, %v; want nothing put back", repaired, err)
	}
	if m.dumps.Load() == before {
		t.Error("a table missing an owned sandbox's elements was not checked against the host's links")
	}
}
