package e2b_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"
)

// TestEnvdProcessGetsBoundSecrets: a process started through the E2B plane gets the
// environment a native exec gets: the value of a secret bound as an environment
// variable, and the placeholder of one delivered through the proxy.
func TestEnvdProcessGetsBoundSecrets(t *testing.T) {
	f := newEnvdFixtureWith(t, testenv.FakeOptions{SecretDelivery: true})
	alice, err := client.New(client.Options{Addr: f.node.Addr, Token: f.node.Token(t, "alice")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, s := range []struct{ name, delivery, target string }{
		{"db-password", "env", "DB_PASSWORD"},
		{"api-token", "proxy", "API_TOKEN"},
	} {
		if _, err := alice.CreateSecret(ctx, api.CreateSecretRequest{Name: s.name, Type: "token", Value: "v-" + s.name,
			AllowedHosts: []string{"api.example.com"}}); err != nil {
			t.Fatal(err)
		}
		if _, err := alice.BindSecret(ctx, s.name, api.BindSecretRequest{Sandbox: f.id, Target: s.target, Delivery: s.delivery}); err != nil {
			t.Fatal(err)
		}
	}
	_, out, errs, end := run(t, f.process(f.id, f.token), &processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "/bin/sh", Args: []string{"-c", `echo "$DB_PASSWORD"; echo "${API_TOKEN:-unset}"`}}})
	if end.GetExitCode() != 0 {
		t.Fatalf("the process ended %v, stderr %q", end, errs)
	}
	lines := strings.Split(out, "\n")
	if len(lines) != 3 {
		t.Fatalf("the E2B process printed %q; want two lines", out)
	}
	if lines[0] != "v-db-password" {
		t.Errorf("the E2B process sees DB_PASSWORD as %q; want the env secret's value", lines[0])
	}
	if lines[1] == "unset" || lines[1] == "v-api-token" {
		t.Errorf("the E2B process sees API_TOKEN as %q; want the proxy secret's placeholder", lines[1])
	}

	// A listing shows the variables its caller gave, not what the bindings delivered.
	c := f.process(f.id, f.token)
	tag := "lister"
	stream, err := c.Start(ctx, connect.NewRequest(&processpb.StartRequest{Tag: &tag,
		Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"60"}, Envs: map[string]string{"MINE": "1"}}}))
	if err != nil || !stream.Receive() {
		t.Fatalf("start sleep: %v", err)
	}
	stream.Close()
	list, err := c.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range list.Msg.GetProcesses() {
		if p.GetTag() == tag && fmt.Sprint(p.GetConfig().GetEnvs()) != "map[MINE:1]" {
			t.Errorf("the listing shows the process's environment as %v; want only MINE", p.GetConfig().GetEnvs())
		}
	}
}

// TestEnvdProcessAudited: a process started through the E2B plane is in the audit log
// as an exec, as a native one is: its command, directory, how it ended and a checksum
// of its output.
func TestEnvdProcessAudited(t *testing.T) {
	f := newEnvdFixture(t)
	cwd := "/tmp"
	_, out, _, end := run(t, f.process(f.id, f.token), &processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "/bin/sh", Args: []string{"-c", "echo audited"}, Cwd: &cwd}})
	if end.GetExitCode() != 0 || out != "audited\n" {
		t.Fatalf("the process printed %q and ended %v", out, end)
	}
	recs, err := f.node.AuditLog.List(context.Background(), store.AuditFilter{Action: "exec", Sandbox: f.id})
	if err != nil || len(recs) != 1 {
		t.Fatalf("exec records of the sandbox: %d, %v; want 1", len(recs), err)
	}
	var e struct {
		Identity, Result string
		Detail           map[string]any
	}
	if err := json.Unmarshal(recs[0].Doc, &e); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(out))
	if e.Identity != "alice" || e.Result != "succeeded" || e.Detail["via"] != "process" || e.Detail["cwd"] != "/tmp" ||
		e.Detail["output_sha256"] != hex.EncodeToString(sum[:]) || fmt.Sprint(e.Detail["argv"]) != "[/bin/sh -c echo audited]" {
		t.Errorf("the E2B process's exec record: %+v", e)
	}
}

// TestEnvdDeadContainerRecorded: a sandbox whose container died behind the daemon's back
// is recorded when an E2B call finds it (suspended, with a container_gone event), as a
// native call's finding is, whether the call starts a process or reads a file.
func TestEnvdDeadContainerRecorded(t *testing.T) {
	f := newEnvdFixture(t)
	ctx := context.Background()
	for _, call := range []struct {
		name string
		do   func() error
	}{
		{"process start", func() error {
			stream, err := f.process(f.id, f.token).Start(ctx, connect.NewRequest(&processpb.StartRequest{
				Process: &processpb.ProcessConfig{Cmd: "true"}}))
			if err != nil {
				return err
			}
			defer stream.Close()
			for stream.Receive() {
			}
			return stream.Err()
		}},
		{"file read", func() error {
			req, _ := http.NewRequest("GET", f.url+"/files?path=/no-such-file", nil)
			f.headers(req.Header, f.id, f.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return err
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusNotFound { // the agent answered
				return fmt.Errorf("%d %s", resp.StatusCode, body)
			}
			return nil
		}},
	} {
		gone := func() int {
			evs, err := f.node.Store.ListEvents(ctx, store.EventFilter{SandboxID: f.id})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, ev := range evs {
				if ev.Type == "container_gone" {
					n++
				}
			}
			return n
		}
		before := gone()
		if err := call.do(); err != nil { // the sandbox runs (resumed, after the first round)
			t.Fatalf("%s on a live sandbox: %v", call.name, err)
		}
		f.node.Driver.Stop(ctx, f.id) // the container ends behind the daemon's back
		if err := call.do(); err == nil {
			t.Fatalf("%s on a dead container succeeded", call.name)
		}
		sb, err := f.node.Store.GetSandbox(ctx, f.id)
		if err != nil {
			t.Fatal(err)
		}
		if sb.State != "suspended" || gone() != before+1 {
			t.Errorf("after %s found the container dead: state %s, %d container_gone events (had %d); want suspended and one more",
				call.name, sb.State, gone(), before)
		}
	}
}

// TestEnvNameOneRule: an environment variable name that is not allowed gets the same
// error whichever plane and kind of process it comes with: a native exec, a native
// session, a sandbox's own environment, an E2B process. Nothing starts.
func TestEnvNameOneRule(t *testing.T) {
	f := newEnvdFixture(t)
	alice, err := client.New(client.Options{Addr: f.node.Addr, Token: f.node.Token(t, "alice")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const want = `invalid environment variable name "A-B": use letters, digits and '_', not starting with a digit`
	bad := map[string]string{"A-B": "1"}
	msg := func(err error) string {
		var ae *client.Error
		if errors.As(err, &ae) && ae.Code == "invalid_argument" {
			return ae.Message
		}
		var ce *connect.Error
		if errors.As(err, &ce) && ce.Code() == connect.CodeInvalidArgument {
			return ce.Message()
		}
		return fmt.Sprintf("not an invalid-argument error: %v", err)
	}
	_, execErr := alice.Exec(ctx, f.id, api.ExecRequest{Argv: []string{"true"}, Env: bad})
	_, sessErr := alice.StartSession(ctx, f.id, api.SessionRequest{Kind: "raw", Argv: []string{"true"}, Env: bad})
	_, createErr := alice.Create(ctx, api.CreateSandboxRequest{Name: "env-check", Env: bad})
	stream, err := f.process(f.id, f.token).Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "true", Envs: bad}}))
	var procErr error
	if err != nil {
		procErr = err
	} else {
		for stream.Receive() {
		}
		procErr = stream.Err()
		stream.Close()
	}
	for _, c := range []struct {
		plane string
		err   error
	}{{"native exec", execErr}, {"native session", sessErr}, {"native create", createErr}, {"E2B process", procErr}} {
		if got := msg(c.err); got != want {
			t.Errorf("%s with env A-B: %s; want %q", c.plane, got, want)
		}
	}
	if sessions, err := alice.ListSessions(ctx, f.id); err != nil || len(sessions) != 0 {
		t.Errorf("sessions after the refusals: %v, %v; want none", sessions, err)
	}
}
