package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
)

// A usage error is printed in at most three lines: what was wrong (a flag named as it is
// typed, --memory, with the closest flag when one is near), the verb's short synopsis,
// and where its whole help is. The help itself is not printed: it would bury the error.

// printUsageError writes err for verb v.
func printUsageError(w io.Writer, v *verb, err error) {
	fmt.Fprintf(w, "airlock %s: %v\n", v.name, err)
	fmt.Fprintf(w, "usage: airlock %s; see 'airlock %s --help'\n", shortSynopsis(v), v.name)
}

// shortSynopsis is the verb's synopsis with its optional flags folded into [flags]:
// "exec NAME [flags] -- CMD [ARG...]".
func shortSynopsis(v *verb) string {
	words := []string{v.name}
	folded, depth := false, 0
	for _, w := range strings.Fields(v.args) {
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
var flagRefRE = regexp.MustCompile(`(^|[ :])-([A-Za-z0-9][A-Za-z0-9_-]*)`)

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
		msg = "flag provided but not defined: " + dashed(name)
		if near := nearestFlag(fs, name); near != "" {
			msg += "; did you mean " + dashed(near) + "?"
		}
		return errors.New(msg)
	}
	msg = flagRefRE.ReplaceAllStringFunc(msg, func(m string) string {
		sub := flagRefRE.FindStringSubmatch(m)
		if fs.Lookup(sub[2]) == nil {
			return m
		}
		return sub[1] + dashed(sub[2])
	})
	return errors.New(msg)
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

// nearest picks the candidate within two edits of s (a transposition is one edit), or
// the one candidate s is a prefix of; "" when there is none.
func nearest(s string, candidates []string) string {
	sort.Strings(candidates)
	best, bestD := "", 3
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD && d < len(s) {
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
	if near := nearest(name, candidates); near != "" {
		msg += fmt.Sprintf("; did you mean %q?", near)
	}
	fmt.Fprintln(w, msg)
}
