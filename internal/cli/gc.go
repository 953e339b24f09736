package cli

import "fmt"

var gcVerb = &verb{
	name:  "gc",
	args:  "[--dry-run]",
	short: "remove leftover host resources that no live sandbox owns",
	long:  `With --dry-run, only lists what would be removed. Needs the unix socket.`,
	run:   runGC,
}

func runGC(c *cmd, args []string) error {
	dry := c.fs.Bool("dry-run", false, "list what would be removed, remove nothing")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
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
