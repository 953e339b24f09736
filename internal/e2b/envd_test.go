package e2b_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/processpb/processpbconnect"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"

	_ "modernc.org/sqlite"
)

// envdFixture is a control plane with a token key over a node of the fake runtime,
// whose sandboxes run a real agent, and one sandbox of alice's.
type envdFixture struct {
	fixture
	id, token, traffic string
	key, keyID         string // alice's API key, which the tokens were issued to
}

func newEnvdFixture(t *testing.T) envdFixture {
	return newEnvdFixtureWith(t, testenv.FakeOptions{})
}

// newEnvdFixtureWith is newEnvdFixture over a node made with opts (its owners are
// alice and bob).
func newEnvdFixtureWith(t *testing.T, opts testenv.FakeOptions) envdFixture {
	opts.Owners = []string{"alice", "bob"}
	opts.E2B, opts.E2BDomain = true, "sandboxes.test"
	n := testenv.NewFakeNode(t, opts)
	alice, tok, err := n.Auth.CreateTokenFormat(context.Background(), "alice", "e2b", "e2b", 0)
	if err != nil {
		t.Fatal(err)
	}
	f := envdFixture{fixture: fixture{t: t, url: n.E2BURL, node: n}}
	st, body, _ := f.do("POST", "/sandboxes", alice, `{"templateID":"base","envVars":{"GREETING":"hi"}}`)
	f.want("create", st, body, 201)
	var sb struct{ SandboxID, EnvdAccessToken, TrafficAccessToken string }
	json.Unmarshal(body, &sb)
	if sb.EnvdAccessToken == "" || sb.TrafficAccessToken == "" || sb.EnvdAccessToken == sb.TrafficAccessToken {
		t.Fatalf("create answered %s; want two different access tokens", body)
	}
	f.id, f.token, f.traffic = sb.SandboxID, sb.EnvdAccessToken, sb.TrafficAccessToken
	f.key, f.keyID = alice, tok.ID
	return f
}

// headers names the sandbox as the SDKs do with E2B_SANDBOX_URL set.
func (f envdFixture) headers(h http.Header, id, token string) {
	h.Set("E2b-Sandbox-Id", id)
	h.Set("E2b-Sandbox-Port", "49983")
	if token != "" {
		h.Set("X-Access-Token", token)
	}
}

func (f envdFixture) process(id, token string) processpbconnect.ProcessClient {
	return processpbconnect.NewProcessClient(http.DefaultClient, f.url, connect.WithInterceptors(headerInterceptor(func(h http.Header) {
		f.headers(h, id, token)
	})))
}

type headerInterceptor func(http.Header)

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h(req.Header())
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h(conn.RequestHeader())
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// run starts argv and collects its events until the end.
func run(t *testing.T, c processpbconnect.ProcessClient, req *processpb.StartRequest) (pid uint32, stdout, stderr string, end *processpb.ProcessEvent_EndEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := c.Start(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var out, errb strings.Builder
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().GetEvent().(type) {
		case *processpb.ProcessEvent_Start:
			pid = ev.Start.GetPid()
		case *processpb.ProcessEvent_Data:
			out.Write(ev.Data.GetStdout())
			errb.Write(ev.Data.GetStderr())
			out.Write(ev.Data.GetPty())
		case *processpb.ProcessEvent_End:
			end = ev.End
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatalf("start %v: %v", req.GetProcess(), err)
	}
	return pid, out.String(), errb.String(), end
}

// TestEnvdProcessStart: a command's output streams as stdout and stderr events between
// a start event with its pid and an end event with its exit code, as a Go program
// would describe it.
func TestEnvdProcessStart(t *testing.T) {
	f := newEnvdFixture(t)
	c := f.process(f.id, f.token)
	pid, out, errs, end := run(t, c, &processpb.StartRequest{Process: &processpb.ProcessConfig{
		Cmd: "/bin/sh", Args: []string{"-c", "echo out; echo err >&2; echo $GREETING $EXTRA; exit 3"},
		Envs: map[string]string{"EXTRA": "there"}}})
	if pid == 0 || out != "out\nhi there\n" || errs != "err\n" {
		t.Errorf("pid %d, stdout %q, stderr %q; want a pid, %q and %q", pid, out, errs, "out\nhi there\n", "err\n")
	}
	if end == nil || end.GetExitCode() != 3 || !end.GetExited() || end.GetStatus() != "exit status 3" {
		t.Errorf("end %v, want exit code 3, exited, status %q", end, "exit status 3")
	}

	// A background process is listed, signalled and ends killed.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tag := "sleeper"
	stream, err := c.Start(ctx, connect.NewRequest(&processpb.StartRequest{Tag: &tag,
		Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"300"}}}))
	if err != nil || !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("start sleep: %v %v", err, stream.Err())
	}
	sleepPID := stream.Msg().GetEvent().GetStart().GetPid()
	stream.Close() // the process keeps running
	list, err := c.List(ctx, connect.NewRequest(&processpb.ListRequest{}))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list.Msg.GetProcesses() {
		found = found || p.GetPid() == sleepPID && p.GetTag() == tag && p.GetConfig().GetCmd() == "sleep"
	}
	if !found {
		t.Fatalf("list %v does not show the sleep (pid %d, tag %s)", list.Msg.GetProcesses(), sleepPID, tag)
	}
	conn, err := c.Connect(ctx, connect.NewRequest(&processpb.ConnectRequest{Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Tag{Tag: tag}}}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if !conn.Receive() || conn.Msg().GetEvent().GetStart().GetPid() != sleepPID {
		t.Fatalf("connect by tag: %v %v", conn.Msg(), conn.Err())
	}
	if _, err := c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Signal: processpb.Signal_SIGNAL_SIGKILL,
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: sleepPID}}})); err != nil {
		t.Fatal(err)
	}
	var killed *processpb.ProcessEvent_EndEvent
	for conn.Receive() {
		if e := conn.Msg().GetEvent().GetEnd(); e != nil {
			killed = e
		}
	}
	if killed == nil || killed.GetExited() || killed.GetExitCode() != -1 || killed.GetStatus() != "signal: killed" {
		t.Errorf("the killed sleep ended with %v, want not exited, -1, %q", killed, "signal: killed")
	}

	// Bad input is refused with the code that says so.
	_, err = c.SendSignal(ctx, connect.NewRequest(&processpb.SendSignalRequest{Signal: processpb.Signal_SIGNAL_SIGTERM,
		Process: &processpb.ProcessSelector{Selector: &processpb.ProcessSelector_Pid{Pid: sleepPID}}}))
	if connect.CodeOf(err) != connect.CodeNotFound {
		t.Errorf("signal to an ended process: %v, want not_found", err)
	}
	stream, err = c.Start(ctx, connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{}}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Errorf("start with no command: %v, want invalid_argument", err)
	}
}

// TestEnvdRefusesWithoutToken: the in-sandbox plane answers only with the sandbox's own
// token; a token of another sandbox, a made-up one or none is refused alike, and the
// traffic token opens only other ports.
func TestEnvdRefusesWithoutToken(t *testing.T) {
	f := newEnvdFixture(t)
	for name, tc := range map[string]struct{ id, token string }{
		"no token":         {f.id, ""},
		"made-up token":    {f.id, "AAAA"},
		"traffic token":    {f.id, f.traffic},
		"unknown sandbox":  {"sb_nosuchsandbox", f.token},
		"no such, made up": {"sb_nosuchsandbox", "AAAA"},
	} {
		_, err := f.process(tc.id, tc.token).List(context.Background(), connect.NewRequest(&processpb.ListRequest{}))
		if connect.CodeOf(err) != connect.CodeUnauthenticated {
			t.Errorf("%s: %v, want unauthenticated", name, err)
		}
	}
	req, _ := http.NewRequest("GET", f.url+"/health", nil)
	f.headers(req.Header, f.id, "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f.want("health without a token", resp.StatusCode, body, 401)

	// A bad port header is refused before anything else.
	req, _ = http.NewRequest("GET", f.url+"/health", nil)
	req.Header.Set("E2b-Sandbox-Id", f.id)
	req.Header.Set("E2b-Sandbox-Port", "99999")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	f.want("port 99999", resp.StatusCode, body, 400)
}

// health is the envd plane's GET /health for sandbox id with token.
func (f envdFixture) health(id, token string) (int, []byte) {
	req, _ := http.NewRequest("GET", f.url+"/health", nil)
	f.headers(req.Header, id, token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		f.t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, body
}

// TestEnvdTokenFollowsItsKey: an access token is only as good as the API key it was
// issued to, now: narrowing the owner's roles refuses what they no longer allow on the
// next request, revoking the key refuses everything, and a token issued to one key is
// not another sandbox's or another key's.
func TestEnvdTokenFollowsItsKey(t *testing.T) {
	f := newEnvdFixture(t)
	ctx := context.Background()
	list := func() error {
		_, err := f.process(f.id, f.token).List(ctx, connect.NewRequest(&processpb.ListRequest{}))
		return err
	}
	if err := list(); err != nil {
		t.Fatalf("list with a fresh token: %v", err)
	}

	// A second key of alice's gets tokens of its own; both work while both keys do.
	_, second, err := f.node.Auth.CreateTokenFormat(ctx, "alice", "second", "e2b", 0)
	if err != nil {
		t.Fatal(err)
	}
	if second.ID == f.keyID {
		t.Fatal("two keys with one id")
	}
	forged := strings.Replace(f.token, f.keyID, second.ID, 1)
	if _, err := f.process(f.id, forged).List(ctx, connect.NewRequest(&processpb.ListRequest{})); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("a token whose key id was swapped: %v, want unauthenticated", err)
	}

	// A viewer may still ask for health, but no longer run anything.
	if _, err := f.node.Auth.SetRoles(ctx, "alice", []string{"viewer"}); err != nil {
		t.Fatal(err)
	}
	if err := list(); connect.CodeOf(err) != connect.CodePermissionDenied {
		t.Errorf("list after alice became a viewer: %v, want permission denied", err)
	}
	if st, body := f.health(f.id, f.token); st != http.StatusNoContent {
		t.Errorf("health as a viewer: %d %s, want 204", st, body)
	}
	if _, err := f.node.Auth.SetRoles(ctx, "alice", []string{"developer"}); err != nil {
		t.Fatal(err)
	}
	if err := list(); err != nil {
		t.Fatalf("list after alice was a developer again: %v", err)
	}

	// Revoking the key the token came from ends the token, for every route.
	if _, err := f.node.Auth.RevokeToken(ctx, f.keyID); err != nil {
		t.Fatal(err)
	}
	if err := list(); connect.CodeOf(err) != connect.CodeUnauthenticated {
		t.Errorf("list after the key was revoked: %v, want unauthenticated", err)
	}
	st, body := f.health(f.id, f.token)
	f.want("health after the key was revoked", st, body, 401)
	put := url.Values{"path": {"/tmp/s.txt"}, "signature": {signature("/tmp/s.txt", "write", "", f.token, 0)}}
	resp, err := http.Post(f.url+"/files?"+put.Encode(), "application/octet-stream", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a URL signed with the revoked key's token: %d, want 401", resp.StatusCode)
	}
}

// TestEnvdHealthLeavesPausedSandbox: health says a paused sandbox is not running (502,
// what the SDKs read as "not running") and leaves it paused; a process call resumes it.
func TestEnvdHealthLeavesPausedSandbox(t *testing.T) {
	f := newEnvdFixture(t)
	if st, body := f.health(f.id, f.token); st != http.StatusNoContent {
		t.Fatalf("health: %d %s, want 204", st, body)
	}
	st, body, _ := f.do("POST", "/sandboxes/"+f.id+"/pause", f.key, "")
	f.want("pause", st, body, 204)
	st, body = f.health(f.id, f.token)
	f.want("health of a paused sandbox", st, body, 502)
	// envs is answered from the record too: the variables the sandbox was made with.
	req, _ := http.NewRequest("GET", f.url+"/envs", nil)
	f.headers(req.Header, f.id, f.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	envs, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(envs), `"GREETING":"hi"`) {
		t.Errorf("envs of a paused sandbox: %d %s, want its GREETING", resp.StatusCode, envs)
	}
	if d := f.detail(f.key, f.id); d.State != "paused" {
		t.Fatalf("after health the sandbox is %q, want paused", d.State)
	}
	if _, err := f.process(f.id, f.token).List(context.Background(), connect.NewRequest(&processpb.ListRequest{})); err != nil {
		t.Fatalf("list of a paused sandbox: %v", err)
	}
	if d := f.detail(f.key, f.id); d.State != "running" {
		t.Fatalf("after a process call the sandbox is %q, want running", d.State)
	}
}

// TestEnvdRefusesChangesWithoutAudit: while the audit log cannot be written, the plane
// refuses calls that change anything, as Airlock's own API does, and still answers
// reads.
func TestEnvdRefusesChangesWithoutAudit(t *testing.T) {
	f := newEnvdFixture(t)
	db, err := sql.Open("sqlite", filepath.Join(f.node.Dir, "airlock.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`ALTER TABLE audit_log RENAME TO audit_log_away`); err != nil {
		t.Fatal(err)
	}
	defer db.Exec(`ALTER TABLE audit_log_away RENAME TO audit_log`)
	// A refused call is recorded, so its record fails and the log is known broken.
	st, body := f.health(f.id, "")
	f.want("health without a token", st, body, 401)
	c := f.process(f.id, f.token)
	stream, err := c.Start(context.Background(), connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "touch /tmp/unaudited"}}}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
		stream.Close()
	}
	if connect.CodeOf(err) != connect.CodeUnavailable {
		t.Errorf("start while the audit log cannot be written: %v, want unavailable", err)
	}
	if _, err := os.Stat("/tmp/unaudited"); err == nil {
		os.Remove("/tmp/unaudited")
		t.Error("the refused command ran")
	}
	if st, body := f.health(f.id, f.token); st != http.StatusNoContent {
		t.Errorf("health while the audit log cannot be written: %d %s", st, body)
	}
}

// signature is how E2B's SDKs sign a /files URL.
func signature(path, op, user, token string, exp int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if exp != 0 {
		raw += ":" + strconv.FormatInt(exp, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// TestEnvdSignedURL: a /files URL signed with the sandbox's token works without the
// token header, for its operation and until it expires.
func TestEnvdSignedURL(t *testing.T) {
	f := newEnvdFixture(t)
	put := url.Values{"path": {"/tmp/s.txt"}, "signature": {signature("/tmp/s.txt", "write", "", f.token, 0)}}
	req, _ := http.NewRequest("POST", f.url+"/files?"+put.Encode(), strings.NewReader("signed\n"))
	req.Header.Set("Content-Type", "application/octet-stream")
	f.headers(req.Header, f.id, "")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), `"path":"/tmp/s.txt"`) {
		t.Fatalf("signed upload: %d %s", resp.StatusCode, body)
	}
	get := func(q url.Values) (int, string) {
		req, _ := http.NewRequest("GET", f.url+"/files?"+q.Encode(), nil)
		f.headers(req.Header, f.id, "")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	exp := time.Now().Add(time.Hour).Unix()
	q := url.Values{"path": {"/tmp/s.txt"}, "signature": {signature("/tmp/s.txt", "read", "", f.token, exp)},
		"signature_expiration": {fmt.Sprint(exp)}}
	if st, body := get(q); st != 200 || body != "signed\n" {
		t.Errorf("signed download: %d %q", st, body)
	}
	past := time.Now().Add(-time.Minute).Unix()
	for name, q := range map[string]url.Values{
		"expired":         {"path": {"/tmp/s.txt"}, "signature": {signature("/tmp/s.txt", "read", "", f.token, past)}, "signature_expiration": {fmt.Sprint(past)}},
		"write signature": {"path": {"/tmp/s.txt"}, "signature": {signature("/tmp/s.txt", "write", "", f.token, 0)}},
		"other path":      {"path": {"/etc/passwd"}, "signature": {signature("/tmp/s.txt", "read", "", f.token, 0)}},
		"traffic token":   {"path": {"/tmp/s.txt"}, "signature": {signature("/tmp/s.txt", "read", "", f.traffic, 0)}},
	} {
		st, body := get(q)
		if st != 401 {
			t.Errorf("%s: %d %q, want 401", name, st, body)
		}
		// As envd answers: an expired signature says so; a wrong one does not.
		if expired := strings.Contains(body, "signature is already expired"); expired != (name == "expired") {
			t.Errorf("%s: %q", name, body)
		}
	}
	forged := url.Values{"path": {"/tmp/s.txt"}, "signature": {"v1_forged"}, "signature_expiration": {fmt.Sprint(past)}}
	if st, body := get(forged); st != 401 || strings.Contains(body, "expired") {
		t.Errorf("a forged signature past its expiration: %d %q, want 401 without saying it expired", st, body)
	}
}

// TestEnvdPortByHost: PORT-ID.DOMAIN reaches that port on the sandbox's loopback with
// the traffic token (or the envd one), which the sandbox never sees; without a token,
// or with another sandbox's, nothing is passed on.
func TestEnvdPortByHost(t *testing.T) {
	f := newEnvdFixture(t)
	seen := make(chan http.Header, 4)
	// The fake runtime's sandboxes share the host's loopback.
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.Header.Clone()
		fmt.Fprintf(w, "app %s %s", r.Method, r.URL.Path)
	}))
	defer app.Close()
	port := app.Listener.Addr().(*net.TCPAddr).Port
	get := func(host string, hdr map[string]string) (int, string) {
		req, _ := http.NewRequest("GET", f.url+"/hello", nil)
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	host := fmt.Sprintf("%d-%s.sandboxes.test", port, f.id)
	for name, hdr := range map[string]map[string]string{
		"traffic token": {"E2b-Traffic-Access-Token": f.traffic},
		"envd token":    {"X-Access-Token": f.token},
	} {
		st, body := get(host, hdr)
		if st != 200 || body != "app GET /hello" {
			t.Fatalf("%s: %d %q, want the app's answer", name, st, body)
		}
		h := <-seen
		for _, k := range []string{"X-Access-Token", "E2b-Traffic-Access-Token", "E2b-Sandbox-Id"} {
			if h.Get(k) != "" {
				t.Errorf("%s: the sandbox saw %s", name, k)
			}
		}
	}
	// A POST to the app carries neither the plane's key nor a trace in the audit log:
	// what a port's server is asked is the sandbox's business.
	req, _ := http.NewRequest("POST", f.url+"/form", strings.NewReader("x=1"))
	req.Host = host
	req.Header.Set("E2b-Traffic-Access-Token", f.traffic)
	req.Header.Set("X-API-Key", f.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if h := <-seen; resp.StatusCode != 200 || h.Get("X-API-Key") != "" {
		t.Errorf("POST through the port: %d, the app saw X-API-Key %q", resp.StatusCode, h.Get("X-API-Key"))
	}
	if recs, err := f.node.AuditLog.List(context.Background(), store.AuditFilter{Action: fmt.Sprintf("E2B port %d", port)}); err != nil || len(recs) != 0 {
		t.Errorf("port traffic in the audit log: %v %d records", err, len(recs))
	}
	for name, hdr := range map[string]map[string]string{
		"no token":      {},
		"made-up token": {"E2b-Traffic-Access-Token": "AAAA"},
	} {
		if st, body := get(host, hdr); st != 401 {
			t.Errorf("%s: %d %q, want 401", name, st, body)
		}
	}
	if st, body := get("notaport-"+f.id+".sandboxes.test", nil); st != 404 {
		t.Errorf("a host with no port: %d %q, want 404", st, body)
	}
	select {
	case h := <-seen:
		t.Errorf("a refused request reached the app: %v", h)
	default:
	}
}

// TestEnvdProcessTimeout: a command ends at its call's timeout (Connect-Timeout-Ms, which
// the SDKs send for every command), killed by the sandbox's agent, though its stream
// has already gone.
func TestEnvdProcessTimeout(t *testing.T) {
	f := newEnvdFixture(t)
	c := f.process(f.id, f.token)
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	tag := "slow"
	stream, err := c.Start(ctx, connect.NewRequest(&processpb.StartRequest{Tag: &tag,
		Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"30"}}}))
	if err == nil {
		for stream.Receive() {
		}
		err = stream.Err()
	}
	if connect.CodeOf(err) != connect.CodeDeadlineExceeded {
		t.Errorf("a stream past its timeout: %v, want deadline_exceeded", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		list, err := c.List(context.Background(), connect.NewRequest(&processpb.ListRequest{}))
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Msg.GetProcesses()) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the process outlived its timeout: %v", list.Msg.GetProcesses())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEnvdDefaultUser: a process that names no user runs as E2B's default user, as the
// base template's sandboxes have it; root is still there by name; and in a sandbox
// without that account, the sandbox's default user stands in.
func TestEnvdDefaultUser(t *testing.T) {
	f := newEnvdFixture(t)
	c := f.process(f.id, f.token)
	id := &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "id -u; echo $HOME"}}}
	self := fmt.Sprintf("%d\n", os.Geteuid())
	if _, out, errs, _ := run(t, c, id); !strings.HasPrefix(out, self) {
		t.Errorf("without a user account: %q (stderr %q), want the agent's uid %q", out, errs, self)
	}
	// The fake runtime's sandboxes have no /etc/passwd of their own: give it one.
	_, _, errs, end := run(t, c, &processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c",
		"mkdir -p etc && printf 'root:x:0:0:root:/root:/bin/sh\\nuser:x:1000:1000:user:/home/user:/bin/sh\\n' >etc/passwd"}}})
	if end.GetExitCode() != 0 {
		t.Fatalf("write etc/passwd: %v %s", end, errs)
	}
	if _, out, errs, _ := run(t, c, id); out != "1000\n/home/user\n" {
		t.Errorf("no user named: %q (stderr %q), want uid 1000 and HOME /home/user", out, errs)
	}
	root := processpbconnect.NewProcessClient(http.DefaultClient, f.url, connect.WithInterceptors(headerInterceptor(func(h http.Header) {
		f.headers(h, f.id, f.token)
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("root:")))
	})))
	if _, out, errs, _ := run(t, root, id); out != "0\n/root\n" {
		t.Errorf("as root: %q (stderr %q), want uid 0 and HOME /root", out, errs)
	}
}

// TestEnvdKillEndsStreams: killing a sandbox ends a running command's stream without
// an error, as envd's ends, and its health check then answers 502 (what the SDKs read
// as "not running") to its own token, while another token is still refused.
func TestEnvdKillEndsStreams(t *testing.T) {
	f := newEnvdFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stream, err := f.process(f.id, f.token).Start(ctx, connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "sleep", Args: []string{"300"}}}))
	if err != nil || !stream.Receive() || stream.Msg().GetEvent().GetStart() == nil {
		t.Fatalf("start sleep: %v %v", err, stream.Err())
	}
	defer stream.Close()
	st, body, _ := f.do("DELETE", "/sandboxes/"+f.id, f.key, "")
	f.want("kill", st, body, 204)
	for stream.Receive() { // an end event, if the agent saw the command killed, or none
	}
	if err := stream.Err(); err != nil {
		t.Errorf("the stream of a killed sandbox's command: %v, want its end without an error", err)
	}
	st, body = f.health(f.id, f.token)
	f.want("health of a killed sandbox", st, body, 502)
	st, body = f.health(f.id, f.traffic)
	f.want("health of a killed sandbox with the traffic token", st, body, 401)
}
