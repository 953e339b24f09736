package cli

import (
	"context"
	"fmt"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

var suspendVerb = &verb{
	name:  "suspend",
	args:  "NAME [-v] [--if-match VERSION] [--idempotency-key K]",
	short: "stop a sandbox's compute, keeping its files (and, under runsc, its memory)",
	long: `Under runc, processes end; writes under /root, /home, /var and the rest of the root
filesystem are kept; /tmp, /run and /dev/shm are not. Under runsc the sandbox's memory and
processes are saved too, and its resume restores them as they were (open TCP connections
are closed); if they cannot be saved (disk full, a secret delivered by file or env), the
suspend keeps the files only and its memory_not_kept event says why. "airlock get" shows
which (persistence). Any later call that touches the sandbox resumes it.
Prints one line, or with -v the operation.`,
	run: func(c *cmd, args []string) error { return runLifecycle(c, args, "suspended", (*client.Client).Suspend) },
}

var resumeVerb = &verb{
	name:  "resume",
	args:  "NAME [-v] [--if-match VERSION] [--idempotency-key K]",
	short: "start a suspended or lost sandbox again (generation + 1; its memory restored if kept)",
	long: `A sandbox whose node was lost, stopped or drained resumes on the node that takes the
call, from its files in the cluster's object store (kept there at each suspend). A lost
sandbox resumes from its last suspend or a newer snapshot; the line says since when its
changes, which were on the lost node, are lost. Prints one line, or with -v the operation.`,
	run: func(c *cmd, args []string) error { return runLifecycle(c, args, "resumed", (*client.Client).Resume) },
}

type lifecycleCall func(*client.Client, context.Context, string, ...client.CallOption) (*api.OperationResponse, error)

func runLifecycle(c *cmd, args []string, done string, do lifecycleCall) error {
	ifMatch := c.fs.Int64("if-match", 0, "act only at this `VERSION`")
	key := c.fs.String("idempotency-key", "", "idempotency key `K`: a retry with the same key returns the same operation")
	verbose := c.verboseFlag("print the operation")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	opts := c.callOpts(*key, *ifMatch)
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := do(cl, c.ctx, pos[0], opts...)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	if *verbose || resp.Sandbox == nil || resp.Operation.State != "succeeded" {
		return printOperation(c.stdout, &resp.Operation, resp.Sandbox)
	}
	line := done + " " + resp.Sandbox.Name
	if done == "resumed" {
		line += fmt.Sprintf(" (generation %d)", resp.Sandbox.Generation)
		if mv := resp.Moved; mv != nil {
			line += fmt.Sprintf(" on node %s, moved from node %s", resp.Sandbox.Node, mv.From)
			if mv.Notice != "" {
				line += ": " + mv.Notice
			}
		}
	}
	_, err = fmt.Fprintln(safeWriter{c.stdout}, line)
	return err
}
