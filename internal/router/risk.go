package router

import (
	"fmt"
	"math"
	"sort"
	"strings"

	"mvdan.cc/sh/v3/syntax"
)

// Limits on the work one Score does. The command text is hostile: past any of them the
// command is not scored but held to be high risk.
const (
	// MaxCommandBytes is the longest command text Score reads.
	MaxCommandBytes = 64 << 10
	// maxNesting is how deep shell text inside shell text (sh -c, eval, here-documents
	// fed to a shell) is followed.
	maxNesting = 8
	// maxParsedBytes caps all the text parsed for one command, nested text included.
	maxParsedBytes = 4 * MaxCommandBytes
	// maxNodes caps the syntax nodes visited, and maxCalls the simple commands judged.
	maxNodes = 200_000
	maxCalls = 10_000
	// maxBrackets caps how deeply brackets may nest: the parser's time grows faster than
	// the text on deep nesting, and no real command nests this deep.
	maxBrackets = 200
	// maxWrapHops caps wrappers peeled off one command (sudo env nice timeout ... cmd).
	maxWrapHops = 32
	// maxReasons caps the reasons an Assessment lists; the score counts them all.
	maxReasons = 16
)

// Reason codes: what kind of operation raised the score.
const (
	ReasonUnscorable   = "unscorable"     // the text could not be parsed or scored
	ReasonDynamic      = "dynamic"        // a command or code not known until run time
	ReasonDownloadExec = "download-exec"  // a download piped or fed into an interpreter
	ReasonDevice       = "device"         // writes a raw disk or memory device
	ReasonPrivilege    = "privilege"      // sudo, su, doas, setuid bits
	ReasonSystem       = "system"         // packages, services, mounts, system paths, users
	ReasonSecrets      = "secrets"        // reads or writes credentials
	ReasonOutside      = "outside-write"  // writes outside the workspace
	ReasonCode         = "code"           // runs code that cannot be judged (inline, from input)
	ReasonInstall      = "install"        // installs packages or runs downloaded ones
	ReasonNetwork      = "network"        // reaches the network
	ReasonDelete       = "delete"         // deletes files or discards changes
	ReasonRecursive    = "recursive"      // acts on a whole tree or on every input line
	ReasonUnknownPath  = "unknown-target" // acts on a path not known until run time
	ReasonProcesses    = "processes"      // signals other processes
	ReasonPermissions  = "permissions"    // changes permissions inside the workspace
	ReasonResources    = "resources"      // exhausts the machine (a fork bomb)
	ReasonMore         = "more"           // the last reason when more were found than listed
)

// Reason is one thing the scorer found in a command.
type Reason struct {
	Code string `json:"code"`
	Text string `json:"text"`
}

// Assessment is a command's risk: Score in [0, 1] and the reasons for it, strongest
// first. A command with no reasons scores 0.
type Assessment struct {
	Score   float64  `json:"score"`
	Reasons []Reason `json:"reasons"`
}

// Score judges what a shell command line does: whether it deletes files, changes the
// system, reaches the network, acts recursively, escalates privileges, writes outside
// the workspace (the current directory), reads secrets or runs code that cannot be
// judged. It parses the text as bash and follows pipelines, lists, subshells, command and
// process substitution, sh -c and eval text, here-documents fed to a shell, and wrappers
// such as sudo, env, timeout, xargs and find -exec. Each finding has a weight; the score
// is 1 - Π(1 - w) over the strongest finding of each kind. Text that cannot be parsed, is
// too long or too deep, or names its command at run time ($X args) scores 1.
func Score(command string) (a Assessment) {
	s := &riskScorer{cwd: ".", worst: map[string]float64{}}
	defer func() {
		if r := recover(); r != nil {
			a = Assessment{Score: 1, Reasons: []Reason{{ReasonUnscorable, "the scorer failed on this command, so it is held to be high risk"}}}
		}
	}()
	if len(command) > MaxCommandBytes {
		s.add(ReasonUnscorable, 1, fmt.Sprintf("the command is %d bytes long; commands over %d bytes are not scored", len(command), MaxCommandBytes))
	} else {
		s.text(command, 0)
	}
	return s.assessment()
}

// riskScorer is the state of one Score call.
type riskScorer struct {
	worst   map[string]float64 // the strongest weight seen per reason code
	found   []weightedReason
	seen    map[Reason]bool
	cwd     string   // the current directory relative to the workspace; "" once it may be outside
	dirs    []string // the pushd stack
	parsed  int      // bytes parsed so far
	nodes   int
	calls   int
	stopped bool // a limit was hit: stop looking, the score is 1 already
}

type weightedReason struct {
	Reason
	weight float64
}

// shText is one parsed piece of shell text: the source (positions index it) and how
// deep in nested text it sits.
type shText struct {
	src   string
	depth int
}

// add records a finding.
func (s *riskScorer) add(code string, weight float64, text string) {
	if weight > s.worst[code] {
		s.worst[code] = weight
	}
	r := Reason{code, text}
	if s.seen == nil {
		s.seen = map[Reason]bool{}
	}
	if s.seen[r] {
		return
	}
	s.seen[r] = true
	s.found = append(s.found, weightedReason{r, weight})
}

// stop records that a limit was hit and ends the walk.
func (s *riskScorer) stop(text string) {
	s.add(ReasonUnscorable, 1, text)
	s.stopped = true
}

func (s *riskScorer) assessment() Assessment {
	keep := 1.0
	for _, w := range s.worst {
		keep *= 1 - math.Min(math.Max(w, 0), 1)
	}
	a := Assessment{Score: math.Round((1-keep)*1000) / 1000, Reasons: []Reason{}}
	sort.SliceStable(s.found, func(i, j int) bool { return s.found[i].weight > s.found[j].weight })
	for i, f := range s.found {
		if i == maxReasons {
			a.Reasons = append(a.Reasons, Reason{ReasonMore, fmt.Sprintf("and %d more", len(s.found)-maxReasons)})
			break
		}
		a.Reasons = append(a.Reasons, f.Reason)
	}
	return a
}

// text parses src as shell text depth levels deep and judges all of it.
func (s *riskScorer) text(src string, depth int) {
	if s.stopped {
		return
	}
	if depth > maxNesting {
		s.stop(fmt.Sprintf("shell text is nested more than %d levels deep", maxNesting))
		return
	}
	if s.parsed += len(src); s.parsed > maxParsedBytes {
		s.stop(fmt.Sprintf("the command holds more than %d bytes of nested shell text", maxParsedBytes))
		return
	}
	if bracketDepth(src) > maxBrackets {
		s.stop(fmt.Sprintf("brackets nest more than %d levels deep", maxBrackets))
		return
	}
	f, err := syntax.NewParser(syntax.Variant(syntax.LangBash)).Parse(strings.NewReader(src), "")
	if err != nil {
		what := "the command"
		if depth > 0 {
			what = "nested shell text"
		}
		s.add(ReasonUnscorable, 1, fmt.Sprintf("%s cannot be parsed (%v), so it is held to be high risk", what, err))
		return
	}
	s.walk(&shText{src: src, depth: depth}, f)
}

// bracketDepth is how deeply (, { and [ nest in src, quotes not considered: a bound on
// the parser's work, not a judgement of the command.
func bracketDepth(src string) int {
	depth, deepest := 0, 0
	for i := 0; i < len(src); i++ {
		switch src[i] {
		case '(', '{', '[':
			if depth++; depth > deepest {
				deepest = depth
			}
		case ')', '}', ']':
			depth = max(depth-1, 0)
		}
	}
	return deepest
}

// shInput is where a simple command's standard input comes from, as far as it matters:
// a shell or interpreter reading its program from there.
type shInput struct {
	piped    bool         // from a pipe
	download bool         // an earlier stage of the pipeline downloads something
	hdoc     *syntax.Word // a here-document or here-string
	herestr  bool         // hdoc is a here-string (<<<), not a here-document
	file     *syntax.Word // a < redirection
}

// inspect walks node like syntax.Walk, counting every visit against the node budget.
func (s *riskScorer) inspect(node syntax.Node, f func(syntax.Node) bool) {
	syntax.Walk(node, func(n syntax.Node) bool {
		if s.stopped {
			return false
		}
		if s.nodes++; s.nodes > maxNodes {
			s.stop(fmt.Sprintf("judging the command takes more than %d steps", maxNodes))
			return false
		}
		return f(n)
	})
}

// walk visits every node of one parsed text in source order.
func (s *riskScorer) walk(u *shText, node syntax.Node) {
	inputs := map[*syntax.CallExpr]shInput{}
	pipes := map[*syntax.BinaryCmd]bool{}
	s.inspect(node, func(n syntax.Node) bool {
		switch n := n.(type) {
		case *syntax.Stmt:
			s.redirects(u, n, inputs)
		case *syntax.BinaryCmd:
			if (n.Op == syntax.Pipe || n.Op == syntax.PipeAll) && !pipes[n] {
				s.pipeline(u, n, inputs, pipes)
			}
		case *syntax.CallExpr:
			s.assigns(u, n.Assigns)
			if len(n.Args) > 0 {
				s.call(u, argvOf(n.Args), inputs[n], false)
			}
		case *syntax.DeclClause:
			s.assigns(u, n.Args)
		case *syntax.FuncDecl:
			s.funcDecl(n)
		case *syntax.ParamExp:
			if n.Param != nil && secretEnvName(n.Param.Value) {
				s.add(ReasonSecrets, 0.7, "reads a secret from the environment: $"+n.Param.Value)
			}
		}
		return true
	})
}

// assigns judges variable assignments (prefixes such as FOO=1 cmd, and export/declare).
func (s *riskScorer) assigns(u *shText, as []*syntax.Assign) {
	for _, a := range as {
		if a.Name != nil && loaderEnv[a.Name.Value] {
			s.add(ReasonCode, 0.6, fmt.Sprintf("sets %s, which makes programs load or run other code", a.Name.Value))
		}
	}
}

// loaderEnv are variables that make programs load or run code the command does not show.
var loaderEnv = map[string]bool{
	"LD_PRELOAD": true, "LD_AUDIT": true, "LD_LIBRARY_PATH": true, "DYLD_INSERT_LIBRARIES": true,
	"DYLD_LIBRARY_PATH": true, "BASH_ENV": true, "ENV": true, "PROMPT_COMMAND": true,
	"NODE_OPTIONS": true, "PERL5OPT": true, "RUBYOPT": true, "PYTHONSTARTUP": true,
	"GIT_SSH_COMMAND": true, "GIT_EXTERNAL_DIFF": true,
}

// funcDecl flags a function that calls itself: the shape of a fork bomb.
func (s *riskScorer) funcDecl(fd *syntax.FuncDecl) {
	names := fd.Names
	if fd.Name != nil {
		names = append(names, fd.Name)
	}
	for _, name := range names {
		s.inspect(fd.Body, func(n syntax.Node) bool {
			if c, ok := n.(*syntax.CallExpr); ok && len(c.Args) > 0 && c.Args[0].Lit() == name.Value {
				s.add(ReasonResources, 0.8, "defines a function that calls itself ("+name.Value+"), the shape of a fork bomb")
				return false
			}
			return true
		})
	}
}

// call judges one simple command, given as its words, peeling wrappers such as sudo,
// env and timeout off until the command they run. many says the command runs once per
// input item (under xargs or find -exec).
func (s *riskScorer) call(u *shText, argv []shArg, in shInput, many bool) {
	if s.calls++; s.calls > maxCalls {
		s.stop(fmt.Sprintf("the command runs more than %d simple commands", maxCalls))
		return
	}
	for hops := 0; len(argv) > 0; hops++ {
		if hops == maxWrapHops {
			s.stop(fmt.Sprintf("more than %d wrapper commands around one command", maxWrapHops))
			return
		}
		c := &cmdCtx{s: s, u: u, argv: argv, in: in, many: many}
		if !argv[0].static || argv[0].lit == "" || argv[0].lit != "[" && strings.ContainsAny(argv[0].lit, "*?[") {
			s.add(ReasonDynamic, 1, "the command name is not known until run time: "+c.excerpt())
			return
		}
		c.name = commandName(argv[0].lit)
		uw, ok := unwrap(c.name, argv)
		if !ok {
			s.secretArgs(c)
			if h := handlers[c.name]; h != nil {
				h(c)
			}
			return
		}
		s.wrapped(c, uw)
		argv, many = uw.inner, many || uw.many
	}
}

// commandName is the name a command is looked up by: the last element of a path, with
// a version suffix dropped (python3.12 is python3, pip3.12 is pip3) and mkfs.ext4 as mkfs.
func commandName(lit string) string {
	if i := strings.LastIndexByte(lit, '/'); i >= 0 && i < len(lit)-1 {
		lit = lit[i+1:]
	}
	if base, _, ok := strings.Cut(lit, "."); ok && base != "" {
		switch {
		case base == "mkfs" || base == "fsck":
			return base
		case strings.HasPrefix(base, "python") || strings.HasPrefix(base, "pip") || strings.HasPrefix(base, "pypy"):
			if strings.Trim(lit[len(base):], ".0123456789") == "" {
				return base
			}
		}
	}
	return lit
}

// cmdCtx is one simple command being judged.
type cmdCtx struct {
	s    *riskScorer
	u    *shText
	name string  // argv[0] as looked up
	argv []shArg // the words, argv[0] included
	in   shInput // where its input comes from
	many bool    // runs once per input item
	ex   string  // the excerpt, once made
}

// add records a finding about this command; the text ends with the command itself.
func (c *cmdCtx) add(code string, weight float64, what string) {
	c.s.add(code, weight, what+": "+c.excerpt())
}

// excerpt is the command as written, whitespace collapsed, cut to 80 bytes.
func (c *cmdCtx) excerpt() string {
	if c.ex == "" {
		var b strings.Builder
		for _, a := range c.argv {
			if b.Len() > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(head(rawWord(c.u, a.w)))
			if b.Len() > 160 {
				break
			}
		}
		c.ex = shorten(b.String())
	}
	return c.ex
}

// head is the first 160 bytes of s: enough for an excerpt, and cheap on hostile input.
func head(s string) string {
	if len(s) > 160 {
		return s[:160]
	}
	return s
}

// excerptWord is one word as written, for a reason's text.
func excerptWord(u *shText, w *syntax.Word) string { return shorten(head(rawWord(u, w))) }

func shorten(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 80 {
		cut := 77
		for cut > 0 && s[cut]&0xC0 == 0x80 { // do not split a UTF-8 sequence
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
