package daemon_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/postgres"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// TestStoreFromConfig: a configuration without store.dsn keeps the node's records in
// SQLite in its state directory; with one, in that PostgreSQL database. What the node
// says of its store, and every error opening it, leaves the DSN's password out.
func TestStoreFromConfig(t *testing.T) {
	ctx := context.Background()
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	st, err := daemon.OpenStore(ctx, cfg)
	if err != nil {
		t.Fatalf("OpenStore without store.dsn: %v", err)
	}
	if _, ok := st.(*sqlite.Store); !ok || fmt.Sprint(st) != "SQLite "+cfg.StateDir+"/airlock.db" {
		t.Errorf("OpenStore without store.dsn: got %T %q, want SQLite in the state directory", st, fmt.Sprint(st))
	}
	st.Close()

	srv := pgtest.Start(t)
	cfg.Store.DSN = config.DSN(srv.CreateDatabase(t))
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a configuration with the test server's DSN: %v", err)
	}
	st, err = daemon.OpenStore(ctx, cfg)
	if err != nil {
		t.Fatalf("OpenStore with store.dsn: %v", err)
	}
	defer st.Close()
	if _, ok := st.(*postgres.Store); !ok {
		t.Errorf("OpenStore with store.dsn: got %T, want the PostgreSQL store", st)
	}
	if got := fmt.Sprint(st); strings.Contains(got, srv.Password()) || !strings.Contains(got, "xxxxx") {
		t.Errorf("the PostgreSQL store describes itself as %q; want its DSN with the password replaced by xxxxx", got)
	}
	if _, err := st.ListSandboxes(ctx, store.SandboxFilter{}); err != nil {
		t.Errorf("ListSandboxes on the PostgreSQL store: %v", err)
	}

	cfg.Store.DSN = config.DSN(strings.Replace(string(cfg.Store.DSN), srv.Password(), "wrong-Pa55word", 1))
	if st, err := daemon.OpenStore(ctx, cfg); err == nil {
		st.Close()
		t.Errorf("OpenStore with a wrong password: got no error, want one")
	} else if strings.Contains(err.Error(), "wrong-Pa55word") {
		t.Errorf("OpenStore with a wrong password: got error %q, which holds the password", err)
	}
}
