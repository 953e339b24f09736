package cli

import (
	"fmt"

	"github.com/airlockhq/airlock/api"
)

const poolHelp = `A warm pool keeps --size sandboxes of an image, runtime, limits and network mode
started and unused on this node. A create that asks for exactly these (a plain create
asks for the node's defaults: the host image, default limits, baseline) claims a ready
one in milliseconds: it takes the create's name, owner, role, labels, environment,
network rules and session credential, and nothing ran in it before. A create with a
workspace, or when the pool is drained, is an ordinary (cold) create. Members are
started one at a time, never while a create is under way; they count against the
node's capacity, not an owner's quota, are hidden from owners' listings, and survive a
daemon restart. Pools are kept in the daemon's store; the configuration's pools: are set
at each start. Admin only.`

// groupAbout is what airlock help GROUP says after the group's subcommands.
var groupAbout = map[string]string{"pool": poolHelp, "node": nodeHelp}

var poolSetVerb = &verb{
	name:  "pool set",
	args:  "NAME --image IMG --size N [--runtime NAME] [--cpu N] [--memory SIZE] [--pids N] [--open-files N] [--disk SIZE] [--network MODE]",
	short: "create or change a warm pool of ready sandboxes (admin)",
	long:  poolHelp + "\nThe image must be on the node already (airlock image pull); a pool never pulls.",
	run:   runPoolSet,
}

var poolLsVerb = &verb{
	name:  "pool ls",
	args:  "",
	short: "list warm pools: size, ready members, hits, misses, refill time (admin)",
	long:  poolHelp,
	run:   runPoolLs,
}

var poolRmVerb = &verb{name: "pool rm", args: "NAME", short: "remove a warm pool and terminate its members (admin)", run: runPoolRm}

func runPoolSet(c *cmd, args []string) error {
	var memory, disk sizeFlag
	img := c.fs.String("image", "", "image `IMG` of the members, already on the node (default host)")
	size := c.fs.Int("size", -1, "how many members to keep ready: `N`, 0 to 64 (required)")
	rt := c.fs.String("runtime", "", "runtime `NAME` (default the node's)")
	cpu := c.fs.Float64("cpu", 0, "CPU limit in cores: `N`")
	c.fs.Var(&memory, "memory", "memory limit: `SIZE`")
	pids := c.fs.Int64("pids", 0, "maximum number of processes: `N`")
	openFiles := c.fs.Int64("open-files", 0, "maximum open files per process: `N`")
	c.fs.Var(&disk, "disk", "cap on each member's writable layer: `SIZE`")
	network := c.fs.String("network", "", "egress `MODE` of the members: none, deny_all, baseline (default), allowlist or unrestricted")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *size < 0 {
		return usagef("--size N is required (0 to 64)")
	}
	p, err := cl.SetPool(c.ctx, pos[0], api.PoolRequest{Image: *img, Runtime: *rt, Network: *network, Size: *size,
		Limits: api.Limits{CPU: *cpu, Memory: int64(memory), PIDs: *pids, OpenFiles: *openFiles, Disk: int64(disk)}})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(p)
	}
	fmt.Fprintf(c.stdout, "pool %s: %d of %s (%s), refilling in the background\n", termSafe(p.Name), p.Size, termSafe(p.Image), termSafe(shortDigest(p.ImageDigest)))
	return nil
}

func runPoolLs(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	pools, err := cl.Pools(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(pools)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tIMAGE\tRUNTIME\tNETWORK\tSIZE\tREADY\tHITS\tMISSES\tREFILL")
	for _, p := range pools {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%.0fms\n", termSafe(p.Name), termSafe(p.Image), termSafe(p.Runtime), termSafe(p.Network),
			p.Size, p.Ready, p.Hits, p.Misses, p.RefillAvgMS)
	}
	return tw.Flush()
}

func runPoolRm(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if err := cl.DeletePool(c.ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "removed pool %s\n", termSafe(pos[0]))
	return nil
}
