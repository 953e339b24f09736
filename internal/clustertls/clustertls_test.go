package clustertls_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/clustertls"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/store/sqlite"
)

// What the node-to-node forwarding codes against.
var _ interface {
	ServerConfig() *tls.Config
	ClientConfig(node string) *tls.Config
	PeerNode(*tls.ConnectionState) (string, error)
} = (*clustertls.Identity)(nil)

const (
	token      = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	otherToken = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

// openStore opens a new SQLite store, the one the nodes of a test share.
func openStore(t *testing.T) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(filepath.Join(t.TempDir(), "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func open(t *testing.T, st store.ClusterCA, tok, name string, now func() time.Time) *clustertls.Identity {
	t.Helper()
	id, err := clustertls.Open(t.Context(), st, tok, name, "127.0.0.1:7000", now)
	if err != nil {
		t.Fatalf("Open(%s): %v", name, err)
	}
	return id
}

// result is what one side of a handshake saw.
type result struct {
	peer      string // the peer's node name, by PeerNode
	handshake error  // the handshake's own error
	err       error  // the first error of the handshake, PeerNode or the exchange
}

// handshake runs server cfg against client cfg over loopback, exchanging one byte
// each way so a refusal on either side shows on both, and returns what each saw.
func handshake(t *testing.T, server *clustertls.Identity, serverCfg, clientCfg *tls.Config, client *clustertls.Identity) (srv, cli result) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan result, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			done <- result{err: err}
			return
		}
		defer c.Close()
		tc := tls.Server(c, serverCfg)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			done <- result{handshake: err, err: err}
			return
		}
		cs := tc.ConnectionState()
		name, err := server.PeerNode(&cs)
		if err == nil {
			_, err = tc.Write([]byte("s"))
		}
		if err == nil {
			_, err = io.ReadFull(tc, make([]byte, 1))
		}
		done <- result{peer: name, err: err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc := tls.Client(c, clientCfg)
	tc.SetDeadline(time.Now().Add(10 * time.Second))
	cli.handshake = tc.Handshake()
	cli.err = cli.handshake
	if cli.err == nil {
		cs := tc.ConnectionState()
		cli.peer, cli.err = client.PeerNode(&cs)
	}
	if cli.err == nil {
		_, cli.err = io.ReadFull(tc, make([]byte, 1))
	}
	if cli.err == nil {
		_, cli.err = tc.Write([]byte("c"))
	}
	tc.Close()
	return <-done, cli
}

// mustConnect checks that client reaches server, named server's name, and that each
// sees the other's name.
func mustConnect(t *testing.T, server, client *clustertls.Identity) {
	t.Helper()
	srv, cli := handshake(t, server, server.ServerConfig(), client.ClientConfig(server.Node()), client)
	if srv.err != nil || cli.err != nil {
		t.Fatalf("%s dialling %s: server saw %v, client saw %v; want both to connect", client.Node(), server.Node(), srv.err, cli.err)
	}
	if srv.peer != client.Node() || cli.peer != server.Node() {
		t.Fatalf("%s dialling %s: server saw peer %q, client saw %q; want %q and %q", client.Node(), server.Node(), srv.peer, cli.peer, client.Node(), server.Node())
	}
}

// mustRefuse checks that the handshake of serverCfg and clientCfg fails on the side
// named, in the handshake itself, with an error holding want.
func mustRefuse(t *testing.T, server *clustertls.Identity, serverCfg, clientCfg *tls.Config, client *clustertls.Identity, side, want string) {
	t.Helper()
	srv, cli := handshake(t, server, serverCfg, clientCfg, client)
	got := map[string]result{"server": srv, "client": cli}[side]
	if got.handshake == nil || !strings.Contains(got.handshake.Error(), want) {
		t.Fatalf("the %s's handshake ended in %v (server saw %v, client %v); want an error holding %q", side, got.handshake, srv.err, cli.err, want)
	}
}

func TestNodesConnectBothWays(t *testing.T) {
	st := openStore(t)
	a, b := open(t, st, token, "a", nil), open(t, st, token, "b", nil)
	mustConnect(t, a, b)
	mustConnect(t, b, a)
}

func TestWrongTokenRefused(t *testing.T) {
	st := openStore(t)
	open(t, st, token, "a", nil)
	_, err := clustertls.Open(t.Context(), st, otherToken, "c", "", nil)
	if err == nil || !strings.Contains(err.Error(), "the join token does not match the cluster's (") || !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Fatalf("Open with another token = %v; want a failed precondition saying the join token does not match the cluster's", err)
	}
}

func TestEmptyTokenOnSharedStoreRefused(t *testing.T) {
	st := shared{openStore(t)}
	_, err := clustertls.Open(t.Context(), st, "", "a", "", nil)
	if err == nil || !strings.Contains(err.Error(), "set cluster.join_token") {
		t.Fatalf("Open with no token on a shared store = %v; want a refusal saying to set cluster.join_token", err)
	}
	if _, gerr := st.GetClusterCA(t.Context()); !errors.Is(gerr, errdefs.ErrNotFound) {
		t.Fatalf("after the refusal GetClusterCA = %v; want no CA stored", gerr)
	}
}

// shared is a store that says other nodes reach it, as PostgreSQL does.
type shared struct{ *sqlite.Store }

func (shared) SharedByNodes() bool { return true }

func TestDamagedRecordToldApartFromWrongToken(t *testing.T) {
	st := openStore(t)
	open(t, st, token, "a", nil)
	rec, err := st.GetClusterCA(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	rec.SealedKey[len(rec.SealedKey)-1] ^= 1
	_, err = clustertls.Open(t.Context(), fixed{rec}, token, "b", "", nil)
	if err == nil || !strings.Contains(err.Error(), "damaged") || strings.Contains(err.Error(), "does not match") {
		t.Fatalf("Open on a damaged record = %v; want an error saying the CA is damaged, not that the token is wrong", err)
	}
}

// fixed is a store that holds rec and takes no other.
type fixed struct{ rec *store.ClusterCARecord }

func (f fixed) GetClusterCA(context.Context) (*store.ClusterCARecord, error) { return f.rec, nil }
func (f fixed) PutClusterCAIfAbsent(context.Context, *store.ClusterCARecord) (*store.ClusterCARecord, error) {
	return f.rec, nil
}

func TestForeignCARefused(t *testing.T) {
	st := openStore(t)
	a := open(t, st, token, "a", nil)
	// A node named "b" of another cluster (another store), even with the same token.
	foreign := open(t, openStore(t), token, "b", nil)
	// Each time the other side accepts anything, so only the side under test refuses.
	trusting := foreign.ClientConfig("a")
	trusting.VerifyConnection = nil
	mustRefuse(t, a, a.ServerConfig(), trusting, foreign, "server", "certificate signed by unknown authority")
	bare := &tls.Config{MinVersion: tls.VersionTLS13, InsecureSkipVerify: true}
	mustRefuse(t, a, a.ServerConfig(), bare, a, "server", "didn't provide a certificate")
	lax := foreign.ServerConfig()
	lax.ClientAuth, lax.VerifyConnection = tls.NoClientCert, nil
	mustRefuse(t, foreign, lax, a.ClientConfig("b"), a, "client", "the peer's certificate is not the cluster's")
}

func TestClientChecksServerNode(t *testing.T) {
	st := openStore(t)
	a, c := open(t, st, token, "a", nil), open(t, st, token, "c", nil)
	mustRefuse(t, c, c.ServerConfig(), a.ClientConfig("b"), a, "client", `the server is node "c", not "b"`)
}

func TestRotation(t *testing.T) {
	st := openStore(t)
	// A fake clock, moved by hand; both nodes read it.
	var elapsed atomic.Int64
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	now := func() time.Time { return start.Add(time.Duration(elapsed.Load())) }
	add := func(d time.Duration) { elapsed.Add(int64(d)) }
	a, b := open(t, st, token, "a", now), open(t, st, token, "b", now)
	leafOf := func(id *clustertls.Identity) *tls.Certificate {
		cert, err := id.ClientConfig("x").GetClientCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		return cert
	}
	first := leafOf(a)
	if got := first.Leaf.NotAfter.Sub(first.Leaf.NotBefore); got < clustertls.LeafLifetime || got > clustertls.LeafLifetime+time.Hour {
		t.Fatalf("a leaf is valid for %v; want about %v", got, clustertls.LeafLifetime)
	}
	add(clustertls.LeafLifetime/2 - time.Minute)
	if leafOf(a) != first {
		t.Fatal("a new leaf before half-life; want the first one kept")
	}
	add(2 * time.Minute)
	second := leafOf(a)
	if second == first || second.Leaf.SerialNumber.Cmp(first.Leaf.SerialNumber) == 0 {
		t.Fatal("the same leaf past half-life; want a new one")
	}
	if !second.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Fatalf("the new leaf ends %v, the first %v; want it to end later", second.Leaf.NotAfter, first.Leaf.NotAfter)
	}
	mustConnect(t, a, b)
	mustConnect(t, b, a)
	// Past the first leaf's end, the renewed ones still connect.
	add(clustertls.LeafLifetime/2 + time.Hour)
	mustConnect(t, a, b)
	mustConnect(t, b, a)
}

func TestConcurrentOpenMakesOneCA(t *testing.T) {
	dir := t.TempDir()
	ids := make([]*clustertls.Identity, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := range ids {
		// Each node its own connection to the one database, as separate nodes have.
		st, err := sqlite.Open(filepath.Join(dir, "airlock.db"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		wg.Go(func() {
			ids[i], errs[i] = clustertls.Open(t.Context(), st, token, fmt.Sprintf("n%d", i), "", nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open n%d: %v", i, err)
		}
	}
	for i := range ids {
		if !ids[i].CA().Equal(ids[0].CA()) {
			t.Fatalf("n%d has CA %x, n0 has %x; want one CA", i, ids[i].CA().SerialNumber, ids[0].CA().SerialNumber)
		}
	}
	mustConnect(t, ids[1], ids[2])
	mustConnect(t, ids[2], ids[0])
}

func TestLeafNames(t *testing.T) {
	st := openStore(t)
	for _, tt := range []struct{ advertise, ip, dns string }{
		{"10.1.2.3:7000", "10.1.2.3", ""},
		{"[fd00::1]:7000", "fd00::1", ""},
		{"node-a.example.com:7000", "", "node-a.example.com"},
		{"", "", ""},
	} {
		id, err := clustertls.Open(t.Context(), st, token, "a", tt.advertise, nil)
		if err != nil {
			t.Fatalf("Open(advertise %q): %v", tt.advertise, err)
		}
		cert, err := id.ServerConfig().GetCertificate(nil)
		if err != nil {
			t.Fatal(err)
		}
		l := cert.Leaf
		var ip, dns string
		if len(l.IPAddresses) == 1 {
			ip = l.IPAddresses[0].String()
		}
		if len(l.DNSNames) == 1 {
			dns = l.DNSNames[0]
		}
		uris := fmt.Sprint(l.URIs)
		if uris != "[airlock-node://a]" || ip != tt.ip || dns != tt.dns || len(l.IPAddresses)+len(l.DNSNames) > 1 {
			t.Errorf("advertise %q: leaf has URIs %s, IPs %v, DNS names %v; want [airlock-node://a], %q, %q", tt.advertise, uris, l.IPAddresses, l.DNSNames, tt.ip, tt.dns)
		}
	}
	for _, bad := range []struct{ name, advertise string }{{"A", ""}, {"a/b", ""}, {"", ""}, {"a", "10.1.2.3"}} {
		if _, err := clustertls.Open(t.Context(), st, token, bad.name, bad.advertise, nil); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("Open(name %q, advertise %q) = %v; want invalid argument", bad.name, bad.advertise, err)
		}
	}
}
