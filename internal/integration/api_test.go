package integration

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"
)

// rawPost sends body as is to path over the node's socket and returns the status and
// the decoded error body (zero when the answer is not an error).
func rawPost(t testing.TB, n *testenv.Node, path string, body []byte) (int, api.ErrorBody) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", n.Socket)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://airlock"+path, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		if err := json.Unmarshal(b, &eb); err != nil {
			t.Errorf("POST %s: %d answer %q is not the error shape: %v", path, resp.StatusCode, b, err)
		}
	}
	return resp.StatusCode, eb
}

// assertNothingLeft fails the test if the node has any sandbox record, operation or
// driver resource.
func assertNothingLeft(t testing.TB, n *testenv.Node) {
	t.Helper()
	if list, err := n.Client.List(background, client.ListOptions{}); err != nil || len(list) != 0 {
		t.Errorf("List: got %d sandboxes (%v), want none", len(list), err)
	}
	if ops, err := n.Store.ListOperations(background, store.OperationFilter{}); err != nil || len(ops) != 0 {
		t.Errorf("operations: got %d (%v), want none", len(ops), err)
		for _, op := range ops {
			t.Logf("operation %s %s %s %s", op.ID, op.Kind, op.State, op.ErrorCode)
		}
	}
	if ids, err := n.Driver.List(background); err != nil || len(ids) != 0 {
		t.Errorf("driver resources: got %v (%v), want none", ids, err)
	}
}

// TestAPI checks the API of a real node: bad input changes nothing, conflicts and
// preconditions answer with their codes, operations are durable, files round-trip and
// stay inside the sandbox, and sessions keep state.
func TestAPI(t *testing.T) {
	n := testenv.NewNode(t)

	t.Run("bad input changes nothing", func(t *testing.T) {
		tests := []struct {
			name       string
			req        api.CreateSandboxRequest
			wantStatus int
			wantCode   string
		}{
			{"uppercase name", api.CreateSandboxRequest{Name: "Upper"}, 400, "invalid_argument"},
			{"empty name", api.CreateSandboxRequest{Name: ""}, 400, "invalid_argument"},
			{"name too long", api.CreateSandboxRequest{Name: strings.Repeat("a", 64)}, 400, "invalid_argument"},
			{"leading dash", api.CreateSandboxRequest{Name: "-lead"}, 400, "invalid_argument"},
			{"trailing dash", api.CreateSandboxRequest{Name: "trail-"}, 400, "invalid_argument"},
			{"id prefix", api.CreateSandboxRequest{Name: "sb_x"}, 400, "invalid_argument"},
			{"slash", api.CreateSandboxRequest{Name: "a/b"}, 400, "invalid_argument"},
			{"unknown image, never pulled", api.CreateSandboxRequest{Name: "img", Image: "itest-no-such-image", Pull: api.PullNever}, 404, "not_found"},
			{"bad pull", api.CreateSandboxRequest{Name: "img", Image: "itest-no-such-image", Pull: "sometimes"}, 400, "invalid_argument"},
			{"cpu 1000", api.CreateSandboxRequest{Name: "cpu", Limits: api.Limits{CPU: 1000}}, 400, "invalid_argument"},
			{"negative cpu", api.CreateSandboxRequest{Name: "cpu", Limits: api.Limits{CPU: -1}}, 400, "invalid_argument"},
			{"memory 1 byte", api.CreateSandboxRequest{Name: "mem", Limits: api.Limits{Memory: 1}}, 400, "invalid_argument"},
			{"memory 1 EiB", api.CreateSandboxRequest{Name: "mem", Limits: api.Limits{Memory: 1 << 60}}, 400, "invalid_argument"},
			{"pids -1", api.CreateSandboxRequest{Name: "pids", Limits: api.Limits{PIDs: -1}}, 400, "invalid_argument"},
			{"pids 1", api.CreateSandboxRequest{Name: "pids", Limits: api.Limits{PIDs: 1}}, 400, "invalid_argument"},
			{"open files 1e12", api.CreateSandboxRequest{Name: "nofile", Limits: api.Limits{OpenFiles: 1e12}}, 400, "invalid_argument"},
			{"bad env name", api.CreateSandboxRequest{Name: "env", Env: map[string]string{"1X": "y"}}, 400, "invalid_argument"},
			{"bad lifetime", api.CreateSandboxRequest{Name: "life", MaxLifetime: "forever"}, 400, "invalid_argument"},
		}
		for _, tt := range tests {
			_, err := n.Client.Create(background, tt.req)
			wantAPIError(t, "create "+tt.name, err, tt.wantStatus, tt.wantCode)
		}

		raw := []struct {
			name       string
			body       []byte
			wantStatus int
		}{
			{"unknown field", []byte(`{"name":"raw-ok","bogus":true}`), 400},
			{"unknown limit field", []byte(`{"name":"raw-ok","limits":{"gpus":1}}`), 400},
			{"two values", []byte(`{"name":"raw-ok"} {"name":"raw-ok2"}`), 400},
			{"not json", []byte(`name=raw-ok`), 400},
			{"empty body", nil, 400},
			{"wrong type", []byte(`{"name":"raw-ok","limits":{"cpu":"lots"}}`), 400},
		}
		for _, tt := range raw {
			status, eb := rawPost(t, n, "/v1/sandboxes", tt.body)
			if status != tt.wantStatus || eb.Error.Code != "invalid_argument" {
				t.Errorf("POST %s: got %d %s (%q), want %d invalid_argument", tt.name, status, eb.Error.Code, eb.Error.Message, tt.wantStatus)
			}
		}
		assertNothingLeft(t, n)
	})

	t.Run("oversize body", func(t *testing.T) {
		body := []byte(`{"name":"raw-big","labels":{"k":"` + strings.Repeat("a", 1<<20+1) + `"}}`)
		status, eb := rawPost(t, n, "/v1/sandboxes", body)
		if eb.Error.Code != "invalid_argument" {
			t.Errorf("POST a body over 1 MiB: got code %q (%q), want invalid_argument", eb.Error.Code, eb.Error.Message)
		}
		assertNothingLeft(t, n)
		if status != http.StatusRequestEntityTooLarge {
			t.Errorf("POST a body over 1 MiB: got status %d, want 413", status)
		}
	})

	key := "itest-" + randHex(8)
	req := api.CreateSandboxRequest{Name: "api-a", Labels: map[string]string{"suite": "api"}}
	first, err := n.Client.Create(background, req, client.WithIdempotencyKey(key))
	if err != nil {
		t.Fatalf("create api-a: %v", err)
	}
	sb := first.Sandbox
	if sb == nil || sb.State != api.StateRunning {
		t.Fatalf("create api-a: got sandbox %+v, want it running", sb)
	}

	t.Run("idempotency", func(t *testing.T) {
		again, err := n.Client.Create(background, req, client.WithIdempotencyKey(key))
		if err != nil {
			t.Fatalf("replay: %v", err)
		}
		if again.Operation.ID != first.Operation.ID {
			t.Errorf("replay operation: got %s, want %s", again.Operation.ID, first.Operation.ID)
		}
		if again.Sandbox == nil || again.Sandbox.ID != sb.ID {
			t.Errorf("replay sandbox: got %+v, want id %s", again.Sandbox, sb.ID)
		}
		other := req
		other.Labels = map[string]string{"suite": "other"}
		_, err = n.Client.Create(background, other, client.WithIdempotencyKey(key))
		wantAPIError(t, "same key, other body", err, 409, "idempotency_conflict")
		other = api.CreateSandboxRequest{Name: "api-other"}
		_, err = n.Client.Create(background, other, client.WithIdempotencyKey(key))
		wantAPIError(t, "same key, other name", err, 409, "idempotency_conflict")
		if _, err := n.Client.Get(background, "api-other"); !client.IsNotFound(err) {
			t.Errorf("get api-other after the conflict: got %v, want not_found", err)
		}
		list, err := n.Client.List(background, client.ListOptions{})
		if err != nil || len(list) != 1 || list[0].ID != sb.ID {
			t.Errorf("List after replays: got %v (%v), want only %s", list, err, sb.ID)
		}
	})

	t.Run("duplicate name", func(t *testing.T) {
		_, err := n.Client.Create(background, api.CreateSandboxRequest{Name: "api-a"})
		wantAPIError(t, "create a second api-a", err, 409, "already_exists")
		list, err := n.Client.List(background, client.ListOptions{})
		if err != nil || len(list) != 1 {
			t.Errorf("List after the duplicate: got %d sandboxes (%v), want 1", len(list), err)
		}
	})

	t.Run("operation", func(t *testing.T) {
		op, err := n.Client.Operation(background, first.Operation.ID)
		if err != nil {
			t.Fatalf("get operation: %v", err)
		}
		if op.ID != first.Operation.ID || op.Kind != "create" || op.State != "succeeded" || op.SandboxID != sb.ID || op.Error != nil {
			t.Errorf("operation: got %+v, want kind create, state succeeded, sandbox %s, no error", op, sb.ID)
		}
		_, err = n.Client.Operation(background, "op_itestnosuchoperation")
		wantAPIError(t, "get an unknown operation", err, 404, "not_found")
	})

	t.Run("stale If-Match", func(t *testing.T) {
		cur, err := n.Client.Get(background, sb.Name)
		if err != nil {
			t.Fatal(err)
		}
		stale := cur.Version - 1
		if stale < 1 {
			stale = cur.Version + 1
		}
		_, err = n.Client.Terminate(background, sb.Name, client.WithIfMatch(stale))
		wantAPIError(t, fmt.Sprintf("terminate at version %d (current %d)", stale, cur.Version), err, 412, "version_conflict")
		after, err := n.Client.Get(background, sb.Name)
		if err != nil || after.State != api.StateRunning {
			t.Errorf("after the refused terminate: got %+v (%v), want running", after, err)
		}
		if got := mustRun(t, n, sb.Name, "echo ok"); got != "ok\n" {
			t.Errorf("exec after the refused terminate: got %q, want ok", got)
		}

		ver := n.Create(t, api.CreateSandboxRequest{Name: "api-ver"})
		cur, err = n.Client.Get(background, ver.Name)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := n.Client.Terminate(background, ver.Name, client.WithIfMatch(cur.Version))
		if err != nil {
			t.Fatalf("terminate with the current version: %v", err)
		}
		if resp.Sandbox == nil || resp.Sandbox.State != api.StateTerminated || resp.Operation.State != "succeeded" {
			t.Errorf("terminate with the current version: got %+v, want terminated", resp)
		}
	})

	t.Run("paths with dot-dot", func(t *testing.T) {
		for _, p := range []string{"/root/../etc/passwd", "/../etc/passwd", "/root/./x", "root/x", "", "/root/x/.."} {
			_, err := n.Client.Download(background, sb.Name, p, io.Discard)
			wantAPIError(t, fmt.Sprintf("download %q", p), err, 400, "invalid_argument")
			_, err = n.Client.Upload(background, sb.Name, p, 0, strings.NewReader("x"))
			wantAPIError(t, fmt.Sprintf("upload %q", p), err, 400, "invalid_argument")
			_, err = n.Client.Stat(background, sb.Name, p)
			wantAPIError(t, fmt.Sprintf("stat %q", p), err, 400, "invalid_argument")
			_, err = n.Client.ListFiles(background, sb.Name, p)
			wantAPIError(t, fmt.Sprintf("list %q", p), err, 400, "invalid_argument")
			err = n.Client.Mkdir(background, sb.Name, p, true)
			wantAPIError(t, fmt.Sprintf("mkdir %q", p), err, 400, "invalid_argument")
			err = n.Client.Remove(background, sb.Name, p, true)
			wantAPIError(t, fmt.Sprintf("remove %q", p), err, 400, "invalid_argument")
		}
		if got := mustRun(t, n, sb.Name, "head -1 /etc/passwd"); !strings.HasPrefix(got, "root:") {
			t.Errorf("/etc/passwd after the refused calls: got %q", got)
		}
	})

	t.Run("file round trip", func(t *testing.T) {
		data := make([]byte, 1<<20)
		rand.Read(data)
		fi, err := n.Client.Upload(background, sb.Name, "/root/blob.bin", 0o600, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("upload: %v", err)
		}
		if fi.Size != int64(len(data)) || fi.Mode&0o777 != 0o600 {
			t.Errorf("upload answer: got size %d mode %o, want %d and 600", fi.Size, fi.Mode&0o777, len(data))
		}
		var got bytes.Buffer
		if _, err := n.Client.Download(background, sb.Name, "/root/blob.bin", &got); err != nil {
			t.Fatalf("download: %v", err)
		}
		if !bytes.Equal(got.Bytes(), data) {
			t.Errorf("download: got %d bytes (sha256 %x), want the %d uploaded (sha256 %x)",
				got.Len(), sha256.Sum256(got.Bytes()), len(data), sha256.Sum256(data))
		}
		sum := sha256.Sum256(data)
		inside := strings.Fields(mustRun(t, n, sb.Name, "sha256sum /root/blob.bin"))
		if len(inside) == 0 || inside[0] != hex.EncodeToString(sum[:]) {
			t.Errorf("sha256 inside the sandbox: got %v, want %x", inside, sum)
		}
	})

	t.Run("symlinks stay inside", func(t *testing.T) {
		hostDir := t.TempDir()
		mustRun(t, n, sb.Name, strings.Join([]string{
			"ln -s /../../../../etc/shadow /root/shadow-link",
			"ln -s ../../../../../../../etc/shadow /root/shadow-rel-link",
			"ln -s /etc/passwd /root/passwd-link",
			"ln -s " + filepath.Join(n.Dir, "airlock.db") + " /root/db-link",
			"ln -s " + hostDir + " /root/host-dir-link",
			"ln -s / /root/root-link",
		}, " && "))

		hostShadow, _ := os.ReadFile("/etc/shadow")
		hostDB, _ := os.ReadFile(filepath.Join(n.Dir, "airlock.db"))
		for _, p := range []string{"/root/shadow-link", "/root/shadow-rel-link", "/root/root-link/etc/shadow", "/root/db-link"} {
			var got bytes.Buffer
			_, err := n.Client.Download(background, sb.Name, p, &got)
			if err == nil {
				t.Errorf("download %s: got %d bytes and no error, want an error (the target is not in the sandbox)", p, got.Len())
			}
			if got.Len() > 0 && (bytes.Contains(hostShadow, got.Bytes()) || bytes.Contains(hostDB, got.Bytes())) {
				t.Errorf("download %s returned host content (%d bytes)", p, got.Len())
			}
		}

		var got bytes.Buffer
		if _, err := n.Client.Download(background, sb.Name, "/root/passwd-link", &got); err != nil {
			t.Fatalf("download /root/passwd-link: %v", err)
		}
		want := mustRun(t, n, sb.Name, "cat /etc/passwd")
		if got.String() != want {
			t.Errorf("download /root/passwd-link: got %q, want the sandbox's /etc/passwd %q", got.String(), want)
		}
		if hostPasswd, _ := os.ReadFile("/etc/passwd"); string(hostPasswd) != want && got.String() == string(hostPasswd) {
			t.Errorf("download /root/passwd-link returned the host's /etc/passwd")
		}

		// Writing through a link that names a host directory must not reach the host.
		_, err := n.Client.Upload(background, sb.Name, "/root/host-dir-link/pwned", 0, strings.NewReader("pwned"))
		if _, serr := os.Lstat(filepath.Join(hostDir, "pwned")); serr == nil {
			t.Errorf("upload through /root/host-dir-link (answer %v) created %s on the host", err, filepath.Join(hostDir, "pwned"))
		}
		if entries, err := n.Client.ListFiles(background, sb.Name, "/root/root-link"); err == nil {
			root, err := n.Client.ListFiles(background, sb.Name, "/")
			if err != nil {
				t.Fatalf("list /: %v", err)
			}
			names := map[string]bool{}
			for _, e := range root {
				names[e.Name] = true
			}
			for _, e := range entries {
				if !names[e.Name] {
					t.Errorf("listing /root/root-link shows %q, which is not in the sandbox's /", e.Name)
				}
			}
		}
	})

	t.Run("download of a missing file", func(t *testing.T) {
		_, err := n.Client.Download(background, sb.Name, "/root/itest-missing", io.Discard)
		wantAPIError(t, "download a missing file", err, 404, "not_found")
		mustRun(t, n, sb.Name, "ln -sf /itest-missing-target /root/dangling-link")
		_, err = n.Client.Download(background, sb.Name, "/root/dangling-link", io.Discard)
		wantAPIError(t, "download a dangling symlink", err, 404, "not_found")
	})

	t.Run("python session", func(t *testing.T) {
		ses, err := n.Client.StartSession(background, sb.Name, api.SessionRequest{Kind: "python"})
		if err != nil {
			t.Fatalf("start session: %v", err)
		}
		res, err := n.Client.Send(background, sb.Name, ses.ID, "x = 41")
		if err != nil || res.State != api.ExecSucceeded {
			t.Fatalf("send x = 41: got %+v, %v; want succeeded", res, err)
		}
		res, err = n.Client.Send(background, sb.Name, ses.ID, "x + 1")
		if err != nil {
			t.Fatalf("send x + 1: %v", err)
		}
		if res.State != api.ExecSucceeded || res.Stdout != "42\n" {
			t.Errorf("send x + 1: got state %q stdout %q stderr %q, want succeeded and \"42\\n\"", res.State, res.Stdout, res.Stderr)
		}
		if err := n.Client.CloseSession(background, sb.Name, ses.ID); err != nil {
			t.Errorf("close session: %v", err)
		}
		if list, err := n.Client.ListSessions(background, sb.Name); err != nil || len(list) != 0 {
			t.Errorf("sessions after close: got %v (%v), want none", list, err)
		}
	})
}
