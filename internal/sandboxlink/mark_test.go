package sandboxlink

import (
	"hash/fnv"
	"net/netip"
	"path/filepath"
	"testing"
)

// TestReserveMarkSkipsOtherTables: nodes on one host get marks of their own, and a
// node never takes the mark another table (a running node's or one that stopped)
// drops connections by, since its rule would then drop the new node's sandboxes.
func TestReserveMarkSkipsOtherTables(t *testing.T) {
	requireHost(t)
	n := newTestNode(t)
	one := n.config()
	one.Table, one.ListenerMark = "airlock_one", 0
	m1 := openManager(t, one)
	t.Cleanup(func() { m1.RemoveRules() })
	if !validMark(m1.ListenerMark()) {
		t.Fatalf("mark %#x is not one ReserveMark hands out", m1.ListenerMark())
	}

	// A second table whose name starts where the first's mark is.
	name := ""
	for i := 0; name == ""; i++ {
		cand := "airlock_" + string(rune('a'+i%26)) + string(rune('a'+i/26%26)) + string(rune('a'+i/676%26))
		h := fnv.New32a()
		h.Write([]byte(cand))
		if markBase|h.Sum32()%markCount == m1.ListenerMark() {
			name = cand
		}
	}
	two := n.config()
	two.Table, two.ListenerMark, two.HostPrefix = name, 0, "alu"
	two.Subnet = netip.MustParsePrefix("10.204.0.0/16")
	two.RunDir = filepath.Join(t.TempDir(), "netns")
	m2 := openManager(t, two)
	t.Cleanup(func() { m2.RemoveRules() })
	if m2.ListenerMark() == m1.ListenerMark() {
		t.Fatalf("tables %s and %s both drop connections by mark %#x", one.Table, two.Table, m1.ListenerMark())
	}

	// Written again (a restart), a table keeps a free mark: its own does not count.
	again, release, err := ReserveMark(n.path, name)
	if err != nil {
		t.Fatal(err)
	}
	release()
	used, err := marksInUse(n.path, name)
	if err != nil {
		t.Fatal(err)
	}
	if used[again] || !used[m1.ListenerMark()] || used[m2.ListenerMark()] {
		t.Fatalf("marks in use besides %s: %v; reserved %#x", name, used, again)
	}
}

func TestConfigRefusesForeignMark(t *testing.T) {
	c := Config{Subnet: testSubnet, HostPrefix: "al", RunDir: "/run/x", ProxyPort: 1, TransparentHTTPPort: 2,
		TransparentTLSPort: 3, TransparentTCPPort: 4, DNSPort: 5, ListenerMark: 0x4000}
	if err := c.Validate(); err == nil {
		t.Fatal("a mark outside the node marks was accepted")
	}
	c.ListenerMark = markBase | 7
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
}
