package cli

import (
	"fmt"
	"strings"
)

var statusVerb = &verb{
	name:  "status",
	args:  "",
	short: "check the daemon and what the host provides",
	long:  "Prints each check as OK or MISSING, and what a missing one degrades. Exits 1 if any check fails.",
	run:   runStatus,
}

func runStatus(c *cmd, args []string) error {
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	st, err := cl.Status(c.ctx)
	if err != nil {
		return err
	}
	failed := 0
	for _, ch := range st.Checks {
		if !ch.OK && !ch.Optional {
			failed++
		}
	}
	if c.json() {
		if err := c.printJSON(st); err != nil {
			return err
		}
	} else {
		if st.StateDir != "" {
			fmt.Fprintf(c.stdout, "airlock %s, state in %s, %d sandboxes, runtimes %s\n\n", st.Version, st.StateDir, st.Sandboxes, strings.Join(st.Runtimes, ", "))
		} else {
			fmt.Fprintf(c.stdout, "airlock %s, %d sandboxes, runtimes %s\n\n", st.Version, st.Sandboxes, strings.Join(st.Runtimes, ", "))
		}
		tw := newTable(c.stdout)
		for _, ch := range st.Checks {
			mark := "OK"
			switch {
			case !ch.OK && ch.Optional:
				mark = "NOTE"
			case !ch.OK:
				mark = "MISSING"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", mark, ch.Name, ch.Detail)
			if !ch.OK && ch.Degrades != "" {
				fmt.Fprintf(tw, "\t\tdegrades: %s\n", ch.Degrades)
			}
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if failed > 0 {
		if !c.json() {
			fmt.Fprintf(c.stderr, "airlock: %d of %d checks failed\n", failed, len(st.Checks))
		}
		return ExitError{1}
	}
	return nil
}
