package testenv

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/daemon"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/image"
	"github.com/airlockhq/airlock/internal/manager"
	airlockrt "github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/fake"
	"github.com/airlockhq/airlock/internal/secret"
)

// FakeNode is a whole node on the fake runtime, assembled as `airlock serve` assembles
// one (daemon.Assemble) but for the runtime and secret delivery: SQLite, the image and
// snapshot stores, the manager, identities, the audit chain, secrets, and the real HTTP
// server on a unix socket (and TCP, for token owners). It needs no root: the tests of
// the HTTP edge, the SDK and the CLI run on it.
type FakeNode struct {
	*daemon.Node
	Dir    string
	Socket string
	Addr   string // the TCP listener, when the node has token owners
	// E2BURL is where the E2B plane serves, when FakeOptions.E2B is set.
	E2BURL string
	// ClusterAddr is the node listener's address, when FakeOptions.ClusterTLS is set.
	ClusterAddr string
	// Config is the configuration the node was assembled from.
	Config config.Config
	Driver *fake.Driver
	Client *client.Client

	tokens  map[string]string // owner -> token
	cluster *http.Server      // the node listener's server
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
	// E2B serves the node's E2B-compatible plane (e2b_listen) at FakeNode.E2BURL, with
	// E2BDomain as its e2b_domain.
	E2B       bool
	E2BDomain string
	// StoreDSN, if set, keeps the node's records in this PostgreSQL database (store.dsn)
	// instead of SQLite in its state directory.
	StoreDSN string
	// NodeName is the node's name (node.name; default node-1): nodes that share a
	// StoreDSN need one each.
	NodeName string
	// NodeLabels are the node's node.labels.
	NodeLabels map[string]string
	// KeysDir is the node's cluster.keys_dir (mode 700): nodes that share a StoreDSN
	// must share one, or all but the first are refused.
	KeysDir string
	// ClusterTLS, if set, makes the node forward calls about other nodes' sandboxes and
	// serve its node listener (node.listen) on loopback at FakeNode.ClusterAddr, which
	// it advertises; Place chooses where creates go.
	ClusterTLS forward.ClusterTLS
	Place      forward.Place
	// Objects, if set, is the node's object store (objects:); its keys are in the
	// environment variables it names.
	Objects config.Objects
}

// NewFakeNode starts a fake node; its cleanup terminates every sandbox and removes it.
func NewFakeNode(t testing.TB, opts FakeOptions) *FakeNode {
	t.Helper()
	dir, err := os.MkdirTemp("", "alf-") // short: a unix socket path is at most 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	secretsDir := dir + "-secrets"
	t.Cleanup(func() { os.RemoveAll(dir); os.RemoveAll(secretsDir) }) // runs last, even when the start fails
	n := &FakeNode{Dir: dir, Socket: filepath.Join(dir, "api.sock")}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	n.Config = nodeConfig(dir, secretsDir, n.Socket)
	n.Config.Store.DSN = config.DSN(opts.StoreDSN)
	if opts.NodeName != "" {
		n.Config.Node.Name = opts.NodeName
	}
	n.Config.Cluster.KeysDir, n.Config.Node.Labels = opts.KeysDir, opts.NodeLabels
	n.Config.Objects = opts.Objects
	if opts.E2B {
		n.Config.E2BListen, n.Config.E2BDomain = "127.0.0.1:0", opts.E2BDomain // served below, on a listener of the test's
	}
	var nl net.Listener
	if opts.ClusterTLS != nil {
		if nl, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
		n.ClusterAddr = nl.Addr().String()
		n.Config.Node.Listen, n.Config.Node.Advertise = n.ClusterAddr, n.ClusterAddr
		n.Config.Cluster.JoinToken = config.JoinToken(strings.Repeat("j", config.MinJoinToken))
	}
	node, err := daemon.Assemble(context.Background(), n.Config, fakeAssembly(n.Config, opts, log, &n.Driver))
	if err != nil {
		if nl != nil {
			nl.Close()
		}
		t.Fatal(err)
	}
	if nl != nil {
		n.cluster = node.ClusterServer()
		go n.cluster.ServeTLS(nl, "", "")
		t.Cleanup(func() { n.cluster.Close() })
	}
	n.Node = node
	n.tokens = addOwners(t, node, opts.Owners)
	hs, addr, c := serve(t, node, n.Socket, len(opts.Owners) > 0)
	n.Addr, n.Client = addr, c
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hs.Close()
		terminateAll(ctx, t, n.Store, n.Manager)
		node.Close()
	})
	if node.E2B != nil {
		srv := httptest.NewServer(node.E2B)
		t.Cleanup(srv.Close)
		n.E2BURL = srv.URL
	}
	return n
}

// fakeAssembly is what a node on the fake runtime substitutes in daemon.Assemble: the
// fake driver (stored in *drv), and what it cannot do or use: no disk to cap, no host
// workspaces to mount, no host size to bound a create by (so tests answer alike on every
// machine); with opts.SecretDelivery, secrets delivered as files
// (secret.NewFakeDelivery) in cfg's secrets_dir. Then opts.Config adjusts the manager's
// configuration.
func fakeAssembly(cfg config.Config, opts FakeOptions, log *slog.Logger, drv **fake.Driver) daemon.Options {
	version := opts.Version
	if version == "" {
		version = "test"
	}
	return daemon.Options{Log: log, Version: version,
		Driver: func(images *image.Store) (airlockrt.Driver, error) {
			d, err := fake.New(filepath.Join(cfg.StateDir, "sb"), images)
			if err != nil {
				return nil, err
			}
			*drv = d
			return d, nil
		},
		SecretDelivery: func(s *secret.Service, log *slog.Logger) (*secret.Delivery, error) {
			if !opts.SecretDelivery {
				return nil, nil // bindings are kept but reach no sandbox
			}
			return secret.NewFakeDelivery(s, cfg.SecretsDir, log)
		},
		ClusterTLS: opts.ClusterTLS, Place: opts.Place,
		Manager: func(c *manager.Config) {
			c.DefaultLimits.Disk, c.WorkspaceDir, c.HostCPU, c.HostMemory = 0, "", 0, 0
			if opts.Config != nil {
				opts.Config(c)
			}
		},
	}
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
