package daemon_test

import (
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
)

// TestClusterTLS: nodes that serve the other nodes (node.listen) get an identity from
// the one cluster CA and complete a mutual TLS handshake; a node whose join token is
// not the cluster's is refused before it takes its name; a node that does not serve
// gets none.
func TestClusterTLS(t *testing.T) {
	dsn := pgtest.Start(t).CreateDatabase(t)
	keys := keysDir(t)
	serving := func(token, addr string) func(*config.Config) {
		return func(cfg *config.Config) {
			cfg.Node.Listen, cfg.Cluster.JoinToken = addr, config.JoinToken(token)
		}
	}
	token := strings.Repeat("ab", 32)
	a, err := assembleWith(t, dsn, "node-a", keys, serving(token, "127.0.0.1:7401"))
	if err != nil {
		t.Fatalf("node-a: %v", err)
	}
	b, err := assembleWith(t, dsn, "node-b", copyKeys(t, keys), serving(token, "127.0.0.1:7402"))
	if err != nil {
		t.Fatalf("node-b: %v", err)
	}
	if a.ClusterTLS == nil || b.ClusterTLS == nil {
		t.Fatalf("ClusterTLS of node-a %v, node-b %v; want both set", a.ClusterTLS, b.ClusterTLS)
	}
	// node-b dials node-a; each names the other.
	server, client := net.Pipe()
	done := make(chan error, 1)
	var seen string
	go func() {
		s := tls.Server(server, a.ClusterTLS.ServerConfig())
		err := s.Handshake()
		if err == nil {
			cs := s.ConnectionState()
			seen, err = a.ClusterTLS.PeerNode(&cs)
		}
		s.Close()
		done <- err
	}()
	c := tls.Client(client, b.ClusterTLS.ClientConfig("node-a"))
	if err := c.Handshake(); err != nil {
		t.Fatalf("node-b dialling node-a: %v", err)
	}
	cs := c.ConnectionState()
	if name, err := b.ClusterTLS.PeerNode(&cs); err != nil || name != "node-a" {
		t.Fatalf("node-b sees its peer as %q, %v; want node-a", name, err)
	}
	if err := <-done; err != nil || seen != "node-b" {
		t.Fatalf("node-a sees its peer as %q, %v; want node-b", seen, err)
	}
	c.Close()

	_, err = assembleWith(t, dsn, "node-c", copyKeys(t, keys), serving(strings.Repeat("cd", 32), "127.0.0.1:7403"))
	if err == nil || !strings.Contains(err.Error(), "the join token does not match the cluster's (") {
		t.Fatalf("a node with another join token: %v; want it refused, saying the join token does not match the cluster's", err)
	}
	if _, err := a.Store.GetNode(t.Context(), "node-c"); err == nil {
		t.Fatal("the refused node-c took its name")
	}

	d, err := assembleOn(t, dsn, "node-d", copyKeys(t, keys))
	if err != nil {
		t.Fatalf("node-d: %v", err)
	}
	if d.ClusterTLS != nil {
		t.Fatal("node-d, which serves no nodes, has a cluster TLS identity")
	}
}
