package integration

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/sandboxlink"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestNetworkNodesCoexist: several nodes on one host, each with its own table, prefix
// and subnet, running or stopped, never break each other's sandbox networking. Two
// live nodes' sandboxes both reach their own proxy and DNS (by name, through the
// proxy and around it) beside the table of a node that stopped, and each node's
// status says its network works.
func TestNetworkNodesCoexist(t *testing.T) {
	w := newNetWorld(t)
	stoppedTable(t)
	nodes := []*testenv.Node{w.node(t), w.node(t)}
	for i, n := range nodes {
		name := fmt.Sprintf("coexist-%d", i)
		n.Create(t, api.CreateSandboxRequest{Name: name,
			Network: &api.NetworkPolicy{Mode: "allowlist", Allow: []string{"api.example.test"}, AllowPrivate: netLoopback8}})
		netInstallProbe(t, n, name)
	}
	for i, n := range nodes {
		netWantAllowed(t, w, n, fmt.Sprintf("coexist-%d", i), "GET", "https://api.example.test/")
		if c := networkCheck(t, n); !c.OK {
			t.Errorf("node %d: status says the network does not work: %s (%s)", i, c.Detail, c.Degrades)
		}
	}
}

// TestNetworkStatusSeesBrokenNetwork: a table elsewhere on the host that drops every
// new connection to the node's listeners (as one node's rules used to drop every
// other node's sandboxes) makes status report the network as not working, naming the
// tables, instead of saying all is well while every sandbox is cut off.
func TestNetworkStatusSeesBrokenNetwork(t *testing.T) {
	w := newNetWorld(t)
	n := w.node(t)
	name := "airlock_blk" + randHex(2)
	// (Its rule matches this node's mark only: other nodes on the host are left alone.)
	c, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	tab := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
	accept := nftables.ChainPolicyAccept
	ch := c.AddChain(&nftables.Chain{Table: tab, Name: "input", Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accept})
	c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: []expr.Any{
		&expr.Socket{Key: expr.SocketKeyMark, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(n.Network.ListenerMark())},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}})
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { deleteTable(name) })
	check := networkCheck(t, n)
	if check.OK || !strings.Contains(check.Degrades, name) {
		t.Fatalf("with every connection to marked sockets dropped, status says network ok=%v: %s (%s); want it failed, naming table %s",
			check.OK, check.Detail, check.Degrades, name)
	}
}

// networkCheck returns the node's "network" status check.
func networkCheck(t testing.TB, n *testenv.Node) api.Check {
	t.Helper()
	st, err := n.Client.Status(background)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range st.Checks {
		if c.Name == "network" {
			return c
		}
	}
	t.Fatalf("status has no network check: %+v", st.Checks)
	return api.Check{}
}

// stoppedTable leaves the table of a node that stopped on the host for the test's
// duration: written as a node writes it, then its manager closed without removing it.
func stoppedTable(t testing.TB) {
	t.Helper()
	tag := randHex(2)
	cfg := sandboxlink.Config{Subnet: netip.MustParsePrefix("10.212.0.0/24"), HostPrefix: "s" + tag,
		RunDir: filepath.Join(t.TempDir(), "netns"), ProxyPort: 1, TransparentHTTPPort: 2, TransparentTLSPort: 3,
		TransparentTCPPort: 4, DNSPort: 5, Table: "airlock_s" + tag}
	m, err := sandboxlink.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	t.Cleanup(func() { deleteTable(cfg.Table) })
}

func deleteTable(name string) {
	if c, err := nftables.New(); err == nil {
		c.DelTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: name})
		c.Flush()
	}
}
