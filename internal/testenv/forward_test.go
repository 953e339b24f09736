package testenv

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/forward"
	"github.com/airlockhq/airlock/internal/store/postgres/pgtest"
	"github.com/airlockhq/airlock/internal/testenv/testca"
)

// cluster is two fake nodes, node-a and node-b, on one PostgreSQL database and one
// keys_dir, each with a certificate of one test CA and a node listener; alice reaches
// node-a's TCP listener with her token. Creates through node-a go where place says.
type cluster struct {
	a, b  *FakeNode
	ca    *testca.CA
	alice *client.Client
}

func newCluster(t testing.TB, place forward.Place, adjust ...func(*FakeOptions)) *cluster {
	t.Helper()
	return newClusterWith(t, place, false, adjust...)
}

// newClusterWith is newCluster whose nodes serve the E2B-compatible plane too when e2b
// is set (FakeNode.E2BURL).
func newClusterWith(t testing.TB, place forward.Place, e2b bool, adjust ...func(*FakeOptions)) *cluster {
	t.Helper()
	dsn := pgtest.Start(t).CreateDatabase(t)
	keys := t.TempDir()
	if err := os.Chmod(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	c := &cluster{ca: testca.New(t)}
	start := func(o FakeOptions) *FakeNode {
		for _, f := range adjust {
			f(&o)
		}
		return NewFakeNode(t, o)
	}
	c.b = start(FakeOptions{StoreDSN: dsn, NodeName: "node-b", KeysDir: keys, ClusterTLS: c.ca.Node(t, "node-b"), E2B: e2b})
	c.a = start(FakeOptions{StoreDSN: dsn, NodeName: "node-a", KeysDir: keys, ClusterTLS: c.ca.Node(t, "node-a"),
		Owners: []string{"alice"}, Place: place, E2B: e2b})
	var err error
	if c.alice, err = client.New(client.Options{Addr: c.a.Addr, Token: c.a.Token(t, "alice")}); err != nil {
		t.Fatal(err)
	}
	return c
}

// toB places every create on node-b.
func toB(context.Context, forward.PlaceRequest) (string, error) { return "node-b", nil }

// TestForwardedCallsReachTheSandboxsNode: a create that the placement puts on node-b,
// sent to node-a, is made on node-b; a get, an exec, a streamed exec, a streamed upload
// and a PTY for it, sent to node-a, are answered by node-b (its container, its audit
// record naming node-a); the stream's first line and the upload's first bytes reach
// node-b before the caller has sent or received the rest (nothing is buffered on the
// way).
func TestForwardedCallsReachTheSandboxsNode(t *testing.T) {
	c := newCluster(t, toB)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	resp, err := c.alice.Create(ctx, api.CreateSandboxRequest{Name: "far"})
	if err != nil {
		t.Fatalf("create through node-a: %v", err)
	}
	id := resp.Sandbox.ID
	if resp.Sandbox.Node != "node-b" || !c.b.Driver.Running(id) || c.a.Driver.Running(id) {
		t.Fatalf("the placed create: node %q, running on b %v, on a %v; want it made on node-b only",
			resp.Sandbox.Node, c.b.Driver.Running(id), c.a.Driver.Running(id))
	}
	if sb, err := c.alice.Get(ctx, "far"); err != nil || sb.Node != "node-b" {
		t.Fatalf("get through node-a = %+v, %v", sb, err)
	}
	if res, err := c.alice.Exec(ctx, "far", api.ExecRequest{Argv: []string{"sh", "-c", "echo hi; pwd"}}); err != nil ||
		res.Stdout != "hi\n"+c.b.Driver.Path(id, "/")+"\n" {
		t.Fatalf("exec through node-a = %+v, %v; want hi and node-b's sandbox directory", res, err)
	}

	// The stream's first line arrives while the command still waits for the file the
	// test makes only then.
	first := make(chan struct{})
	var once sync.Once
	out := writerFunc(func(p []byte) (int, error) {
		once.Do(func() { close(first) })
		return len(p), nil
	})
	done := make(chan error, 1)
	go func() {
		res, err := c.alice.ExecStream(ctx, "far", api.ExecRequest{Argv: []string{"sh", "-c",
			"echo first; while [ ! -e go ]; do sleep 0.05; done; echo last"}}, out, io.Discard)
		if err == nil && res.ExitCode != 0 {
			err = errors.New("exit " + res.State)
		}
		done <- err
	}()
	select {
	case <-first:
	case err := <-done:
		t.Fatalf("the streamed exec ended before its first line reached the caller: %v", err)
	case <-ctx.Done():
		t.Fatal("the streamed exec's first line never reached the caller through node-a")
	}
	if err := os.WriteFile(c.b.Driver.Path(id, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("streamed exec through node-a: %v", err)
	}

	// The upload's first MiB is in node-b's sandbox while the caller still holds the rest.
	pr, pw := io.Pipe()
	upDone := make(chan error, 1)
	go func() {
		_, err := c.alice.Upload(ctx, "far", "/big", 0o644, pr)
		upDone <- err
	}()
	chunk := bytes.Repeat([]byte("x"), 1<<20)
	if _, err := pw.Write(chunk); err != nil {
		t.Fatal(err)
	}
	if !waitFor(ctx, func() bool { return partialUpload(c.b.Driver.Path(id, "/")) >= 1<<19 }) {
		t.Fatal("the upload's first MiB never reached node-b while the caller held the rest: buffered on the way")
	}
	for range 3 {
		pw.Write(chunk)
	}
	pw.Close()
	if err := <-upDone; err != nil {
		t.Fatalf("upload through node-a: %v", err)
	}
	if fi, err := os.Stat(c.b.Driver.Path(id, "/big")); err != nil || fi.Size() != 4<<20 {
		t.Fatalf("the uploaded file on node-b: %v, %v; want 4 MiB", fi, err)
	}

	pty, err := c.alice.PTY(ctx, "far", 24, 80, []string{"sh", "-c", "echo pty-on-$(basename $PWD)"})
	if err != nil {
		t.Fatalf("PTY through node-a: %v", err)
	}
	b, _ := io.ReadAll(pty)
	pty.Close()
	if !strings.Contains(string(b), "pty-on-upper") {
		t.Fatalf("the PTY through node-a printed %q; want node-b's sandbox's output", b)
	}

	recs, err := c.a.Client.AuditLog(ctx, client.AuditFilter{Action: "POST /v1/sandboxes/{ref}/exec"})
	if err != nil {
		t.Fatal(err)
	}
	via := 0
	for _, r := range recs {
		var e struct{ Source string }
		json.Unmarshal(r.Record, &e)
		if strings.HasPrefix(e.Source, "node node-a (forwarded; there: tcp ") {
			via++
		}
	}
	if via != 2 || len(recs) != 2 {
		t.Fatalf("the execs' audit records: %d, %d of them through node-a; want one each, written by node-b, naming node-a", len(recs), via)
	}
}

// TestForwardingHeaderOnlyFromClusterNodes: the forwarding header sent to a public
// listener is refused; the node listener refuses a certificate of another CA and a
// connection without one, and a forwarded call of a revoked token.
func TestForwardingHeaderOnlyFromClusterNodes(t *testing.T) {
	c := newCluster(t, nil)
	ctx := context.Background()
	// A caller that claims to be forwarded for the admin, on node-a's public listener.
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+c.a.Addr+"/v1/whoami", nil)
	req.Header.Set("Authorization", "Bearer "+c.a.Token(t, "alice"))
	req.Header.Set(forward.Header, forward.Caller{Identity: "root"}.Encode())
	if status, body := do(t, http.DefaultClient, req); status != http.StatusForbidden || !strings.Contains(body, "accepted only from the cluster's nodes") {
		t.Fatalf("the forwarding header on the public listener: %d %s; want 403", status, body)
	}

	call := func(tc *tls.Config, caller forward.Caller) (int, string, error) {
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}}
		defer hc.CloseIdleConnections()
		req, _ := http.NewRequestWithContext(ctx, "GET", "https://"+c.b.ClusterAddr+"/v1/whoami", nil)
		req.Header.Set(forward.Header, caller.Encode())
		resp, err := hc.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	tokens, err := c.a.Auth.ListTokens(ctx, "alice")
	if err != nil || len(tokens) != 1 {
		t.Fatalf("alice's tokens: %v, %v", tokens, err)
	}
	alice := forward.Caller{Identity: "alice", TokenID: tokens[0].ID}
	if status, body, err := call(c.ca.Node(t, "node-a").ClientConfig("node-b"), alice); err != nil || status != http.StatusOK || !strings.Contains(body, `"alice"`) {
		t.Fatalf("node-a's forwarded whoami on node-b: %d %s %v; want alice", status, body, err)
	}
	other := testca.New(t).Node(t, "node-a")
	tc := other.ClientConfig("node-b")
	tc.VerifyConnection = nil // it trusts node-b; node-b must not trust it
	if status, body, err := call(tc, alice); err == nil {
		t.Fatalf("a certificate of another CA on the node listener: %d %s; want the handshake refused", status, body)
	}
	tc = c.ca.Node(t, "node-a").ClientConfig("node-b")
	tc.Certificates, tc.GetClientCertificate = nil, nil
	if status, body, err := call(tc, alice); err == nil {
		t.Fatalf("no client certificate on the node listener: %d %s; want the handshake refused", status, body)
	}
	if _, err := c.a.Auth.RevokeToken(ctx, tokens[0].ID); err != nil {
		t.Fatal(err)
	}
	if status, body, err := call(c.ca.Node(t, "node-a").ClientConfig("node-b"), alice); err != nil || status != http.StatusUnauthorized {
		t.Fatalf("a forwarded call of a revoked token: %d %s %v; want 401", status, body, err)
	}
}

// TestForwardToANodeThatIsGone: a call about a sandbox whose node cannot be reached, or
// has stopped, is answered by the node reached with an unavailable error naming that
// node and its state.
func TestForwardToANodeThatIsGone(t *testing.T) {
	c := newCluster(t, toB)
	ctx := context.Background()
	if _, err := c.alice.Create(ctx, api.CreateSandboxRequest{Name: "far"}); err != nil {
		t.Fatal(err)
	}
	c.b.cluster.Close()
	_, err := c.alice.Get(ctx, "far")
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), `node "node-b" (ready), which cannot be reached`) {
		t.Fatalf("get while node-b's listener is down: %v; want unavailable naming node-b, ready", err)
	}
	if err := c.b.Lease.Close(); err != nil {
		t.Fatal(err)
	}
	_, err = c.alice.Exec(ctx, "far", api.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), `node "node-b", which is stopped`) {
		t.Fatalf("exec once node-b stopped: %v; want unavailable naming node-b, stopped", err)
	}
	// node-b takes its name back: node-a sees it at its next call, not a kept list's
	// lifetime later (its listener is still down, so the call now fails reaching it).
	nodes, err := c.b.Store.ListNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.Name == "node-b" {
			n.LeaseExpires = time.Now().Add(time.Minute)
			if err := c.b.Store.AcquireNode(ctx, n, time.Now()); err != nil {
				t.Fatal(err)
			}
		}
	}
	_, err = c.alice.Exec(ctx, "far", api.ExecRequest{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), `node "node-b" (ready), which cannot be reached`) {
		t.Fatalf("exec once node-b is back: %v; want node-b seen ready at once (and its listener still down)", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// partialUpload is the size of the upload in progress in dir (the agent's temporary
// file).
func partialUpload(dir string) int64 {
	m, _ := filepath.Glob(filepath.Join(dir, ".airlock-upload-*"))
	var n int64
	for _, p := range m {
		if fi, err := os.Stat(p); err == nil {
			n += fi.Size()
		}
	}
	return n
}

func do(t *testing.T, hc *http.Client, req *http.Request) (int, string) {
	t.Helper()
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestPlacedCreateDeclinedGoesToTheNextNode: a create placed on a drained node-b, which
// refuses it as its own refusal, is placed once more without node-b and made on
// node-a; with no other candidate, node-b's refusal is the answer.
func TestPlacedCreateDeclinedGoesToTheNextNode(t *testing.T) {
	var asked [][]string
	c := newCluster(t, func(_ context.Context, r forward.PlaceRequest) (string, error) {
		asked = append(asked, r.Exclude)
		if len(r.Exclude) == 0 {
			return "node-b", nil
		}
		if r.Labels["fallback"] == "none" {
			return "", errdefs.Unavailable("no other node")
		}
		return "node-a", nil
	})
	ctx := context.Background()
	if _, err := c.a.Manager.SetNodeDraining(ctx, "node-b", true); err != nil {
		t.Fatal(err)
	}
	if err := c.b.Lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	resp, err := c.alice.Create(ctx, api.CreateSandboxRequest{Name: "next", Limits: api.Limits{Memory: 256 << 20}})
	if err != nil || resp.Sandbox.Node != "node-a" {
		t.Fatalf("create placed on drained node-b: %+v, %v; want it made on node-a", resp, err)
	}
	if len(asked) != 2 || len(asked[1]) != 1 || asked[1][0] != "node-b" {
		t.Fatalf("placement asked with excludes %v; want [] then [node-b]", asked)
	}
	// Made on node-a after node-b declined: node-a's audit record is the create's.
	recs, err := c.a.Client.AuditLog(ctx, client.AuditFilter{Action: "POST /v1/sandboxes"})
	if err != nil {
		t.Fatal(err)
	}
	made := 0
	for _, r := range recs {
		var e struct {
			Sandbox string
			Status  int
		}
		json.Unmarshal(r.Record, &e)
		if e.Status == http.StatusCreated || e.Sandbox == resp.Sandbox.ID {
			made++
		}
	}
	if made != 1 {
		t.Fatalf("audit records of the create made on node-a after node-b declined: %d of %d; want 1", made, len(recs))
	}
	_, err = c.alice.Create(ctx, api.CreateSandboxRequest{Name: "nowhere", Labels: map[string]string{"fallback": "none"}})
	if err == nil || !strings.Contains(err.Error(), `node "node-b" is draining`) {
		t.Fatalf("create with no other node: %v; want node-b's refusal", err)
	}
}

// TestSnapshotCallsGoWhereTheSnapshotIs: on nodes that share no object store, a
// snapshot taken on node-b is read, forked and deleted through node-a: each call goes
// to node-b, which alone holds the snapshot (the fork is made there).
func TestSnapshotCallsGoWhereTheSnapshotIs(t *testing.T) {
	c := newCluster(t, toB)
	ctx := context.Background()
	if _, err := c.alice.Create(ctx, api.CreateSandboxRequest{Name: "far"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.alice.Upload(ctx, "far", "/data", 0o644, strings.NewReader("kept in the snapshot")); err != nil {
		t.Fatal(err)
	}
	snap, err := c.alice.Snapshot(ctx, "far", nil)
	if err != nil || snap.Snapshot == nil {
		t.Fatalf("snapshot node-b's sandbox through node-a: %+v, %v", snap, err)
	}
	id := snap.Snapshot.ID
	if got, err := c.alice.GetSnapshot(ctx, id); err != nil || got.ID != id || len(got.Chunks) == 0 {
		t.Fatalf("node-b's snapshot read through node-a: %+v, %v; want it, with its chunks", got, err)
	}
	fork, err := c.alice.Fork(ctx, id, api.ForkRequest{Name: "forked"})
	if err != nil || fork.Sandbox == nil || fork.Sandbox.Node != "node-b" || !c.b.Driver.Running(fork.Sandbox.ID) {
		t.Fatalf("fork of node-b's snapshot through node-a: %+v, %v; want it made on node-b", fork.Sandbox, err)
	}
	if _, err := c.alice.Terminate(ctx, "forked"); err != nil {
		t.Fatal(err)
	}
	if err := c.alice.DeleteSnapshot(ctx, id); err != nil {
		t.Fatalf("delete node-b's snapshot through node-a: %v", err)
	}
	if _, err := c.alice.GetSnapshot(ctx, id); !client.IsNotFound(err) {
		t.Fatalf("the deleted snapshot: %v; want not_found", err)
	}
}
