package cli

// The daemon's verbs (serve, agent, check-config) are run by main, not by Run; they are
// here so that "airlock help serve" and "airlock serve --help" answer like every other
// verb. Their flags mirror the ones main and the agent parse.

var serveVerb = &verb{
	name:   "serve",
	args:   "[--config FILE] [--state-dir DIR] [--socket PATH] [--listen HOST:PORT]",
	short:  "run the daemon",
	daemon: true,
	long: `The daemon serves the API on its unix socket (no authentication: the socket's file
mode is the access control) and, with --listen, on TCP for token owners. It runs as
root; sandboxes keep running when it stops, and it finds them again when it starts.
Check a configuration file first with "airlock check-config FILE".`,
	run: func(c *cmd, args []string) error {
		c.fs.String("config", "", "configuration `FILE` (YAML or JSON; unknown keys are errors)")
		c.fs.String("state-dir", "", "`DIR` for the database, images and sandboxes (default /var/lib/airlock)")
		c.fs.String("socket", "", "unix socket `PATH` of the API (default /run/airlock/airlock.sock)")
		c.fs.String("listen", "", "also serve the API on TCP `HOST:PORT` (needs tokens in the config)")
		return daemonOnly(c, args, 0)
	},
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
