package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"sync"
	"time"
)

// A usage error is printed in at most three lines: what was wrong (a flag named as it is
// typed, --memory, with the closest flag when one is near), the verb's short synopsis,
// and where its whole help is. The help itself is not printed: it would bury the error.

// printUsageError writes err for verb v.
func printUsageError(w io.Writer, v *verb, err error) {
	var uf unknownFlagError
	if errors.As(err, &uf) {
		if hint := habitHint(v.name, uf.name); hint != "" {
			err = fmt.Errorf("%w; %s", unknownFlagError{name: uf.name}, hint) // the hint, not a near miss
		}
	}
	fmt.Fprintf(w, "airlock %s: %v\n", v.name, err)
	fmt.Fprintf(w, "usage: airlock %s; see 'airlock %s --help'\n", shortSynopsis(v), v.name)
}

// shortSynopsis is the verb's synopsis with its optional flags folded into [flags]:
// "exec NAME [flags] -- CMD [ARG...]".
func shortSynopsis(v *verb) string {
	words := []string{v.name}
	folded, depth := false, 0
	for _, w := range strings.Fields(v.synopsis()) {
		switch {
		case depth > 0:
		case strings.HasPrefix(w, "[-"):
		default:
			words = append(words, w)
			continue
		}
		// Inside an optional flag group such as "[--allow HOST[:PORT][/METHODS]]...".
		if !folded {
			words, folded = append(words, "[flags]"), true
		}
		depth += strings.Count(w, "[") - strings.Count(w, "]")
	}
	return strings.Join(words, " ")
}

// flagRefRE finds a flag named with one dash in the flag package's messages:
// "invalid value "x" for flag -memory: ...", "flag needs an argument: -cpu".
var flagRefRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[ :])-([A-Za-z0-9][A-Za-z0-9_-]*)`) })

// dashed names a flag as it is typed: --memory, or -o for a one-letter flag.
func dashed(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}

// flagError rewrites an error of fs.Parse: flags named with two dashes and, for an
// unknown flag, the nearest defined one.
func flagError(fs *flag.FlagSet, err error) error {
	if errors.Is(err, flag.ErrHelp) {
		return err
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return unknownFlagError{name: name, near: nearestFlag(fs, name)}
	}
	if bad, ok := strings.CutSuffix(msg, ": parse error"); ok {
		msg = bad + ": " + parseHint(fs, msg)
	}
	msg = flagRefRE().ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagRefRE().FindStringSubmatch(m)
		if fs.Lookup(sub[2]) == nil {
			return m
		}
		return sub[1] + dashed(sub[2])
	})
	return errors.New(msg)
}

// unknownFlagError is a flag the verb does not have, with the nearest one it has.
type unknownFlagError struct{ name, near string }

func (e unknownFlagError) Error() string {
	msg := "flag provided but not defined: " + dashed(e.name)
	if e.near != "" {
		msg += "; did you mean " + dashed(e.near) + "?"
	}
	return msg
}

// habitHint says what to do instead of a flag that docker or kubectl has and the verb
// does not: "" when there is nothing to say.
func habitHint(verb, flag string) string {
	if f, ok := strings.CutPrefix(flag, "o"); ok && (f == "json" || f == "table" || f == "yaml" || f == "wide") {
		return "write -o json or --output=json (table and json are the formats)"
	}
	switch flag {
	case "it", "ti", "t", "tty", "interactive", "i":
		if verb == "exec" || verb == "run" || verb == "shell" {
			return "for an interactive terminal use 'airlock shell NAME'; --stdin passes piped input to exec"
		}
	case "rm":
		if verb == "run" {
			return "run always terminates its sandbox when the command ends (unless --detach)"
		}
	case "f", "force":
		if verb == "rm" {
			return "rm terminates running sandboxes without it"
		}
	case "p", "publish":
		if verb == "run" || verb == "create" {
			return "expose a port once the sandbox runs: airlock port expose NAME PORT"
		}
	case "v", "volume", "mount":
		if verb == "create" {
			return "attach a volume with --volume NAME:/PATH[:ro] (airlock volume create makes one)"
		}
		if verb == "run" {
			return "attach a volume at create (airlock create NAME --volume VOL:/PATH), copy files in with 'airlock cp', or give run --profile strict --workspace DIR (at /workspace)"
		}
	}
	return ""
}

// badValueRE finds the flag in the flag package's "invalid value "x" for flag -timeout: parse error".
var badValueRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`for flag -([A-Za-z0-9][A-Za-z0-9_-]*):`) })

// parseHint says what a flag's value should look like, in place of "parse error".
func parseHint(fs *flag.FlagSet, msg string) string {
	m := badValueRE().FindStringSubmatch(msg)
	if m == nil {
		return "parse error"
	}
	f := fs.Lookup(m[1])
	if f == nil {
		return "parse error"
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return "parse error"
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration with its unit, such as 30s, 5m or 1h30m"
	case float64:
		return "want a number, such as 0.5 or 2"
	case int, int64, uint, uint64:
		return "want a whole number"
	case bool:
		return "want true or false"
	}
	return "parse error"
}

// PrintFlagError writes an error of parsing the flags of "airlock VERB" (a verb that
// main parses itself, such as serve) the way every verb's usage errors read.
func PrintFlagError(w io.Writer, verbName string, fs *flag.FlagSet, err error) {
	v := lookupVerb(verbName)
	if v == nil {
		v = &verb{name: verbName}
	}
	printUsageError(w, v, flagError(fs, err))
}

// nearestFlag is the defined flag closest to name: the one a typo most likely meant,
// or "" when none is close (at most two edits, fewer than name has letters).
func nearestFlag(fs *flag.FlagSet, name string) string {
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	return nearest(name, names)
}

// nearest picks the candidate within two edits of s (one when s is shorter than six
// letters; a transposition is one edit), or the one candidate s is a prefix of; "" when
// there is none.
func nearest(s string, candidates []string) string {
	sort.Strings(candidates)
	best, bestD := "", 3
	for _, c := range candidates {
		// On a tie a long name wins over a one-letter one: --al means --all, not -a.
		// Two edits only in a word of six letters or more: bogus is not a typo of logs.
		d := editDistance(s, c)
		if d >= len(s) || d == 2 && len(s) < 6 {
			continue
		}
		if d < bestD || d == bestD && len(best) == 1 && len(c) > 1 {
			best, bestD = c, d
		}
	}
	if best != "" || len(s) < 3 {
		return best
	}
	var prefixed []string
	for _, c := range candidates {
		if strings.HasPrefix(c, s) {
			prefixed = append(prefixed, c)
		}
	}
	if len(prefixed) == 1 {
		return prefixed[0]
	}
	return ""
}

// editDistance is the optimal-string-alignment distance: insertions, deletions,
// substitutions and transpositions of neighbours each cost one.
func editDistance(a, b string) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// lookupVerb finds a verb by name: one of verbList, or a verb of the daemon's binary
// (serve, agent, check-config) that only has help here.
func lookupVerb(name string) *verb {
	if v := verbs[name]; v != nil {
		return v
	}
	return daemonVerbs[name]
}

// verbNames lists every verb and group name, for suggestions.
func verbNames() []string {
	var names []string
	for _, v := range verbList {
		names = append(names, v.name)
	}
	for g := range groups {
		names = append(names, g)
	}
	for n := range daemonVerbs {
		names = append(names, n)
	}
	return names
}

// unknownCommand reports a verb that does not exist, with the nearest one.
func unknownCommand(w io.Writer, prefix, name string, candidates []string) {
	msg := fmt.Sprintf("%s: unknown command %q", prefix, name)
	if same, ok := habitVerbs[name]; ok && prefix == "airlock" {
		msg += "; " + same
	} else if near := nearest(name, candidates); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	fmt.Fprintln(w, msg)
}

// habitVerbs are docker's and kubectl's words for what a verb of airlock does.
var habitVerbs = map[string]string{
	"stop":     `"airlock suspend NAME" stops its processes and keeps its files; "airlock rm NAME" ends it`,
	"start":    `"airlock resume NAME" starts a suspended sandbox again`,
	"restart":  `"airlock suspend NAME" then "airlock resume NAME" restarts a sandbox`,
	"kill":     `"airlock rm NAME" terminates a sandbox`,
	"delete":   `"airlock rm NAME" terminates a sandbox`,
	"describe": `"airlock get NAME" shows one sandbox`,
	"inspect":  `"airlock get NAME" shows one sandbox`,
	"attach":   `"airlock shell NAME" opens a terminal in a sandbox`,
	"images":   `"airlock image ls" lists images`,
	"rmi":      `"airlock image rm REF" removes an image`,
	"pull":     `"airlock image pull REF" pulls an image`,
	"load":     `"airlock image import FILE" imports an image archive`,
	"commit":   `"airlock snapshot create NAME" snapshots a sandbox`,
	"top":      `"airlock exec NAME -- ps aux" shows a sandbox's processes`,
}
