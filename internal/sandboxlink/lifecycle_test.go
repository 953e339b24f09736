package sandboxlink

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
)

// leftovers lists what sandbox id still has on the node, by kind.
func leftovers(t testing.TB, m *Manager, id string) []string {
	t.Helper()
	var left []string
	if _, err := os.Lstat(m.cfg.netnsPath(id)); !errors.Is(err, fs.ErrNotExist) {
		left = append(left, "netns file")
	}
	links, err := m.ourLinks()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := links[id]; ok {
		left = append(left, "veth")
	}
	elems, err := m.elements()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range elems {
		if e.Comment == id {
			left = append(left, e.set.Name+" element")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for a, owner := range m.byAddr {
		if owner == id {
			left = append(left, "lookup of "+a.String())
		}
	}
	for i, owner := range m.slots {
		if owner == id {
			left = append(left, fmt.Sprint("link index ", i))
		}
	}
	if m.busy[id] {
		left = append(left, "busy mark")
	}
	return left
}

// ourPrefixLinks lists the host's interfaces whose name starts with HostPrefix.
func ourPrefixLinks(t testing.TB, m *Manager) []string {
	t.Helper()
	links, err := m.nl.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, m.cfg.HostPrefix) {
			names = append(names, l.Attrs().Name)
		}
	}
	return names
}

func TestModeNone(t *testing.T) {
	requireHost(t)
	m := newTestManager(t, newTestNode(t))
	sb := create(t, m, "sb_none", ModeNone)
	if sb.HostIf != "" || sb.SandboxIf != "" || sb.HostAddr.IsValid() || sb.SandboxAddr.IsValid() {
		t.Errorf("Create(none) = %+v, want no link", sb)
	}
	err := inNetns(sb.NetnsPath, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		if len(links) != 1 || links[0].Attrs().Name != "lo" || links[0].Attrs().Flags&(1<<0) == 0 {
			t.Errorf("links in a none sandbox: %v, want lo only, up", links)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, m, sb.ID); !slices.Equal(got, []string{"netns file"}) {
		t.Errorf("resources of a none sandbox: %v, want the netns file only", got)
	}
	if ids, err := m.List(); err != nil || !slices.Equal(ids, []string{"sb_none"}) {
		t.Errorf("List() = %v, %v; want [sb_none]", ids, err)
	}
	if err := m.Delete(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, m, sb.ID); len(got) > 0 {
		t.Errorf("after Delete: %v left", got)
	}
}

func TestDelete(t *testing.T) {
	requireHost(t)
	m := newTestManager(t, newTestNode(t))
	sb := create(t, m, "sb_del", "baseline")
	if got := leftovers(t, m, sb.ID); len(got) != 6 {
		t.Errorf("resources after Create: %v, want file, veth, 2 elements, lookup, link index", got)
	}
	for range 2 { // the second time finds nothing to delete
		if err := m.Delete(t.Context(), sb.ID); err != nil {
			t.Fatal(err)
		}
		if got := leftovers(t, m, sb.ID); len(got) > 0 {
			t.Errorf("after Delete: %v left", got)
		}
	}
	if ids, err := m.List(); err != nil || len(ids) > 0 {
		t.Errorf("List() = %v, %v; want none", ids, err)
	}
	again := create(t, m, sb.ID, "baseline")
	if again.SandboxAddr != sb.SandboxAddr {
		t.Errorf("re-created %s at %v, want its first choice %v again", sb.ID, again.SandboxAddr, sb.SandboxAddr)
	}
}

func TestListAfterCrash(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m1 := newTestManager(t, node)
	c1 := create(t, m1, "sb_c1", "baseline")
	c2 := create(t, m1, "sb_c2", ModeNone)
	m1.Close() // the daemon dies; everything it made stays

	m2 := openManager(t, node.config())
	if ids, err := m2.List(); err != nil || !slices.Equal(ids, []string{c1.ID, c2.ID}) {
		t.Errorf("List() after restart = %v, %v; want [%s %s]", ids, err, c1.ID, c2.ID)
	}
	if id, ok := m2.Lookup(c1.SandboxAddr); !ok || id != c1.ID {
		t.Errorf("Lookup(%v) after restart = %q, %v; want %s", c1.SandboxAddr, id, ok, c1.ID)
	}
	if _, err := m2.Create(t.Context(), c1.ID, "baseline"); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Create(%s) again = %v, want already exists", c1.ID, err)
	}
	if got := leftovers(t, m2, c1.ID); len(got) != 6 {
		t.Errorf("the refused Create changed %s: %v", c1.ID, got)
	}
	c3 := create(t, m2, "sb_c3", "baseline")
	if c3.SandboxAddr == c1.SandboxAddr {
		t.Errorf("a new sandbox got %v, which %s still has", c3.SandboxAddr, c1.ID)
	}

	// Any single kind of leftover is enough for List to name the id.
	if err := removeNamed(c1.NetnsPath); err != nil {
		t.Fatal(err)
	}
	if ids, _ := m2.List(); !slices.Contains(ids, c1.ID) {
		t.Errorf("List() = %v, want %s by its veth and elements", ids, c1.ID)
	}
	if err := m2.delLink(c1.HostIf); err != nil {
		t.Fatal(err)
	}
	if ids, _ := m2.List(); !slices.Contains(ids, c1.ID) {
		t.Errorf("List() = %v, want %s by its elements", ids, c1.ID)
	}
	if err := m2.Delete(t.Context(), c1.ID); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, m2, c1.ID); len(got) > 0 {
		t.Errorf("after Delete: %v left", got)
	}

	// A crash half way through a Create leaves elements only, here on the link that
	// sb_c4 would pick first. After a restart that link stays taken until it is deleted.
	host, sbAddr := m2.cfg.slotAddrs(m2.cfg.firstSlot("sb_c4"))
	half := &Sandbox{ID: "sb_half", HostIf: m2.cfg.hostIfName(host), HostAddr: host, SandboxAddr: sbAddr}
	if err := m2.addElements(half); err != nil {
		t.Fatal(err)
	}
	m3 := openManager(t, node.config())
	if ids, _ := m3.List(); !slices.Contains(ids, half.ID) {
		t.Errorf("List() = %v, want %s by its elements", ids, half.ID)
	}
	if c4 := create(t, m3, "sb_c4", "baseline"); c4.HostAddr == host {
		t.Errorf("sb_c4 got link %v, which %s's elements still hold", host, half.ID)
	}
	if err := m3.Delete(t.Context(), half.ID); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, m3, half.ID); len(got) > 0 {
		t.Errorf("after Delete: %v left", got)
	}
}

var errInjected = errors.New("injected failure")

func TestCreateRollback(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m := newTestManager(t, node)
	for _, c := range []struct{ mode, step string }{
		{ModeNone, "netns"}, {"baseline", "netns"}, {"baseline", "rules"}, {"baseline", "veth"}, {"baseline", "link"},
	} {
		m.failAfter = func(step string) error {
			if step == c.step {
				return errInjected
			}
			return nil
		}
		_, err := m.Create(t.Context(), "sb_rb", c.mode)
		if !errors.Is(err, errInjected) {
			t.Errorf("Create(%s) failing after %s = %v, want the injected error", c.mode, c.step, err)
		}
		if got := leftovers(t, m, "sb_rb"); len(got) > 0 {
			t.Errorf("Create(%s) failing after %s left %v", c.mode, c.step, got)
		}
		if got := ourPrefixLinks(t, m); len(got) > 0 {
			t.Errorf("Create(%s) failing after %s left interfaces %v", c.mode, c.step, got)
		}
	}
	m.failAfter = nil

	// A real failure half way: the host-side name is taken by an interface that is not
	// the sandbox's. Create fails, undoes its own steps and leaves that interface alone.
	host, _ := m.cfg.slotAddrs(m.cfg.firstSlot("sb_rb"))
	attrs := netlink.NewLinkAttrs()
	attrs.Name = m.cfg.hostIfName(host)
	if err := m.nl.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: "squatter"}); err != nil {
		t.Fatal(err)
	}
	_, err := m.Create(t.Context(), "sb_rb", "baseline")
	if !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("Create with its interface name taken = %v, want already exists", err)
	}
	if got := leftovers(t, m, "sb_rb"); len(got) > 0 {
		t.Errorf("after the failed Create: %v left", got)
	}
	if got := ourPrefixLinks(t, m); !slices.Equal(got, []string{attrs.Name}) {
		t.Errorf("after the failed Create: interfaces %v, want the other one (%s) only", got, attrs.Name)
	}
	if err := m.delLink(attrs.Name); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := m.Create(ctx, "sb_rb", "baseline"); !errors.Is(err, context.Canceled) {
		t.Errorf("Create with a cancelled context = %v, want context.Canceled", err)
	}
	create(t, m, "sb_rb", "baseline") // and nothing stands in the way afterwards
}

func TestNewIsIdempotent(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m1 := newTestManager(t, node)
	startServices(t, node)
	sb := create(t, m1, "sb_keep", "baseline")
	count := func(m *Manager) map[string]int {
		c, err := m.nft()
		if err != nil {
			t.Fatal(err)
		}
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			t.Fatal(err)
		}
		n := map[string]int{}
		for _, ch := range chains {
			rules, err := c.GetRules(ch.Table, ch)
			if err != nil {
				t.Fatal(err)
			}
			n[ch.Name] = len(rules)
		}
		return n
	}
	before := count(m1)
	m2 := openManager(t, node.config())
	if after := count(m2); !equalMaps(before, after) || len(after) != 6 {
		t.Errorf("rules per chain: %v after a second New, %v before; want 6 chains, unchanged", after, before)
	}
	if got, err := tcpFrom(sb.NetnsPath, ap(sb.HostAddr, proxyPort)); err != nil || got != "proxy" {
		t.Errorf("proxy from %s after a second New: %q, %v", sb.ID, got, err)
	}
	if got, err := tcpFrom(sb.NetnsPath, ap(sb.HostAddr, forbiddenPort)); err == nil {
		t.Errorf("forbidden port from %s after a second New: %q, want refused", sb.ID, got)
	}
}

func equalMaps(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestConfigValidate(t *testing.T) {
	good := Config{Subnet: netip.MustParsePrefix("10.203.0.0/16"), HostPrefix: "al", RunDir: "/run/airlock/netns",
		ProxyPort: 3128, TransparentHTTPPort: 8080, TransparentTLSPort: 8443, TransparentTCPPort: 8444, DNSPort: 5353}
	if err := good.Validate(); err != nil {
		t.Fatalf("Validate(good) = %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"no subnet":          func(c *Config) { c.Subnet = netip.Prefix{} },
		"ipv6 subnet":        func(c *Config) { c.Subnet = netip.MustParsePrefix("fd00::/64") },
		"subnet too small":   func(c *Config) { c.Subnet = netip.MustParsePrefix("10.0.0.0/31") },
		"link /29":           func(c *Config) { c.LinkPrefixLen = 29 },
		"empty prefix":       func(c *Config) { c.HostPrefix = "" },
		"prefix too long":    func(c *Config) { c.HostPrefix = "airlock1" },
		"prefix upper case":  func(c *Config) { c.HostPrefix = "AL" },
		"relative run dir":   func(c *Config) { c.RunDir = "netns" },
		"no proxy port":      func(c *Config) { c.ProxyPort = 0 },
		"dns port too large": func(c *Config) { c.DNSPort = 70000 },
		"no tls port":        func(c *Config) { c.TransparentTLSPort = 0 },
		"no tcp port":        func(c *Config) { c.TransparentTCPPort = 0 },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Validate(%s) = %v, want invalid argument", name, err)
		}
	}
}

func TestAddressing(t *testing.T) {
	for _, c := range []struct {
		subnet        string
		bits, slots   int
		slot          int
		host, sandbox string
	}{
		{"10.203.0.0/16", 30, 16384, 0, "10.203.0.1", "10.203.0.2"},
		{"10.203.0.0/16", 30, 16384, 1, "10.203.0.5", "10.203.0.6"},
		{"10.203.0.0/16", 30, 16384, 16383, "10.203.255.253", "10.203.255.254"},
		{"10.203.0.0/16", 31, 32768, 0, "10.203.0.0", "10.203.0.1"},
		{"10.203.0.0/16", 31, 32768, 32767, "10.203.255.254", "10.203.255.255"},
		{"192.168.9.0/30", 30, 1, 0, "192.168.9.1", "192.168.9.2"},
	} {
		cfg := Config{Subnet: netip.MustParsePrefix(c.subnet), LinkPrefixLen: c.bits}
		host, sb := cfg.slotAddrs(c.slot)
		if cfg.slots() != c.slots || host.String() != c.host || sb.String() != c.sandbox {
			t.Errorf("%s /%d link %d: %d links, %v / %v; want %d, %s / %s",
				c.subnet, c.bits, c.slot, cfg.slots(), host, sb, c.slots, c.host, c.sandbox)
		}
		if i, ok := cfg.slotOf(host); !ok || i != c.slot {
			t.Errorf("slotOf(%v) = %d, %v; want %d", host, i, ok, c.slot)
		}
		if _, ok := cfg.slotOf(sb); ok {
			t.Errorf("slotOf(sandbox address %v) is a link, want none", sb)
		}
	}
	cfg := Config{Subnet: testSubnet, HostPrefix: "airlock"}
	host, _ := cfg.slotAddrs(1)
	if name := cfg.hostIfName(host); name != "airlock0acb0005" {
		t.Errorf("hostIfName(%v) = %q, want airlock0acb0005", host, name)
	}
	for name, want := range map[string]int{"airlock0acb0005": 1, "airlock0acb0006": -1, "airlock0acc0005": -1, "al0acb0005": -1, "airlock0acb00": -1} {
		got, ok := cfg.slotOfIf(name)
		if !ok {
			got = -1
		}
		if got != want {
			t.Errorf("slotOfIf(%q) = %d, want %d", name, got, want)
		}
	}
	if a, b := cfg.firstSlot("sb_x"), cfg.firstSlot("sb_x"); a != b || a < 0 || a >= cfg.slots() {
		t.Errorf("firstSlot(sb_x) = %d then %d, want one index in [0, %d)", a, b, cfg.slots())
	}
}

func TestValidID(t *testing.T) {
	for id, ok := range map[string]bool{
		"sb_01HZX": true, "a": true, "A-b.c_d": true,
		"": false, ".": false, "..": false, "a/b": false, "../x": false, "-a": false, "a b": false,
		string(make([]byte, 129)): false,
	} {
		if err := validID(id); (err == nil) != ok {
			t.Errorf("validID(%q) = %v, want ok=%v", id, err, ok)
		}
	}
}

func BenchmarkCreateDelete(b *testing.B) {
	requireHost(b)
	for _, mode := range []string{"baseline", ModeNone} {
		b.Run(mode, func(b *testing.B) {
			m := newTestManager(b, newTestNode(b))
			var create, del time.Duration
			for b.Loop() {
				start := time.Now()
				sb, err := m.Create(b.Context(), "sb_bench", mode)
				if err != nil {
					b.Fatal(err)
				}
				mid := time.Now()
				if err := m.Delete(b.Context(), sb.ID); err != nil {
					b.Fatal(err)
				}
				create, del = create+mid.Sub(start), del+time.Since(mid)
			}
			b.ReportMetric(float64(create.Microseconds())/float64(b.N), "create-µs/op")
			b.ReportMetric(float64(del.Microseconds())/float64(b.N), "delete-µs/op")
		})
	}
}

func TestConcurrentCreateDelete(t *testing.T) {
	requireHost(t)
	m := newTestManager(t, newTestNode(t))
	const n = 16
	sbs := make([]*Sandbox, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { sbs[i], errs[i] = m.Create(t.Context(), fmt.Sprintf("sb_%02d", i), "baseline") })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]string{}
	for _, sb := range sbs {
		if other, dup := seen[sb.SandboxAddr]; dup {
			t.Errorf("%s and %s both got %v", sb.ID, other, sb.SandboxAddr)
		}
		seen[sb.SandboxAddr] = sb.ID
		if id, _ := m.Lookup(sb.SandboxAddr); id != sb.ID {
			t.Errorf("Lookup(%v) = %q, want %s", sb.SandboxAddr, id, sb.ID)
		}
	}
	for i, sb := range sbs {
		wg.Go(func() { errs[i] = m.Delete(t.Context(), sb.ID) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if ids, err := m.List(); err != nil || len(ids) > 0 {
		t.Errorf("List() after deleting all = %v, %v; want none", ids, err)
	}
}

// TestBusy calls Create and Delete for an id while its Create is under way.
func TestBusy(t *testing.T) {
	requireHost(t)
	m := newTestManager(t, newTestNode(t))
	var inner []error
	m.failAfter = func(step string) error {
		if step == "rules" {
			_, err := m.Create(t.Context(), "sb_busy", "baseline")
			inner = append(inner, err, m.Delete(t.Context(), "sb_busy"))
		}
		return nil
	}
	create(t, m, "sb_busy", "baseline")
	for i, err := range inner {
		if !errors.Is(err, errdefs.ErrUnavailable) {
			t.Errorf("call %d during Create = %v, want unavailable", i, err)
		}
	}
	if len(inner) != 2 {
		t.Errorf("%d calls during Create, want 2", len(inner))
	}
}

// TestNewRestoresLostRules: the table goes (an `nft flush ruleset` by the host's
// firewall service, say) while sandboxes keep their links; the next New must give every
// surviving link its elements back before anything else, or the links stay unfiltered:
// the node's other ports, the world and ICMP open to the sandbox. A veth named like ours
// with neither label nor elements (a crash between adding and labelling it, then the
// lost table) is deleted.
func TestNewRestoresLostRules(t *testing.T) {
	requireHost(t)
	node := newTestNode(t)
	m1 := newTestManager(t, node)
	svc := startServices(t, node)
	sb := create(t, m1, "sb_lost", "baseline")
	orphan := &Sandbox{ID: "sb_orphan", NetnsPath: filepath.Join(node.dir, "orphan")}
	orphan.HostAddr, orphan.SandboxAddr = m1.cfg.slotAddrs(7)
	orphan.HostIf, orphan.SandboxIf = m1.cfg.hostIfName(orphan.HostAddr), sandboxIf
	if err := newNamed(orphan.NetnsPath); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeNamed(orphan.NetnsPath) }) // the veth goes with the node namespace
	if err := m1.addVeth(orphan); err != nil {
		t.Fatal(err)
	}
	if l, err := m1.nl.LinkByName(orphan.HostIf); err != nil || m1.nl.LinkSetAlias(l, "") != nil {
		t.Fatalf("unlabel %s: %v", orphan.HostIf, err)
	}
	if err := m1.RemoveRules(); err != nil {
		t.Fatal(err)
	}
	m1.Close()
	// Without the table the link is open: the test would prove nothing otherwise.
	if got, _ := tcpFrom(sb.NetnsPath, ap(otherAddr, forbiddenPort)); got != "forbidden" {
		t.Fatalf("without the table: tcp to a forbidden port got %q, want it reached", got)
	}
	svc.forbidden.Store(0)

	m2 := openManager(t, node.config())
	var left []string
	elems, err := m2.elements()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range elems {
		left = append(left, e.set.Name+":"+e.Comment)
	}
	slices.Sort(left)
	if want := []string{setIfs + ":sb_lost", setLinks + ":sb_lost"}; !slices.Equal(left, want) {
		t.Errorf("elements after New: %v, want %v", left, want)
	}
	if id, ok := m2.Lookup(sb.SandboxAddr); !ok || id != sb.ID {
		t.Errorf("Lookup(%v) = %q, %v after New", sb.SandboxAddr, id, ok)
	}
	if got, err := tcpFrom(sb.NetnsPath, ap(sb.HostAddr, proxyPort)); err != nil || got != "proxy" {
		t.Errorf("proxy after New: %q, %v", got, err)
	}
	if got, err := tcpFrom(sb.NetnsPath, ap(otherAddr, forbiddenPort)); err != nil || !strings.HasPrefix(got, "tcp ") {
		t.Errorf("tcp to another node address after New: %q, %v; want the relay", got, err)
	}
	if got, err := udpFrom(sb.NetnsPath, ap(sb.HostAddr, forbiddenPort)); err == nil {
		t.Errorf("udp to a forbidden port after New: %q, want no answer", got)
	}
	if replied, _ := pingFrom(sb.NetnsPath, remoteAddr); replied {
		t.Error("ping to the world after New: replied, want refused")
	}
	if n := svc.forbidden.Load(); n != 0 {
		t.Errorf("forbidden listeners reached %d times after New, want 0", n)
	}
	if _, err := m2.nl.LinkByName(orphan.HostIf); !errors.As(err, new(netlink.LinkNotFoundError)) {
		t.Errorf("orphan veth %s after New: %v, want deleted", orphan.HostIf, err)
	}
}

// TestJoinedDropsTheMount: once a container holds the namespace, Joined takes its host
// mount away; the namespace and its link live on through the holder, and the file
// still records the sandbox for Get, List and Delete.
func TestJoinedDropsTheMount(t *testing.T) {
	requireHost(t)
	m := newTestManager(t, newTestNode(t))
	sb := create(t, m, "sb_joined", "baseline")
	mounted := func() bool {
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		return strings.Contains(string(data), " "+sb.NetnsPath+" ")
	}
	if !mounted() {
		t.Fatalf("%s is not mounted after Create", sb.NetnsPath)
	}
	holder, err := vnetns.GetFromPath(sb.NetnsPath) // as the container's processes would
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	for range 2 { // the second finds nothing to unmount
		if err := m.Joined(sb.ID); err != nil {
			t.Fatal(err)
		}
	}
	if mounted() {
		t.Errorf("%s is still mounted after Joined", sb.NetnsPath)
	}
	h, err := netlink.NewHandleAt(holder)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.LinkByName(sb.SandboxIf); err != nil {
		t.Errorf("the held namespace lost its link: %v", err)
	}
	if got, ok := m.Get(sb.ID); !ok || got.SandboxAddr != sb.SandboxAddr {
		t.Errorf("Get after Joined: %+v, %v; want the link at %v", got, ok, sb.SandboxAddr)
	}
	if ids, err := m.List(); err != nil || !slices.Contains(ids, sb.ID) {
		t.Errorf("List() = %v, %v; want %s in it", ids, err, sb.ID)
	}
	if err := m.Delete(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, m, sb.ID); len(got) > 0 {
		t.Errorf("after Delete: %v left", got)
	}
	if err := m.Joined("../x"); err == nil {
		t.Error("Joined accepted an id that is not a sandbox's")
	}
}

// TestDeleteAsItsNamespaceGoes: once the container holding a joined namespace ends, the
// kernel removes the sandbox's link pair on its own time, so a link found may be gone
// when it is deleted: that is no failure, and Delete then leaves nothing.
func TestDeleteAsItsNamespaceGoes(t *testing.T) {
	requireHost(t)
	m := newTestManager(t, newTestNode(t))
	sb := create(t, m, "sb_nsgoes", "baseline")
	l, err := m.nl.LinkByName(sb.HostIf)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.nl.LinkDel(l); err != nil { // as the namespace's end does
		t.Fatal(err)
	}
	if err := m.unlink(l); err != nil {
		t.Errorf("deleting a link gone since it was found: %v", err)
	}
	if err := m.Delete(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, m, sb.ID); len(got) > 0 {
		t.Errorf("after Delete: %v left", got)
	}
}
