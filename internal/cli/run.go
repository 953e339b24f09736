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
	"github.com/airlockhq/airlock/internal/router/decision"
)

var runVerb = &verb{
	name:  "run",
	args:  "[--image IMG] [--cpu N] [--memory SIZE] [--env K=V]... [--timeout D] [--max-lifetime D] [--idle-suspend D] [--ttl D] [--profile P [--workspace DIR] [--access none|ro|rw] [--artifacts DIR]] [--detach [--name NAME]] -- CMD [ARG...]",
	short: "run a command in a new sandbox (or where a profile says), then terminate it",
	long: `The sandbox is named run-<random> and is terminated when the command ends, fails
or is interrupted. With --detach the sandbox stays: the command starts in the background
and the sandbox's name is printed; airlock logs NAME [--follow] shows its output. The
lifetime flags are create's, with its defaults: a detached sandbox suspends after 10m
without inbound traffic (--idle-suspend) and ends after 8h (--max-lifetime).
With --profile (or the daemon's router.profile) the daemon decides where the command
runs: off on the host, safe on the host inside the fence unless its risk score reaches
the threshold, strict always in a sandbox without network. One argument after -- is shell
text (run with sh -c), several are the command's words. The command works in a scratch
directory (on the host: the artifacts directory; in a sandbox: /work, whose new files are
copied to the artifacts directory) or, with --workspace, on a project: in a sandbox it is
mounted at /workspace (read-only with --access ro) when the daemon is on this machine,
else a copy whose new and changed files come back when access is rw. A line on stderr
says where it ran and why. See docs/router.md.
` + exitCodesHelp,
	run: runRun,
}

// terminateTimeout bounds the clean-up of an ephemeral sandbox after the command.
const terminateTimeout = 30 * time.Second

func runRun(c *cmd, args []string) error {
	var lim limitFlags
	lim.register(c, false)
	timeout := c.fs.Duration("timeout", 0, "stop the command after `D`, e.g. 30s")
	detach := c.fs.Bool("detach", false, "keep the sandbox and run the command in the background")
	c.fs.BoolVar(detach, "d", false, "short for --detach")
	detachName := c.fs.String("name", "", "with --detach, the sandbox's `NAME` (default run-<random>)")
	var life lifecycleFlags
	life.register(c)
	lim.also = func(r *api.CreateSandboxRequest) error { return life.apply(c, r) }
	var rf routeFlags
	rf.register(c)
	_, command, err := c.parse(args, 0, true)
	if err != nil {
		return err
	}
	if err := rf.check(); err != nil {
		return err
	}
	if *detach {
		if rf.profile != "" || rf.used() {
			return usagef("--detach runs in a sandbox that stays: it takes no --profile, --workspace, --access or --artifacts")
		}
		return runDetached(c, &lim, command, *detachName)
	}
	if len(command) > 0 {
		if routed, err := runRoutedCommand(c, &rf, &lim, command, *timeout); routed {
			return err
		}
	} else if rf.profile != "" || rf.used() {
		return usagef("missing the command to run (put it after --)")
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
	return withEphemeral(c, cl, &lim, create, func() error { return execute(c, cl, name, req) })
}

// withEphemeral creates the sandbox create asks for, calls use, and terminates the
// sandbox afterwards, whatever happened.
func withEphemeral(c *cmd, cl *client.Client, lim *limitFlags, create api.CreateSandboxRequest, use func() error) (retErr error) {
	name := create.Name
	resp, err := cl.Create(c.ctx, create, c.createOpts(create.Image, client.WithIdempotencyKey(name))...)
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
	return use()
}

// runRoutedCommand asks the daemon where command runs and runs it there. routed is
// false when no profile applies (none given, none configured): run then goes on as it
// always has, in a sandbox.
func runRoutedCommand(c *cmd, rf *routeFlags, lim *limitFlags, command []string, timeout time.Duration) (routed bool, err error) {
	cl, err := c.client()
	if err != nil {
		return true, err
	}
	req := api.RouteRequest{Kind: string(decision.KindCommand), Argv: command}
	if len(command) == 1 {
		req = api.RouteRequest{Kind: string(decision.KindCommand), Command: command[0]}
	}
	d, err := c.route(cl, rf, req)
	if err != nil {
		return true, err
	}
	if d == nil {
		if rf.used() {
			return true, usageError{fmt.Errorf("--workspace, --access and --artifacts: %w", errNoProfile)}
		}
		return false, nil
	}
	argv, shell, err := shellArgv(command)
	if err != nil {
		return true, err
	}
	if timeout < 0 {
		return true, usagef("--timeout must be positive")
	}
	w := &work{name: ephemeralName(), argv: argv, shell: shell, timeout: timeout, env: lim.env, decision: d}
	if err := w.prepare(rf); err != nil {
		return true, err
	}
	return true, c.runRouted(cl, lim, w)
}

// ephemeralName is "run-" and 12 random hex digits.
func ephemeralName() string {
	var b [6]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	return "run-" + hex.EncodeToString(b[:])
}

// runDetached creates a sandbox that stays, starts command in it as a background
// session and prints the sandbox's name.
func runDetached(c *cmd, lim *limitFlags, command []string, name string) error {
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
	cl, err := c.client()
	if err != nil {
		return err
	}
	resp, err := cl.Create(c.ctx, create, c.createOpts(create.Image, client.WithIdempotencyKey(name))...)
	if err != nil {
		return err
	}
	ses, err := cl.StartSession(c.ctx, name, api.SessionRequest{Kind: "raw", Argv: command, Background: true})
	if err != nil {
		return fmt.Errorf("sandbox %s was created but the command did not start: %w", name, err)
	}
	if c.json() {
		return c.printJSON(map[string]any{"sandbox": resp.Sandbox, "session": ses})
	}
	fmt.Fprintln(c.stdout, name)
	return nil
}
