package daemon_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
)

// assembleOn assembles a node on the fake runtime named name, on the store of dsn with
// the keys of keysDir.
func assembleOn(t *testing.T, dsn, name, keysDir string) (*daemon.Node, error) {
	return assembleWith(t, dsn, name, keysDir, nil)
}

// assembleWith is assembleOn with the configuration changed by edit (nil: unchanged).
func assembleWith(t *testing.T, dsn, name, keysDir string, edit func(*config.Config)) (*daemon.Node, error) {
	dir, err := os.MkdirTemp("", "alk-") // short: a unix socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(dir + "-secrets") })
	cfg := config.Default()
	cfg.StateDir, cfg.SecretsDir, cfg.Socket = dir, dir+"-secrets", filepath.Join(dir, "api.sock")
	cfg.Network.Enabled, cfg.Runsc = false, "off"
	cfg.Store.DSN, cfg.Node.Name, cfg.Cluster.KeysDir = config.DSN(dsn), name, keysDir
	if edit != nil {
		edit(&cfg)
	}
	n, err := daemon.Assemble(context.Background(), cfg, daemon.Options{Log: slog.New(slog.DiscardHandler),
		Driver: func(images *image.Store) (runtime.Driver, error) { return fake.New(filepath.Join(dir, "sb"), images) }})
	if err == nil {
		t.Cleanup(func() { n.Close() })
	}
	return n, err
}

// keysDir is a new keys directory, closed to other users.
func keysDir(t *testing.T) string {
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// copyKeys copies the key files of src into a new keys directory, but for those named
// in skip.
func copyKeys(t *testing.T, src string, skip ...string) string {
	dst := keysDir(t)
	for _, name := range []string{"audit.key", "secret.key", "e2b-token.key"} {
		b, err := os.ReadFile(filepath.Join(src, name))
		if os.IsNotExist(err) || strings.Contains(strings.Join(skip, " "), name) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestNodesMustShareKeys: the first node on a store records its keys' fingerprints; a
// second node whose secret.key differs is refused, naming the key and what to do,
// before it takes its name; one with a copy of the first's keys starts.
func TestNodesMustShareKeys(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.Start(t).CreateDatabase(t)
	keys := keysDir(t)
	a, err := assembleOn(t, dsn, "node-a", keys)
	if err != nil {
		t.Fatalf("the first node: %v", err)
	}

	_, err = assembleOn(t, dsn, "node-b", copyKeys(t, keys, "secret.key"))
	if err == nil {
		t.Fatal("a node with another secret.key started on the cluster's store")
	}
	if msg := err.Error(); !strings.Contains(msg, "secret.key in ") || !strings.Contains(msg, "copy audit.key, secret.key and e2b-token.key from the cluster's keys_dir") {
		t.Fatalf("the refusal: %v; want it to name secret.key and say to copy the cluster's keys_dir", err)
	}
	if nodes, err := a.Store.ListNodes(ctx); err != nil || len(nodes) != 1 || nodes[0].Name != "node-a" {
		t.Fatalf("nodes after the refusal: %v, %v; want node-a alone (the refused node took no name)", nodes, err)
	}

	if _, err := assembleOn(t, dsn, "node-c", copyKeys(t, keys)); err != nil {
		t.Fatalf("a node with a copy of the cluster's keys: %v", err)
	}
	if nodes, err := a.Store.ListNodes(ctx); err != nil || len(nodes) != 2 {
		t.Fatalf("nodes: %v, %v; want node-a and node-c", nodes, err)
	}
}
