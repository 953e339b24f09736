package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
)

// wantExit checks that err is the exit code want (0 meaning nil).
func wantExit(t *testing.T, err error, want int) {
	t.Helper()
	if want == 0 {
		if err != nil {
			t.Fatalf("err = %v, want success", err)
		}
		return
	}
	var e ExitError
	if !errors.As(err, &e) || e.Code != want {
		t.Fatalf("err = %v, want exit %d", err, want)
	}
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s = %q, want it to contain %q", what, got, w)
		}
	}
}

var bg = context.Background()

func TestCreate(t *testing.T) {
	f := newFakeDaemon(t)
	out, errOut, err := f.run(bg, "", "create", "box", "--image", "alpine", "--cpu", "1.5", "--memory", "512M", "--pids", "100",
		"--open-files", "1024", "--env", "A=1", "--label", "team=x", "--max-lifetime", "2h", "--idempotency-key", "k1")
	wantExit(t, err, 0)
	if errOut != "" {
		t.Errorf("stderr = %q, want nothing", errOut)
	}
	wantContains(t, "stdout", out, "NAME", "GEN", "box", "sb_1", "running", "alpine")
	want := api.CreateSandboxRequest{Name: "box", Image: "alpine", Limits: api.Limits{CPU: 1.5, Memory: 512 << 20, PIDs: 100, OpenFiles: 1024},
		Env: map[string]string{"A": "1"}, Labels: map[string]string{"team": "x"}, MaxLifetime: "2h0m0s"}
	if got := f.lastCreate; got.Name != want.Name || got.Limits != want.Limits || got.MaxLifetime != want.MaxLifetime ||
		got.Env["A"] != "1" || got.Labels["team"] != "x" || got.Image != "alpine" {
		t.Errorf("create request = %+v, want %+v", got, want)
	}
	if f.lastKey != "k1" {
		t.Errorf("Idempotency-Key = %q, want k1", f.lastKey)
	}

	_, errOut, err = f.run(bg, "", "create", "box")
	wantExit(t, err, 1)
	if want := "airlock: sandbox box already exists (already_exists)\n"; errOut != want {
		t.Errorf("stderr = %q, want %q", errOut, want)
	}

	_, errOut, err = f.run(bg, "", "create", "box", "-o", "json")
	wantExit(t, err, 1)
	var body api.ErrorBody
	if jerr := json.Unmarshal([]byte(errOut), &body); jerr != nil || body.Error.Code != "already_exists" {
		t.Errorf("json error = %q (%v), want an already_exists body", errOut, jerr)
	}

	_, errOut, err = f.run(bg, "", "create", "other", "--memory", "lots")
	wantExit(t, err, 2)
	wantContains(t, "stderr", errOut, `invalid size "lots"`, "512M, 1G, 1.5GiB", "usage: airlock create NAME")
}

func TestLsAndGet(t *testing.T) {
	f := newFakeDaemon(t)
	sb := f.addSandbox("alpha")
	sb.Limits = api.Limits{CPU: 2, Memory: 1 << 30}
	sb.CreatedAt = time.Now().Add(-5 * time.Minute)
	sb.Labels = map[string]string{"team": "x"}
	f.addSandbox("beta").State = api.StateSuspended

	out, _, err := f.run(bg, "", "ls")
	wantExit(t, err, 0)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ID STATE IMAGE CPU MEMORY CREATED" {
		t.Fatalf("ls =\n%s", out)
	}
	if got, want := strings.Join(strings.Fields(lines[1]), " "), "alpha sb_1 running host 2 1GiB 5m ago"; got != want {
		t.Errorf("ls row = %q, want %q", got, want)
	}

	out, _, err = f.run(bg, "", "ls", "--state", "suspended", "-o", "json")
	wantExit(t, err, 0)
	var list []api.Sandbox
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].Name != "beta" {
		t.Errorf("ls --state suspended -o json = %q (%v), want beta only", out, err)
	}
	out, _, _ = f.run(bg, "", "ls", "--label", "team=x")
	if strings.Contains(out, "beta") || !strings.Contains(out, "alpha") {
		t.Errorf("ls --label team=x =\n%s\nwant alpha only", out)
	}

	out, _, err = f.run(bg, "", "get", "alpha")
	wantExit(t, err, 0)
	wantContains(t, "get", out, "name:", "alpha", "memory:", "1GiB", "labels:", "team=x", "pids:", "-")

	_, errOut, err := f.run(bg, "", "get", "nope")
	wantExit(t, err, 1)
	if errOut != "airlock: sandbox nope not found (not_found)\n" {
		t.Errorf("stderr = %q", errOut)
	}
}

func TestExec(t *testing.T) {
	f := newFakeDaemon(t)
	f.addSandbox("box")
	tests := []struct {
		name    string
		args    []string
		stdin   string
		code    int
		out     string
		errOut  string
		wantEnv map[string]string
	}{
		{name: "output", args: []string{"box", "--env", "K=V", "--cwd", "/w", "--", "echo", "hi", "there"}, out: "hi there\n", wantEnv: map[string]string{"K": "V"}},
		{name: "no --", args: []string{"box", "echo", "-n"}, out: "-n\n"},
		{name: "exit code", args: []string{"box", "--", "fail", "7"}, code: 7, errOut: "oops\n"},
		{name: "timeout", args: []string{"box", "--timeout", "5s", "--", "timeout"}, code: 124, errOut: "airlock: command timed out after 5s\n"},
		{name: "oom", args: []string{"box", "--", "oom"}, code: 137, errOut: "airlock: command killed: out of memory (the sandbox's memory limit)\n"},
		{name: "signal", args: []string{"box", "--", "kill"}, code: 143, errOut: "airlock: command killed by SIGTERM\n"},
		{name: "stdin", args: []string{"box", "--stdin", "--", "cat"}, stdin: "from stdin", out: "from stdin"},
		{name: "missing command", args: []string{"box"}, code: 2},
		{name: "missing sandbox", args: []string{"nope", "--", "echo"}, code: 1, errOut: "airlock: sandbox nope not found (not_found)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := f.run(bg, tt.stdin, append([]string{"exec"}, tt.args...)...)
			wantExit(t, err, tt.code)
			if tt.code == 2 {
				wantContains(t, "stderr", errOut, "missing the command", "usage: airlock exec")
				return
			}
			if out != tt.out || errOut != tt.errOut {
				t.Errorf("stdout, stderr = %q, %q; want %q, %q", out, errOut, tt.out, tt.errOut)
			}
			if tt.wantEnv != nil && (f.lastExec.Env["K"] != "V" || f.lastExec.Cwd != "/w" || !f.lastExec.Stream) {
				t.Errorf("exec request = %+v, want env, cwd and stream", f.lastExec)
			}
		})
	}

	out, _, err := f.run(bg, "", "exec", "-o", "json", "box", "--", "fail", "3")
	wantExit(t, err, 3)
	var res api.ExecResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || res.ExitCode != 3 || res.Stderr != "oops\n" || f.lastExec.Stream {
		t.Errorf("exec -o json = %q (%v), want the collected result", out, jerr)
	}
}

func TestExecCancel(t *testing.T) {
	f := newFakeDaemon(t)
	f.addSandbox("box")
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	pr, pw := newLineWaiter()
	done := make(chan error, 1)
	var errOut bytes.Buffer
	go func() {
		done <- Run(ctx, []string{"exec", "--socket", f.sock, "box", "--", "hang"}, strings.NewReader(""), pw, &errOut)
	}()
	<-pr // the first line arrived: the exec is running
	cancel()
	wantExit(t, <-done, 130)
	if errOut.String() != "airlock: cancelled\n" {
		t.Errorf("stderr = %q", errOut.String())
	}
	select {
	case <-f.hangEnded:
	case <-time.After(10 * time.Second):
		t.Error("the daemon did not see the exec's connection close")
	}
}

// lineWaiter is a writer that signals its first newline.
type lineWaiter struct{ ch chan struct{} }

func newLineWaiter() (<-chan struct{}, *lineWaiter) {
	w := &lineWaiter{ch: make(chan struct{})}
	return w.ch, w
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte("\n")) && w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
	return len(p), nil
}

func TestRunTerminatesAlways(t *testing.T) {
	f := newFakeDaemon(t)
	out, _, err := f.run(bg, "", "run", "--memory", "1G", "--", "fail", "4")
	wantExit(t, err, 4)
	if out != "" {
		t.Errorf("stdout = %q", out)
	}
	if len(f.sandboxes) != 1 {
		t.Fatalf("sandboxes = %v, want one", f.sandboxes)
	}
	for name, sb := range f.sandboxes {
		if !strings.HasPrefix(name, "run-") || sb.State != api.StateTerminated || sb.Limits.Memory != 1<<30 {
			t.Errorf("sandbox %s = %+v, want a terminated run-* with 1GiB", name, sb)
		}
		if f.lastKey != name {
			t.Errorf("create idempotency key = %q, want the name %q", f.lastKey, name)
		}
	}

	ctx, cancel := context.WithCancel(bg)
	pr, pw := newLineWaiter()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--socket", f.sock, "run", "--", "hang"}, strings.NewReader(""), pw, &bytes.Buffer{})
	}()
	<-pr
	cancel()
	wantExit(t, <-done, 130)
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, sb := range f.sandboxes {
		if sb.State != api.StateTerminated {
			t.Errorf("after Ctrl-C, sandbox %s is %s, want terminated", name, sb.State)
		}
	}
}

func TestShell(t *testing.T) {
	f := newFakeDaemon(t)
	f.addSandbox("box")
	out, _, err := f.run(bg, "hello\n", "shell", "box", "--", "bash", "-l")
	wantExit(t, err, 3)
	if want := "$ bash -l\nhello\n"; out != want {
		t.Errorf("stdout = %q, want %q", out, want)
	}
}

func TestCp(t *testing.T) {
	f := newFakeDaemon(t)
	f.addSandbox("box")
	dir := t.TempDir()
	local := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(local, []byte("#!/bin/sh\n"), 0o750); err != nil {
		t.Fatal(err)
	}

	_, _, err := f.run(bg, "", "cp", local, "box:/app/run.sh")
	wantExit(t, err, 0)
	if got := string(f.files["box:/app/run.sh"]); got != "#!/bin/sh\n" || f.modes["box:/app/run.sh"] != 0o750 {
		t.Errorf("uploaded %q mode %o, want the script with mode 750", got, f.modes["box:/app/run.sh"])
	}
	_, _, err = f.run(bg, "", "cp", local, "box:/dir")
	wantExit(t, err, 0)
	if _, ok := f.files["box:/dir/run.sh"]; !ok {
		t.Errorf("cp into a directory wrote %v, want /dir/run.sh", sortedKeys(f.files))
	}
	_, _, err = f.run(bg, "piped", "cp", "-", "box:/p.txt")
	wantExit(t, err, 0)
	if string(f.files["box:/p.txt"]) != "piped" {
		t.Errorf("cp - wrote %q", f.files["box:/p.txt"])
	}

	out, _, err := f.run(bg, "", "cp", "box:/p.txt", "-")
	wantExit(t, err, 0)
	if out != "piped" {
		t.Errorf("cp to - = %q", out)
	}
	_, _, err = f.run(bg, "", "cp", "box:/app/run.sh", dir)
	wantExit(t, err, 0)
	b, err := os.ReadFile(filepath.Join(dir, "run.sh"))
	if err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("downloaded %q, %v", b, err)
	}

	tests := []struct {
		name   string
		args   []string
		code   int
		errOut string
	}{
		{"local directory", []string{dir, "box:/x"}, 1, "is a directory: cp copies single files only"},
		{"remote directory", []string{"box:/dir", dir}, 1, "box:/dir is a directory: cp copies single files only"},
		{"two local", []string{local, "other"}, 2, "exactly one of SRC and DST"},
		{"two remote", []string{"box:/a", "box:/b"}, 2, "exactly one of SRC and DST"},
		{"relative remote", []string{local, "box:rel"}, 2, "must be absolute"},
		{"missing remote", []string{"box:/none", dir}, 1, "not_found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, err := f.run(bg, "", append([]string{"cp"}, tt.args...)...)
			wantExit(t, err, tt.code)
			wantContains(t, "stderr", errOut, tt.errOut)
		})
	}
}

func TestRmAndOps(t *testing.T) {
	f := newFakeDaemon(t)
	f.addSandbox("box")
	_, errOut, err := f.run(bg, "", "rm", "box", "--if-match", "9")
	wantExit(t, err, 1)
	wantContains(t, "stderr", errOut, "(version_conflict)")
	out, _, err := f.run(bg, "", "rm", "box", "--if-match", "1")
	wantExit(t, err, 0)
	wantContains(t, "rm", out, "operation:", "op_2", "terminate", "terminated")
	if f.sandbox("box").State != api.StateTerminated {
		t.Error("rm did not terminate the sandbox")
	}

	out, _, err = f.run(bg, "", "ops", "get", "op_1")
	wantExit(t, err, 0)
	wantContains(t, "ops get", out, "op_1", "failed", "too many sandboxes (quota_exceeded)")
	_, _, err = f.run(bg, "", "ops", "nope")
	wantExit(t, err, 2)
}

func TestImage(t *testing.T) {
	f := newFakeDaemon(t)
	archive := filepath.Join(t.TempDir(), "Alpine.tar.gz")
	os.WriteFile(archive, []byte("TAR archive bytes"), 0o644)
	out, errOut, err := f.run(bg, "", "image", "import", archive)
	wantExit(t, err, 0)
	if errOut != "" {
		t.Errorf("stderr = %q, want no progress off a terminal", errOut)
	}
	wantContains(t, "import", out, "alpine", "sha256:abcdef012345", "17B")

	bad := filepath.Join(t.TempDir(), "bad.tar")
	os.WriteFile(bad, []byte("junk"), 0o644)
	_, errOut, err = f.run(bg, "", "image", "import", bad, "--name", "x")
	wantExit(t, err, 1)
	if errOut != "airlock: not an image archive (invalid_argument)\n" {
		t.Errorf("stderr = %q", errOut)
	}

	out, _, err = f.run(bg, "", "image", "ls")
	wantExit(t, err, 0)
	wantContains(t, "image ls", out, "host", "built in", "alpine")
	out, _, err = f.run(bg, "", "image", "rm", "alpine")
	wantExit(t, err, 0)
	if out != "removed alpine\n" {
		t.Errorf("image rm = %q", out)
	}
	_, _, err = f.run(bg, "", "image", "rm", "ghost")
	wantExit(t, err, 1)
	out, _, err = f.run(bg, "", "image", "--help")
	wantExit(t, err, 0)
	wantContains(t, "image --help", out, "image import")
	_, errOut, err = f.run(bg, "", "image")
	wantExit(t, err, 2)
	wantContains(t, "stderr", errOut, "image import", "image ls", "image rm")
}

// TestHostileTextIsEscaped checks that text a sandbox wrote reaches the terminal with its
// control characters shown, not acted on, while a command's own output stays as it is.
func TestHostileTextIsEscaped(t *testing.T) {
	f := newFakeDaemon(t)
	f.addSandbox("box")
	raw := func(s string) bool { return strings.ContainsAny(s, "\x1b\x07\u009b\u202e") }
	out, errOut, err := f.run(bg, "", "exec", "box", "--", "hostile")
	wantExit(t, err, 1)
	if out != "red \x1b[31mtext\n" {
		t.Errorf("the command's own output = %q; want it unchanged", out)
	}
	if raw(errOut) {
		t.Errorf("stderr of a failed command carries raw control characters: %q", errOut)
	}
	wantContains(t, "stderr", errOut, `gone\x1b]0;pwned\x07`, `\u009b2J`, `\u202eevil`, "\tend\nline")

	_, errOut, err = f.run(bg, "", "exec", "box", "--", "agenterr")
	wantExit(t, err, 1)
	if raw(errOut) {
		t.Errorf("an error from the agent reached stderr raw: %q", errOut)
	}
	wantContains(t, "stderr", errOut, `agent says \x1b[2J`)

	out, _, _ = f.run(bg, "", "-o", "json", "exec", "box", "--", "hostile")
	if raw(out) || !strings.Contains(out, `\u009b2J`) {
		t.Errorf("JSON output carries raw control characters or lost them: %q", out)
	}
	var res api.ExecResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || !strings.Contains(res.Error, "\u009b2J") {
		t.Errorf("JSON output does not decode to the same error: %v, %q", err, res.Error)
	}
}

func TestStatus(t *testing.T) {
	f := newFakeDaemon(t)
	out, _, err := f.run(bg, "", "status")
	wantExit(t, err, 0)
	wantContains(t, "status", out, "airlock 1.2.3", "OK", "runc")

	f.mu.Lock()
	f.checks = append(f.checks, api.Check{Name: "cgroup memory", OK: false, Detail: "controller not mounted", Degrades: "memory limits are not enforced"})
	f.mu.Unlock()
	out, errOut, err := f.run(bg, "", "status")
	wantExit(t, err, 1)
	wantContains(t, "status", out, "MISSING", "cgroup memory", "controller not mounted", "memory limits are not enforced")
	wantContains(t, "stderr", errOut, "1 of 2 checks failed")
}

func TestVersionAndHelp(t *testing.T) {
	f := newFakeDaemon(t)
	out, _, err := f.run(bg, "", "version")
	wantExit(t, err, 0)
	if out != "client: dev\nserver: 1.2.3\n" {
		t.Errorf("version = %q", out)
	}

	var stdout, stderr bytes.Buffer
	wantExit(t, Run(bg, []string{"help"}, nil, &stdout, &stderr), 0)
	wantContains(t, "help", stdout.String(), "serve", "agent", "check-config", "exec", "image import", "124", "137", "130")
	stdout.Reset()
	wantExit(t, Run(bg, []string{"help", "exec"}, nil, &stdout, &stderr), 0)
	wantContains(t, "help exec", stdout.String(), "usage: airlock exec NAME", "-timeout", "124")
	stdout.Reset()
	wantExit(t, Run(bg, []string{"cp", "-h"}, nil, &stdout, &stderr), 0)
	wantContains(t, "cp -h", stdout.String(), "single files only")
	stderr.Reset()
	wantExit(t, Run(bg, nil, nil, &stdout, &stderr), 2)
	wantContains(t, "no args", stderr.String(), "Commands:")
	stderr.Reset()
	wantExit(t, Run(bg, []string{"frobnicate"}, nil, &stdout, &stderr), 2)
	wantContains(t, "unknown", stderr.String(), `unknown command "frobnicate"`)
}

func TestUnreachableDaemon(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := Run(bg, []string{"ls", "--socket", filepath.Join(t.TempDir(), "none.sock")}, nil, &stdout, &stderr)
	wantExit(t, err, 1)
	wantContains(t, "stderr", stderr.String(), "none.sock", "airlock serve")
}

func TestTCPWithToken(t *testing.T) {
	t.Setenv("AIRLOCK_TOKEN", "s3cret")
	var gotAuth string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth = r.Header.Get("Authorization")
		writeJSON(w, 200, api.Status{Version: "9"})
	}))
	defer srv.Close()
	var stdout, stderr bytes.Buffer
	err := Run(bg, []string{"status", "--addr", strings.TrimPrefix(srv.URL, "http://")}, nil, &stdout, &stderr)
	wantExit(t, err, 0)
	if gotAuth != "Bearer s3cret" {
		t.Errorf("Authorization = %q, want the token from $AIRLOCK_TOKEN", gotAuth)
	}
	stdout.Reset()
	wantExit(t, Run(bg, []string{"--addr", "h:1", "help", "exec"}, nil, &stdout, &stderr), 0)
	wantContains(t, "help after global flags", stdout.String(), "usage: airlock exec")
}
