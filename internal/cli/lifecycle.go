package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

var suspendVerb = &verb{
	name:  "suspend",
	args:  "NAME [--if-match VERSION] [--idempotency-key K]",
	short: "stop a sandbox's compute, keeping its files",
	long: `Processes end; writes under /root, /home, /var and the rest of the root filesystem are
kept; /tmp, /run and /dev/shm are not. Any later call that touches the sandbox resumes it.`,
	run: func(c *cmd, args []string) error { return runLifecycle(c, args, (*client.Client).Suspend) },
}

var resumeVerb = &verb{
	name:  "resume",
	args:  "NAME [--if-match VERSION] [--idempotency-key K]",
	short: "start a suspended sandbox again (a fresh container, generation + 1)",
	run:   func(c *cmd, args []string) error { return runLifecycle(c, args, (*client.Client).Resume) },
}

type lifecycleCall func(*client.Client, context.Context, string, ...client.CallOption) (*api.OperationResponse, error)

func runLifecycle(c *cmd, args []string, do lifecycleCall) error {
	ifMatch := c.fs.Int64("if-match", 0, "act only at this `VERSION`")
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
	resp, err := do(cl, c.ctx, pos[0], opts...)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(resp)
	}
	return printOperation(c.stdout, &resp.Operation, resp.Sandbox)
}

var eventsVerb = &verb{
	name:  "events",
	args:  "[NAME] [--follow] [--after SEQ]",
	short: "show state changes and limit hits",
	long:  `With --follow, events are printed as they happen until interrupted.`,
	run:   runEvents,
}

func runEvents(c *cmd, args []string) error {
	follow := c.fs.Bool("follow", false, "keep printing new events")
	after := c.fs.Int64("after", 0, "only events after sequence number `SEQ`")
	ref, cl, err := c.connectOptional(args)
	if err != nil {
		return err
	}
	print := func(ev api.Event) error {
		if c.json() {
			return c.printJSON(ev)
		}
		data := ""
		if len(ev.Data) > 0 {
			data = fmt.Sprint(ev.Data)
		}
		_, err := fmt.Fprintf(safeWriter{c.stdout}, "%s  %-6s %s  gen %-3s %-14s %-14s %s\n", ev.Time.Local().Format("2006-01-02 15:04:05"),
			strconv.FormatInt(ev.Seq, 10), ev.SandboxID, strconv.FormatInt(ev.Generation, 10), ev.Type, ev.Cause, data)
		return err
	}
	if !*follow {
		evs, err := cl.Events(c.ctx, ref, *after)
		if err != nil {
			return err
		}
		if c.json() {
			return c.printJSON(evs)
		}
		for _, ev := range evs {
			if err := print(ev); err != nil {
				return err
			}
		}
		return nil
	}
	err = cl.FollowEvents(c.ctx, ref, *after, print)
	if errors.Is(err, c.ctx.Err()) && c.ctx.Err() != nil {
		return nil // interrupted: the normal end of --follow
	}
	return err
}
