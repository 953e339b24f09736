package cli

import (
	"fmt"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

var lsVerb = &verb{
	name:  "ls",
	args:  "[--state S]... [--label K=V]...",
	short: "list sandboxes",
	long:  "Repeated --state flags match any of the states; repeated --label flags must all match.",
	run:   runLs,
}

func runLs(c *cmd, args []string) error {
	var states listFlag
	labels := kvFlag{}
	c.fs.Var(&states, "state", "only sandboxes in state `S` (repeatable)")
	c.fs.Var(labels, "label", "only sandboxes with label `K=V` (repeatable)")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	list, err := cl.List(c.ctx, client.ListOptions{States: states, Labels: labels.orNil()})
	if err != nil {
		return err
	}
	if c.json() {
		if list == nil {
			list = []api.Sandbox{}
		}
		return c.printJSON(list)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tID\tSTATE\tIMAGE\tCPU\tMEMORY\tCREATED")
	for _, sb := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.Name, sb.ID, sb.State, sb.Image,
			orDash(sb.Limits.CPU, formatCPU), orDash(sb.Limits.Memory, formatSize), formatAge(sb.CreatedAt))
	}
	return tw.Flush()
}
