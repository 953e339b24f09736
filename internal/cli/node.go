package cli

import (
	"fmt"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/units"
)

const nodeHelp = `Each node holds a lease in the store it shares with the other nodes of its cluster
(SQLite: a cluster of one) and renews it every node.lease_period (default 5s). A node is
ready or draining while its lease lives, lost once two periods pass unrenewed, and
stopped after a clean shutdown. A drained node takes no new sandbox (creates on it are
refused, naming its state); its sandboxes go on, suspend and resume as before, and the
drain outlasts its restarts until airlock node ready. Admin only.`

var nodeLsVerb = &verb{
	name:  "node ls",
	args:  "",
	short: "list the cluster's nodes: state, address, capacity, reservations, runtimes, labels (admin)",
	long:  nodeHelp,
	run:   runNodeLs,
}

var nodeDrainVerb = &verb{name: "node drain", args: "NAME", short: "stop placing new sandboxes on a node (admin)", long: nodeHelp,
	run: func(c *cmd, args []string) error { return runNodeState(c, args, true) }}

var nodeReadyVerb = &verb{name: "node ready", args: "NAME", short: "let a drained node take new sandboxes again (admin)", long: nodeHelp,
	run: func(c *cmd, args []string) error { return runNodeState(c, args, false) }}

func runNodeLs(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	nodes, err := cl.Nodes(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(nodes)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tSTATE\tADDRESS\tMEMORY\tCPUS\tSANDBOXES\tRUNTIMES\tLABELS\tEPOCH")
	for _, n := range nodes {
		name := termSafe(n.Name)
		if n.Self {
			name += " (this)"
		}
		addr, runtimes := termSafe(n.Address), termSafe(strings.Join(n.Runtimes, ","))
		if addr == "" {
			addr = "-"
		}
		if runtimes == "" {
			runtimes = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%g/%g\t%d/%d\t%s\t%s\t%d\n", name, termSafe(n.State), addr,
			units.FormatSize(n.Reserved.Memory), units.FormatSize(n.Capacity.Memory), n.Reserved.CPUs, n.Capacity.CPUs,
			n.Reserved.Sandboxes, n.Capacity.Sandboxes, runtimes, termSafe(formatMap(n.Labels)), n.Epoch)
	}
	return tw.Flush()
}

func runNodeState(c *cmd, args []string, drain bool) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	var n *api.Node
	if drain {
		n, err = cl.DrainNode(c.ctx, pos[0])
	} else {
		n, err = cl.ReadyNode(c.ctx, pos[0])
	}
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(n)
	}
	fmt.Fprintf(c.stdout, "node %s: %s\n", termSafe(n.Name), termSafe(n.State))
	return nil
}
