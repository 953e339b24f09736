package cluster

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
)

// TestForwardedThroughAnyNode: with the nodes' own cluster TLS (the CA sealed in the
// store under the join token), a client that reaches node-0 works on a sandbox node-1
// holds as if node-0 held it: exec, a streamed exec, a PTY, an upload and its download
// (the same bytes), suspend and resume, a snapshot, an exposed port's traffic; node-1
// answers each (its audit records name node-0); node-2 forks that snapshot and reads
// node-1's operation; the fork, on node-2, is reached and ended through node-0 in turn;
// the snapshot's delete through node-0 is node-1's, which took it. Through node-0's
// E2B-compatible plane, node-1's E2B sandbox is paused, resumed, written, read and
// killed.
func TestForwardedThroughAnyNode(t *testing.T) {
	c := newCluster(t)
	ctx, cancel := context.WithTimeout(background, 5*time.Minute)
	defer cancel()
	a0, a1, a2 := c.Node(0).As("alice"), c.Node(1).As("alice"), c.Node(2).As("alice")
	if _, err := a1.Create(ctx, api.CreateSandboxRequest{Name: "held"}); err != nil {
		t.Fatalf("create held on node-1: %v", err)
	}
	if sb, err := a0.Get(ctx, "held"); err != nil || sb.Node != "node-1" {
		t.Fatalf("get held through node-0: %+v, %v; want it on node-1", sb, err)
	}

	if out := mustExec(t, a0, "held", "echo forwarded > /root/marker; cat /root/marker"); out != "forwarded\n" {
		t.Fatalf("exec through node-0: %q", out)
	}
	var lines bytes.Buffer
	res, err := a0.ExecStream(ctx, "held", api.ExecRequest{Shell: "for i in 1 2 3; do echo line-$i; sleep 0.1; done", Timeout: "60s"}, &lines, io.Discard)
	if err != nil || res.ExitCode != 0 || lines.String() != "line-1\nline-2\nline-3\n" {
		t.Fatalf("streamed exec through node-0: %+v, %v, stdout %q", res, err, lines.String())
	}
	pty, err := a0.PTY(ctx, "held", 24, 80, []string{"sh", "-c", "cat /root/marker; echo pty-$((6*7))"})
	if err != nil {
		t.Fatalf("PTY through node-0: %v", err)
	}
	screen, _ := io.ReadAll(pty)
	pty.Close()
	if !strings.Contains(string(screen), "forwarded") || !strings.Contains(string(screen), "pty-42") {
		t.Fatalf("the PTY through node-0 printed %q; want node-1's sandbox's marker and pty-42", screen)
	}

	payload := make([]byte, 6<<20+123)
	crand.Read(payload)
	sum := sha256.Sum256(payload)
	if _, err := a0.Upload(ctx, "held", "/root/payload.bin", 0o600, bytes.NewReader(payload)); err != nil {
		t.Fatalf("upload through node-0: %v", err)
	}
	if out := mustExec(t, a1, "held", "sha256sum /root/payload.bin"); !strings.HasPrefix(out, hexSum(sum)) {
		t.Fatalf("the upload through node-0, in the sandbox on node-1: %q; want sha256 %s", out, hexSum(sum))
	}
	wantDownload(t, a0, "held", "/root/payload.bin", sum, "through node-0")

	if _, err := a0.Suspend(ctx, "held"); err != nil {
		t.Fatalf("suspend through node-0: %v", err)
	}
	if sb, err := a2.Get(ctx, "held"); err != nil || sb.State != api.StateSuspended {
		t.Fatalf("get through node-2 after suspend: %+v, %v; want suspended", sb, err)
	}
	resumed, err := a0.Resume(ctx, "held")
	if err != nil || resumed.Operation.ID == "" {
		t.Fatalf("resume through node-0: %+v, %v", resumed, err)
	}
	if op, err := a2.Operation(ctx, resumed.Operation.ID); err != nil || op.State != "succeeded" {
		t.Fatalf("node-1's resume operation read through node-2: %+v, %v; want succeeded", op, err)
	}
	if out := mustExec(t, a0, "held", "cat /root/marker"); out != "forwarded\n" {
		t.Fatalf("exec through node-0 after resume: %q", out)
	}

	snap, err := a0.Snapshot(ctx, "held", map[string]string{"via": "node-0"})
	if err != nil || snap.Snapshot == nil {
		t.Fatalf("snapshot through node-0: %+v, %v", snap, err)
	}
	fork, err := a2.Fork(ctx, snap.Snapshot.ID, api.ForkRequest{Name: "fork-on-2"})
	if err != nil || fork.Sandbox == nil || fork.Sandbox.Node != "node-2" {
		t.Fatalf("fork of node-1's snapshot through node-2: %+v, %v; want it on node-2", fork, err)
	}
	wantDownload(t, a0, "fork-on-2", "/root/payload.bin", sum, "from node-2's fork, through node-0")

	// An exposed port of node-1's sandbox, reached at node-0's address.
	if _, err := a0.StartSession(ctx, "held", api.SessionRequest{Kind: "raw", Cwd: "/root",
		Argv: []string{"python3", "-m", "http.server", "8000", "--bind", "127.0.0.1"}}); err != nil {
		t.Fatalf("start a server through node-0: %v", err)
	}
	port, err := a0.ExposePort(ctx, "held", 8000, false)
	if err != nil {
		t.Fatalf("expose a port through node-0: %v", err)
	}
	sb, _ := a0.Get(ctx, "held")
	viaNode0 := "http://" + c.Node(0).API + "/v1/ports/" + sb.ID + "/8000/"
	code, body := getPort(ctx, t, viaNode0+"marker", port.Token)
	for deadline := time.Now().Add(20 * time.Second); code != http.StatusOK && time.Now().Before(deadline); {
		time.Sleep(200 * time.Millisecond)
		code, body = getPort(ctx, t, viaNode0+"marker", port.Token)
	}
	if code != http.StatusOK || body != "forwarded\n" {
		t.Fatalf("node-1's exposed port through node-0: %d %q; want 200 and the sandbox's file", code, body)
	}
	if code, _ := getPort(ctx, t, viaNode0+"marker", ""); code != http.StatusUnauthorized {
		t.Fatalf("node-1's exposed port through node-0 without its token: %d; want 401", code)
	}

	// The snapshot goes on the node that took it (its copy, its chunk counts), once the
	// fork on node-2 that comes from it is gone.
	if _, err := a0.Terminate(ctx, "fork-on-2"); err != nil {
		t.Fatalf("terminate node-2's fork through node-0: %v", err)
	}
	if err := a0.DeleteSnapshot(ctx, snap.Snapshot.ID); err != nil {
		t.Fatalf("delete node-1's snapshot through node-0: %v", err)
	}
	if _, err := a2.GetSnapshot(ctx, snap.Snapshot.ID); !client.IsNotFound(err) {
		t.Fatalf("the deleted snapshot read through node-2: %v; want not_found", err)
	}

	wantForwardedRecords(t, c.Node(1), "POST /v1/sandboxes/{ref}/exec", "node-0")
	wantForwardedRecords(t, c.Node(1), "DELETE /v1/snapshots/{id}", "node-0")

	// The E2B-compatible planes: a sandbox made through node-1's is paused, resumed and
	// run in through node-0's, with the access token node-1 issued.
	key, err := c.Node(0).Client.CreateToken(ctx, api.CreateTokenRequest{User: "alice", Name: "e2b", Format: "e2b"})
	if err != nil {
		t.Fatal(err)
	}
	e2b := func(n *Node, method, path, body string, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, "http://"+n.E2B+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key.Secret)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("%s %s on %s's E2B plane: %v", method, path, n.Name, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	st, body := e2b(c.Node(1), "POST", "/sandboxes", `{"templateID":"base","timeout":600}`, nil)
	var e2bSB struct{ SandboxID, EnvdAccessToken string }
	if json.Unmarshal([]byte(body), &e2bSB); st != http.StatusCreated || e2bSB.EnvdAccessToken == "" {
		t.Fatalf("create through node-1's E2B plane: %d %s", st, body)
	}
	id := e2bSB.SandboxID
	if st, body := e2b(c.Node(0), "POST", "/sandboxes/"+id+"/pause", "", nil); st != http.StatusNoContent {
		t.Fatalf("pause node-1's E2B sandbox through node-0's E2B plane: %d %s", st, body)
	}
	if st, body := e2b(c.Node(0), "POST", "/sandboxes/"+id+"/connect", `{"timeout":600}`, nil); st != http.StatusCreated {
		t.Fatalf("connect (resume) through node-0's E2B plane: %d %s", st, body)
	}
	envd := map[string]string{"E2b-Sandbox-Id": id, "X-Access-Token": e2bSB.EnvdAccessToken}
	if st, body := e2b(c.Node(0), "POST", "/files?path=/tmp/e2b.txt", "e2b through node-0",
		map[string]string{"E2b-Sandbox-Id": id, "X-Access-Token": e2bSB.EnvdAccessToken, "Content-Type": "application/octet-stream"}); st != http.StatusOK {
		t.Fatalf("upload through node-0's envd plane: %d %s", st, body)
	}
	if out := mustExec(t, a1, id, "cat /tmp/e2b.txt"); out != "e2b through node-0" {
		t.Fatalf("the file uploaded through node-0's envd plane, in node-1's sandbox: %q", out)
	}
	if st, body := e2b(c.Node(0), "GET", "/files?path=/tmp/e2b.txt", "", envd); st != http.StatusOK || body != "e2b through node-0" {
		t.Fatalf("download through node-0's envd plane: %d %q", st, body)
	}
	if st, body := e2b(c.Node(0), "DELETE", "/sandboxes/"+id, "", nil); st != http.StatusNoContent {
		t.Fatalf("kill through node-0's E2B plane: %d %s", st, body)
	}
}

// wantDownload: path in ref, read through cl, has the checksum sum.
func wantDownload(t *testing.T, cl *client.Client, ref, path string, sum [32]byte, what string) {
	t.Helper()
	h := sha256.New()
	n, err := cl.Download(background, ref, path, h)
	if err != nil || !bytes.Equal(h.Sum(nil), sum[:]) {
		t.Fatalf("download of %s in %s %s: %d bytes, %v, sha256 %x; want %s", path, ref, what, n, err, h.Sum(nil), hexSum(sum))
	}
}

func hexSum(sum [32]byte) string { return hex.EncodeToString(sum[:]) }

// getPort GETs an exposed port's URL with its token ("": none).
func getPort(ctx context.Context, t *testing.T, rawURL, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if token != "" {
		req.Header.Set("X-Airlock-Port-Token", token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", rawURL, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// wantForwardedRecords: node n wrote the audit records of action, and each names the
// node it came through, via.
func wantForwardedRecords(t *testing.T, n *Node, action, via string) {
	t.Helper()
	recs, err := n.Client.AuditLog(background, client.AuditFilter{Action: action})
	if err != nil {
		t.Fatal(err)
	}
	forwarded := 0
	for _, r := range recs {
		var e struct{ Source string }
		json.Unmarshal(r.Record, &e)
		if strings.HasPrefix(e.Source, "node "+via+" (forwarded; ") {
			forwarded++
		}
	}
	if forwarded == 0 {
		t.Fatalf("%s's audit records of %s: %d, none through %s; want those of the calls forwarded to it", n.Name, action, len(recs), via)
	}
}

// expectForwarded checks a call made on one node for a sandbox another node holds was
// answered by the holder (no refusal naming it).
func expectForwarded(t *testing.T, err error, holder string) {
	t.Helper()
	var ce *client.Error
	if errors.As(err, &ce) && ce.Details["reason"] == "other_node" {
		t.Fatalf("a call for %s's sandbox on another node was refused: %d %s %v (%s); want it forwarded to %s",
			holder, ce.Status, ce.Code, ce.Details, ce.Message, holder)
	}
	if err != nil {
		t.Fatalf("a call for %s's sandbox on another node: %v; want it forwarded and answered", holder, err)
	}
}
