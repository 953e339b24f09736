package testenv

import (
	"context"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
)

// TestFakeNodeOnPostgres: a node whose store.dsn names a PostgreSQL database keeps
// everything there through the same contract, with nothing else changed: token owners
// (identities, tokens), sandboxes and their operations and events, secrets, the audit
// chain. Its status names the store without the password.
func TestFakeNodeOnPostgres(t *testing.T) {
	srv := pgtest.Start(t)
	n := NewFakeNode(t, FakeOptions{Owners: []string{"alice"}, StoreDSN: srv.CreateDatabase(t)})
	ctx := context.Background()
	alice, err := client.New(client.Options{Addr: n.Addr, Token: n.Token(t, "alice")})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Create(ctx, api.CreateSandboxRequest{Name: "web"}); err != nil {
		t.Fatalf("create as alice: %v", err)
	}
	res, err := alice.Exec(ctx, "web", api.ExecRequest{Argv: []string{"echo", "hi"}})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("exec in web: %+v, %v; want it to succeed", res, err)
	}
	if _, err := alice.CreateSecret(ctx, api.CreateSecretRequest{Name: "gh", Type: "token", Value: "s3cret-value"}); err != nil {
		t.Fatalf("create a secret: %v", err)
	}
	if sb, err := n.Store.GetSandboxByName(ctx, "alice", "web"); err != nil || sb.State != "running" {
		t.Errorf("the sandbox in PostgreSQL: %+v, %v; want alice/web running", sb, err)
	}
	if secs, err := n.Store.ListSecrets(ctx, "alice"); err != nil || len(secs) != 1 {
		t.Errorf("alice's secrets in PostgreSQL: %d, %v; want 1", len(secs), err)
	}
	if v, err := n.AuditLog.Verify(ctx); err != nil || !v.OK || v.Records == 0 {
		t.Errorf("the audit chain in PostgreSQL: %+v, %v; want records that verify", v, err)
	}

	st, err := n.Client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Checks) == 0 || st.Checks[0].Name != "store" || !st.Checks[0].OK ||
		!strings.HasPrefix(st.Checks[0].Detail, "PostgreSQL postgres://airlock:xxxxx@") || strings.Contains(st.Checks[0].Detail, srv.Password()) {
		t.Errorf("status's store check: %+v; want it passing, naming PostgreSQL and its DSN without the password", st.Checks)
	}
}
