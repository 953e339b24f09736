package cli

// The daemon's verbs (serve, agent, check-config) are run by main, not by Run; they are
// here so that "airlock help serve" and "airlock serve --help" answer like every other
// verb. serve's flags are the ones main parses (ServeFlags); the agent's mirror the
// ones it parses.

import (
	"flag"
	"strings"
	"sync"
)

var serveVerb = &verb{
	name:   "serve",
	argsOf: sync.OnceValue(func() string { return flagSynopsis((&ServeFlags{}).Register) }),
	short:  "run the daemon",
	daemon: true,
	long: `The daemon serves the API on its unix socket and, with --listen, on TCP, and with
--e2b-listen the E2B-compatible API. On the socket the caller's uid is its identity: root
is the administrator local, unix_users (or airlock user create NAME --uid UID) maps
others, and an unknown uid is refused. Over TCP every request needs a bearer token. It
runs as root; sandboxes keep running when it stops, and it finds them again when it
starts. Check a configuration file first with "airlock check-config FILE".`,
	run: func(c *cmd, args []string) error {
		(&ServeFlags{}).Register(c.fs)
		return daemonOnly(c, args, 0)
	},
}

// ServeFlags are the flags of airlock serve. main parses them to run the daemon and
// help describes them, from the one set Register defines.
type ServeFlags struct {
	Config, StateDir, Socket, Listen, E2BListen, E2BDomain string
}

// Register defines the serve flags on fs, storing into f.
func (f *ServeFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.Config, "config", "", "configuration `FILE` (YAML or JSON; unknown keys are errors)")
	fs.StringVar(&f.StateDir, "state-dir", "", "`DIR` for the database, images and sandboxes (default /var/lib/airlock)")
	fs.StringVar(&f.Socket, "socket", "", "unix socket `PATH` of the API (default /run/airlock/airlock.sock)")
	fs.StringVar(&f.Listen, "listen", "", "also serve the API on TCP `HOST:PORT` (needs tokens in the config)")
	fs.StringVar(&f.E2BListen, "e2b-listen", "", "also serve the E2B-compatible API on TCP `HOST:PORT` (API keys: airlock token create --format e2b)")
	fs.StringVar(&f.E2BDomain, "e2b-domain", "", "with --e2b-listen: host names PORT-SANDBOXID.`DOMAIN` reach a sandbox's ports")
}

// flagSynopsis is the usage line of the flags register defines: "[--name ARG]" each,
// in name order.
func flagSynopsis(register func(*flag.FlagSet)) string {
	fs := flag.NewFlagSet("", flag.ContinueOnError)
	register(fs)
	var parts []string
	fs.VisitAll(func(f *flag.Flag) {
		arg, _ := flag.UnquoteUsage(f)
		parts = append(parts, "["+strings.TrimSpace(dashed(f.Name)+" "+arg)+"]")
	})
	return strings.Join(parts, " ")
}

var agentVerb = &verb{
	name:   "agent",
	args:   "(--socket PATH | --listen-fd FD | --accept-fd FD) [--root DIR] [--workdir DIR] [--env K=V]... [--deadline UNIX] [--ready-fd FD]",
	short:  "the in-sandbox agent (started by the daemon, not by hand)",
	daemon: true,
	long: `The agent is PID 1 of every sandbox: it runs commands, moves files and reports
exit statuses for the daemon. Nobody needs to start it by hand.`,
	run: func(c *cmd, args []string) error {
		c.fs.String("socket", "", "listen on this unix socket `PATH`")
		c.fs.Int("listen-fd", -1, "listen on this inherited, bound unix socket `FD` instead of --socket")
		c.fs.Int("accept-fd", -1, "take connections handed over this inherited unix socket `FD` instead of --socket")
		c.fs.String("root", "/", "root `DIR` of file operations")
		c.fs.Int64("deadline", 0, "stop at this Unix time in seconds: `UNIX` (0: never)")
		c.fs.Int("ready-fd", -1, "write \"ready\" to this `FD` once listening, then close it")
		c.fs.String("workdir", "/", "default working `DIR` of processes")
		c.fs.Var(&listFlag{}, "env", "`K=V` added to the base environment (repeatable)")
		return daemonOnly(c, args, 0)
	},
}

var checkConfigVerb = &verb{
	name:   "check-config",
	args:   "FILE",
	short:  "check a daemon configuration file",
	daemon: true,
	long:   `Prints "FILE: ok", or what is wrong with the file, and exits 1 if it is wrong.`,
	run:    func(c *cmd, args []string) error { return daemonOnly(c, args, 1) },
}

// daemonVerbs are the verbs main runs itself, by name.
var daemonVerbs = map[string]*verb{serveVerb.name: serveVerb, agentVerb.name: agentVerb, checkConfigVerb.name: checkConfigVerb}

// daemonOnly parses a daemon verb's arguments, for its help and usage errors; main runs
// the verb when it is the first argument, so reaching here otherwise is a usage error.
func daemonOnly(c *cmd, args []string, npos int) error {
	if _, _, err := c.parse(args, npos, false); err != nil {
		return err
	}
	return usagef("give %s as the first argument, before any flag: airlock %s", c.verb.name, shortSynopsis(c.verb))
}
