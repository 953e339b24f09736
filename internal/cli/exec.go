package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// exitCodesHelp explains the exit codes of exec, run and shell.
const exitCodesHelp = `airlock exits with the command's own exit code, or with
  124  the command timed out (--timeout, or the sandbox's lifetime ended),
  137  it was killed for using too much memory, or by SIGKILL (128+N for another signal N),
  130  it was cancelled: Ctrl-C cancels the command in the sandbox.
A line on stderr says why when the command did not exit by itself.`

var execVerb = &verb{
	name:  "exec",
	args:  "NAME [--timeout D] [--env K=V]... [--cwd DIR] [--stdin] -- CMD [ARG...]",
	short: "run a command in a sandbox, streaming its output",
	long: exitCodesHelp + `
--stdin reads all of standard input first and gives it to the command; without it,
standard input is not read (a pipe or a file there gets a one-line warning on stderr).
With -o json nothing streams: the result, with the collected output, is printed as JSON.`,
	run: runExec,
}

func runExec(c *cmd, args []string) error {
	timeout := c.fs.Duration("timeout", 0, "stop the command after `D`, e.g. 30s")
	env := kvFlag{}
	c.fs.Var(env, "env", "environment variable `K=V` for the command (repeatable)")
	c.fs.Var(env, "e", "short for --env")
	cwd := c.fs.String("cwd", "", "working directory `DIR` in the sandbox")
	c.fs.StringVar(cwd, "w", "", "short for --cwd")
	stdin := c.fs.Bool("stdin", false, "read standard input and give it to the command")
	c.fs.BoolVar(stdin, "i", false, "short for --stdin")
	pos, command, err := c.parse(args, 1, true)
	if err != nil {
		return err
	}
	req, err := execRequest(command, *timeout)
	if err != nil {
		return err
	}
	req.Env, req.Cwd = env.orNil(), *cwd
	if *stdin {
		b, err := io.ReadAll(c.stdin)
		if err != nil {
			return fmt.Errorf("read stdin: %w", err)
		}
		req.Stdin = string(b)
	} else if stdinHasInput(c.stdin) {
		fmt.Fprintln(c.stderr, "airlock: standard input is not passed to the command without --stdin")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	return execute(c, cl, pos[0], req)
}

// stdinHasInput reports whether r is a pipe, or a file with data, that the user may
// have meant for the command: not a terminal, not /dev/null, not an empty file. It
// reads nothing.
func stdinHasInput(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	switch mode := fi.Mode(); {
	case mode&os.ModeNamedPipe != 0:
		return true
	case mode.IsRegular():
		return fi.Size() > 0
	}
	return false // a terminal, /dev/null or a socket
}

// execRequest checks the command and timeout that exec and run share.
func execRequest(command []string, timeout time.Duration) (api.ExecRequest, error) {
	if len(command) == 0 {
		return api.ExecRequest{}, usagef("missing the command to run (put it after --)")
	}
	if timeout < 0 {
		return api.ExecRequest{}, usagef("--timeout must be positive")
	}
	req := api.ExecRequest{Argv: command}
	if timeout > 0 {
		req.Timeout = timeout.String()
	}
	return req, nil
}

// execute runs req in the sandbox — streaming, or collected for -o json — and turns how
// it ended into Run's answer.
func execute(c *cmd, cl *client.Client, ref string, req api.ExecRequest) error {
	if c.json() {
		res, err := cl.Exec(c.ctx, ref, req)
		if err != nil {
			return err
		}
		if err := c.printJSON(res); err != nil {
			return err
		}
		code, _ := exitCode(res, req.Timeout)
		return exitErr(code)
	}
	res, err := cl.ExecStream(c.ctx, ref, req, c.stdout, c.stderr)
	if err != nil {
		return err
	}
	return c.exitWith(res, req.Timeout)
}

// exitWith prints why a command ended, if it did not exit by itself, and returns its code.
func (c *cmd) exitWith(res *api.ExecResult, timeout string) error {
	code, reason := exitCode(res, timeout)
	if reason != "" {
		fmt.Fprintf(c.stderr, "airlock: %s\n", termSafe(reason))
	}
	return exitErr(code)
}

// exitErr is nil for 0 and an ExitError otherwise.
func exitErr(code int) error {
	if code == 0 {
		return nil
	}
	return ExitError{code}
}

// exitCode maps how a command ended to this process's exit code and, when the command did
// not simply exit, a one-line reason.
func exitCode(res *api.ExecResult, timeout string) (int, string) {
	switch res.State {
	case api.ExecSucceeded:
		return 0, ""
	case api.ExecFailed:
		if res.ExitCode == 0 {
			return 1, orText(res.Error, "command failed")
		}
		return res.ExitCode, res.Error
	case api.ExecTimeout:
		if timeout != "" {
			return exitTimeout, "command timed out after " + timeout
		}
		return exitTimeout, orText(res.Error, "command timed out")
	case api.ExecOOMKilled:
		return exitKilled, "command killed: out of memory (the sandbox's memory limit)"
	case api.ExecKilled:
		code := exitKilled
		if res.ExitCode > 128 && res.ExitCode < 256 {
			code = res.ExitCode
		}
		return code, "command killed by " + orText(res.Signal, "a signal")
	case api.ExecCancelled:
		return exitCancelled, "command cancelled"
	}
	return 1, fmt.Sprintf("command ended in unknown state %q", res.State)
}

func orText(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}
