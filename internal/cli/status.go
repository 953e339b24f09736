package cli

import (
	"fmt"
	"strings"
)

var statusVerb = &verb{
	name:  "status",
	args:  "[--matrix]",
	short: "check the daemon and what the host provides",
	long: `Prints each check as OK or MISSING, and what a missing one degrades, and the command
router's state: live (a runtime works; work is contained as the profile says), degraded
(the profile contains work but no runtime can run sandboxes: such work runs on the host
in the fence, or is refused with router.fail_closed) or off. With --matrix, also which
mechanism governs each kind of caller under the profile. Exits 1 if any check fails.`,
	run: runStatus,
}

func runStatus(c *cmd, args []string) error {
	matrix := c.fs.Bool("matrix", false, "also print which mechanism governs each kind of caller")
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
		if r := st.Router; r != nil {
			profile := r.Profile
			if profile == "" {
				profile = "none"
			}
			fmt.Fprintf(c.stdout, "\nrouter: %s (profile %s%s): %s\n", strings.ToUpper(r.State), profile,
				map[bool]string{true: ", fail_closed"}[r.FailClosed], termSafe(r.Reason))
			if *matrix && len(r.Matrix) > 0 {
				fmt.Fprintln(c.stdout)
				tw := newTable(c.stdout)
				fmt.Fprintln(tw, "CALLER\tGOVERNED BY\tBEHAVIOUR")
				for _, row := range r.Matrix {
					fmt.Fprintf(tw, "%s\t%s\t%s\n", row.Caller, row.Mechanism, termSafe(row.Behaviour))
				}
				if err := tw.Flush(); err != nil {
					return err
				}
			} else if *matrix {
				fmt.Fprintln(c.stdout, "no profile, so no matrix: each request names its own (airlock run --profile)")
			}
		}
		for _, p := range st.Pools {
			fmt.Fprintf(c.stdout, "pool %s: %d of %d ready, %d hits, %d misses, refill %.0fms\n", termSafe(p.Name), p.Ready, p.Size, p.Hits, p.Misses, p.RefillAvgMS)
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
