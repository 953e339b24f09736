package router

import "strings"

// This file judges package managers: installing, removing or fetching packages reaches
// the network and runs the packages' own install scripts; system package managers
// change the system.

// What a package manager's subcommand does.
const (
	pkgInstall = iota + 1 // installs, removes or fetches packages
	pkgRun                // downloads a package and runs it
	pkgNetwork            // only reaches the network (publish)
)

// packageSubs map a language package manager to what its subcommands do.
var packageSubs = map[string]map[string]int{
	"pip":        subs(pkgInstall, "install", "download", "uninstall", "wheel"),
	"pip3":       subs(pkgInstall, "install", "download", "uninstall", "wheel"),
	"pipx":       with(subs(pkgInstall, "install", "upgrade", "upgrade-all", "inject", "reinstall", "reinstall-all", "runpip"), pkgRun, "run"),
	"npm":        with(with(subs(pkgInstall, "install", "i", "in", "ins", "inst", "insta", "instal", "isnt", "isnta", "isntal", "add", "ci", "update", "up", "upgrade", "udpate"), pkgRun, "exec", "x", "create"), pkgNetwork, "publish", "audit", "login", "adduser"),
	"pnpm":       with(with(subs(pkgInstall, "install", "i", "add", "update", "up", "upgrade"), pkgRun, "dlx", "create", "exec"), pkgNetwork, "publish", "audit"),
	"yarn":       with(with(subs(pkgInstall, "install", "add", "upgrade", "up", "upgrade-interactive"), pkgRun, "dlx", "create"), pkgNetwork, "publish", "npm", "audit"),
	"gem":        with(subs(pkgInstall, "install", "update", "uninstall", "fetch"), pkgNetwork, "push"),
	"bundle":     subs(pkgInstall, "install", "update", "add"),
	"bundler":    subs(pkgInstall, "install", "update", "add"),
	"cargo":      with(subs(pkgInstall, "install", "add", "update", "fetch"), pkgNetwork, "publish", "login"),
	"composer":   subs(pkgInstall, "install", "require", "update", "create-project", "global"),
	"conda":      subs(pkgInstall, "install", "create", "update", "upgrade", "remove", "env"),
	"mamba":      subs(pkgInstall, "install", "create", "update", "upgrade", "remove", "env"),
	"micromamba": subs(pkgInstall, "install", "create", "update", "remove"),
	"poetry":     with(subs(pkgInstall, "add", "install", "update", "lock", "self"), pkgNetwork, "publish"),
	"pdm":        with(subs(pkgInstall, "add", "install", "update", "sync", "lock"), pkgNetwork, "publish"),
	"uv":         subs(pkgInstall, "add", "remove", "sync", "lock", "pip", "tool", "self"),
	"brew":       subs(pkgInstall, "install", "reinstall", "upgrade", "uninstall", "remove", "rm", "tap", "update", "bundle"),
	"dotnet":     subs(pkgInstall, "restore", "add", "tool"),
	"go":         subs(pkgInstall, "get"),
}

// systemPackageSubs map a system package manager to the subcommands that change the system.
var systemPackageSubs = map[string]map[string]int{
	"apt":      subs(pkgInstall, "install", "remove", "purge", "upgrade", "dist-upgrade", "full-upgrade", "autoremove", "update", "build-dep", "reinstall"),
	"apt-get":  subs(pkgInstall, "install", "remove", "purge", "upgrade", "dist-upgrade", "autoremove", "update", "build-dep", "reinstall", "dselect-upgrade"),
	"aptitude": subs(pkgInstall, "install", "remove", "purge", "upgrade", "safe-upgrade", "full-upgrade", "update", "reinstall"),
	"yum":      subs(pkgInstall, "install", "remove", "erase", "update", "upgrade", "downgrade", "reinstall", "groupinstall", "localinstall", "makecache", "autoremove"),
	"dnf":      subs(pkgInstall, "install", "in", "remove", "rm", "erase", "update", "up", "upgrade", "downgrade", "reinstall", "groupinstall", "makecache", "autoremove", "distro-sync"),
	"microdnf": subs(pkgInstall, "install", "remove", "update", "upgrade", "reinstall", "makecache"),
	"tdnf":     subs(pkgInstall, "install", "remove", "erase", "update", "upgrade", "reinstall", "makecache"),
	"zypper":   subs(pkgInstall, "install", "in", "remove", "rm", "update", "up", "dist-upgrade", "dup", "patch", "refresh", "ref"),
	"apk":      subs(pkgInstall, "add", "del", "upgrade", "update", "fix"),
	"snap":     subs(pkgInstall, "install", "remove", "refresh", "revert"),
	"flatpak":  subs(pkgInstall, "install", "uninstall", "update", "remote-add"),
	"port":     subs(pkgInstall, "install", "uninstall", "upgrade", "selfupdate"),
	"pkg":      subs(pkgInstall, "install", "add", "delete", "remove", "upgrade", "update"),
}

func subs(kind int, names ...string) map[string]int {
	return with(map[string]int{}, kind, names...)
}

func with(m map[string]int, kind int, names ...string) map[string]int {
	for _, n := range names {
		m[n] = kind
	}
	return m
}

// packageValueOpts are the global options of package managers whose value is the next word.
var packageValueOpts = []string{"prefix", "cwd", "dir", "registry", "filter", "proxy", "index-url", "cache-dir", "log", "python", "directory", "manifest-path", "config", "workspace", "project", "target", "root"}

// packageCmd judges any package manager.
func packageCmd(c *cmdCtx) {
	switch c.name {
	case "npx", "bunx", "uvx", "pnpx":
		c.add(ReasonInstall, 0.6, "downloads and runs a package")
		return
	case "pacman", "yay", "paru", "dpkg", "rpm":
		if flagPackageChange(c.name, c.argv[1:]) {
			c.add(ReasonSystem, 0.8, "changes system packages")
		}
		return
	}
	o := readOpts(c.argv[1:], false, "C", packageValueOpts...)
	sub := ""
	if len(o.rest) > 0 {
		sub = o.rest[0].lit
	}
	if table, ok := systemPackageSubs[c.name]; ok {
		if table[sub] != 0 {
			c.add(ReasonSystem, 0.8, "changes system packages")
		}
		return
	}
	kind := packageSubs[c.name][sub]
	rest := readOpts(o.rest[min(1, len(o.rest)):], true, "")
	switch {
	case c.name == "yarn" && sub == "":
		kind = pkgInstall // bare yarn installs
	case c.name == "go":
		kind = goSub(sub, rest.rest)
	case c.name == "uv" && sub == "tool" && len(rest.rest) > 0 && rest.rest[0].lit == "run":
		kind = pkgRun
	case c.name == "uv" && sub == "pip" && (len(rest.rest) == 0 || !contains([]string{"install", "sync", "uninstall", "compile"}, rest.rest[0].lit)):
		kind = 0
	}
	switch kind {
	case pkgInstall:
		c.add(ReasonInstall, 0.6, "installs packages")
		if rest.has("g", "global", "user") || strings.HasPrefix(sub, "global") {
			c.add(ReasonOutside, 0.6, "installs outside the workspace")
		}
	case pkgRun:
		c.add(ReasonInstall, 0.6, "downloads and runs a package")
	case pkgNetwork:
		c.add(ReasonNetwork, 0.5, "reaches the network")
	}
}

// goSub is what a go subcommand does: get, install PKG@V, run PKG@V and mod download
// reach the network; the rest build what is there.
func goSub(sub string, operands []shArg) int {
	switch sub {
	case "get":
		return pkgInstall
	case "install", "run":
		for _, a := range operands {
			if strings.Contains(a.lit, "@") {
				return map[string]int{"install": pkgInstall, "run": pkgRun}[sub]
			}
		}
	case "mod":
		if len(operands) > 0 && (operands[0].lit == "download" || operands[0].lit == "tidy") {
			return pkgNetwork
		}
	}
	return 0
}

// flagPackageChange is pacman, dpkg and rpm, whose operation is an option.
func flagPackageChange(name string, args []shArg) bool {
	for _, a := range args {
		v := a.lit
		if !a.static || len(v) < 2 || v[0] != '-' {
			continue
		}
		if long, ok := strings.CutPrefix(v, "--"); ok {
			switch long {
			case "sync", "remove", "upgrade", "database", "install", "purge", "configure", "unpack", "erase", "freshen", "reinstall":
				return true
			}
			continue
		}
		op := v[1:]
		switch name {
		case "dpkg":
			return strings.ContainsAny(op[:1], "irPa")
		case "rpm":
			return strings.ContainsAny(op[:1], "iUFe")
		default: // pacman and its helpers: -S installs unless it only searches or shows
			if strings.ContainsAny(op, "RUD") || strings.Contains(op, "S") && !strings.ContainsAny(op, "silgp") {
				return true
			}
			if strings.Contains(op, "S") || strings.Contains(op, "Q") || strings.Contains(op, "F") {
				return false
			}
		}
	}
	return false
}
