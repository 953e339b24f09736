package router

import (
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file judges commands that run code: shells (whose text is parsed and judged in
// turn), interpreters (whose code is never judged: inline code is contained like
// run-code), eval, alias, trap and source.

var shells = map[string]bool{
	"sh": true, "bash": true, "rbash": true, "zsh": true, "dash": true, "ksh": true, "mksh": true,
	"ash": true, "yash": true, "posh": true, "fish": true, "csh": true, "tcsh": true,
}

// interpreters map a language interpreter to the options that hand it code inline.
var interpreters = map[string][]string{
	"python": {"-c"}, "python2": {"-c"}, "python3": {"-c"}, "pypy": {"-c"}, "pypy3": {"-c"},
	"node": {"-e", "--eval", "-p", "--print"}, "nodejs": {"-e", "--eval", "-p", "--print"},
	"bun": {"-e", "--eval", "-p", "--print"}, "ts-node": {"-e", "--eval", "-p", "--print"},
	"tsx": {"-e", "--eval", "-p", "--print"}, "deno": {"eval"},
	"perl": {"-e", "-E"}, "ruby": {"-e"}, "php": {"-r"}, "lua": {"-e"}, "luajit": {"-e"},
	"Rscript": {"-e"}, "R": {"-e"}, "julia": {"-e"}, "osascript": {"-e"}, "groovy": {"-e"},
	"pwsh": {"-c", "-Command", "-command"}, "tclsh": nil, "wish": nil,
}

// interpreterValueOpts are an interpreter's options whose value is the next word.
var interpreterValueOpts = map[string]bool{
	"-W": true, "-X": true, "-Q": true, "-r": true, "--require": true, "--import": true,
	"--loader": true, "-C": true, "--conditions": true, "--env-file": true, "-I": true,
}

// shellCode judges shell text a command runs: sh -c TEXT, su -c TEXT, eval TEXT.
func (s *riskScorer) shellCode(c *cmdCtx, a shArg) {
	if a.w != nil && !a.static && s.downloads(c.u, a.w) {
		c.add(ReasonDownloadExec, 0.95, "runs a downloaded script")
	}
	s.text(codeText(c.u, a), c.u.depth+1)
}

// shellCmd is sh, bash and the other shells: -c TEXT is parsed and judged; a script
// file is judged by where it lies; otherwise the shell reads its input.
func shellCmd(c *cmdCtx) {
	args := c.argv[1:]
	text, stdin := false, false
	var operands []shArg
scan:
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.lit
		switch {
		case !a.static:
			operands = args[i:]
			break scan
		case v == "-" || v == "--":
			stdin = stdin || v == "-"
			operands = args[i+1:]
			break scan
		case v == "--rcfile" || v == "--init-file":
			i++
		case strings.HasPrefix(v, "--"):
		case len(v) > 1 && (v[0] == '-' || v[0] == '+'):
			if v[0] == '-' {
				text = text || strings.Contains(v[1:], "c")
				stdin = stdin || strings.Contains(v[1:], "s")
			}
			if strings.HasSuffix(v, "o") || strings.HasSuffix(v, "O") {
				i++ // -o OPTION
			}
		default:
			operands = args[i:]
			break scan
		}
	}
	switch {
	case text && len(operands) > 0:
		c.s.shellCode(c, operands[0])
	case text:
	case !stdin && len(operands) > 0:
		c.s.script(c, operands[0])
	default:
		c.s.stdinCode(c, true)
	}
}

// interpreterCmd is python, node and the other language interpreters.
func interpreterCmd(c *cmdCtx) {
	inline := interpreters[c.name]
	args := c.argv[1:]
	python := strings.HasPrefix(c.name, "python") || strings.HasPrefix(c.name, "pypy")
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.lit
		switch {
		case !a.static:
			c.s.script(c, a)
			return
		case inlineFlag(v, inline) || python && len(v) > 1 && v[0] == '-' && v[1] != '-' && strings.Contains(v, "c"):
			c.add(ReasonCode, 0.6, "runs inline code, which cannot be judged")
			for _, rest := range args[i:] {
				if rest.w != nil && !rest.static && c.s.downloads(c.u, rest.w) {
					c.add(ReasonDownloadExec, 0.95, "runs downloaded code")
				}
			}
			return
		case python && (v == "-m" || strings.HasPrefix(v, "-m")):
			module, rest := strings.TrimPrefix(v, "-m"), args[i+1:]
			if module == "" && len(rest) > 0 {
				module, rest = rest[0].lit, rest[1:]
			}
			pythonModule(c, module, rest)
			return
		case c.name == "deno" && (v == "run" || v == "test" || v == "task" || v == "serve"):
		case v == "-":
			c.s.stdinCode(c, false)
			return
		case v == "--":
			if i+1 < len(args) {
				c.s.script(c, args[i+1])
				return
			}
		case strings.HasPrefix(v, "-"):
			if interpreterValueOpts[v] {
				i++
			}
		default:
			c.s.script(c, a)
			return
		}
	}
	c.s.stdinCode(c, false)
}

// inlineFlag reports whether v is one of an interpreter's inline-code options, alone,
// with its value attached (-c'code') or after = (--eval=code).
func inlineFlag(v string, flags []string) bool {
	for _, f := range flags {
		if v == f || strings.HasPrefix(v, f+"=") || len(f) == 2 && f[0] == '-' && strings.HasPrefix(v, f) {
			return true
		}
	}
	return false
}

// pythonModule judges python -m MODULE ARGS.
func pythonModule(c *cmdCtx, module string, rest []shArg) {
	switch module {
	case "pip", "pip3":
		c.excerpt() // the sub-command's reasons show the whole command
		sub := *c
		sub.name, sub.argv = "pip", append([]shArg{{static: true, lit: module}}, rest...)
		packageCmd(&sub)
	case "http.server", "SimpleHTTPServer", "smtpd", "ftplib", "telnetlib":
		c.add(ReasonNetwork, 0.5, "serves or reaches the network")
	case "ensurepip":
		c.add(ReasonInstall, 0.6, "installs packages")
	}
}

// script judges a script a shell or interpreter runs from a file.
func (s *riskScorer) script(c *cmdCtx, a shArg) {
	if a.w != nil && hasSubst(a.w) {
		if s.downloads(c.u, a.w) {
			c.add(ReasonDownloadExec, 0.95, "runs a downloaded script")
		} else {
			c.add(ReasonCode, 0.6, "runs a script another command makes")
		}
		return
	}
	if a.static && (strings.HasPrefix(a.lit, "http://") || strings.HasPrefix(a.lit, "https://")) {
		c.add(ReasonDownloadExec, 0.95, "runs a script fetched from the network")
		return
	}
	switch s.place(a) {
	case placeOutside:
		c.add(ReasonCode, 0.6, "runs a script from outside the workspace")
	case placeUnknown:
		c.add(ReasonCode, 0.6, "runs a script whose path is not known until run time")
	case placeSink:
		s.stdinCode(c, shells[c.name])
	case placeNet:
		c.add(ReasonDownloadExec, 0.95, "runs code read from a network connection")
	}
}

// hasSubst reports whether a word holds a command or process substitution.
func hasSubst(w *syntax.Word) bool {
	found := false
	syntax.Walk(w, func(n syntax.Node) bool {
		switch n.(type) {
		case *syntax.CmdSubst, *syntax.ProcSubst:
			found = true
		}
		return !found
	})
	return found
}

// stdinCode judges a shell or interpreter that reads its program from its input.
func (s *riskScorer) stdinCode(c *cmdCtx, shell bool) {
	in := c.in
	switch {
	case in.download:
		c.add(ReasonDownloadExec, 0.95, "pipes a download into an interpreter")
	case in.hdoc != nil && s.downloads(c.u, in.hdoc):
		c.add(ReasonDownloadExec, 0.95, "feeds a download into an interpreter")
	case in.hdoc != nil && shell:
		body := rawWord(c.u, in.hdoc)
		if in.herestr {
			body = codeText(c.u, wordArg(in.hdoc))
		}
		s.text(body, c.u.depth+1)
	case in.file != nil:
		s.script(c, wordArg(in.file))
	case in.hdoc != nil:
		c.add(ReasonCode, 0.6, "runs code from a here-document, which cannot be judged")
	case in.piped:
		c.add(ReasonCode, 0.6, "runs code read from a pipe, which cannot be judged")
	default:
		c.add(ReasonCode, 0.6, "runs code read from its input, which cannot be judged")
	}
}

// evalCmd parses and judges the text eval runs.
func evalCmd(c *cmdCtx) {
	args := c.argv[1:]
	parts := make([]string, len(args))
	for i, a := range args {
		if a.w != nil && !a.static && c.s.downloads(c.u, a.w) {
			c.add(ReasonDownloadExec, 0.95, "runs a downloaded script")
		}
		parts[i] = codeText(c.u, a)
	}
	if len(parts) > 0 {
		c.s.text(strings.Join(parts, " "), c.u.depth+1)
	}
}

// aliasCmd judges the text each alias NAME=TEXT stands for.
func aliasCmd(c *cmdCtx) {
	for _, a := range c.argv[1:] {
		if _, text, ok := strings.Cut(codeText(c.u, a), "="); ok {
			c.s.text(text, c.u.depth+1)
		}
	}
}

// trapCmd judges the text trap runs on a signal.
func trapCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], false, "")
	if len(o.rest) > 1 {
		c.s.shellCode(c, o.rest[0])
	}
}

// sourceCmd is source and ".": the shell runs a file's text.
func sourceCmd(c *cmdCtx) {
	if len(c.argv) > 1 {
		c.s.script(c, c.argv[1])
	}
}

// awkCmd flags an awk program that runs commands (system(), pipes).
func awkCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], true, "Ffv", "file", "field-separator", "assign", "include")
	if o.has("f", "file") || len(o.rest) == 0 {
		return
	}
	prog := o.rest[0].lit
	if !o.rest[0].static || strings.Contains(prog, "system") || strings.Contains(prog, "|") {
		c.add(ReasonCode, 0.6, "runs an awk program that runs commands")
	}
}
