package cli

import (
	"fmt"
	"io"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
)

// networkFlags are the egress flags of create and run.
type networkFlags struct {
	mode         string
	allow        repeatFlag
	allowPrivate listFlag
}

func (n *networkFlags) register(c *cmd) {
	c.fs.StringVar(&n.mode, "network", "", "egress `MODE`: none, deny_all, baseline (default), allowlist or unrestricted")
	c.fs.Var(&n.allow, "allow", "allow `HOST[:PORT][/METHODS]` (repeatable; HOST may be *.domain, an address or a CIDR prefix such as 198.51.100.0/24:5432, which also allows plain TCP; commas separate ports or methods of one rule; implies allowlist)")
	c.fs.Var(&n.allowPrivate, "allow-private", "authorise a private `CIDR` explicitly (repeatable)")
}

func (n *networkFlags) policy() *api.NetworkPolicy {
	if n.mode == "" && len(n.allow) == 0 && len(n.allowPrivate) == 0 {
		return nil
	}
	mode := n.mode
	if mode == "" {
		mode = "baseline"
	}
	return &api.NetworkPolicy{Mode: mode, Allow: n.allow, AllowPrivate: n.allowPrivate}
}

var networkGetVerb = &verb{
	name:  "network get",
	args:  "NAME",
	short: "show a sandbox's egress policy",
	run: func(c *cmd, args []string) error {
		pos, cl, err := c.connect(args, 1)
		if err != nil {
			return err
		}
		pol, err := cl.Network(c.ctx, pos[0])
		if err != nil {
			return err
		}
		if c.json() {
			return c.printJSON(pol)
		}
		return printFields(c.stdout, [][2]string{{"mode", pol.Mode}, {"allow", orNone(strings.Join(pol.Allow, " "))},
			{"allow_private", orNone(strings.Join(pol.AllowPrivate, " "))}})
	},
}

var networkSetVerb = &verb{
	name:  "network set",
	args:  "NAME --network MODE [--allow HOST[:PORT][/METHODS]]... [--allow-private CIDR]... [-v]",
	short: "change a sandbox's egress policy (new connections follow it at once)",
	long: `Prints the policy now in force, and on stderr the allow rules and private ranges the
change dropped; -v prints the operation instead of the policy.`,
	run: func(c *cmd, args []string) error {
		var nf networkFlags
		nf.register(c)
		verbose := c.verboseFlag("print the operation")
		pos, _, err := c.parse(args, 1, false)
		if err != nil {
			return err
		}
		pol := nf.policy()
		if pol == nil {
			return usagef("give --network, --allow or --allow-private")
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		before, _ := cl.Network(c.ctx, pos[0]) // only to say what the change drops
		resp, err := cl.SetNetwork(c.ctx, pos[0], *pol)
		if err != nil {
			return err
		}
		after, _ := cl.Network(c.ctx, pos[0])
		if before != nil && after != nil {
			reportDropped(c.stderr, before, after)
		}
		if c.json() {
			return c.printJSON(resp)
		}
		if *verbose || after == nil || resp.Operation.State != "succeeded" {
			return printOperation(c.stdout, &resp.Operation, resp.Sandbox)
		}
		line := "egress policy of " + pos[0] + ": " + after.Mode
		if len(after.Allow) > 0 {
			line += ", allowing " + strings.Join(after.Allow, " ")
		}
		if len(after.AllowPrivate) > 0 {
			line += ", private ranges " + strings.Join(after.AllowPrivate, " ")
		}
		_, err = fmt.Fprintln(safeWriter{c.stdout}, line)
		return err
	},
}

var egressLogVerb = &verb{
	name:  "egress log",
	args:  "NAME [--follow] [--after SEQ]",
	short: "show a sandbox's egress decisions",
	long: `With --follow, decisions are printed as they happen until interrupted; with -o json
as well, one JSON object a line.`,
	run: runEgressLog,
}

var portExposeVerb = &verb{
	name:  "port expose",
	args:  "NAME PORT [--public]",
	short: "make a sandbox port reachable through the daemon (token-protected unless --public)",
	run: func(c *cmd, args []string) error {
		public := c.fs.Bool("public", false, "no token needed")
		pos, _, err := c.parse(args, 2, false)
		if err != nil {
			return err
		}
		port, err := strconv.Atoi(pos[1])
		if err != nil {
			return usagef("PORT must be a number from 1 to 65535")
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		p, err := cl.ExposePort(c.ctx, pos[0], port, *public)
		if err != nil {
			return err
		}
		if c.json() {
			return c.printJSON(p)
		}
		fields := [][2]string{{"port", strconv.Itoa(p.Port)}, {"url", p.URL}, {"public", strconv.FormatBool(p.Public)}}
		if p.Token != "" {
			fields = append(fields, [2]string{"token", p.Token + "  (header X-Airlock-Port-Token, or ?airlock_token=)"})
		}
		if u, err := url.Parse(p.URL); err == nil && u.Host == api.SocketHost && c.addr == "" {
			// The daemon has no TCP listener: the URL works through its socket.
			curl := "curl --unix-socket " + shellQuote(cl.Target())
			if p.Token != "" {
				curl += " -H " + shellQuote("X-Airlock-Port-Token: "+p.Token)
			}
			fields = append(fields, [2]string{"try", curl + " " + shellQuote(p.URL)})
		}
		return printFields(c.stdout, fields)
	},
}

var portLsVerb = &verb{
	name:  "port ls",
	args:  "NAME",
	short: "list a sandbox's exposed ports",
	run: func(c *cmd, args []string) error {
		pos, cl, err := c.connect(args, 1)
		if err != nil {
			return err
		}
		ports, err := cl.Ports(c.ctx, pos[0])
		if err != nil {
			return err
		}
		if c.json() {
			if ports == nil {
				ports = []api.Port{}
			}
			return c.printJSON(ports)
		}
		tw := newTable(c.stdout)
		fmt.Fprintln(tw, "PORT\tPUBLIC\tURL")
		for _, p := range ports {
			fmt.Fprintf(tw, "%d\t%v\t%s\n", p.Port, p.Public, p.URL)
		}
		return tw.Flush()
	},
}

var portCloseVerb = &verb{
	name:  "port close",
	args:  "NAME PORT",
	short: "stop exposing a port and cut its open connections",
	run: func(c *cmd, args []string) error {
		pos, _, err := c.parse(args, 2, false)
		if err != nil {
			return err
		}
		port, err := strconv.Atoi(pos[1])
		if err != nil {
			return usagef("PORT must be a number from 1 to 65535")
		}
		cl, err := c.client()
		if err != nil {
			return err
		}
		if err := cl.ClosePort(c.ctx, pos[0], port); err != nil {
			return err
		}
		if c.json() {
			return c.printJSON(map[string]int{"closed": port})
		}
		_, err = fmt.Fprintf(c.stdout, "closed port %d\n", port)
		return err
	},
}

// reportDropped says which allow rules and private ranges a policy change removed, so
// a switch to deny_all or none does not silently lose them.
func reportDropped(w io.Writer, before, after *api.NetworkPolicy) {
	gone := func(old, cur []string) []string {
		var out []string
		for _, r := range old {
			if !slices.Contains(cur, r) {
				out = append(out, r)
			}
		}
		return out
	}
	why := ""
	switch after.Mode {
	case "deny_all":
		why = " (deny_all allows no outbound connections)"
	case "none":
		why = " (none gives the sandbox no network)"
	}
	if d := gone(before.Allow, after.Allow); len(d) > 0 {
		fmt.Fprintf(w, "dropped allow rules: %s%s\n", termSafe(strings.Join(d, ", ")), why)
	}
	if d := gone(before.AllowPrivate, after.AllowPrivate); len(d) > 0 {
		fmt.Fprintf(w, "dropped private ranges: %s%s\n", termSafe(strings.Join(d, ", ")), why)
	}
}
