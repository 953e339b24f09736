package cli

import (
	"fmt"

	"github.com/airlockhq/airlock/api"
)

var rmVerb = &verb{
	name:  "rm",
	args:  "NAME... [-v] [--if-match VERSION] [--idempotency-key K]",
	short: "terminate sandboxes",
	long: `Terminating kills every process of the sandbox and makes it a tombstone (shown by
"airlock ls -a"); rm returns then, and the name can be used again at once. Its
container, writable layer and what it owns are removed right after, in the daemon's
background ("airlock status" counts the pending ones). Prints one line a sandbox, or with -v
each operation. A name that cannot be terminated is reported and the others still are;
the exit status is then 1. --if-match (one NAME only) refuses (version_conflict) if the
sandbox changed since you read VERSION (see "airlock get").`,
	run: runRm,
}

func runRm(c *cmd, args []string) error {
	ifMatch := c.fs.Int64("if-match", 0, "terminate only at this `VERSION` (one NAME only)")
	key := c.fs.String("idempotency-key", "", "idempotency key `K`: a retry with the same key returns the same operation (one NAME only)")
	verbose := c.verboseFlag("print each operation")
	names, _, err := c.parse(args, -1, false)
	if err != nil {
		return err
	}
	switch {
	case len(names) == 0:
		return usagef("missing NAME")
	case len(names) > 1 && (c.isSet("if-match") || *key != ""):
		return usagef("--if-match and --idempotency-key apply to one NAME")
	}
	opts := c.callOpts(*key, *ifMatch)
	cl, err := c.client()
	if err != nil {
		return err
	}
	var done []*api.OperationResponse
	failed, printed := false, false
	for _, name := range names {
		resp, err := cl.Terminate(c.ctx, name, opts...)
		if err != nil {
			if c.ctx.Err() != nil || len(names) == 1 {
				return err
			}
			c.report(err) // says which name and why; the others are still terminated
			failed = true
			continue
		}
		switch {
		case c.json():
			done = append(done, resp)
		case *verbose:
			if printed {
				fmt.Fprintln(c.stdout)
			}
			printed = true
			if err := printOperation(c.stdout, &resp.Operation, resp.Sandbox); err != nil {
				return err
			}
		default:
			fmt.Fprintf(safeWriter{c.stdout}, "terminated %s\n", name)
		}
	}
	if c.json() {
		var err error
		if len(names) == 1 {
			err = c.printJSON(done[0]) // one name: the operation response, as the API has it
		} else {
			if done == nil {
				done = []*api.OperationResponse{}
			}
			err = c.printJSON(done)
		}
		if err != nil {
			return err
		}
	}
	if failed {
		return ExitError{1}
	}
	return nil
}
