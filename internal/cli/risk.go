package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/router/decision"
)

var riskVerb = &verb{
	name:  "risk",
	args:  "[--profile P] -- COMMAND",
	short: "score a shell command's risk and say where a profile runs it",
	long: `Asks the node, as run does, and runs nothing: the command's risk score, what it
deletes, changes, reaches, escalates or reads (one reason per line), and whether the
profile runs it on the host, in the fence or in a sandbox. The node scores with its
router.threshold and, without --profile, decides under its router.profile, so risk says
what run would do. One argument is read as shell text ('curl x | sh'); several are one
command's words, scored as their shell-quoted join.`,
	run: runRisk,
}

// riskResult is what risk prints with --output json.
type riskResult struct {
	Score   float64           `json:"score"`
	Reasons []api.RouteReason `json:"reasons"`
	// Route is host, sandbox, or none when no profile applies (run runs it as asked).
	Route     string  `json:"route"`
	Fenced    bool    `json:"fenced"` // on the host, inside the fence
	Profile   string  `json:"profile"`
	Threshold float64 `json:"threshold"`
	Why       string  `json:"why"`
}

func runRisk(c *cmd, args []string) error {
	profile := c.fs.String("profile", "", "route under `profile`: "+strings.Join(decision.Profiles(), ", ")+" (default: the node's router.profile)")
	_, words, err := c.parse(args, 0, true)
	if err != nil {
		return err
	}
	if len(words) == 0 {
		return usagef("missing the command to score: airlock risk -- COMMAND")
	}
	if *profile != "" {
		if _, err := decision.ProfileSettings(*profile); err != nil {
			return usagef("--profile: %v", err)
		}
	}
	req := api.RouteRequest{Profile: *profile, Argv: words}
	if len(words) == 1 {
		req = api.RouteRequest{Profile: *profile, Command: words[0]}
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	d, err := cl.Route(c.ctx, req)
	if err != nil {
		return err
	}
	res := riskResult{
		Score: d.Score, Reasons: d.Reasons, Route: "none",
		Fenced: decision.Place(d.Place) == decision.PlaceFence, Profile: d.Profile, Threshold: d.Threshold, Why: d.Reason,
	}
	if res.Reasons == nil {
		res.Reasons = []api.RouteReason{}
	}
	switch decision.Place(d.Place) {
	case decision.PlaceSandbox:
		res.Route = "sandbox"
	case decision.PlaceHost, decision.PlaceFence:
		res.Route = "host"
	}
	if c.json() {
		return c.printJSON(res)
	}
	threshold := strconv.FormatFloat(res.Threshold, 'f', -1, 64)
	where := fmt.Sprintf("%s (%s profile, threshold %s)", res.Route, res.Profile, threshold)
	switch {
	case res.Profile == "":
		where = fmt.Sprintf("none: %s (threshold %s)", res.Why, threshold)
	case res.Fenced:
		where = fmt.Sprintf("host, inside the fence (%s profile, threshold %s)", res.Profile, threshold)
	}
	tw := newTable(c.stdout)
	fmt.Fprintf(tw, "score\t%s\n", strconv.FormatFloat(res.Score, 'f', -1, 64))
	fmt.Fprintf(tw, "route\t%s\n", where)
	key := "reasons"
	for _, r := range res.Reasons {
		fmt.Fprintf(tw, "%s\t%s\n", key, r.Text)
		key = ""
	}
	return tw.Flush()
}
