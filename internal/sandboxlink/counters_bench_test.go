package sandboxlink

import (
	"fmt"
	"os"
	"strconv"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// BenchmarkCounters measures Counters, the one dump of the host's links a usage
// collector tick makes, with N labelled host-side links (AIRLOCK_BENCH_SANDBOXES,
// default 1000; veths named and labelled as Create names them, their peers in another
// namespace as a sandbox's are) in a test node's namespace.
func BenchmarkCounters(b *testing.B) {
	requireHost(b)
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_SANDBOXES")); err == nil && v > 0 {
		n = v
	}
	node := newTestNode(b)
	m := newTestManager(b, node)
	world, err := vnetns.GetFromPath(node.world)
	if err != nil {
		b.Fatal(err)
	}
	defer world.Close()
	err = inNetns(node.path, func() error {
		for i := range n {
			host, _ := m.cfg.slotAddrs(i)
			attrs := netlink.NewLinkAttrs()
			attrs.Name = m.cfg.hostIfName(host)
			l := &netlink.Veth{LinkAttrs: attrs, PeerName: fmt.Sprintf("bp%d", i), PeerNamespace: netlink.NsFd(world)}
			if err := netlink.LinkAdd(l); err != nil {
				return err
			}
			if err := netlink.LinkSetAlias(l, fmt.Sprintf("%ssb_bench%05d", aliasPrefix, i)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		inNetns(node.path, func() error {
			for i := range n {
				host, _ := m.cfg.slotAddrs(i)
				if l, err := netlink.LinkByName(m.cfg.hostIfName(host)); err == nil {
					netlink.LinkDel(l)
				}
			}
			return nil
		})
	})
	if c, err := m.Counters(); err != nil || len(c) != n {
		b.Fatalf("Counters: %d links, %v; want %d", len(c), err, n)
	}
	var ru0, ru1 unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru0)
	for b.Loop() {
		if _, err := m.Counters(); err != nil {
			b.Fatal(err)
		}
	}
	unix.Getrusage(unix.RUSAGE_SELF, &ru1)
	cpu := ru1.Utime.Nano() + ru1.Stime.Nano() - ru0.Utime.Nano() - ru0.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(n), "links")
}
