package cli

var rmVerb = &verb{
	name:  "rm",
	args:  "NAME [--if-match VERSION] [--idempotency-key K]",
	short: "terminate a sandbox",
	long: `Terminating deletes the container, its writable layer and what it owns; the name
stays as a tombstone. --if-match refuses (version_conflict) if the sandbox changed since
you read VERSION (see "airlock get").`,
	run: runRm,
}

func runRm(c *cmd, args []string) error {
	ifMatch := c.fs.Int64("if-match", 0, "terminate only at this `VERSION`")
	key := c.fs.String("idempotency-key", "", "idempotency key `K`: a retry with the same key returns the same operation")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	opts := c.callOpts(*key, *ifMatch)
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.Terminate(c.ctx, pos[0], opts...)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	return printOperation(c.stdout, &resp.Operation, resp.Sandbox)
}
