package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/airlockhq/airlock/client"
)

var auditLsVerb = &verb{
	name:  "audit ls",
	args:  "[--sandbox N] [--identity I] [--action A] [--since T]",
	short: "list the audit log: requests and execs, oldest first (audit.read)",
	long: `--since takes an RFC 3339 time or a duration back from now (24h). An administrator
sees everyone's records; anyone else only its own.`,
	run: runAuditLs,
}

var auditVerifyVerb = &verb{
	name:  "audit verify",
	args:  "",
	short: "check the audit log's hash chain; names the first edited, inserted or deleted record (admin)",
	run:   runAuditVerify,
}

func runAuditLs(c *cmd, args []string) error {
	sandbox := c.fs.String("sandbox", "", "only records of sandbox `N` (name or id)")
	identity := c.fs.String("identity", "", "only records of identity `I`")
	action := c.fs.String("action", "", "only records of action `A` (exec, or a route such as \"POST /v1/sandboxes\")")
	since := c.fs.String("since", "", "only records from `T` on (RFC 3339, or a duration back from now)")
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	f := client.AuditFilter{Identity: *identity, Action: *action}
	if *since != "" {
		if d, derr := time.ParseDuration(*since); derr == nil {
			f.Since = time.Now().Add(-d)
		} else if f.Since, err = time.Parse(time.RFC3339, *since); err != nil {
			return usagef("invalid --since %q: an RFC 3339 time or a duration such as 24h", *since)
		}
	}
	if *sandbox != "" {
		sb, err := cl.Get(c.ctx, *sandbox)
		if err != nil {
			return err
		}
		f.Sandbox = sb.ID
	}
	var all []json.RawMessage
	tw := newTable(c.stdout)
	if !c.json() {
		fmt.Fprintln(tw, "SEQ\tTIME\tIDENTITY\tACTION\tRESOURCE\tRESULT\tSOURCE")
	}
	for {
		recs, err := cl.AuditLog(c.ctx, f)
		if err != nil {
			return err
		}
		for _, r := range recs {
			f.After = r.Seq
			if c.json() {
				all = append(all, r.Record)
				continue
			}
			var e struct {
				Time                                       time.Time
				Identity, Action, Resource, Result, Source string
			}
			json.Unmarshal(r.Record, &e)
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Seq, e.Time.Local().Format("2006-01-02 15:04:05"), termSafe(orNone(e.Identity)),
				termSafe(e.Action), termSafe(orNone(e.Resource)), termSafe(e.Result), termSafe(e.Source))
		}
		if len(recs) < 1000 {
			break
		}
	}
	if c.json() {
		if all == nil {
			all = []json.RawMessage{}
		}
		return c.printJSON(all)
	}
	return tw.Flush()
}

func runAuditVerify(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	res, err := cl.VerifyAudit(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		if err := c.printJSON(res); err != nil {
			return err
		}
	} else if res.OK {
		fmt.Fprintf(c.stdout, "the audit log is intact: %d records\n", res.Records)
	}
	if !res.OK {
		if !c.json() {
			fmt.Fprintf(c.stdout, "the audit log was tampered with: %s\n", termSafe(strings.TrimSpace(res.Problem)))
		}
		return ExitError{Code: 1}
	}
	return nil
}
