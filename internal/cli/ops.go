package cli

var opsGetVerb = &verb{
	name:  "ops get",
	args:  "ID",
	short: "show an operation (how a mutating call ended)",
	long:  "Use it when a create or rm timed out: a timeout is an unknown result, not a failure.",
	run:   runOpsGet,
}

func runOpsGet(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	op, err := cl.Operation(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(op)
	}
	return printOperation(c.stdout, op, nil)
}
