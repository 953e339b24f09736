package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/api"
)

var whoamiVerb = &verb{name: "whoami", args: "", short: "show who you are to the daemon, your roles and permissions", run: runWhoami}

var userLsVerb = &verb{name: "user ls", args: "", short: "list users and service accounts (admin)", run: runUserLs}

var userCreateVerb = &verb{
	name:  "user create",
	args:  "NAME --role R [--role R2] [--uid N] [--service]",
	short: "add a user or service account with its roles (admin)",
	long: `Roles are built in (admin, developer, viewer, agent) or custom (airlock role create).
--uid maps a local user to the identity over the unix socket. Make it a token with
airlock token create --user NAME.`,
	run: runUserCreate,
}

var userRmVerb = &verb{name: "user rm", args: "NAME", short: "remove an identity and its tokens; its calls stop at once (admin)", run: runUserRm}

var userRolesVerb = &verb{name: "user roles", args: "NAME --role R [--role R2]", short: "replace an identity's roles, from its next call (admin)", run: runUserRoles}

var roleLsVerb = &verb{name: "role ls", args: "", short: "list roles and their permissions", run: runRoleLs}

var roleCreateVerb = &verb{
	name:  "role create",
	args:  "NAME --permission P[,P2...]",
	short: "create or replace a custom role (admin)",
	long:  `Permissions: ` + permissionList + `; a group as prefix.* (snapshot.*).`,
	run:   runRoleCreate,
}

var roleRmVerb = &verb{name: "role rm", args: "NAME", short: "remove a custom role no identity holds (admin)", run: runRoleRm}

var tokenCreateVerb = &verb{
	name:  "token create",
	args:  "--user NAME [--name N] [--expires 720h] [--format airlock|e2b]",
	short: "make an API token; it is shown this once (admin)",
	long: `--format e2b makes the secret look like an E2B API key (e2b_ and 40 hex digits), for
E2B's SDKs pointed at the daemon's E2B-compatible listener (e2b_listen); it is the same
kind of token and works as a bearer token on Airlock's API too.`,
	run: runTokenCreate,
}

var tokenLsVerb = &verb{name: "token ls", args: "[--user NAME]", short: "list API tokens, never their secrets (admin)", run: runTokenLs}

var tokenRevokeVerb = &verb{name: "token revoke", args: "ID", short: "revoke a token; its next request is refused (admin)", run: runTokenRevoke}

const permissionList = "sandbox.create, sandbox.read, sandbox.exec, sandbox.files, sandbox.network, sandbox.admin, " +
	"snapshot.create, snapshot.read, snapshot.delete, image.read, image.create, image.delete, secret.create, " +
	"secret.bind, audit.read, metrics.read, admin"

func runWhoami(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	me, err := cl.WhoAmI(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(me)
	}
	fmt.Fprintf(c.stdout, "%s (roles: %s)\npermissions: %s\n", me.User, strings.Join(me.Roles, ", "), strings.Join(me.Permissions, ", "))
	return nil
}

func runUserLs(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	users, err := cl.Users(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(users)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tKIND\tROLES\tUIDS\tCREATED")
	for _, u := range users {
		var uids []string
		for _, id := range u.UIDs {
			uids = append(uids, strconv.Itoa(id))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", termSafe(u.Name), u.Kind, termSafe(strings.Join(u.Roles, ",")), orNone(strings.Join(uids, ",")), formatAge(u.CreatedAt))
	}
	return tw.Flush()
}

func runUserCreate(c *cmd, args []string) error {
	var roles listFlag
	var uids []int
	c.fs.Var(&roles, "role", "role `R` (repeatable, or comma-separated)")
	c.fs.Func("uid", "local uid `N` that is this identity over the unix socket (repeatable)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return fmt.Errorf("invalid uid %q", v)
		}
		uids = append(uids, n)
		return nil
	})
	service := c.fs.Bool("service", false, "a service account rather than a person")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return usagef("at least one --role is required")
	}
	kind := "user"
	if *service {
		kind = "service"
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	u, err := cl.CreateUser(c.ctx, api.CreateUserRequest{Name: pos[0], Kind: kind, Roles: roles, UIDs: uids})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(u)
	}
	fmt.Fprintf(c.stdout, "created %s %s with roles %s\n", u.Kind, termSafe(u.Name), termSafe(strings.Join(u.Roles, ", ")))
	return nil
}

func runUserRm(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if err := cl.DeleteUser(c.ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "removed %s and its tokens\n", termSafe(pos[0]))
	return nil
}

func runUserRoles(c *cmd, args []string) error {
	var roles listFlag
	c.fs.Var(&roles, "role", "role `R` (repeatable, or comma-separated)")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	if len(roles) == 0 {
		return usagef("at least one --role is required")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	u, err := cl.SetUserRoles(c.ctx, pos[0], roles)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(u)
	}
	fmt.Fprintf(c.stdout, "%s now has roles %s (from its next call; its sandboxes keep the role they were made with)\n",
		termSafe(u.Name), termSafe(strings.Join(u.Roles, ", ")))
	return nil
}

func runRoleLs(c *cmd, args []string) error {
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	roles, err := cl.Roles(c.ctx)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(roles)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "NAME\tKIND\tPERMISSIONS")
	for _, r := range roles {
		kind := "custom"
		if r.Builtin {
			kind = "built in"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", termSafe(r.Name), kind, termSafe(strings.Join(r.Permissions, ",")))
	}
	return tw.Flush()
}

func runRoleCreate(c *cmd, args []string) error {
	var perms listFlag
	c.fs.Var(&perms, "permission", "permission `P` (repeatable, or comma-separated)")
	pos, _, err := c.parse(args, 1, false)
	if err != nil {
		return err
	}
	if len(perms) == 0 {
		return usagef("at least one --permission is required")
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	r, err := cl.PutRole(c.ctx, pos[0], perms)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(r)
	}
	fmt.Fprintf(c.stdout, "role %s: %s\n", termSafe(r.Name), termSafe(strings.Join(r.Permissions, ", ")))
	return nil
}

func runRoleRm(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	if err := cl.DeleteRole(c.ctx, pos[0]); err != nil {
		return err
	}
	fmt.Fprintf(c.stdout, "removed role %s\n", termSafe(pos[0]))
	return nil
}

func runTokenCreate(c *cmd, args []string) error {
	user := c.fs.String("user", "", "the identity `NAME` the token is for")
	name := c.fs.String("name", "", "a `label` for the token")
	expires := c.fs.String("expires", "", "lifetime `D` such as 720h (default: until revoked)")
	format := c.fs.String("format", "airlock", "the secret's `shape`: airlock (al_...) or e2b (e2b_ and 40 hex digits, an E2B API key)")
	if _, _, err := c.parse(args, 0, false); err != nil {
		return err
	}
	if *user == "" {
		return usagef("--user is required")
	}
	if *format != "airlock" && *format != "e2b" {
		return usagef("--format is airlock or e2b, not %q", *format)
	}
	cl, err := c.client()
	if err != nil {
		return err
	}
	t, err := cl.CreateToken(c.ctx, api.CreateTokenRequest{User: *user, Name: *name, Expires: *expires, Format: *format})
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(t)
	}
	fmt.Fprintln(c.stdout, t.Secret)
	fmt.Fprintf(c.stderr, "token %s for %s; this is the only time its secret is shown\n", t.ID, termSafe(t.User))
	return nil
}

func runTokenLs(c *cmd, args []string) error {
	user := c.fs.String("user", "", "only the tokens of identity `NAME`")
	_, cl, err := c.connect(args, 0)
	if err != nil {
		return err
	}
	toks, err := cl.Tokens(c.ctx, *user)
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(toks)
	}
	tw := newTable(c.stdout)
	fmt.Fprintln(tw, "ID\tUSER\tNAME\tPREFIX\tCREATED\tEXPIRES\tSTATE")
	for _, t := range toks {
		exp, state := "never", "active"
		if t.ExpiresAt != nil {
			exp = t.ExpiresAt.Format("2006-01-02 15:04")
		}
		if t.RevokedAt != nil {
			state = "revoked"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, termSafe(t.User), orNone(termSafe(t.Name)), t.Prefix, formatAge(t.CreatedAt), exp, state)
	}
	return tw.Flush()
}

func runTokenRevoke(c *cmd, args []string) error {
	pos, cl, err := c.connect(args, 1)
	if err != nil {
		return err
	}
	t, err := cl.RevokeToken(c.ctx, pos[0])
	if err != nil {
		return err
	}
	if c.json() {
		return c.printJSON(t)
	}
	fmt.Fprintf(c.stdout, "revoked %s of %s; its next request is refused\n", t.ID, termSafe(t.User))
	return nil
}
