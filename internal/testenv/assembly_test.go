package testenv

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlockhq/airlock/internal/daemon"
	airlockrt "github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/fake"
)

// TestFakeNodeIsTheDaemonsNode: a fake node is the node `airlock serve` assembles from
// the same configuration, but for the parts a test substitutes (the runtime, secret
// delivery): the same routes, planes, runtimes and health checks.
func TestFakeNodeIsTheDaemonsNode(t *testing.T) {
	opts := FakeOptions{E2B: true, SecretDelivery: true}
	n := NewFakeNode(t, opts)

	dir, err := os.MkdirTemp("", "alf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(dir + "-secrets") })
	cfg := n.Config
	cfg.StateDir, cfg.SecretsDir, cfg.Socket = dir, dir+"-secrets", filepath.Join(dir, "api.sock")
	var drv *fake.Driver
	d, err := daemon.Assemble(context.Background(), cfg, fakeAssembly(cfg, opts, slog.New(slog.DiscardHandler), &drv))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()

	if got, want := n.Server.Routes(), d.Server.Routes(); !slices.Equal(got, want) {
		t.Errorf("routes: the harness's node has %v, the daemon's %v", got, want)
	}
	for _, p := range []struct {
		part          string
		harness, node bool
	}{
		{"E2B plane", n.E2B != nil, d.E2B != nil},
		{"audit chain", n.AuditLog != nil, d.AuditLog != nil},
		{"identities", n.Auth != nil, d.Auth != nil},
		{"secrets", n.Secrets != nil, d.Secrets != nil},
		{"secret delivery", n.Delivery != nil, d.Delivery != nil},
		{"snapshots", n.Snapshots != nil, d.Snapshots != nil},
		{"shared ports", n.Ports != nil, d.Ports != nil},
	} {
		if !p.harness || !p.node {
			t.Errorf("%s: the harness's node has one: %v, the daemon's: %v; want both", p.part, p.harness, p.node)
		}
	}
	if got, want := n.Manager.Runtimes(), d.Manager.Runtimes(); !slices.Equal(got, want) {
		t.Errorf("runtimes: the harness's node has %v, the daemon's %v", got, want)
	}
	ctx := context.Background()
	got, want := checkNames(n.Manager.Health(ctx, "", nil).Checks), checkNames(d.Manager.Health(ctx, "", nil).Checks)
	if !slices.Equal(got, want) || len(want) == 0 {
		t.Errorf("health checks: the harness's node has %v, the daemon's %v", got, want)
	}
}

func checkNames(checks []airlockrt.Check) []string {
	var out []string
	for _, c := range checks {
		out = append(out, c.Name)
	}
	return out
}
