package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/router/decision"
)

var runCodeVerb = &verb{
	name:  "run-code",
	args:  "--lang python|node|bash [--profile P] [--workspace DIR] [--access none|ro|rw] [--artifacts DIR] [--timeout D] [--image IMG] FILE|-",
	short: "run a code snippet where its profile says: a sandbox unless the profile is off",
	long: `The code comes from FILE, or from standard input with -, and runs with python3, node
or bash. Code is never judged: under the safe and strict profiles (and with no profile at
all) it runs in a new sandbox as /work/main.py (.js, .sh), with /work as its working
directory and the files it makes there copied to the artifacts directory; under off it runs
on this host. A line on stderr says where it ran and why; -o json prints the result.
` + exitCodesHelp,
	run: runRunCode,
}

// maxCodeBytes bounds a snippet.
const maxCodeBytes = 16 << 20

func runRunCode(c *cmd, args []string) error {
	var lim limitFlags
	lim.register(c, false)
	var rf routeFlags
	rf.register(c)
	lang := c.fs.String("lang", "", "the code's language: `python`, node or bash")
	timeout := c.fs.Duration("timeout", 0, "stop the code after `D`, e.g. 30s")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	if err := rf.check(); err != nil {
		return err
	}
	if _, ok := interpreters[*lang]; !ok {
		langs := make([]string, 0, len(interpreters))
		for l := range interpreters {
			langs = append(langs, l)
		}
		sort.Strings(langs)
		if *lang == "" {
			return usagef("--lang is required: one of %s", strings.Join(langs, ", "))
		}
		return usagef("--lang %q: want one of %s", *lang, strings.Join(langs, ", "))
	}
	if *timeout < 0 {
		return usagef("--timeout must be positive")
	}
	w := &work{name: ephemeralName(), lang: *lang, timeout: *timeout, env: lim.env}
	if w.code, err = readCode(c.stdin, pos[0]); err != nil {
		return err
	}
	if pos[0] != "-" {
		w.codeFile = pos[0]
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	d, err := c.route(cl, &rf, api.RouteRequest{Kind: string(decision.KindCode), Language: *lang})
	if err != nil {
		return err
	}
	if d == nil {
		// No profile anywhere: code is contained, with the safe profile's workspace and
		// network, as it would be under safe.
		s, _ := decision.ProfileSettings(decision.ProfileSafe)
		d = &api.RouteDecision{Place: string(decision.PlaceSandbox), Reason: "no profile: code always runs in a sandbox",
			Reasons: []api.RouteReason{}, WorkspaceAccess: string(s.Workspace), Network: s.Network, Threshold: decision.DefaultThreshold}
		if rf.access != "" {
			d.WorkspaceAccess = rf.access
		}
	}
	w.decision = d
	if err := w.prepare(&rf); err != nil {
		return err
	}
	return c.runRouted(cl, &lim, w)
}

// readCode reads the snippet from file, or from stdin for "-".
func readCode(stdin io.Reader, file string) ([]byte, error) {
	r := stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return nil, usagef("%v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxCodeBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read the code: %w", err)
	}
	if len(b) > maxCodeBytes {
		return nil, usagef("the code is larger than %s", formatSize(maxCodeBytes))
	}
	return b, nil
}
