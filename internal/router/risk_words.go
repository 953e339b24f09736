package router

import (
	"path"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// This file reads shell words: their values when they are known before run time, what
// they name as paths, and a command's options.

// unknownPart stands, in a path view, for a part not known until run time.
const unknownPart = "\x00"

// shArg is one word of a command.
type shArg struct {
	w      *syntax.Word
	lit    string // the value when static (a leading ~ is kept, not expanded)
	static bool   // no expansion: lit is what the command gets
	path   string // the word as a path: $HOME as ~, any other expansion as unknownPart
}

func argvOf(words []*syntax.Word) []shArg {
	argv := make([]shArg, len(words))
	for i, w := range words {
		argv[i] = wordArg(w)
	}
	return argv
}

// wordArg resolves what can be resolved of a word without running anything.
func wordArg(w *syntax.Word) shArg {
	a := shArg{w: w, static: true}
	if w == nil {
		return a
	}
	var lit, p strings.Builder
	dynamic := func(part syntax.WordPart) {
		a.static = false
		if pe, ok := part.(*syntax.ParamExp); ok && p.Len() == 0 && pe.Param != nil && pe.Param.Value == "HOME" && !pe.Length && !pe.Excl {
			p.WriteString("~")
			return
		}
		p.WriteString(unknownPart)
	}
	for _, part := range w.Parts {
		switch part := part.(type) {
		case *syntax.Lit:
			v := unescapeBare(part.Value)
			lit.WriteString(v)
			p.WriteString(v)
		case *syntax.SglQuoted:
			if part.Dollar && strings.Contains(part.Value, `\`) {
				dynamic(part)
				continue
			}
			lit.WriteString(part.Value)
			p.WriteString(part.Value)
		case *syntax.DblQuoted:
			for _, q := range part.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					v := unescapeDouble(l.Value)
					lit.WriteString(v)
					p.WriteString(v)
				} else {
					dynamic(q)
				}
			}
		default:
			dynamic(part)
		}
	}
	a.lit, a.path = lit.String(), p.String()
	return a
}

// unescapeBare removes the backslashes of an unquoted literal.
func unescapeBare(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
			if v[i] == '\n' {
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// unescapeDouble removes the backslashes that mean something inside double quotes.
func unescapeDouble(v string) string {
	if !strings.Contains(v, `\`) {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) && strings.IndexByte("$`\"\\\n", v[i+1]) >= 0 {
			i++
			if v[i] == '\n' {
				continue
			}
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// rawNode is a node's text as written.
func rawNode(u *shText, n syntax.Node) string {
	if n == nil || !n.Pos().IsValid() || !n.End().IsValid() {
		return ""
	}
	start, end := int(n.Pos().Offset()), int(n.End().Offset())
	if start < 0 || end > len(u.src) || start > end {
		return ""
	}
	return u.src[start:end]
}

func rawWord(u *shText, w *syntax.Word) string {
	if w == nil || len(w.Parts) == 0 {
		return ""
	}
	return rawNode(u, w)
}

// codeText is the shell text a word hands to a shell (sh -c WORD, eval WORD): its value
// with one level of quoting removed, expansions left as written so that the inner parse
// sees them as expansions (a command name made of one is then dynamic).
func codeText(u *shText, a shArg) string {
	if a.static {
		return a.lit
	}
	var b strings.Builder
	for _, part := range a.w.Parts {
		switch part := part.(type) {
		case *syntax.Lit:
			b.WriteString(unescapeBare(part.Value))
		case *syntax.SglQuoted:
			if part.Dollar {
				b.WriteString(rawNode(u, part))
			} else {
				b.WriteString(part.Value)
			}
		case *syntax.DblQuoted:
			for _, q := range part.Parts {
				if l, ok := q.(*syntax.Lit); ok {
					b.WriteString(unescapeDouble(l.Value))
				} else {
					b.WriteString(rawNode(u, q))
				}
			}
		default:
			b.WriteString(rawNode(u, part))
		}
	}
	return b.String()
}

// pathPlace is where a path lies relative to the workspace.
type pathPlace int

const (
	placeInside  pathPlace = iota
	placeSink              // /dev/null, /dev/stdout and the like
	placeNet               // bash's /dev/tcp and /dev/udp
	placeOutside           // elsewhere: home, /tmp, another project
	placeSystem            // the system's own directories, or /
	placeDevice            // a raw disk or memory device
	placeUnknown           // not known until run time
)

// place says where a path word lies. Relative paths are resolved against the directory
// the command line has moved to (cd); once that may be outside, so are they.
func (s *riskScorer) place(a shArg) pathPlace {
	p := a.path
	switch {
	case p == "":
		return placeInside
	case strings.HasPrefix(p, "~"):
		return placeOutside
	case strings.HasPrefix(p, "/"):
		return absPlace(path.Clean(p))
	case strings.HasPrefix(p, unknownPart):
		return placeUnknown
	case s.cwd == "":
		return placeOutside
	}
	if j := path.Join(s.cwd, p); j == ".." || strings.HasPrefix(j, "../") {
		return placeOutside
	}
	if strings.Contains(p, unknownPart) {
		return placeUnknown
	}
	return placeInside
}

var sinks = map[string]bool{
	"/dev/null": true, "/dev/zero": true, "/dev/full": true, "/dev/stdin": true, "/dev/stdout": true,
	"/dev/stderr": true, "/dev/tty": true, "/dev/random": true, "/dev/urandom": true,
}

var devicePrefixes = []string{"sd", "hd", "vd", "xvd", "nvme", "mmcblk", "loop", "dm-", "md", "sr", "nbd", "mem", "kmem", "port", "disk/", "mapper/", "rdisk", "disk"}

var systemDirs = map[string]bool{
	"etc": true, "usr": true, "bin": true, "sbin": true, "lib": true, "lib32": true, "lib64": true,
	"libx32": true, "boot": true, "sys": true, "proc": true, "opt": true, "root": true, "var": true,
	"srv": true, "snap": true, "System": true, "Library": true, "Applications": true,
}

func absPlace(c string) pathPlace {
	switch {
	case sinks[c] || within(c, "/dev/fd") || within(c, "/proc/self/fd") || within(c, "/dev/pts"):
		return placeSink
	case within(c, "/dev/tcp") || within(c, "/dev/udp"):
		return placeNet
	case strings.HasPrefix(c, "/dev/"):
		for _, d := range devicePrefixes {
			if strings.HasPrefix(c[len("/dev/"):], d) {
				return placeDevice
			}
		}
		return placeOutside
	case c == "/":
		return placeSystem
	case within(c, "/var/tmp"):
		return placeOutside
	}
	first, _, _ := strings.Cut(c[1:], "/")
	if systemDirs[first] {
		return placeSystem
	}
	return placeOutside
}

// within reports whether the clean path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// secretPath reports whether a path names credentials: SSH and GnuPG keys, cloud and
// cluster credentials, package-registry tokens, .env files, the shadow password file.
func secretPath(p string) bool {
	if p == "" {
		return false
	}
	comps := strings.Split(path.Clean(p), "/")
	for i, comp := range comps {
		switch comp {
		case ".ssh", ".aws", ".gnupg", ".kube", ".docker", ".azure", ".password-store", ".vault-token",
			".netrc", ".git-credentials", ".pgpass", ".npmrc", ".pypirc", ".my.cnf", ".boto", ".s3cfg":
			return true
		case ".config":
			if i+1 < len(comps) && secretConfigDirs[comps[i+1]] {
				return true
			}
		case "shadow", "gshadow", "sudoers", "master.passwd":
			if i == 2 && comps[0] == "" && comps[1] == "etc" {
				return true
			}
		case "environ":
			if i >= 2 && comps[0] == "" && comps[1] == "proc" {
				return true
			}
		}
	}
	base := comps[len(comps)-1]
	if base == ".env" || base == ".envrc" {
		return true
	}
	if rest, ok := strings.CutPrefix(base, ".env."); ok {
		switch rest {
		case "example", "sample", "template", "dist", "defaults":
			return false
		}
		return true
	}
	for _, k := range []string{"id_rsa", "id_dsa", "id_ecdsa", "id_ed25519"} {
		if strings.HasPrefix(base, k) && !strings.HasSuffix(base, ".pub") {
			return true
		}
	}
	switch path.Ext(base) {
	case ".key", ".p12", ".pfx", ".keystore", ".jks":
		return true
	}
	return false
}

var secretConfigDirs = map[string]bool{"gcloud": true, "gh": true, "hub": true, "doctl": true, "op": true, "rclone": true}

// secretEnvName reports whether a variable's name says it holds a secret.
func secretEnvName(name string) bool {
	up := strings.ToUpper(name)
	for _, k := range []string{"TOKEN", "SECRET", "PASSWORD", "PASSWD", "API_KEY", "APIKEY", "PRIVATE_KEY", "ACCESS_KEY", "CREDENTIAL"} {
		if strings.Contains(up, k) {
			return true
		}
	}
	return false
}

// cmdOpts is a command's options and operands.
type cmdOpts struct {
	set  map[string]shArg // a short letter or a long name (no dashes) → its value, if any
	rest []shArg          // the operands, in order
}

func (o cmdOpts) has(names ...string) bool {
	for _, n := range names {
		if _, ok := o.set[n]; ok {
			return true
		}
	}
	return false
}

func (o cmdOpts) get(names ...string) (shArg, bool) {
	for _, n := range names {
		if a, ok := o.set[n]; ok {
			return a, true
		}
	}
	return shArg{}, false
}

// readOpts reads getopt-style options from args (argv without argv[0]). short lists the
// short options that take a value, long the long ones. With permute (as GNU tools do),
// options may follow operands; without it (wrappers such as sudo and env), the first
// operand ends the options and everything from it on is an operand. "--" always ends them.
func readOpts(args []shArg, permute bool, short string, long ...string) cmdOpts {
	o := cmdOpts{set: map[string]shArg{}}
	for i := 0; i < len(args); i++ {
		a := args[i]
		v := a.lit
		if !a.static || len(v) < 2 || v[0] != '-' {
			if !permute {
				o.rest = append(o.rest, args[i:]...)
				return o
			}
			o.rest = append(o.rest, a)
			continue
		}
		if v == "--" {
			o.rest = append(o.rest, args[i+1:]...)
			return o
		}
		if name, ok := strings.CutPrefix(v, "--"); ok {
			name, val, eq := strings.Cut(name, "=")
			switch {
			case eq:
				o.set[name] = shArg{w: a.w, lit: val, static: true, path: val}
			case contains(long, name) && i+1 < len(args):
				i++
				o.set[name] = args[i]
			default:
				o.set[name] = shArg{w: a.w, static: true}
			}
			continue
		}
		for j := 1; j < len(v); j++ {
			ch := v[j : j+1]
			if !strings.Contains(short, ch) {
				o.set[ch] = shArg{w: a.w, static: true}
				continue
			}
			switch {
			case j+1 < len(v):
				o.set[ch] = shArg{w: a.w, lit: v[j+1:], static: true, path: v[j+1:]}
			case i+1 < len(args):
				i++
				o.set[ch] = args[i]
			default:
				o.set[ch] = shArg{w: a.w, static: true}
			}
			break
		}
	}
	return o
}

func contains(list []string, s string) bool {
	for _, l := range list {
		if l == s {
			return true
		}
	}
	return false
}

// literals are the static values of args; a dynamic word shows as its raw text.
func literals(u *shText, args []shArg) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a.static {
			out[i] = a.lit
		} else {
			out[i] = rawWord(u, a.w)
		}
	}
	return out
}
