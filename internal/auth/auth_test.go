package auth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

func newService(t *testing.T) (*auth.Service, string) {
	dir := t.TempDir()
	st, err := sqlite.Open(filepath.Join(dir, "db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return auth.New(st, auth.Options{UnixUsers: map[int]string{0: "local"}}), dir
}

// The first start makes the administrator and a token only it can read; later starts
// make nothing. The store keeps only a hash of the token.
func TestBootstrap(t *testing.T) {
	a, dir := newService(t)
	ctx := context.Background()
	path, err := a.Bootstrap(ctx, dir)
	if err != nil || path != filepath.Join(dir, auth.AdminTokenFile) {
		t.Fatalf("Bootstrap = %q, %v", path, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v, mode %v; want 0600", err, fi.Mode())
	}
	b, _ := os.ReadFile(path)
	secret := strings.TrimSpace(string(b))
	p, err := a.Authenticate(ctx, secret)
	if err != nil || p.Identity != "local" || !p.Can(auth.Admin) || !p.Can(auth.SecretBind) {
		t.Fatalf("the administrator's token: %+v, %v", p, err)
	}
	if again, err := a.Bootstrap(ctx, dir); again != "" || err != nil {
		t.Errorf("a second Bootstrap = %q, %v; want nothing made", again, err)
	}
	toks, _ := a.ListTokens(ctx, "")
	if len(toks) != 1 || toks[0].Hash == secret || strings.Contains(toks[0].Hash, secret[len(auth.TokenPrefix):]) || toks[0].Prefix == secret {
		t.Errorf("stored token %+v keeps the secret", toks[0])
	}
	db, _ := os.ReadFile(filepath.Join(dir, "db"))
	wal, _ := os.ReadFile(filepath.Join(dir, "db-wal"))
	if strings.Contains(string(db)+string(wal), secret) {
		t.Error("the database holds the token's secret")
	}
}

func TestRolesAndUIDs(t *testing.T) {
	a, dir := newService(t)
	ctx := context.Background()
	a.Bootstrap(ctx, dir)
	if _, err := a.CreateIdentity(ctx, "dev", "user", []string{"developer"}, []int{1000}); err != nil {
		t.Fatal(err)
	}
	p, err := a.ForUID(ctx, 1000)
	if err != nil || p.Identity != "dev" || !p.Can(auth.SnapshotDelete) || p.Can(auth.AuditRead) || p.Can(auth.Admin) {
		t.Fatalf("uid 1000: %+v, %v; want dev with developer's permissions", p, err)
	}
	if p, err := a.ForUID(ctx, 0); err != nil || p.Identity != "local" {
		t.Errorf("root: %+v, %v; want local", p, err)
	}
	if _, err := a.ForUID(ctx, 4242); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("an unknown uid: %v; want unauthenticated", err)
	}
	for _, c := range []struct {
		name  string
		roles []string
	}{{"Bad", []string{"viewer"}}, {"x", nil}, {"x", []string{"nosuch"}}} {
		if _, err := a.CreateIdentity(ctx, c.name, "user", c.roles, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("CreateIdentity(%q, %v): %v; want invalid", c.name, c.roles, err)
		}
	}
	if _, err := a.PutRole(ctx, "auditor", []string{"audit.read", "snapshot.*"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.PutRole(ctx, "broken", []string{"sandbox.fly"}); !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "sandbox.fly") {
		t.Errorf("a role with an unknown permission: %v", err)
	}
	if _, err := a.PutRole(ctx, "admin", []string{"audit.read"}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("replacing a built-in role: %v", err)
	}
	if _, err := a.SetRoles(ctx, "dev", []string{"auditor"}); err != nil {
		t.Fatal(err)
	}
	p, _ = a.ForUID(ctx, 1000)
	if !p.Can(auth.AuditRead) || !p.Can(auth.SnapshotRead) || p.Can(auth.SandboxCreate) {
		t.Errorf("after the role change: %v", p.Permissions())
	}
	if err := a.DeleteRole(ctx, "auditor"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("removing a role in use: %v", err)
	}
	if err := a.DeleteIdentity(ctx, "local"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("removing the administrator: %v", err)
	}
}

func TestRolesFile(t *testing.T) {
	a, dir := newService(t)
	ctx := context.Background()
	good := filepath.Join(dir, "roles.yaml")
	os.WriteFile(good, []byte("# custom roles\nauditor: [audit.read, snapshot.*]\nrunner:\n  - sandbox.exec\n"), 0o644)
	if err := a.LoadRolesFile(ctx, good); err != nil {
		t.Fatal(err)
	}
	roles, _ := a.ListRoles(ctx)
	var names []string
	for _, r := range roles {
		if !r.Builtin {
			names = append(names, r.Name)
		}
	}
	if strings.Join(names, ",") != "auditor,runner" {
		t.Errorf("custom roles after the file: %v", names)
	}
	for body, want := range map[string]string{
		"ok: [sandbox.read]\nbad:\n  - sandbox.read\n  - sandbox.fly\n": "line 4",
		"admin: [audit.read]\n":           "line 1",
		"x: []\n":                         "line 1",
		"x: [sandbox.read]\n  y: [oops\n": "yaml: line",
		"- just\n- a list\n":              "line 1",
		"Upper: [sandbox.read]\n":         "line 1",
	} {
		bad := filepath.Join(dir, "bad.yaml")
		os.WriteFile(bad, []byte(body), 0o644)
		err := a.LoadRolesFile(ctx, bad)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("roles file %q: %v; want an error at %s", body, err, want)
		}
	}
	if roles2, _ := a.ListRoles(ctx); len(roles2) != len(roles) {
		t.Errorf("a malformed file changed the roles: %d, then %d", len(roles), len(roles2))
	}
}

// The configuration file's old tokens: list keeps working: its owner becomes a service
// account with the developer role, and its token authenticates; a restart adds nothing.
func TestStaticTokens(t *testing.T) {
	a, dir := newService(t)
	ctx := context.Background()
	a.Bootstrap(ctx, dir)
	for range 2 {
		if err := a.AddStaticToken(ctx, "a-long-random-secret-value", "ci"); err != nil {
			t.Fatal(err)
		}
	}
	p, err := a.Authenticate(ctx, "a-long-random-secret-value")
	if err != nil || p.Identity != "ci" || !p.Can(auth.SandboxCreate) || p.Can(auth.Admin) {
		t.Fatalf("the static token: %+v, %v", p, err)
	}
	if toks, _ := a.ListTokens(ctx, "ci"); len(toks) != 1 {
		t.Errorf("ci has %d tokens after two starts; want 1", len(toks))
	}
	ids, _ := a.ListIdentities(ctx)
	for _, id := range ids {
		if id.Name == "ci" && id.Kind != "service" {
			t.Errorf("ci is a %s; want a service account", id.Kind)
		}
	}
	if _, err := a.Authenticate(ctx, "a-long-random-secret-valuE"); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("a wrong token: %v", err)
	}
}
