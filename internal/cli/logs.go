package cli

import (
	"fmt"

	"github.com/airlockhq/airlock/api"
)

var logsVerb = &verb{
	name:  "logs",
	args:  "NAME [--session ID] [-f|--follow] [--tail N]",
	short: "show the output of a sandbox's background process (run --detach)",
	long: `A process started with run --detach (or a session started with background: true)
keeps the last MiB of its output. logs prints it: all of it, or its last --tail N lines,
and with --follow what the process writes after, until it ends or you press Ctrl-C.
Without --session it is the sandbox's most recent background process. The output goes
to stdout and stderr as the process wrote it. The exit code is 0 while the process
runs, and its own once it has ended.`,
	run: runLogs,
}

func runLogs(c *cmd, args []string) error {
	session := c.fs.String("session", "", "the background session `ID` (default: the most recent)")
	follow := c.fs.Bool("follow", false, "keep printing what the process writes until it ends")
	c.fs.BoolVar(follow, "f", false, "short for --follow")
	tail := c.fs.Int("tail", 0, "print only the last `N` lines first (default: all kept)")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *tail < 0 {
		return usagef("--tail must be 0 or more")
	}
	name, sid := pos[0], *session
	if sid == "" {
		list, err := cl.ListSessions(c.ctx, name)
		if err != nil {
			return err
		}
		var last *api.Session
		for i := range list {
			s := &list[i]
			if s.Background && (last == nil || s.Started != nil && last.Started != nil && s.Started.After(*last.Started)) {
				last = s
			}
		}
		if last == nil {
			return fmt.Errorf("sandbox %s has no background process (start one with airlock run --detach)", name)
		}
		sid = last.ID
	}
	res, err := cl.SessionLogs(c.ctx, name, sid, *tail, *follow, c.stdout, c.stderr)
	if err != nil {
		if c.ctx.Err() != nil && *follow {
			return nil // Ctrl-C ends a follow
		}
		return err
	}
	if res != nil && res.State == "exited" && res.ExitCode != 0 {
		return ExitError{res.ExitCode}
	}
	return nil
}
