package cli

import (
	"fmt"
	"io"
	"strings"

	"github.com/airlockhq/airlock/api"
)

var secretCreateVerb = &verb{
	name:  "secret create",
	args:  "--name N --type token|password|certificate [--allowed-hosts H[,H2]] [--description D] [--expires T] < value",
	short: "store a secret read from standard input, sealed at rest (secret.create)",
	long: `The value is read from standard input; one trailing newline is trimmed, and an empty
value or one of 64 KiB or more is refused. It is sealed with AES-256-GCM under the node's
key and never shown again: listings show a safe preview and a fingerprint. Proxy
delivery sends it to the allowed hosts only; a secret without --allowed-hosts can be
delivered only as a file or in the environment. --expires takes an RFC 3339 time or a duration (720h).`,
	run: runSecretCreate,
}

var secretLsVerb = &verb{name: "secret ls", args: "", short: "list your secrets (metadata only)", run: runSecretLs}

var secretGetVerb = &verb{name: "secret get", args: "NAME", short: "show a secret's metadata and versions", run: runSecretGet}

var secretRotateVerb = &verb{
	name:  "secret rotate",
	args:  "NAME < value",
	short: "add a new version read from standard input",
	run:   runSecretRotate,
}

var secretRevokeVerb = &verb{
	name:  "secret revoke",
	args:  "NAME --yes",
	short: "revoke a secret: its values are destroyed and delivery stops at once",
	run:   runSecretRevoke,
}

var secretRmVerb = &verb{
	name:  "secret rm",
	args:  "NAME --yes",
	short: "remove a secret and its bindings (revoking it first if it is not revoked); its name is free again",
	run:   runSecretRm,
}

var secretRekeyVerb = &verb{name: "secret rekey", args: "", short: "re-seal every secret under a new node key, without downtime (admin)", run: runSecretRekey}

var secretBindVerb = &verb{
	name:  "secret bind",
	args:  "NAME --sandbox SB --target VAR|/PATH [--delivery proxy|file|env] [--scope sandbox|execution] [--hosts H,…] [--header NAME]… [--query]",
	short: "hand a secret to a sandbox (secret.bind)",
	long: `Delivery proxy (the default) puts only a placeholder in the sandbox, in the variable or
file named by --target; the egress proxy puts the real value in its place in https requests
to the binding's hosts only, in the Authorization header (basic auth included) or instead in
the headers named by --header (repeat it or separate with commas; name Authorization too to keep it), and the query
string with --query. The placeholder anywhere else (another header, the path, another host)
refuses the request; in a body it goes as it is. Each form of the value (as it is, escaped,
base64) is starred out of every answer from those hosts, compressed bodies decoded. The
proxy opens those hosts with every method. Delivery file puts the value in a file on a tmpfs, outside
everything that is snapshotted, forked or copied; a file bound to a running sandbox appears
at once (under gVisor, at its next start). Delivery env puts the value in every execution's environment: the
higher-risk choice, since any process in the sandbox can read and print it.
--scope sandbox (the default) delivers the version that was newest when the sandbox started;
--scope execution gives each execution (and each proxied request) the newest version.
--hosts defaults to the secret's allowed hosts; each must be one of them.`,
	run: runSecretBind,
}

var secretUnbindVerb = &verb{
	name:  "secret unbind",
	args:  "NAME --sandbox SB [--target VAR|/PATH] --yes",
	short: "stop handing a secret to a sandbox: delivery stops at once",
	run:   runSecretUnbind,
}

// readValue reads a secret's value from standard input, at most one byte past the limit.
func (c *cmd) readValue() (string, error) {
	b, err := io.ReadAll(io.LimitReader(c.stdin, 64<<10+2))
	if err != nil {
		return "", err
	}
	return string(b), nil
}

func printSecret(c *cmd, s *api.Secret) error {
	if c.json() {
		return c.printJSON(s)
	}
	expires, state := "never", "active"
	if s.ExpiresAt != nil {
		expires = s.ExpiresAt.Format("2006-01-02 15:04")
	}
	if s.RevokedAt != nil {
		state = "revoked"
	}
	kv := [][2]string{{"name", s.Name}, {"type", s.Type}, {"description", orNone(s.Description)},
		{"allowed hosts", orNone(strings.Join(s.AllowedHosts, ", "))}, {"expires", expires}, {"state", state}}
	for _, p := range kv {
		fmt.Fprintf(c.stdout, "%-14s %s\n", p[0]+":", termSafe(p[1]))
	}
	for _, v := range s.Versions {
		fmt.Fprintf(c.stdout, "version %d:     %s  %s  %d bytes  %s\n", v.Version, termSafe(v.Preview), v.Fingerprint, v.Size, formatAge(v.CreatedAt))
	}
	for _, b := range s.Bindings {
		fmt.Fprintf(c.stdout, "bound:         %s\n", termSafe(describeBinding(b)))
	}
	return nil
}

// describeBinding says in one line what a binding hands to which sandbox.
func describeBinding(b api.SecretBinding) string {
	line := fmt.Sprintf("%s %s, %s delivery at %s (scope %s)", b.ID, b.Sandbox, b.Delivery, b.Target, b.Scope)
	if b.Delivery == "proxy" {
		line += " for " + strings.Join(b.Hosts, ", ")
		headers := b.Headers
		if len(headers) == 0 {
			headers = []string{"Authorization"}
		}
		line += ", in " + strings.Join(headers, ", ")
		if b.Query {
			line += " and the query string"
		}
	}
	if b.Risk != "" {
		line += " [risk " + b.Risk + "]"
	}
	return line
}

func runSecretBind(c *cmd, args []string) error {
	sandbox := c.fs.String("sandbox", "", "the `SB` to hand it to (name or id)")
	target := c.fs.String("target", "", "a variable `NAME` or an absolute file path")
	delivery := c.fs.String("delivery", "proxy", "`HOW` it reaches the sandbox: proxy, file or env")
	scope := c.fs.String("scope", "sandbox", "`SCOPE` of the version used: sandbox or execution")
	var hosts listFlag
	c.fs.Var(&hosts, "hosts", "`H`osts a proxy delivery is substituted for (default: the secret's allowed hosts)")
	query := c.fs.Bool("query", false, "proxy delivery: also substitute in the URL's query string")
	var headers listFlag
	c.fs.Var(&headers, "header", "proxy delivery: request header `NAME`s to substitute in, instead of Authorization")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *sandbox == "" || *target == "" {
		return usagef("--sandbox and --target are required")
	}
	res, err := cl.BindSecret(c.ctx, pos[0], api.BindSecretRequest{Sandbox: *sandbox, Scope: *scope, Target: *target,
		Delivery: *delivery, Hosts: hosts, Query: *query, Headers: headers})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(res)
	}
	fmt.Fprintf(c.stdout, "bound %s to %s: %s\n", termSafe(pos[0]), termSafe(*sandbox), termSafe(describeBinding(res.Binding)))
	if res.Binding.Delivery == "env" {
		fmt.Fprintln(c.stderr, "warning: env delivery is the higher-risk choice: any process in the sandbox can read and print the value; proxy delivery keeps it out of the sandbox")
	}
	if res.Applies != "now" {
		fmt.Fprintf(c.stdout, "it reaches the sandbox %s\n", res.Applies)
	}
	return nil
}

func runSecretUnbind(c *cmd, args []string) error {
	sandbox := c.fs.String("sandbox", "", "the `SB` to take it from (name or id)")
	target := c.fs.String("target", "", "only the binding at `VAR|/PATH`")
	yes := c.fs.Bool("yes", false, "unbind without asking")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if *sandbox == "" {
		return usagef("--sandbox is required")
	}
	if !*yes {
		return usagef("unbinding %s stops its delivery to %s at once (processes already running keep what they read); confirm with --yes", pos[0], *sandbox)
	}
	n, err := cl.UnbindSecret(c.ctx, pos[0], *sandbox, *target)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(api.UnbindSecretResult{Removed: n})
	}
	fmt.Fprintf(c.stdout, "removed %d binding(s) of %s from %s\n", n, termSafe(pos[0]), termSafe(*sandbox))
	return nil
}

func runSecretCreate(c *cmd, args []string) error {
	name := c.fs.String("name", "", "the secret's `N`ame")
	typ := c.fs.String("type", "", "`TYPE`: token, password or certificate")
	var hosts listFlag
	c.fs.Var(&hosts, "allowed-hosts", "the only `H`osts proxy delivery sends it to (comma-separated; none: file or env delivery only)")
	desc := c.fs.String("description", "", "description `D`: what it is for")
	expires := c.fs.String("expires", "", "expiry `T`: an RFC 3339 time or a duration")
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	if *name == "" || *typ == "" {
		return usagef("--name and --type are required")
	}
	value, err := c.readValue()
	if err != nil {
		return err
	}
	s, err := cl.CreateSecret(c.ctx, api.CreateSecretRequest{Name: *name, Type: *typ, Description: *desc,
		AllowedHosts: hosts, Expires: *expires, Value: value})
	if err != nil {
		return err
	}
	return printSecret(c, s)
}

func runSecretLs(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	list, err := cl.Secrets(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(list)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tTYPE\tVERSION\tPREVIEW\tALLOWED HOSTS\tSTATE")
	for _, s := range list {
		v := s.Versions[len(s.Versions)-1]
		state := "active"
		if s.RevokedAt != nil {
			state = "revoked"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\n", termSafe(s.Name), s.Type, v.Version, termSafe(v.Preview), termSafe(orNone(strings.Join(s.AllowedHosts, ","))), state)
	}
	return tw.Flush()
}

func runSecretGet(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	s, err := cl.Secret(c.ctx, pos[0])
	if err != nil {
		return err
	}
	return printSecret(c, s)
}

func runSecretRotate(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	value, err := c.readValue()
	if err != nil {
		return err
	}
	s, err := cl.RotateSecret(c.ctx, pos[0], value)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(s)
	}
	fmt.Fprintf(c.stdout, "%s is at version %d: new sandboxes and executions take it; running processes keep theirs until they restart\n",
		termSafe(s.Name), s.Versions[len(s.Versions)-1].Version)
	return nil
}

func runSecretRevoke(c *cmd, args []string) error {
	yes := c.fs.Bool("yes", false, "revoke without asking")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if !*yes {
		return usagef("revoking %s destroys its values and stops its delivery at once; confirm with --yes", pos[0])
	}
	s, err := cl.RevokeSecret(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(s)
	}
	fmt.Fprintf(c.stdout, "revoked %s\n", termSafe(s.Name))
	return nil
}

func runSecretRm(c *cmd, args []string) error {
	yes := c.fs.Bool("yes", false, "remove without asking")
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if !*yes {
		return usagef("removing %s destroys its values, stops its delivery at once and forgets it; confirm with --yes", pos[0])
	}
	if err := cl.DeleteSecret(c.ctx, pos[0]); err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(map[string]string{"removed": pos[0]})
	}
	fmt.Fprintf(c.stdout, "removed %s\n", termSafe(pos[0]))
	return nil
}

func runSecretRekey(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	res, err := cl.RekeySecrets(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(res)
	}
	fmt.Fprintf(c.stdout, "re-sealed %d secrets under a new key\n", res.Secrets)
	return nil
}
