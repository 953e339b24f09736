package router

import (
	"strings"
)

// This file peels wrappers — commands that run another command (sudo, env, timeout,
// xargs...) — and judges the paths a command reads and writes.

// unwrapped is what a wrapper runs and what it does itself.
type unwrapped struct {
	inner   []shArg // the command it runs, argv[0] first; empty for none
	text    *shArg  // shell text it runs instead (su -c, env -S, flock -c)
	joined  []shArg // words it joins into shell text (watch)
	priv    bool    // it runs the command with raised privileges
	system  string  // how it changes the system, if it does
	many    bool    // it runs the command once per input item
	writes  []shArg // files it writes itself (time -o, strace -o)
	envs    []shArg // NAME=VALUE words it sets (env)
	dumpEnv bool    // it prints the environment (env with no command)
}

// unwrap peels one wrapper. ok is false when name is not a wrapper.
func unwrap(name string, argv []shArg) (uw unwrapped, ok bool) {
	f := wrappers[name]
	if f == nil {
		return unwrapped{}, false
	}
	return f(argv[1:]), true
}

// wrappers map a wrapper's name to a function of its arguments (argv without argv[0]).
var wrappers = map[string]func(args []shArg) unwrapped{
	"sudo": func(args []shArg) unwrapped {
		o := readOpts(args, false, "ugpCDhrtTUR", "user", "group", "prompt", "close-from", "chdir", "host", "role", "type", "command-timeout", "other-user", "chroot")
		return unwrapped{inner: o.rest, priv: true}
	},
	"doas":     privWrapper("uC"),
	"pkexec":   privWrapper("", "user"),
	"run0":     privWrapper("ugDp", "user", "group", "chdir", "setenv", "property", "description", "slice", "nice"),
	"sudoedit": func(args []shArg) unwrapped { return unwrapped{priv: true} },
	"su":       suWrapper,
	"runuser": func(args []shArg) unwrapped {
		o := readOpts(args, false, "ugGcsw", "user", "group", "supp-group", "command", "shell", "whitelist-environment")
		if o.has("u", "user") {
			return unwrapped{inner: o.rest, priv: true}
		}
		return suWrapper(args)
	},
	"env": func(args []shArg) unwrapped {
		o := readOpts(args, false, "uCS", "unset", "chdir", "split-string", "default-signal", "ignore-signal", "block-signal")
		uw := unwrapped{}
		rest := o.rest
		for len(rest) > 0 && rest[0].static && isAssignWord(rest[0].lit) {
			uw.envs = append(uw.envs, rest[0])
			rest = rest[1:]
		}
		if s, ok := o.get("S", "split-string"); ok {
			uw.text = &s
			return uw
		}
		uw.inner, uw.dumpEnv = rest, len(rest) == 0
		return uw
	},
	"nice":  leadingWrapper("n", "adjustment"),
	"nohup": leadingWrapper(""),
	"timeout": func(args []shArg) unwrapped {
		o := readOpts(args, false, "sk", "signal", "kill-after")
		if len(o.rest) == 0 {
			return unwrapped{}
		}
		return unwrapped{inner: o.rest[1:]} // the duration comes first
	},
	"command": func(args []shArg) unwrapped {
		o := readOpts(args, false, "")
		if o.has("v", "V") {
			return unwrapped{} // only looks the command up
		}
		return unwrapped{inner: o.rest}
	},
	"exec": leadingWrapper("a"),
	"time": func(args []shArg) unwrapped {
		o := readOpts(args, false, "of", "output", "format")
		uw := unwrapped{inner: o.rest}
		if out, ok := o.get("o", "output"); ok {
			uw.writes = append(uw.writes, out)
		}
		return uw
	},
	"stdbuf": leadingWrapper("ioe", "input", "output", "error"),
	"ionice": func(args []shArg) unwrapped {
		o := readOpts(args, false, "cnpPu", "class", "classdata", "pid", "pgid", "uid")
		if o.has("p", "P", "u", "pid", "pgid", "uid") {
			return unwrapped{}
		}
		return unwrapped{inner: o.rest}
	},
	"setsid":  leadingWrapper(""),
	"taskset": priorityWrapper(""),
	"chrt":    priorityWrapper("TPD", "sched-runtime", "sched-period", "sched-deadline"),
	"builtin": func(args []shArg) unwrapped { return unwrapped{inner: args} },
	"busybox": func(args []shArg) unwrapped { return unwrapped{inner: args} },
	"xargs": func(args []shArg) unwrapped {
		o := readOpts(args, false, "IdELnPsa", "arg-file", "delimiter", "eof", "max-lines", "max-args", "max-procs", "max-chars", "process-slot-var")
		return unwrapped{inner: o.rest, many: true}
	},
	"watch": func(args []shArg) unwrapped {
		o := readOpts(args, false, "n", "interval")
		if o.has("x", "exec") {
			return unwrapped{inner: o.rest}
		}
		return unwrapped{joined: o.rest}
	},
	"flock": func(args []shArg) unwrapped {
		o := readOpts(args, false, "wEc", "timeout", "wait", "conflict-exit-code", "command")
		if t, ok := o.get("c", "command"); ok {
			return unwrapped{text: &t}
		}
		if len(o.rest) < 2 {
			return unwrapped{}
		}
		cmd := o.rest[1:] // the lock file comes first
		if len(cmd) >= 2 && cmd[0].static && (cmd[0].lit == "-c" || cmd[0].lit == "--command") {
			return unwrapped{text: &cmd[1]}
		}
		return unwrapped{inner: cmd}
	},
	"unbuffer":   leadingWrapper(""),
	"caffeinate": leadingWrapper("tw"),
	"nocorrect":  func(args []shArg) unwrapped { return unwrapped{inner: args} },
	"noglob":     func(args []shArg) unwrapped { return unwrapped{inner: args} },
	"fakeroot":   leadingWrapper("lsi", "lib", "faked"),
	"strace":     tracerWrapper,
	"ltrace":     tracerWrapper,
	"chroot": func(args []shArg) unwrapped {
		o := readOpts(args, false, "", "userspec", "groups")
		uw := unwrapped{system: "changes the root directory", priv: true}
		if len(o.rest) > 1 {
			uw.inner = o.rest[1:]
		}
		return uw
	},
	"nsenter": func(args []shArg) unwrapped {
		o := readOpts(args, false, "tSGw", "target", "setuid", "setgid", "wd")
		return unwrapped{inner: o.rest, system: "enters another process's namespaces", priv: true}
	},
	"unshare": func(args []shArg) unwrapped {
		o := readOpts(args, false, "S", "setuid", "setgid", "propagation")
		return unwrapped{inner: o.rest, system: "makes new kernel namespaces"}
	},
}

func privWrapper(short string, long ...string) func([]shArg) unwrapped {
	return func(args []shArg) unwrapped {
		return unwrapped{inner: readOpts(args, false, short, long...).rest, priv: true}
	}
}

func leadingWrapper(short string, long ...string) func([]shArg) unwrapped {
	return func(args []shArg) unwrapped {
		return unwrapped{inner: readOpts(args, false, short, long...).rest}
	}
}

// priorityWrapper is taskset and chrt: options, a mask or priority, the command; -p
// acts on a running process instead.
func priorityWrapper(short string, long ...string) func([]shArg) unwrapped {
	return func(args []shArg) unwrapped {
		o := readOpts(args, false, short, long...)
		if o.has("p", "pid") || len(o.rest) < 2 {
			return unwrapped{}
		}
		return unwrapped{inner: o.rest[1:]}
	}
}

func tracerWrapper(args []shArg) unwrapped {
	o := readOpts(args, false, "abeEIoOpPsSuUX", "output", "attach", "user", "signal", "trace", "expr")
	uw := unwrapped{inner: o.rest}
	if out, ok := o.get("o", "output"); ok {
		uw.writes = append(uw.writes, out)
	}
	if o.has("p", "attach") {
		uw.system = "attaches to a running process"
	}
	return uw
}

// suWrapper is su: a user, options anywhere, and -c for the command text.
func suWrapper(args []shArg) unwrapped {
	o := readOpts(args, true, "cCsgGw", "command", "session-command", "shell", "group", "supp-group", "whitelist-environment")
	uw := unwrapped{priv: true}
	if t, ok := o.get("c", "C", "command", "session-command"); ok {
		uw.text = &t
	}
	return uw
}

// isAssignWord reports whether an env(1) argument is NAME=VALUE.
func isAssignWord(v string) bool {
	name, _, ok := strings.Cut(v, "=")
	if !ok || name == "" {
		return false
	}
	for i, c := range name {
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// wrapped records what a wrapper does itself, before the command it runs is judged.
func (s *riskScorer) wrapped(c *cmdCtx, uw unwrapped) {
	if uw.priv {
		c.add(ReasonPrivilege, 0.9, "escalates privileges")
	}
	if uw.system != "" {
		c.add(ReasonSystem, 0.8, uw.system)
	}
	for _, w := range uw.writes {
		s.writeTarget(w, "writes", c.excerpt())
	}
	for _, e := range uw.envs {
		if name, _, _ := strings.Cut(e.lit, "="); loaderEnv[name] {
			c.add(ReasonCode, 0.6, "sets "+name+", which makes programs load or run other code")
		}
	}
	if uw.dumpEnv {
		c.add(ReasonSecrets, 0.5, "prints the environment, which may hold secrets")
	}
	if uw.text != nil {
		s.shellCode(c, *uw.text)
	}
	if len(uw.joined) > 0 {
		s.text(strings.Join(literals(c.u, uw.joined), " "), c.u.depth+1)
	}
}

// writeTarget judges a path a command writes; verb says how, ex shows the command.
func (s *riskScorer) writeTarget(a shArg, verb, ex string) {
	if secretPath(a.path) {
		s.add(ReasonSecrets, 0.7, verb+" credentials: "+ex)
	}
	switch s.place(a) {
	case placeDevice:
		s.add(ReasonDevice, 1, verb+" a raw device: "+ex)
	case placeSystem:
		s.add(ReasonSystem, 0.8, verb+" a system path: "+ex)
	case placeOutside:
		s.add(ReasonOutside, 0.6, verb+" a path outside the workspace: "+ex)
	case placeUnknown:
		s.add(ReasonUnknownPath, 0.3, verb+" a path not known until run time: "+ex)
	case placeNet:
		s.add(ReasonNetwork, 0.5, "opens a network connection: "+ex)
	}
}

// readTarget judges a path a command reads.
func (s *riskScorer) readTarget(a shArg, verb, ex string) {
	if secretPath(a.path) {
		s.add(ReasonSecrets, 0.7, verb+" credentials: "+ex)
	}
	if s.place(a) == placeNet {
		s.add(ReasonNetwork, 0.5, "opens a network connection: "+ex)
	}
}

// noSecretArgs are commands whose arguments are text, not paths they open.
var noSecretArgs = map[string]bool{"echo": true, "printf": true, ":": true, "true": true, "false": true}

// secretArgs flags a command any of whose arguments names credentials: the word itself,
// the value after = (--key=PATH, if=PATH) or after @ (curl -d @PATH).
func (s *riskScorer) secretArgs(c *cmdCtx) {
	if noSecretArgs[c.name] {
		return
	}
	for _, a := range c.argv[1:] {
		p := a.path
		if _, v, ok := strings.Cut(p, "="); ok && secretPath(strings.TrimPrefix(v, "@")) || secretPath(strings.TrimPrefix(p, "@")) {
			c.add(ReasonSecrets, 0.7, "touches credentials")
			return
		}
	}
}
