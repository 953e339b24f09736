package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

var eventsVerb = &verb{
	name:  "events",
	args:  "[NAME] [--follow] [--after SEQ]",
	short: "show state changes and limit hits",
	long: `Each event is one line: when, its sequence number (for --after), the sandbox and what
happened. With --follow, events are printed as they happen until interrupted; with
-o json as well, one JSON object a line.`,
	run: runEvents,
}

func runEvents(c *cmd, args []string) error {
	follow := c.fs.Bool("follow", false, "keep printing new events")
	c.fs.BoolVar(follow, "f", false, "short for --follow")
	after := c.fs.Int64("after", 0, "only events after sequence number `SEQ`")
	ref, cl, err := c.connectOptional(args)
	if err != nil {
		return err
	}
	if !*follow {
		evs, err := cl.Events(c.ctx, ref, *after)
		if err != nil {
			return err
		}
		if c.json() {
			if evs == nil {
				evs = []api.Event{}
			}
			return c.printJSON(evs)
		}
		names := newSandboxNames(c, cl)
		p := eventPrinter{w: c.stdout, names: names, width: names.widthFor(ref)}
		p.header()
		for _, ev := range evs {
			if err := p.print(ev); err != nil {
				return err
			}
		}
		return nil
	}
	var print func(api.Event) error
	if c.json() {
		print = func(ev api.Event) error { return c.printJSONLine(ev) }
	} else {
		names := newSandboxNames(c, cl)
		p := eventPrinter{w: c.stdout, names: names, width: names.widthFor(ref)}
		p.header()
		print = p.print
	}
	return endOfFollow(c, cl.FollowEvents(c.ctx, ref, *after, print))
}

func runEgressLog(c *cmd, args []string) error {
	follow := c.fs.Bool("follow", false, "keep printing new decisions")
	c.fs.BoolVar(follow, "f", false, "short for --follow")
	after := c.fs.Int64("after", 0, "only records after sequence number `SEQ`")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *follow {
		return followEgress(c, cl, pos[0], *after)
	}
	page, err := cl.EgressLogPage(c.ctx, pos[0], *after)
	if err != nil {
		return err
	}
	recs := page.Records
	if c.json() {
		if recs == nil {
			recs = []api.EgressRecord{}
		}
		return c.printJSON(recs)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, strings.Join(egressColumns, "\t"))
	for _, r := range recs {
		fmt.Fprintln(tw, strings.Join(egressRow(r), "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if page.Dropped > 0 {
		fmt.Fprintf(c.stdout, "%d records were not stored: the sandbox went over its audit rate (see its records_dropped events)\n", page.Dropped)
	}
	return nil
}

var egressColumns = []string{"TIME", "GEN", "DECISION", "METHOD", "HOST", "PORT", "ADDR", "UP", "DOWN", "RULE/REASON"}

// egressWidths are the columns' widths when following, where the rows to come are unknown.
var egressWidths = []int{8, 3, 8, 7, 28, 5, 15, 8, 8, 0}

func egressRow(r api.EgressRecord) []string {
	why := r.Reason
	if decisionOf(r) == "allow" {
		why = r.Rule
	}
	if r.Repeats > 0 {
		why = fmt.Sprintf("%s (and %d more like it)", why, r.Repeats)
	}
	return []string{r.Time.Local().Format("15:04:05"), strconv.FormatInt(r.Generation, 10), decisionOf(r), orNone(r.Method),
		r.Host, strconv.Itoa(r.Port), orNone(r.Addr), formatSize(r.BytesUp), formatSize(r.BytesDown), orNone(why)}
}

// followEgress prints the sandbox's egress decisions as they are made.
func followEgress(c *cmd, cl *client.Client, ref string, after int64) error {
	w := safeWriter{c.stdout}
	line := func(cells []string) {
		for i, cell := range cells {
			if i == len(cells)-1 {
				fmt.Fprintln(w, cell)
			} else {
				fmt.Fprintf(w, "%-*s  ", egressWidths[i], cell)
			}
		}
	}
	if !c.json() {
		line(egressColumns)
	}
	err := cl.FollowEvents(c.ctx, ref, after, func(ev api.Event) error {
		switch ev.Type {
		case "egress":
			r := egressRecordOf(ev)
			if c.json() {
				return c.printJSONLine(r)
			}
			line(egressRow(r))
		case "records_dropped":
			if n := eventData(ev.Data).dropped("egress"); n > 0 && !c.json() {
				fmt.Fprintf(w, "%d records were not stored: the sandbox went over its audit rate\n", n)
			}
		}
		return nil
	})
	return endOfFollow(c, err)
}

// endOfFollow turns the end of a --follow into Run's answer: an interrupt is its
// normal end.
func endOfFollow(c *cmd, err error) error {
	if err != nil && c.ctx.Err() != nil && errors.Is(err, c.ctx.Err()) {
		return nil
	}
	return err
}

// printJSONLine writes v as one line of JSON: what --follow prints for machines.
func (c *cmd) printJSONLine(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(c.stdout, "%s\n", jsonSafe(b))
	return err
}

// eventTime is how event and egress listings show a time.
const eventTime = "2006-01-02 15:04:05"

// eventPrinter writes events as lines of fixed columns, so that a followed stream
// lines up without knowing what comes next.
type eventPrinter struct {
	w     io.Writer
	names *sandboxNames
	width int // of the SANDBOX column
}

func (p eventPrinter) header() {
	fmt.Fprintf(p.w, "%-19s  %6s  %-*s  %s\n", "TIME", "SEQ", p.width, "SANDBOX", "EVENT")
}

func (p eventPrinter) print(ev api.Event) error {
	_, err := fmt.Fprintf(safeWriter{p.w}, "%-19s  %6d  %-*s  %s\n", ev.Time.Local().Format(eventTime), ev.Seq,
		p.width, p.names.name(ev.SandboxID), describeEvent(ev, p.names.name))
	return err
}

// sandboxNames maps sandbox ids to names, asking the daemon about ids it has not seen.
type sandboxNames struct {
	c     *cmd
	cl    *client.Client
	names map[string]string
}

func newSandboxNames(c *cmd, cl *client.Client) *sandboxNames {
	n := &sandboxNames{c: c, cl: cl, names: map[string]string{}}
	list, _ := cl.List(c.ctx, client.ListOptions{}) // without it, ids are shown
	for _, sb := range list {
		n.names[sb.ID] = sb.Name
	}
	return n
}

// name is the sandbox's name, or its id when the daemon does not say.
func (n *sandboxNames) name(id string) string {
	if name, ok := n.names[id]; ok {
		return name
	}
	name := id
	if sb, err := n.cl.Get(n.c.ctx, id); err == nil {
		name = sb.Name
	}
	n.names[id] = name
	return name
}

// widthFor is the width of the sandbox column: that of ref's name when the events are
// one sandbox's, else of the longest known name.
func (n *sandboxNames) widthFor(ref string) int {
	if ref == "" {
		return n.width()
	}
	name := ref
	if strings.HasPrefix(ref, "sb_") {
		name = n.name(ref)
	}
	return max(len("SANDBOX"), min(len(name), 24))
}

// width is that of the longest known name, within reason.
func (n *sandboxNames) width() int {
	w := len("SANDBOX")
	for _, name := range n.names {
		w = max(w, min(len(name), 24))
	}
	return w
}

// describeEvent says in a few words what an event records; name turns a sandbox id
// into its name. Types it does not know are shown as their type, cause and data.
func describeEvent(ev api.Event, name func(id string) string) string {
	d := eventData(ev.Data)
	cause := ""
	if ev.Cause != "" {
		cause = " (" + ev.Cause + ")"
	}
	switch ev.Type {
	case "created":
		if from := d.str("from"); from != "" {
			return fmt.Sprintf("created as a fork of %s (snapshot %s)", name(from), d.str("snapshot"))
		}
		return "created"
	case "state":
		return fmt.Sprintf("%s → %s%s", d.str("from"), d.str("to"), cause)
	case "limit":
		switch ev.Cause {
		case "memory":
			return fmt.Sprintf("hit its memory limit (%s): a process was killed", formatSize(d.int("limit")))
		case "pids":
			n := d.int("refused_forks")
			return fmt.Sprintf("hit its process limit (%d): %d %s refused", d.int("limit"), n, plural(int(n), "fork", "forks"))
		case "exec_timeout":
			return fmt.Sprintf("a command ran past its timeout (%s) and was stopped", d.str("timeout"))
		}
	case "container_gone":
		return "its container ended: " + d.str("reason")
	case "snapshot":
		return fmt.Sprintf("snapshot %s taken (%s, %s stored)", d.str("snapshot"), d.str("consistency"), formatSize(d.int("stored_size")))
	case "safety_snapshot":
		return fmt.Sprintf("safety snapshot %s taken before a restore", d.str("snapshot"))
	case "restored":
		return "restored from snapshot " + d.str("snapshot")
	case "network":
		s := "egress policy set to " + d.str("mode")
		if allow := d.strs("allow"); len(allow) > 0 {
			s += ", allowing " + strings.Join(allow, " ")
		}
		return s
	case "port":
		switch ev.Cause {
		case "expose":
			how := "token needed"
			if d.bool("public") {
				how = "public"
			}
			return fmt.Sprintf("port %d exposed (%s)", d.int("port"), how)
		case "close":
			return fmt.Sprintf("port %d closed", d.int("port"))
		}
	case "secret":
		switch ev.Cause {
		case "bound":
			return fmt.Sprintf("secret %s bound to %s (%s)", d.str("secret"), d.str("target"), d.str("delivery"))
		case "unbound":
			return fmt.Sprintf("secret %s unbound from %s", d.str("secret"), d.str("target"))
		}
	case "egress":
		return describeEgress(egressRecordOf(ev))
	case "dns":
		s := fmt.Sprintf("DNS %s %s: %s", d.str("Type"), d.str("Name"), d.str("Rcode"))
		if !d.bool("Allowed") && d.str("Reason") != "" {
			s += ", refused: " + d.str("Reason")
		}
		return s + repeats(d.int("repeats"))
	case "records_dropped":
		if msg := d.str("message"); msg != "" {
			return msg
		}
	}
	s := ev.Type + cause
	if len(ev.Data) > 0 {
		b, _ := json.Marshal(ev.Data)
		s += " " + string(b)
	}
	return s
}

// describeEgress is one egress decision in a few words.
func describeEgress(r api.EgressRecord) string {
	target := r.Host
	if r.Port != 0 {
		target = r.Host + ":" + strconv.Itoa(r.Port)
	}
	var s string
	switch decisionOf(r) {
	case "allow":
		s = fmt.Sprintf("allowed %s %s", r.Method, target)
		if r.Rule != "" {
			s += " (rule " + r.Rule + ")"
		}
		if r.BytesUp > 0 || r.BytesDown > 0 {
			s += fmt.Sprintf(", %s up, %s down", formatSize(r.BytesUp), formatSize(r.BytesDown))
		}
	case "error":
		s = fmt.Sprintf("allowed %s %s but it failed: %s", r.Method, target, r.Reason)
	default:
		s = fmt.Sprintf("refused %s %s: %s", r.Method, target, r.Reason)
	}
	return s + repeats(r.Repeats)
}

func repeats(n int64) string {
	if n > 0 {
		return fmt.Sprintf(" (and %d more like it)", n)
	}
	return ""
}

// decisionOf is a record's decision; records from before decisions were kept have only
// whether they were allowed.
func decisionOf(r api.EgressRecord) string {
	switch {
	case r.Decision != "":
		return r.Decision
	case r.Allowed:
		return "allow"
	}
	return "deny"
}

// egressRecordOf reads an "egress" event as the record the egress log lists.
func egressRecordOf(ev api.Event) api.EgressRecord {
	var rec struct {
		Host, Addr, Method, Decision, Rule, Reason string
		Port                                       int
		BytesUp, BytesDown                         int64
		Allowed                                    bool
		Repeats                                    int64  `json:"repeats"`
		Summary                                    string `json:"summary"`
	}
	b, _ := json.Marshal(ev.Data)
	json.Unmarshal(b, &rec)
	return api.EgressRecord{Seq: ev.Seq, Generation: ev.Generation, Host: rec.Host, Addr: rec.Addr, Port: rec.Port,
		Method: rec.Method, BytesUp: rec.BytesUp, BytesDown: rec.BytesDown, Allowed: rec.Allowed, Decision: rec.Decision,
		Rule: rec.Rule, Reason: rec.Reason, Time: ev.Time, Repeats: rec.Repeats, Summary: rec.Summary}
}

// eventData reads the fields of an event's data, which JSON decoding left as any.
type eventData map[string]any

func (d eventData) str(k string) string {
	switch v := d[k].(type) {
	case nil:
		return ""
	case string:
		return v
	default:
		return fmt.Sprint(v)
	}
}

func (d eventData) int(k string) int64 {
	switch v := d[k].(type) {
	case float64:
		return int64(v)
	case json.Number:
		n, _ := v.Int64()
		return n
	}
	return 0
}

// dropped is how many records of a type a records_dropped event counts.
func (d eventData) dropped(typ string) int64 {
	types, _ := d["types"].(map[string]any)
	return eventData(types).int(typ)
}

func (d eventData) bool(k string) bool { b, _ := d[k].(bool); return b }

func (d eventData) strs(k string) []string {
	list, _ := d[k].([]any)
	var out []string
	for _, v := range list {
		out = append(out, fmt.Sprint(v))
	}
	return out
}

// shellQuote quotes s for a POSIX shell when it needs quoting.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./:=@%+,") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
