package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

var runVerb = &verb{
	name:  "run",
	args:  "[--image IMG] [--cpu N] [--memory SIZE] [--env K=V]... [--timeout D] [--detach [--name NAME] [--idle-suspend D]] -- CMD [ARG...]",
	short: "run a command in a new sandbox, then terminate it",
	long: `The sandbox is named run-<random> and is terminated when the command ends, fails
or is interrupted. With --detach the sandbox stays: the command starts in the background
(as a raw session) and the sandbox's name is printed; it suspends after 24h without
inbound traffic unless --idle-suspend says otherwise.
` + exitCodesHelp,
	run: runRun,
}

// terminateTimeout bounds the clean-up of an ephemeral sandbox after the command.
const terminateTimeout = 30 * time.Second

func runRun(c *cmd, args []string) (retErr error) {
	var lim limitFlags
	lim.register(c, false)
	timeout := c.fs.Duration("timeout", 0, "stop the command after `D`, e.g. 30s")
	detach := c.fs.Bool("detach", false, "keep the sandbox and run the command in the background")
	detachName := c.fs.String("name", "", "with --detach, the sandbox's `NAME` (default run-<random>)")
	idle := c.fs.Duration("idle-suspend", 24*time.Hour, "with --detach, suspend after `D` without inbound traffic")
	_, command, err := c.parse(args, 0, true)
	if err != nil {
		return err
	}
	if *detach {
		return runDetached(c, &lim, command, *detachName, *idle)
	}
	var req api.ExecRequest
	if len(command) == 0 && lim.image != "" && *timeout >= 0 {
		// No command: the image's own entrypoint and cmd.
		if *timeout > 0 {
			req.Timeout = timeout.String()
		}
	} else if req, err = execRequest(command, *timeout); err != nil {
		return err
	}
	name := ephemeralName()
	create, err := lim.request(name)
	if err != nil {
		return err
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	if err := lim.pullFirst(c, cl); err != nil {
		return err
	}
	resp, err := cl.Create(c.ctx, create, client.WithIdempotencyKey(name))
	var apiErr *client.Error
	if errors.As(err, &apiErr) && apiErr.Status < 500 {
		return err // refused: nothing was made
	}
	// From here the sandbox may exist, even if the answer was lost: always terminate it.
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.ctx), terminateTimeout)
		defer cancel()
		if _, err := cl.Terminate(ctx, name); err != nil && !client.IsNotFound(err) {
			fmt.Fprintf(c.stderr, "airlock: could not terminate sandbox %s: %v\n", name, err)
			if retErr == nil {
				retErr = ExitError{1}
			}
		}
	}()
	if err != nil {
		return err
	}
	if sb := resp.Sandbox; sb != nil && sb.State == api.StateFailed {
		return fmt.Errorf("sandbox %s failed: %s", name, sb.Failure)
	}
	return execute(c, cl, name, req)
}

// ephemeralName is "run-" and 12 random hex digits.
func ephemeralName() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "run-" + hex.EncodeToString(b[:])
}

// runDetached creates a sandbox that stays, starts command in it as a background
// session and prints the sandbox's name.
func runDetached(c *cmd, lim *limitFlags, command []string, name string, idle time.Duration) error {
	if len(command) == 0 {
		return usagef("a command is required after --")
	}
	if name == "" {
		name = ephemeralName()
	}
	create, err := lim.request(name)
	if err != nil {
		return err
	}
	create.IdleSuspend = idle.String()
	cl, err := c.client()
	if err != nil {
		return err
	}
	if err := lim.pullFirst(c, cl); err != nil {
		return err
	}
	resp, err := cl.Create(c.ctx, create, client.WithIdempotencyKey(name))
	if err != nil {
		return err
	}
	ses, err := cl.StartSession(c.ctx, name, api.SessionRequest{Kind: "raw", Argv: command})
	if err != nil {
		return fmt.Errorf("sandbox %s was created but the command did not start: %w", name, err)
	}
	if c.json() {
		return c.printJSON(map[string]any{"sandbox": resp.Sandbox, "session": ses})
	}
	fmt.Fprintln(c.stdout, name)
	return nil
}
