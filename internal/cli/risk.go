package cli

import (
	"fmt"
	"strconv"
	"strings"

	"mvdan.cc/sh/v3/syntax"

	"github.com/airlockhq/airlock/internal/router"
)

var riskVerb = &verb{
	name:  "risk",
	args:  "[--profile P] -- COMMAND",
	short: "score a shell command's risk and say where a profile runs it",
	long: `Scores the command here, without the daemon: what it deletes, changes, reaches,
escalates or reads, one reason per line, and whether the profile (default safe) runs
it on the host or in a sandbox. One argument is read as shell text ('curl x | sh');
several are one command's words, quoted as a shell would need them.`,
	run: runRisk,
}

// riskResult is what risk prints with --output json.
type riskResult struct {
	Score     float64         `json:"score"`
	Reasons   []router.Reason `json:"reasons"`
	Route     string          `json:"route"`  // host or sandbox
	Fenced    bool            `json:"fenced"` // on the host, inside the fence
	Profile   string          `json:"profile"`
	Threshold float64         `json:"threshold"`
	Why       string          `json:"why"`
}

func runRisk(c *cmd, args []string) error {
	profile := c.fs.String("profile", router.DefaultProfile, "route under `profile`: "+strings.Join(router.Profiles(), ", "))
	_, words, err := c.parse(args, 0, true)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		return usagef("missing the command to score: airlock risk -- COMMAND")
	}
	settings, err := router.ProfileSettings(*profile)
	if err != nil {
		return usagef("--profile: %v", err)
	}
	text := words[0]
	if len(words) > 1 {
		quoted := make([]string, len(words))
		for i, w := range words {
			if quoted[i], err = syntax.Quote(w, syntax.LangBash); err != nil {
				return usagef("argument %d cannot be written as shell text (%v); pass the command as one argument instead", i+1, err)
			}
		}
		text = strings.Join(quoted, " ")
	}
	a := router.Score(text)
	d, err := router.Route(settings, router.KindCommand, a)
	if err != nil {
		return err
	}
	res := riskResult{
		Score: a.Score, Reasons: a.Reasons, Route: "host", Fenced: d.Place == router.PlaceFence,
		Profile: *profile, Threshold: settings.EffectiveThreshold(), Why: d.Reason,
	}
	if d.Place == router.PlaceSandbox {
		res.Route = "sandbox"
	}
	if c.json() {
		return c.printJSON(res)
	}
	where := res.Route
	if res.Fenced {
		where = "host, inside the fence"
	}
	tw := newTable(c.stdout)
	fmt.Fprintf(tw, "score\t%s\n", strconv.FormatFloat(res.Score, 'f', -1, 64))
	fmt.Fprintf(tw, "route\t%s (%s profile, threshold %s)\n", where, res.Profile, strconv.FormatFloat(res.Threshold, 'f', -1, 64))
	key := "reasons"
	for _, r := range res.Reasons {
		fmt.Fprintf(tw, "%s\t%s\n", key, r.Text)
		key = ""
	}
	return tw.Flush()
}
