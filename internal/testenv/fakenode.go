package testenv

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/audit"
	"github.com/airlockhq/airlock/internal/auth"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/manager"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/secret"
	"github.com/airlockhq/airlock/internal/server"
	"github.com/airlockhq/airlock/internal/snapshot"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// FakeNode is a whole node on the fake runtime: SQLite, the image and snapshot stores,
// the manager and the real HTTP server on a unix socket (and TCP, for token owners). It
// needs no root: the tests of the HTTP edge, the SDK and the CLI run on it.
type FakeNode struct {
	Dir      string
	Socket   string
	Addr     string // the TCP listener, when the node has token owners
	Driver   *fake.Driver
	Store    store.Store
	Manager  *manager.Manager
	Auth     *auth.Service
	AuditLog *audit.Chain
	Server   *server.Server
	Client   *client.Client

	tokens map[string]string // owner -> token
}

// FakeOptions adjust a fake node.
type FakeOptions struct {
	Version string   // what /v1/status reports (default "test")
	Owners  []string // owners who reach the node over TCP with a token of their own
	// Config, if set, adjusts the manager's configuration.
	Config func(*manager.Config)
	// Logger, if set, is the node's log (default: errors only, to the test's log).
	Logger *slog.Logger
	// SecretDelivery delivers bound secrets to the node's processes, as a real node does,
	// through secret.NewFakeDelivery: files in a directory of the test's, so no root.
	SecretDelivery bool
}

// NewFakeNode starts a fake node; its cleanup terminates every sandbox and removes it.
func NewFakeNode(t testing.TB, opts FakeOptions) *FakeNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "alf-") // short: a unix socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) }) // runs last, even when the start fails
	n := &FakeNode{Dir: dir, Socket: filepath.Join(dir, "api.sock"), tokens: map[string]string{}}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	if n.Store, err = sqlite.Open(filepath.Join(dir, "airlock.db")); err != nil {
		t.Fatal(err)
	}
	images, err := image.Open(filepath.Join(dir, "images"))
	if err != nil {
		t.Fatal(err)
	}
	if n.Driver, err = fake.New(filepath.Join(dir, "sb"), images); err != nil {
		t.Fatal(err)
	}
	cfg := manager.DefaultConfig()
	cfg.DefaultLimits.Disk = 0 // the fake has no disk to cap
	if opts.Config != nil {
		opts.Config(&cfg)
	}
	n.Manager = manager.New(cfg, n.Store, n.Driver, images, log)
	snaps, err := snapshot.Open(filepath.Join(dir, "snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	n.Manager.SetSnapshots(snaps)
	if err := n.Manager.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	n.Manager.Start()
	n.Auth, n.tokens = newAuth(t, n.Store, dir, opts.Owners)
	n.AuditLog = newAuditLog(t, n.Store, dir)
	n.Manager.SetAuditLog(n.AuditLog)
	version := opts.Version
	if version == "" {
		version = "test"
	}
	secrets := newSecrets(t, n.Store, dir)
	n.Manager.SetSecrets(secrets, n.secretDelivery(t, secrets, dir+"-secrets", opts.SecretDelivery, log))
	srv := server.New(n.Manager, server.Options{Version: version, StateDir: dir, Auth: n.Auth, AuditLog: n.AuditLog, Secrets: secrets}, log)
	n.Server = srv
	hs, addr, c := serve(t, srv, n.Socket, len(opts.Owners) > 0)
	n.Addr, n.Client = addr, c
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hs.Close()
		terminateAll(ctx, t, n.Store, n.Manager)
		n.Manager.Close()
		n.Store.Close()
	})
	return n
}

// secretDelivery is the node's delivery of secrets when on: without it bindings are
// kept but reach no sandbox.
func (n *FakeNode) secretDelivery(t testing.TB, secrets *secret.Service, dir string, on bool, log *slog.Logger) *secret.Delivery {
	if !on {
		return nil
	}
	d, err := secret.NewFakeDelivery(secrets, dir, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return d
}

// Token is owner's bearer token (one of FakeOptions.Owners).
func (n *FakeNode) Token(t testing.TB, owner string) string {
	t.Helper()
	tok, ok := n.tokens[owner]
	if !ok {
		t.Fatalf("owner %q is not one of the node's FakeOptions.Owners", owner)
	}
	return tok
}
