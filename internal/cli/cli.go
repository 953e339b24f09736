// Package cli owns Airlock's command-line verbs (create, ls, get, exec, run, run-code,
// shell, cp, rm, events, snapshots, network, image, identities, secrets, risk, fence, mcp,
// status, version, help): parsing their arguments, calling the daemon through the public
// Go SDK (package client) and printing answers as tables or JSON. It is a thin layer: it
// must not import the daemon's packages (server, manager, store, runtime, agent internals)
// nor reach the daemon any way but the HTTP API, and it never calls os.Exit — Run returns
// an ExitError that main turns into the process's exit code. Where a command runs, and its
// risk, are the daemon's to decide (POST /v1/route, for run and risk alike); what runs on
// the caller's own machine (fence, and run's host and fence routes) uses package fence,
// and the scoring (risk, run's ask) only the router's vocabulary (package
// router/decision); mcp serves package mcp's tools through ServeMCP, which airlockd
// sets (the CLI's binary hands it the verb); gc --state-dir, which cleans up after a
// daemon that is gone, uses package sweep's StateDir through SweepStateDir, which
// airlockd sets too (the CLI's binary hands it that verb as well).
//
// Hostile surface: text a sandbox wrote (an agent's errors, failure reasons, names in
// events and egress records) reaches the user's terminal only through termSafe, which
// shows control characters instead of sending them; a command's own output, which the
// user asked for, passes as it is.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// ExitError asks main to exit with Code. Run has already printed whatever explains it.
type ExitError struct{ Code int }

func (e ExitError) Error() string { return "exit status " + strconv.Itoa(e.Code) }

// Exit codes of exec, run and shell beyond the command's own.
const (
	exitTimeout   = 124 // the command's timeout or the sandbox's lifetime ended it
	exitCancelled = 130 // the user pressed Ctrl-C (or the exec was cancelled)
	exitKilled    = 137 // out of memory, or killed by SIGKILL
)

// Run runs one CLI verb. args excludes the program name; global flags may precede the verb.
// It prints results to stdout and diagnostics to stderr, and returns nil on success or an
// ExitError (a value, not a pointer): 1 for a failed call, 2 for a usage error, or the
// code of a command run in a sandbox. ctx should be cancelled on SIGINT.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	name, rest := splitVerb(args)
	if name == "" && len(rest) > 0 {
		// Flags and no command: --version (-v alone) as docker has it, else a short error
		// rather than the whole help.
		if i := slices.IndexFunc(rest, func(a string) bool { return a == "--version" || a == "-version" }); i >= 0 {
			name, rest = "version", slices.Delete(slices.Clone(rest), i, i+1)
		} else if len(rest) == 1 && (rest[0] == "-v" || rest[0] == "-V") {
			name, rest = "version", nil
		} else {
			fmt.Fprintln(stderr, "airlock: missing command")
			fmt.Fprintln(stderr, "see 'airlock help'")
			return ExitError{2}
		}
	}
	switch name {
	case "", "help", "-h", "-help", "--help":
		return runHelp(ctx, name, rest, stdout, stderr)
	}
	if groups[name] {
		sub, subRest := splitVerb(rest)
		switch sub {
		case "-h", "-help", "--help", "help":
			printGroupUsage(stdout, name)
			return nil
		}
		if sub == "" {
			fmt.Fprintf(stderr, "airlock %s: missing subcommand\n\n", name)
			printGroupUsage(stderr, name)
			return ExitError{2}
		}
		if verbs[name+" "+sub] == nil {
			var subs []string
			for _, v := range verbList {
				if s, ok := strings.CutPrefix(v.name, name+" "); ok {
					subs = append(subs, s)
				}
			}
			unknownCommand(stderr, "airlock "+name, sub, subs)
			fmt.Fprintf(stderr, "see 'airlock %s --help'\n", name)
			return ExitError{2}
		}
		name, rest = name+" "+sub, subRest
	}
	v := lookupVerb(name)
	if v == nil {
		unknownCommand(stderr, "airlock", name, verbNames())
		fmt.Fprintln(stderr, "see 'airlock help'")
		return ExitError{2}
	}
	c := newCmd(ctx, v, stdin, stdout, stderr)
	return c.report(v.run(c, rest))
}

// splitVerb finds the first word of args that is not a global flag or its value, and
// returns it with the other arguments in order (the global flags stay in front).
func splitVerb(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" || !strings.HasPrefix(a, "-") || a == "-" {
			if a == "--" {
				return "", args
			}
			rest := append(append([]string{}, args[:i]...), args[i+1:]...)
			return a, rest
		}
		switch strings.TrimLeft(a, "-") {
		case "socket", "addr", "token", "output", "o":
			i++ // the value follows
		case "h", "help":
			return a, append(append([]string{}, args[:i]...), args[i+1:]...)
		}
	}
	return "", args
}

// cmd is one invocation of a verb: its streams, flags and client.
type cmd struct {
	ctx    context.Context
	verb   *verb
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	fs     *flag.FlagSet

	socket, addr, token, output string
	cl                          *client.Client
}

func newCmd(ctx context.Context, v *verb, stdin io.Reader, stdout, stderr io.Writer) *cmd {
	c := &cmd{ctx: ctx, verb: v, stdin: stdin, stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet("airlock "+v.name, flag.ContinueOnError)
	c.fs.SetOutput(io.Discard)
	if v.daemon { // its own flags only: serve has a --socket of its own
		c.output = "table"
		return c
	}
	c.fs.StringVar(&c.socket, "socket", "", "daemon `path` (default $AIRLOCK_SOCKET or "+client.DefaultSocket+")")
	c.fs.StringVar(&c.addr, "addr", "", "daemon `host:port` (or https://host:port) over TCP instead of the socket")
	c.fs.StringVar(&c.token, "token", "", "bearer `token` for --addr (default $AIRLOCK_TOKEN)")
	c.fs.StringVar(&c.output, "output", "table", "output `format`: table or json")
	c.fs.StringVar(&c.output, "o", "table", "short for --output")
	return c
}

// usageError is a bad invocation: Run prints it with the verb's synopsis and exits 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// parse parses the verb's flags, which may appear anywhere among the first npos
// positional arguments. With withCmd, the command is everything after "--" or, without
// "--", everything from the positional argument after the first npos.
func (c *cmd) parse(args []string, npos int, withCmd bool) (pos, command []string, err error) {
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, nil, usageError{flagError(c.fs, err)}
		}
		rest := c.fs.Args()
		if n := len(args) - len(rest); n > 0 && args[n-1] == "--" {
			if withCmd {
				command = rest
			} else {
				pos = append(pos, rest...)
			}
			break
		}
		if len(rest) == 0 {
			break
		}
		if withCmd && len(pos) == npos {
			command = rest
			break
		}
		pos, args = append(pos, rest[0]), rest[1:]
	}
	if c.output != "table" && c.output != "json" {
		return nil, nil, usagef("--output must be table or json, not %q", c.output)
	}
	if len(pos) < npos {
		if need := positionals(c.verb.synopsis()); len(need) == npos {
			return nil, nil, usagef("missing %s", strings.Join(need[len(pos):], " "))
		}
		return nil, nil, usagef("want %d arguments, got %d", npos, len(pos))
	}
	if !withCmd && npos >= 0 && len(pos) > npos { // npos < 0: any number
		return nil, nil, usagef("unexpected argument %q", pos[npos])
	}
	return pos, command, nil
}

// isSet reports whether the flag was given on the command line.
func (c *cmd) isSet(name string) bool {
	set := false
	c.fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func (c *cmd) json() bool { return c.output == "json" }

// connect parses args (npos positionals, no command) and opens the client: how most
// verbs begin.
func (c *cmd) connect(args []string, npos int) ([]string, *client.Client, error) {
	pos, _, err := c.parse(args, npos, false)
	if err != nil {
		return nil, nil, err
	}
	cl, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	return pos, cl, nil
}

// connectOptional is connect for verbs that take at most one sandbox name; ref is ""
// without one.
func (c *cmd) connectOptional(args []string) (ref string, cl *client.Client, err error) {
	pos, _, err := c.parse(args, -1, false)
	if err != nil {
		return "", nil, err
	}
	if len(pos) > 1 {
		return "", nil, usagef("at most one sandbox name")
	}
	if len(pos) == 1 {
		ref = pos[0]
	}
	if cl, err = c.client(); err != nil {
		return "", nil, err
	}
	return ref, cl, nil
}

// client returns the SDK client the global flags describe.
func (c *cmd) client() (*client.Client, error) {
	if c.cl == nil {
		if c.token == "" {
			c.token = os.Getenv("AIRLOCK_TOKEN")
		}
		cl, err := client.New(client.Options{Socket: c.socket, Addr: c.addr, Token: c.token})
		if err != nil {
			return nil, usageError{err}
		}
		c.cl = cl
	}
	return c.cl, nil
}

// printJSON writes v indented to stdout.
func (c *cmd) printJSON(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", jsonSafe(b))
	return err
}

// report prints err the way the user asked and turns it into an exit code.
func (c *cmd) report(err error) error {
	var exit ExitError
	var ue usageError
	var apiErr *client.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &exit):
		if exit.Code == 0 {
			return nil
		}
		return exit
	case errors.As(err, &ue) && errors.Is(ue.err, flag.ErrHelp):
		printUsage(c.stdout, c.verb, c.fs)
		return nil
	case errors.As(err, &ue):
		printUsageError(c.stderr, c.verb, ue.err)
		return ExitError{2}
	case errors.Is(err, context.Canceled) && c.ctx.Err() != nil:
		fmt.Fprintln(c.stderr, "airlock: cancelled")
		return ExitError{exitCancelled}
	case errors.As(err, &apiErr):
		if c.json() {
			c.printErrorJSON(api.Error{Code: apiErr.Code, Message: apiErr.Message, Details: apiErr.Details})
		} else {
			msg := apiErr.Message
			if apiErr.Code == "invalid_argument" {
				msg = c.flagNamed(msg)
			}
			fmt.Fprintf(c.stderr, "airlock: %s (%s)\n", termSafe(msg), termSafe(apiErr.Code))
		}
		return ExitError{1}
	}
	if c.json() {
		code := errdefs.Code(err)
		c.printErrorJSON(api.Error{Code: code, Message: err.Error()})
		return ExitError{1}
	}
	fmt.Fprintf(c.stderr, "airlock: %s\n", termSafe(err.Error()))
	if client.IsUnavailable(err) && c.addr == "" {
		fmt.Fprintln(c.stderr, "airlock: is the daemon running? Start it with `airlock serve`, or pass --socket or --addr.")
	}
	return ExitError{1}
}

// fieldRE is a request field at the start of a daemon's message: "max_lifetime 0s is out
// of range".
var fieldRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^([a-z]+(?:_[a-z]+)*) `) })

// flagNamed names the field a message starts with as the flag the user typed for it:
// "--max-lifetime 0s is out of range" when --max-lifetime was given.
func (c *cmd) flagNamed(msg string) string {
	m := fieldRE().FindStringSubmatch(msg)
	if m == nil {
		return msg
	}
	name := strings.ReplaceAll(m[1], "_", "-")
	if c.fs.Lookup(name) == nil || !c.isSet(name) {
		return msg
	}
	return "--" + name + " " + msg[len(m[0]):]
}

func (c *cmd) printErrorJSON(e api.Error) {
	b, _ := json.MarshalIndent(api.ErrorBody{Error: e}, "", "  ")
	fmt.Fprintf(c.stderr, "%s\n", jsonSafe(b))
}

// callOpts turns --idempotency-key and --if-match (when given) into SDK call options.
func (c *cmd) callOpts(key string, ifMatch int64) []client.CallOption {
	var opts []client.CallOption
	if c.isSet("if-match") {
		opts = append(opts, client.WithIfMatch(ifMatch))
	}
	if key != "" {
		opts = append(opts, client.WithIdempotencyKey(key))
	}
	return opts
}
