package router

import (
	"path"
	"strings"
)

// This file judges commands by what they do to files, the system and the network.
// Anything not named here is an ordinary program and adds nothing to the score.

// handlers map a command's name to the function that judges it.
var handlers map[string]func(*cmdCtx)

func init() {
	handlers = map[string]func(*cmdCtx){
		"rm": deleteCmd, "rmdir": deleteCmd, "unlink": deleteCmd, "shred": deleteCmd, "srm": deleteCmd, "wipe": deleteCmd,
		"touch": writeAllCmd, "mkdir": writeAllCmd, "truncate": writeAllCmd, "tee": writeAllCmd, "mv": writeAllCmd, "mkfifo": writeAllCmd,
		"cp": writeLastCmd, "ln": writeLastCmd, "install": writeLastCmd, "link": writeLastCmd,
		"chmod": permsCmd, "chown": permsCmd, "chgrp": permsCmd, "chattr": permsCmd, "setfacl": permsCmd,
		"git": gitCmd, "find": findCmd, "sed": sedCmd, "tar": tarCmd, "unzip": unzipCmd, "dd": ddCmd,
		"cd": cdCmd, "pushd": cdCmd, "popd": cdCmd,
		"eval": evalCmd, "alias": aliasCmd, "trap": trapCmd, "source": sourceCmd, ".": sourceCmd,
		"awk": awkCmd, "gawk": awkCmd, "mawk": awkCmd, "nawk": awkCmd,
		"printenv": printenvCmd, "make": makeCmd, "gmake": makeCmd, "ninja": makeCmd, "cmake": makeCmd,
		"kill": killCmd, "pkill": killCmd, "killall": killCmd, "killall5": killCmd,
		"rsync": rsyncCmd, "scp": netCmd, "curl": curlCmd, "wget": wgetCmd,
	}
	for name := range shells {
		handlers[name] = shellCmd
	}
	for name := range interpreters {
		handlers[name] = interpreterCmd
	}
	for name := range packageSubs {
		handlers[name] = packageCmd
	}
	for name := range systemPackageSubs {
		handlers[name] = packageCmd
	}
	for _, name := range []string{"pacman", "yay", "paru", "dpkg", "rpm", "npx", "bunx", "uvx", "pnpx"} {
		handlers[name] = packageCmd
	}
	for _, name := range netTools {
		handlers[name] = netCmd
	}
	for _, name := range remoteTools {
		handlers[name] = remoteCmd
	}
	for name := range systemTools {
		handlers[name] = systemCmd
	}
	for name := range readSubs {
		handlers[name] = systemCmd
	}
	for _, name := range []string{"docker", "podman", "nerdctl", "buildah"} {
		handlers[name] = containerCmd
	}
}

// deleteCmd is rm and its kin.
func deleteCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], true, "", "interactive")
	c.add(ReasonDelete, 0.45, "deletes files")
	if c.name == "rm" && o.has("r", "R", "recursive") {
		c.add(ReasonRecursive, 0.3, "deletes recursively")
	}
	if c.many {
		c.add(ReasonRecursive, 0.3, "deletes every path it is handed")
	}
	if o.has("no-preserve-root") {
		c.add(ReasonSystem, 0.8, "deletes without the guard for /")
	}
	for _, a := range o.rest {
		c.s.writeTarget(a, "deletes", c.excerpt())
	}
}

// writeValueOpts are the options that take a value, per command that writes its operands.
var writeValueOpts = map[string]string{"truncate": "sr", "mkdir": "m", "touch": "rdt", "mv": "tS", "mkfifo": "m", "cp": "tS", "ln": "tS", "install": "tmogS"}

// writeAllCmd writes (or, for mv, moves away) every operand.
func writeAllCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], true, writeValueOpts[c.name], "target-directory", "suffix", "reference", "size", "mode")
	verb := "writes"
	if c.name == "mv" {
		verb = "moves"
	}
	if t, ok := o.get("t", "target-directory"); ok {
		c.s.writeTarget(t, verb, c.excerpt())
	}
	for _, a := range o.rest {
		c.s.writeTarget(a, verb, c.excerpt())
	}
}

// writeLastCmd writes its last operand (cp SRC... DST), or -t DIR.
func writeLastCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], true, writeValueOpts[c.name], "target-directory", "suffix", "mode", "owner", "group")
	switch t, ok := o.get("t", "target-directory"); {
	case ok:
		c.s.writeTarget(t, "writes", c.excerpt())
	case c.name == "install" && o.has("d", "directory"):
		for _, a := range o.rest {
			c.s.writeTarget(a, "writes", c.excerpt())
		}
	case len(o.rest) >= 2:
		c.s.writeTarget(o.rest[len(o.rest)-1], "writes", c.excerpt())
	}
}

// permsCmd is chmod, chown and their kin: the first operand is a mode or owner.
func permsCmd(c *cmdCtx) {
	var flags, operands []shArg
	for _, a := range c.argv[1:] {
		// chmod -x FILE: a mode may look like an option; only these letters are options.
		if a.static && len(a.lit) > 1 && a.lit[0] == '-' && (strings.HasPrefix(a.lit, "--") || strings.Trim(a.lit[1:], "RvfchHLP") == "") {
			flags = append(flags, a)
		} else {
			operands = append(operands, a)
		}
	}
	o := readOpts(flags, true, "")
	if o.has("R", "recursive") {
		c.add(ReasonRecursive, 0.3, "changes permissions recursively")
	}
	if !o.has("reference") && len(operands) > 0 {
		mode := operands[0]
		operands = operands[1:]
		if c.name == "chmod" && setuidMode(mode.lit) {
			c.add(ReasonPrivilege, 0.8, "sets a setuid or setgid bit")
		}
	}
	for _, a := range operands {
		if c.s.place(a) == placeInside {
			c.add(ReasonPermissions, 0.2, "changes file permissions")
			continue
		}
		c.s.writeTarget(a, "changes permissions of", c.excerpt())
	}
}

// setuidMode reports whether a chmod mode sets the setuid or setgid bit (u+s, 4755).
func setuidMode(m string) bool {
	if len(m) == 4 && strings.Trim(m, "01234567") == "" {
		return m[0] == '2' || m[0] >= '4'
	}
	for _, clause := range strings.Split(m, ",") {
		if i := strings.IndexAny(clause, "+="); i >= 0 && strings.Contains(clause[i:], "s") {
			return true
		}
	}
	return false
}

// gitNetworkSubs reach a remote.
var gitNetworkSubs = map[string]bool{"clone": true, "fetch": true, "pull": true, "push": true, "ls-remote": true, "send-email": true, "request-pull": true}

// gitRunsCommands are git settings whose value is a command git runs.
var gitRunsCommands = []string{"core.sshcommand", "core.fsmonitor", "core.hookspath", "core.pager", "core.editor", "core.gitproxy", "protocol.ext.allow", "credential.helper", "diff.external", "uploadpack.packobjectshook"}

func gitCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], false, "Cc", "git-dir", "work-tree", "namespace", "exec-path", "config-env", "super-prefix", "list-cmds")
	for _, a := range c.argv[1:] {
		if !a.static {
			continue
		}
		key, val, _ := strings.Cut(strings.ToLower(a.lit), "=")
		if contains(gitRunsCommands, key) || strings.HasPrefix(key, "alias.") && strings.HasPrefix(val, "!") {
			c.add(ReasonCode, 0.6, "sets a git option that runs commands")
		}
	}
	if len(o.rest) == 0 {
		return
	}
	sub := o.rest[0].lit
	args := readOpts(o.rest[1:], true, "obu", "origin", "branch", "upload-pack", "depth", "reference", "separate-git-dir", "jobs", "config")
	switch {
	case gitNetworkSubs[sub]:
		c.add(ReasonNetwork, 0.5, "reaches the network")
		if sub == "clone" && len(args.rest) >= 2 {
			c.s.writeTarget(args.rest[1], "writes", c.excerpt())
		}
	case sub == "submodule" || sub == "remote" || sub == "lfs":
		if len(args.rest) > 0 && contains([]string{"update", "add", "sync", "fetch", "pull", "push", "prune"}, args.rest[0].lit) {
			c.add(ReasonNetwork, 0.5, "reaches the network")
		}
		if sub == "submodule" && len(args.rest) > 1 && args.rest[0].lit == "foreach" {
			c.s.shellCode(c, args.rest[1])
		}
	case sub == "clean" && !args.has("n", "dry-run"):
		c.add(ReasonDelete, 0.45, "deletes untracked files")
		if args.has("d") {
			c.add(ReasonRecursive, 0.3, "deletes untracked directories")
		}
	case sub == "reset" && args.has("hard"):
		c.add(ReasonDelete, 0.5, "discards uncommitted changes")
	case sub == "config" && args.has("global", "system") &&
		!args.has("get", "get-all", "get-regexp", "list", "l", "get-urlmatch", "show-origin") &&
		(len(args.rest) >= 2 || args.has("unset", "unset-all", "add", "replace-all", "edit", "e", "remove-section", "rename-section")):
		c.add(ReasonOutside, 0.6, "changes configuration outside the workspace")
	}
}

// findCmd judges -delete and the commands of -exec, run once per file found.
func findCmd(c *cmdCtx) {
	args := c.argv[1:]
	var starts []shArg
	i := 0
	for ; i < len(args) && args[i].static && !strings.HasPrefix(args[i].lit, "-") && args[i].lit != "(" && args[i].lit != "!"; i++ {
		starts = append(starts, args[i])
	}
	for ; i < len(args); i++ {
		switch args[i].lit {
		case "-delete":
			c.add(ReasonDelete, 0.45, "deletes what it finds")
			c.add(ReasonRecursive, 0.3, "deletes recursively")
			for _, st := range starts {
				c.s.writeTarget(st, "deletes in", c.excerpt())
			}
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && !(args[j].static && (args[j].lit == ";" || args[j].lit == "+")) {
				j++
			}
			if j > i+1 {
				c.s.call(c.u, args[i+1:j], shInput{}, true)
			}
			i = j
		case "-fprint", "-fprint0", "-fls", "-fprintf":
			if i+1 < len(args) {
				c.s.writeTarget(args[i+1], "writes", c.excerpt())
				i++
			}
		}
	}
}

// sedCmd judges sed -i: it rewrites its file operands.
func sedCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], true, "efl", "expression", "file", "line-length")
	inPlace := o.has("i", "in-place")
	for k := range o.set {
		inPlace = inPlace || strings.HasPrefix(k, "in-place")
	}
	if !inPlace {
		return
	}
	files := o.rest
	if !o.has("e", "f", "expression", "file") && len(files) > 0 {
		files = files[1:] // the script
	}
	for _, f := range files {
		c.s.writeTarget(f, "rewrites", c.excerpt())
	}
}

// tarCmd judges where tar extracts or writes its archive.
func tarCmd(c *cmdCtx) {
	args := c.argv[1:]
	if len(args) > 0 && args[0].static && !strings.HasPrefix(args[0].lit, "-") {
		first := args[0]
		first.lit = "-" + first.lit // the old style: tar xzf FILE
		args = append([]shArg{first}, args[1:]...)
	}
	o := readOpts(args, true, "fCbKNTXgLVHI", "file", "directory", "exclude", "files-from", "exclude-from", "transform", "use-compress-program")
	if dir, ok := o.get("C", "directory"); ok {
		c.s.writeTarget(dir, "extracts into", c.excerpt())
	}
	if f, ok := o.get("f", "file"); ok && o.has("c", "create", "r", "append", "u", "update") {
		c.s.writeTarget(f, "writes", c.excerpt())
	}
	if o.has("P", "absolute-names") && o.has("x", "extract", "get") {
		c.add(ReasonOutside, 0.6, "extracts absolute paths")
	}
}

func unzipCmd(c *cmdCtx) {
	o := readOpts(c.argv[1:], true, "dx")
	if d, ok := o.get("d"); ok {
		c.s.writeTarget(d, "extracts into", c.excerpt())
	}
}

// ddCmd judges dd's output file (of=).
func ddCmd(c *cmdCtx) {
	for _, a := range c.argv[1:] {
		if v, ok := strings.CutPrefix(a.path, "of="); ok {
			t := a
			t.lit, t.path = strings.TrimPrefix(a.lit, "of="), v
			c.s.writeTarget(t, "writes", c.excerpt())
		}
	}
}

// cdCmd follows the current directory, so that later relative paths resolve.
func cdCmd(c *cmdCtx) {
	s := c.s
	o := readOpts(c.argv[1:], false, "")
	if c.name == "popd" {
		if n := len(s.dirs); n > 0 {
			s.cwd, s.dirs = s.dirs[n-1], s.dirs[:n-1]
		} else {
			s.cwd = ""
		}
		return
	}
	if c.name == "pushd" {
		s.dirs = append(s.dirs, s.cwd)
	}
	if len(o.rest) == 0 || s.cwd == "" {
		s.cwd = "" // home, or already somewhere unknown
		return
	}
	d := o.rest[0]
	if !d.static || d.lit == "-" || strings.HasPrefix(d.lit, "/") || strings.HasPrefix(d.lit, "~") {
		s.cwd = ""
		return
	}
	if j := path.Join(s.cwd, d.lit); j != ".." && !strings.HasPrefix(j, "../") {
		s.cwd = j
	} else {
		s.cwd = ""
	}
}

func printenvCmd(c *cmdCtx) {
	if len(c.argv) == 1 {
		c.add(ReasonSecrets, 0.5, "prints the environment, which may hold secrets")
	}
	for _, a := range c.argv[1:] {
		if secretEnvName(a.lit) {
			c.add(ReasonSecrets, 0.7, "prints a secret from the environment")
		}
	}
}

// makeCmd flags install targets, which copy into system directories.
func makeCmd(c *cmdCtx) {
	for _, a := range c.argv[1:] {
		if a.lit == "install" || a.lit == "uninstall" || c.name == "cmake" && a.lit == "--install" {
			c.add(ReasonOutside, 0.6, "installs outside the workspace")
			return
		}
	}
}

func killCmd(c *cmdCtx) {
	if c.name != "kill" {
		c.add(ReasonProcesses, 0.5, "signals processes by name")
		return
	}
	c.add(ReasonProcesses, 0.3, "signals a process")
	args := c.argv[1:]
	for i, a := range args {
		if a.lit == "-1" && i > 0 || a.lit == "1" && (i == 0 || args[i-1].lit != "-s" && args[i-1].lit != "-n") {
			c.add(ReasonSystem, 0.8, "signals every process, or init")
		}
	}
}
