package testenv

import (
	"context"
	"encoding/json"

	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb/processpbconnect"
	"github.com/airlockhq/airlock/internal/forward"
)

// TestE2BForwardedToTheSandboxsNode: a sandbox made through node-b's E2B plane is
// paused, resumed and read through node-a's, which sends each call to node-b (node-a's
// runtime never sees it; the call has one audit record, node-b's, naming node-a); its in-sandbox plane
// reached at node-a (a process, a file written and read back, by the access token
// node-b issued) is node-b's sandbox's; a wrong token is refused at node-a.
func TestE2BForwardedToTheSandboxsNode(t *testing.T) {
	c := newClusterWith(t, nil, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, _, err := c.a.Auth.CreateTokenFormat(ctx, "alice", "e2b", "e2b", 0)
	if err != nil {
		t.Fatal(err)
	}
	call := func(base, method, path, body string, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, base+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return do(t, http.DefaultClient, req)
	}
	st, body := call(c.b.E2BURL, "POST", "/sandboxes", `{"templateID":"base"}`, nil)
	if st != http.StatusCreated {
		t.Fatalf("create through node-b's E2B plane: %d %s", st, body)
	}
	var sb struct{ SandboxID, EnvdAccessToken string }
	json.Unmarshal([]byte(body), &sb)
	id := sb.SandboxID

	if st, body := call(c.a.E2BURL, "POST", "/sandboxes/"+id+"/pause", "", nil); st != http.StatusNoContent {
		t.Fatalf("pause through node-a's E2B plane: %d %s; want 204 from node-b", st, body)
	}
	if c.b.Driver.Running(id) {
		t.Fatal("node-b's sandbox still runs after its pause through node-a")
	}
	if st, body := call(c.a.E2BURL, "POST", "/sandboxes/"+id+"/resume", `{}`, nil); st != http.StatusCreated {
		t.Fatalf("resume through node-a's E2B plane: %d %s; want 201 from node-b", st, body)
	}
	if !c.b.Driver.Running(id) || c.a.Driver.Running(id) {
		t.Fatalf("after the resume through node-a: running on node-b %v, on node-a %v; want node-b only", c.b.Driver.Running(id), c.a.Driver.Running(id))
	}
	if st, body := call(c.a.E2BURL, "GET", "/sandboxes/"+id, "", nil); st != http.StatusOK || !strings.Contains(body, `"running"`) {
		t.Fatalf("get through node-a's E2B plane: %d %s", st, body)
	}

	// The in-sandbox plane, at node-a, with the token node-b issued.
	envd := map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken}
	if st, body := call(c.a.E2BURL, "POST", "/files?path=/tmp/forwarded.txt", "through node-a",
		map[string]string{"E2b-Sandbox-Id": id, "X-Access-Token": sb.EnvdAccessToken, "Content-Type": "application/octet-stream"}); st != http.StatusOK {
		t.Fatalf("upload through node-a's envd plane: %d %s", st, body)
	}
	if b, err := os.ReadFile(c.b.Driver.Path(id, "/tmp/forwarded.txt")); err != nil || string(b) != "through node-a" {
		t.Fatalf("the file uploaded through node-a, in node-b's sandbox: %q, %v", b, err)
	}
	if st, body := call(c.a.E2BURL, "GET", "/files?path=/tmp/forwarded.txt", "", envd); st != http.StatusOK || body != "through node-a" {
		t.Fatalf("download through node-a's envd plane: %d %q", st, body)
	}
	proc := processpbconnect.NewProcessClient(&http.Client{Transport: withHeaders(envd)}, c.a.E2BURL)
	stream, err := proc.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "/bin/sh", Args: []string{"-c", "echo e2b-$((6*7)); pwd"}}}))
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for stream.Receive() {
		out.Write(stream.Msg().GetEvent().GetData().GetStdout())
	}
	stream.Close()
	if err := stream.Err(); err != nil || !strings.HasPrefix(out.String(), "e2b-42\n"+strings.TrimSuffix(c.b.Driver.Path(id, "/"), "/")) {
		t.Fatalf("a process through node-a's envd plane: %q, %v; want e2b-42 in node-b's sandbox (%s)", out.String(), err, c.b.Driver.Path(id, "/"))
	}
	envd["X-Access-Token"] = strings.TrimSuffix(sb.EnvdAccessToken, sb.EnvdAccessToken[len(sb.EnvdAccessToken)-4:]) + "AAAA"
	if st, _ := call(c.a.E2BURL, "GET", "/files?path=/tmp/forwarded.txt", "", envd); st != http.StatusUnauthorized {
		t.Fatalf("a wrong access token at node-a: %d; want 401", st)
	}

	recs, err := c.b.Client.AuditLog(ctx, client.AuditFilter{Action: "E2B POST /sandboxes/{id}/pause"})
	if err != nil || len(recs) != 1 || !strings.Contains(string(recs[0].Record), `"node node-a (forwarded; there: e2b tcp `) {
		t.Fatalf("the audit records of the pause: %d, %v; want one, node-b's, naming node-a", len(recs), err)
	}
}

// withHeaders is a transport that sets header on every request.
type withHeaders map[string]string

func (h withHeaders) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range h {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestE2BCreatePlacedOnTheChosenNode: an E2B create sent to node-a, which the placement
// puts on node-b, is made on node-b (node-b's runtime runs it, the record names
// node-b, one audit record, node-b's, naming node-a); the answer's sandbox id and access
// token work through node-a. With node-b draining, the create it declines is placed once
// more without it and made on node-a.
func TestE2BCreatePlacedOnTheChosenNode(t *testing.T) {
	var asked [][]string
	c := newClusterWith(t, func(_ context.Context, r forward.PlaceRequest) (string, error) {
		asked = append(asked, r.Exclude)
		if len(r.Exclude) == 0 {
			return "node-b", nil
		}
		return "node-a", nil
	}, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, _, err := c.a.Auth.CreateTokenFormat(ctx, "alice", "e2b", "e2b", 0)
	if err != nil {
		t.Fatal(err)
	}
	call := func(method, path, body string, header map[string]string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, method, c.a.E2BURL+path, strings.NewReader(body))
		req.Header.Set("X-API-Key", key)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		return do(t, http.DefaultClient, req)
	}
	create := func() (id, token string) {
		t.Helper()
		st, body := call("POST", "/sandboxes", `{"templateID":"base","metadata":{"k":"v"}}`, nil)
		if st != http.StatusCreated {
			t.Fatalf("create through node-a's E2B plane: %d %s", st, body)
		}
		var sb struct{ SandboxID, EnvdAccessToken string }
		json.Unmarshal([]byte(body), &sb)
		return sb.SandboxID, sb.EnvdAccessToken
	}
	id, token := create()
	if !c.b.Driver.Running(id) || c.a.Driver.Running(id) {
		t.Fatalf("the placed E2B create: running on node-b %v, on node-a %v; want node-b only", c.b.Driver.Running(id), c.a.Driver.Running(id))
	}
	for _, n := range []*FakeNode{c.a, c.b} {
		if sb, err := n.Manager.Resolve(ctx, "alice", id); err != nil || sb.Node != "node-b" || sb.Labels["k"] != "v" {
			t.Fatalf("the placed E2B create in %s's store: %+v, %v; want node-b's, with its metadata", n.Manager.NodeName(), sb, err)
		}
	}
	if len(asked) != 1 || len(asked[0]) != 0 {
		t.Fatalf("placement asked with excludes %v; want once, none", asked)
	}
	if st, body := call("GET", "/sandboxes/"+id, "", nil); st != http.StatusOK || !strings.Contains(body, `"running"`) {
		t.Fatalf("get through node-a's E2B plane: %d %s", st, body)
	}
	if st, body := call("POST", "/files?path=/tmp/placed.txt", "placed", map[string]string{"E2b-Sandbox-Id": id,
		"X-Access-Token": token, "Content-Type": "application/octet-stream"}); st != http.StatusOK {
		t.Fatalf("upload through node-a's envd plane with the token of the answer: %d %s", st, body)
	}
	if b, err := os.ReadFile(c.b.Driver.Path(id, "/tmp/placed.txt")); err != nil || string(b) != "placed" {
		t.Fatalf("the file uploaded through node-a, in node-b's sandbox: %q, %v", b, err)
	}
	recs, err := c.b.Client.AuditLog(ctx, client.AuditFilter{Action: "E2B POST /sandboxes"})
	if err != nil || len(recs) != 1 || !strings.Contains(string(recs[0].Record), `"node node-a (forwarded; there: e2b tcp `) {
		t.Fatalf("the audit records of the create: %d, %v; want one, node-b's, naming node-a", len(recs), err)
	}

	if _, err := c.a.Manager.SetNodeDraining(ctx, "node-b", true); err != nil {
		t.Fatal(err)
	}
	if err := c.b.Lease.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	asked = nil
	next, _ := create()
	if !c.a.Driver.Running(next) || c.b.Driver.Running(next) {
		t.Fatalf("the E2B create drained node-b declined: running on node-a %v, on node-b %v; want node-a only", c.a.Driver.Running(next), c.b.Driver.Running(next))
	}
	if len(asked) != 2 || len(asked[1]) != 1 || asked[1][0] != "node-b" {
		t.Fatalf("placement asked with excludes %v; want [] then [node-b]", asked)
	}
}
