package cli

import (
	"fmt"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

var lsVerb = &verb{
	name:  "ls",
	args:  "[-a] [-q] [--all-owners] [--state S]... [--label K=V]...",
	short: "list sandboxes",
	long: `Terminated sandboxes are left out unless -a (--all) or --state asks for them.
Repeated --state flags match any of the states; repeated --label flags must all match.
-q prints only the names, one a line: airlock rm $(airlock ls -q).
--all-owners lists every owner's sandboxes, with an OWNER column; it needs the admin
permission (root on the unix socket has it). Another owner's sandbox is reached by its
id only, so with --all-owners -q prints ids: airlock rm $(airlock ls -q --all-owners).`,
	run: runLs,
}

func runLs(c *cmd, args []string) error {
	var states listFlag
	labels := kvFlag{}
	c.fs.Var(&states, "state", "only sandboxes in state `S` (repeatable)")
	c.fs.Var(labels, "label", "only sandboxes with label `K=V` (repeatable)")
	all := c.fs.Bool("all", false, "show terminated sandboxes too")
	c.fs.BoolVar(all, "a", false, "short for --all")
	quiet := c.fs.Bool("quiet", false, "print only the names (the ids, with --all-owners)")
	c.fs.BoolVar(quiet, "q", false, "short for --quiet")
	allOwners := c.fs.Bool("all-owners", false, "every owner's sandboxes, with their owners (admin permission)")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	list, err := cl.List(c.ctx, client.ListOptions{States: states, Labels: labels.orNil(), AllOwners: *allOwners})
	if err != nil {
		return err
	}
	if !*all && len(states) == 0 {
		live := list[:0]
		for _, sb := range list {
			if sb.State != api.StateTerminated {
				live = append(live, sb)
			}
		}
		list = live
	}
	if c.json() {
		if len(list) == 0 {
			list = []api.Sandbox{}
		}
		return c.printJSON(list)
	}
	if *quiet {
		w := safeWriter{c.stdout}
		for _, sb := range list {
			if *allOwners {
				fmt.Fprintln(w, sb.ID)
			} else {
				fmt.Fprintln(w, sb.Name)
			}
		}
		return nil
	}
	tw := newTable(c.stdout)
	owner := func(sb api.Sandbox) string { return "" }
	if *allOwners {
		owner = func(sb api.Sandbox) string { return sb.Owner + "\t" }
		fmt.Fprint(tw, "OWNER\t")
	}
	fmt.Fprintln(tw, "NAME\tID\tSTATE\tIMAGE\tCPU\tMEMORY\tCREATED")
	for _, sb := range list {
		fmt.Fprintf(tw, "%s%s\t%s\t%s\t%s\t%s\t%s\t%s\n", owner(sb), sb.Name, sb.ID, sb.State, sb.Image,
			orDash(sb.Limits.CPU, formatCPU), orDash(sb.Limits.Memory, formatSize), formatAge(sb.CreatedAt))
	}
	return tw.Flush()
}
