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
	args:  "[--image IMG] [--cpu N] [--memory SIZE] [--env K=V]... [--timeout D] -- CMD [ARG...]",
	short: "run a command in a new sandbox, then terminate it",
	long: `The sandbox is named run-<random> and is terminated when the command ends, fails
or is interrupted.
` + exitCodesHelp,
	run: runRun,
}

// terminateTimeout bounds the clean-up of an ephemeral sandbox after the command.
const terminateTimeout = 30 * time.Second

func runRun(c *cmd, args []string) (retErr error) {
	var lim limitFlags
	lim.register(c, false)
	timeout := c.fs.Duration("timeout", 0, "stop the command after `D`, e.g. 30s")
	_, command, err := c.parse(args, 0, true)
	if err != nil {
		return err
	}
	req, err := execRequest(command, *timeout)
	if err != nil {
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
