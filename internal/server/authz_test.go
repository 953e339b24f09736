package server_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/server"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestAuthorizationMatrix calls every API route, generated from the server's route
// table, as an identity of every built-in role: a role without the route's permission
// is refused with permission_denied naming it, a role with it is let through. A route
// added without a permission rule makes RoutePermissions name it, and fails here.
func TestAuthorizationMatrix(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"someone"}})
	ctx := context.Background()
	perms := (&server.Server{}).RoutePermissions()
	if len(perms) < 40 {
		t.Fatalf("only %d routes in the table", len(perms))
	}
	param := regexp.MustCompile(`\{[a-z]+(\.\.\.)?\}`)
	for role := range auth.BuiltinRoles {
		name := "as-" + role
		if _, err := n.Auth.CreateIdentity(ctx, name, "user", []string{role}, nil); err != nil {
			t.Fatal(err)
		}
		secret, _, err := n.Auth.CreateToken(ctx, name, "", 0)
		if err != nil {
			t.Fatal(err)
		}
		p, err := n.Auth.Authenticate(ctx, secret)
		if err != nil {
			t.Fatal(err)
		}
		denied := 0
		for _, route := range slices.Sorted(func(yield func(string) bool) {
			for r := range perms {
				if !yield(r) {
					return
				}
			}
		}) {
			perm := perms[route]
			method, path, _ := strings.Cut(route, " ")
			path = param.ReplaceAllString(path, "nosuch")
			var body io.Reader
			if method == "POST" || method == "PUT" {
				body = strings.NewReader("{}")
			}
			req, _ := http.NewRequest(method, "http://"+n.Addr+path, body)
			req.Header.Set("Authorization", "Bearer "+secret)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			allowed := perm == "" || p.Can(auth.Permission(perm))
			if resp.StatusCode == 403 {
				denied++
			}
			switch {
			case resp.StatusCode == 401:
				t.Errorf("%s as %s: 401 %s", route, role, b)
			case allowed && resp.StatusCode == 403 && strings.Contains(string(b), "permission"):
				t.Errorf("%s as %s: refused (%s) although the role grants %q", route, role, b, perm)
			case !allowed && (resp.StatusCode != 403 || !strings.Contains(string(b), perm)):
				t.Errorf("%s as %s: %d %s; want 403 naming %s", route, role, resp.StatusCode, b, perm)
			}
		}
		if (role == "admin") != (denied == 0) {
			t.Errorf("role %s was refused %d calls; want none for admin and some for every other role", role, denied)
		}
	}
}

// An identity sees and touches only its own sandboxes: another one's is not found.
func TestOwnersSeeOnlyTheirOwn(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice", "bob"}})
	alice, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	bob, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "bob")})
	resp, err := alice.Create(bg, api.CreateSandboxRequest{Name: "mine"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"mine", resp.Sandbox.ID} {
		_, err := bob.Get(bg, ref)
		wantCode(t, "bob gets alice's sandbox "+ref, err, "not_found")
		_, err = bob.Exec(bg, ref, api.ExecRequest{Argv: []string{"true"}})
		wantCode(t, "bob execs in alice's sandbox "+ref, err, "not_found")
		_, err = bob.Terminate(bg, ref)
		wantCode(t, "bob deletes alice's sandbox "+ref, err, "not_found")
	}
	if list, _ := bob.List(bg, client.ListOptions{}); len(list) != 0 {
		t.Errorf("bob lists %d sandboxes; want none of alice's", len(list))
	}
}

// A revoked or expired token is refused on the very next request, and so is a token of
// a removed identity.
func TestTokensEndAtOnce(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"carol"}})
	ctx := context.Background()
	c, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "carol")})
	if _, err := c.Status(bg); err != nil {
		t.Fatal(err)
	}
	toks, _ := n.Auth.ListTokens(ctx, "carol")
	if _, err := n.Auth.RevokeToken(ctx, toks[0].ID); err != nil {
		t.Fatal(err)
	}
	_, err := c.Status(bg)
	wantCode(t, "a revoked token", err, "unauthenticated")

	secret, _, err := n.Auth.CreateToken(ctx, "carol", "", 1) // a nanosecond
	if err != nil {
		t.Fatal(err)
	}
	c2, _ := client.New(client.Options{Addr: n.Addr, Token: secret})
	_, err = c2.Status(bg)
	wantCode(t, "an expired token", err, "unauthenticated")

	secret, _, _ = n.Auth.CreateToken(ctx, "carol", "", 0)
	c3, _ := client.New(client.Options{Addr: n.Addr, Token: secret})
	if _, err := c3.Status(bg); err != nil {
		t.Fatal(err)
	}
	if err := n.Auth.DeleteIdentity(ctx, "carol"); err != nil {
		t.Fatal(err)
	}
	_, err = c3.Status(bg)
	wantCode(t, "a removed identity's token", err, "unauthenticated")

	noTok, _ := client.New(client.Options{Addr: n.Addr})
	_, err = noTok.Status(bg)
	wantCode(t, "no token over TCP", err, "unauthenticated")
}

// A sandbox made with --role keeps that role; a role the caller does not hold is refused.
func TestSandboxRole(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"dana"}})
	dana, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "dana")})
	_, err := dana.Create(bg, api.CreateSandboxRequest{Name: "big", Role: "admin"})
	wantCode(t, "a role dana does not hold", err, "permission_denied")
	resp, err := dana.Create(bg, api.CreateSandboxRequest{Name: "narrow", Role: "developer"})
	if err != nil || resp.Sandbox.Role != "developer" {
		t.Fatalf("create with her role: %+v, %v", resp, err)
	}
	if _, err := n.Auth.SetRoles(context.Background(), "dana", []string{"viewer", "developer"}); err != nil {
		t.Fatal(err)
	}
	if sb, _ := dana.Get(bg, "narrow"); sb.Role != "developer" {
		t.Errorf("after her roles changed the sandbox's role is %q; want it kept", sb.Role)
	}
}

// A caller with sandbox.admin reaches another identity's sandbox by its id (never by
// name), and the audit log names who acted; without it, the id is not found.
func TestSandboxAdminReachesOthersByID(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice", "bob"}})
	alice, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	bob, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "bob")})
	resp, err := alice.Create(bg, api.CreateSandboxRequest{Name: "box"})
	if err != nil {
		t.Fatal(err)
	}
	id := resp.Sandbox.ID
	admin := n.Client // local, over the socket
	if sb, err := admin.Get(bg, id); err != nil || sb.Name != "box" {
		t.Fatalf("the administrator gets alice's sandbox by id: %+v, %v", sb, err)
	}
	res, err := admin.Exec(bg, id, api.ExecRequest{Argv: []string{"echo", "ok"}})
	if err != nil || res.Stdout != "ok\n" {
		t.Fatalf("the administrator execs in it: %+v, %v", res, err)
	}
	_, err = admin.Get(bg, "box")
	wantCode(t, "the administrator by name", err, "not_found")
	_, err = bob.Get(bg, id)
	wantCode(t, "bob by id", err, "not_found")
	recs := auditEntries(t, admin, client.AuditFilter{Action: "exec"})
	if len(recs) != 1 || recs[0].Identity != "local" || recs[0].Sandbox != id {
		t.Errorf("the exec's audit record: %+v; want it made by local in %s", recs, id)
	}
}

// all_owners=true lists every owner's sandboxes, each naming its owner, to a caller with
// the admin permission only; anyone else is refused and told which permission it lacks,
// and so is code inside a sandbox whatever its owner's role.
func TestListAllOwners(t *testing.T) {
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice", "bob"}})
	alice, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	bob, _ := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "bob")})
	for c, name := range map[*client.Client]string{alice: "a-box", bob: "b-box"} {
		if _, err := c.Create(bg, api.CreateSandboxRequest{Name: name}); err != nil {
			t.Fatal(err)
		}
	}
	list, err := n.Client.List(bg, client.ListOptions{AllOwners: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, sb := range list {
		got = append(got, sb.Owner+"/"+sb.Name)
	}
	slices.Sort(got) // created in map order
	if want := []string{"alice/a-box", "bob/b-box"}; !slices.Equal(got, want) {
		t.Errorf("the administrator lists all owners' sandboxes: %v, want %v", got, want)
	}
	if own, _ := n.Client.List(bg, client.ListOptions{}); len(own) != 0 {
		t.Errorf("the administrator's own list has %d sandboxes; want none without all_owners", len(own))
	}
	if own, _ := alice.List(bg, client.ListOptions{}); len(own) != 1 || own[0].Owner != "alice" {
		t.Errorf("alice's own list: %+v; want a-box, naming her as its owner", own)
	}
	_, err = alice.List(bg, client.ListOptions{AllOwners: true})
	wantCode(t, "alice lists all owners", err, "permission_denied")
	if err == nil || !strings.Contains(err.Error(), "admin permission") {
		t.Errorf("alice's refusal %v; want it to name the admin permission", err)
	}
	for _, q := range []string{"all_owners=yes", "all_owners=1"} {
		req, _ := http.NewRequest("GET", "http://"+n.Addr+"/v1/sandboxes?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+n.Token(t, "alice"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Errorf("?%s: HTTP %d, want 400", q, resp.StatusCode)
		}
	}

	// From inside a sandbox of the administrator, all_owners is refused.
	inside := createSandbox(t, n, "admins-own")
	token, err := n.Auth.SessionToken(bg, "local", "", inside.ID)
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/v1/sandboxes?all_owners=true", nil)
	r.Header.Set("Authorization", "Bearer "+token)
	w := httptest.NewRecorder()
	n.Server.ServeFromSandbox(w, r, inside.ID)
	if w.Code != 403 || strings.Contains(w.Body.String(), "a-box") {
		t.Errorf("all_owners from inside the administrator's sandbox: %d %s; want 403", w.Code, w.Body.String())
	}
}
