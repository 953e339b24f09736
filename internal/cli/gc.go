package cli

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/internal/leftover"
	"github.com/airlockhq/airlock/internal/version"
)

var gcVerb = &verb{
	name:  "gc",
	args:  "[--dry-run] [--state-dir DIR]",
	short: "remove leftover host resources that no live sandbox owns",
	long: `Asks the daemon to remove the host resources (containers, mounts, cgroups,
network namespaces, veths) that carry Airlock's names but no live sandbox's record, and
to finish now the pending cleanups of terminated sandboxes (each listed with its failed
attempts, if any). Needs the unix socket.

With --state-dir DIR, it needs no daemon: it cleans up after the daemon of the state
directory DIR, which must be gone (it refuses while one holds DIR's lock). It stops
every container that daemon left running, kills what is left in its cgroups, unmounts
everything under DIR and its secrets tmpfs, and removes its cgroups, nftables table
and veths, found by the names the daemon recorded in DIR/host.json. The sandboxes'
records and files stay: a daemon started on DIR again finds their containers ended.
Runs as root.

With --dry-run, only lists what would be removed.`,
	run: runGC,
}

func runGC(c *cmd, args []string) error {
	dry := c.fs.Bool("dry-run", false, "list what would be removed, remove nothing")
	stateDir := c.fs.String("state-dir", "", "clean up after the gone daemon of state `DIR` instead of asking a daemon")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	if *stateDir != "" {
		return c.gcStateDir(*stateDir, *dry, args)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	res, err := cl.GC(c.ctx, *dry)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(res)
	}
	verb := "removed"
	if res.DryRun {
		verb = "would remove"
	}
	if len(res.Leftovers) == 0 {
		_, err = fmt.Fprintln(c.stdout, "nothing to remove")
		return err
	}
	for _, l := range res.Leftovers {
		fmt.Fprintf(c.stdout, "%s sandbox resources %s (%s)\n", verb, l.SandboxID, l.Reason)
	}
	return nil
}

// gcStateDirResult is what gc --state-dir prints with -o json.
type gcStateDirResult struct {
	StateDir string          `json:"state_dir"`
	DryRun   bool            `json:"dry_run"`
	Items    []leftover.Item `json:"items"`
}

// SweepStateDir cleans up after the gone daemon of the state directory dir (package
// sweep's StateDir), passing each item to each as it is handled. The daemon's binary
// (cmd/airlockd) sets it; the CLI's binary leaves it nil, so that it links none of
// sweep's netlink and nftables code, and runs gc --state-dir in airlockd instead.
var SweepStateDir func(ctx context.Context, dir string, dry bool, each func(leftover.Item)) ([]leftover.Item, error)

// gcStateDir is gc --state-dir: in table form, one line per thing as it is handled.
// args are gc's arguments, for airlockd when this binary cannot sweep.
func (c *cmd) gcStateDir(dir string, dry bool, args []string) error {
	if SweepStateDir == nil {
		return ExecBeside(version.DaemonBinary, append([]string{"gc"}, args...))
	}
	verb := "removed"
	if dry {
		verb = "would remove"
	}
	each := func(it leftover.Item) {
		if c.json() {
			return
		}
		if it.Error != "" {
			fmt.Fprintf(c.stdout, "could not remove %s %s: %s\n", it.Kind, termSafe(it.Name), termSafe(it.Error))
			return
		}
		fmt.Fprintf(c.stdout, "%s %s %s\n", verb, it.Kind, termSafe(it.Name))
	}
	if _, ok := terminalFd(c.stderr); ok && !c.json() {
		fmt.Fprintf(c.stderr, "looking for what the daemon of %s left…\n", dir)
	}
	items, err := SweepStateDir(c.ctx, dir, dry, each)
	if err != nil {
		return err
	}
	failed := 0
	for _, it := range items {
		if it.Error != "" {
			failed++
		}
	}
	if c.json() {
		if items == nil {
			items = []leftover.Item{}
		}
		if err := c.printJSON(gcStateDirResult{StateDir: dir, DryRun: dry, Items: items}); err != nil {
			return err
		}
	} else if len(items) == 0 {
		fmt.Fprintln(c.stdout, "nothing to remove")
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d could not be removed", failed, len(items))
	}
	return nil
}
