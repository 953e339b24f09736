package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/client"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
	"github.com/airlockhq/airlock/internal/testenv"
)

// The CLI's verbs run here against the real HTTP server, manager and SQLite store of a
// node on the fake runtime (testenv.NewFakeNode): no root, and every answer is the one a
// real daemon gives. Commands run on the host as the test's user.

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

type node struct{ *testenv.FakeNode }

func newNode(t *testing.T) *node {
	return &node{testenv.NewFakeNode(t, testenv.FakeOptions{Version: "1.2.3"})}
}

// run runs the CLI against the node with stdin and returns what it printed.
func (n *node) run(ctx context.Context, stdin string, args ...string) (string, string, error) {
	var out, errOut bytes.Buffer
	err := Run(ctx, append([]string{"--socket", n.Socket}, args...), strings.NewReader(stdin), &out, &errOut)
	return out.String(), errOut.String(), err
}

// must runs the CLI and fails the test unless it succeeds.
func (n *node) must(t *testing.T, args ...string) string {
	t.Helper()
	return n.mustIn(t, "", args...)
}

// mustIn is must with stdin as the standard input.
func (n *node) mustIn(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := n.run(bg, stdin, args...)
	if err != nil {
		t.Fatalf("airlock %s: %v\n%s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// sandbox reads a sandbox through the SDK.
func (n *node) sandbox(t *testing.T, name string) *api.Sandbox {
	t.Helper()
	sb, err := n.Client.Get(bg, name)
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	return sb
}

func TestCreate(t *testing.T) {
	n := newNode(t)
	args := []string{"create", "box", "--cpu", "1.5", "--memory", "512M", "--pids", "100",
		"--open-files", "1024", "--env", "A=1", "--label", "team=x", "--max-lifetime", "2h", "--idempotency-key", "k1"}
	out, errOut, err := n.run(bg, "", args...)
	wantExit(t, err, 0)
	if errOut != "" {
		t.Errorf("stderr = %q, want nothing", errOut)
	}
	wantContains(t, "stdout", out, "NAME", "GEN", "box", "sb_", "running", "host")
	sb := n.sandbox(t, "box")
	if want := (api.Limits{CPU: 1.5, Memory: 512 << 20, PIDs: 100, OpenFiles: 1024}); sb.Limits.CPU != want.CPU ||
		sb.Limits.Memory != want.Memory || sb.Limits.PIDs != want.PIDs || sb.Limits.OpenFiles != want.OpenFiles ||
		sb.Env["A"] != "1" || sb.Labels["team"] != "x" || sb.ExpiresAt.Sub(sb.CreatedAt) != 2*time.Hour {
		t.Errorf("created %+v; want the flags' limits, env, label and lifetime", sb)
	}
	// The same key and body replay the create: the key reached the daemon.
	out, _, err = n.run(bg, "", args...)
	wantExit(t, err, 0)
	wantContains(t, "replayed create", out, sb.ID)

	_, errOut, err = n.run(bg, "", "create", "box")
	wantExit(t, err, 1)
	wantContains(t, "stderr", errOut, "box", "(already_exists)")

	_, errOut, err = n.run(bg, "", "create", "box", "-o", "json")
	wantExit(t, err, 1)
	var body api.ErrorBody
	if jerr := json.Unmarshal([]byte(errOut), &body); jerr != nil || body.Error.Code != "already_exists" {
		t.Errorf("json error = %q (%v), want an already_exists body", errOut, jerr)
	}

	_, errOut, err = n.run(bg, "", "create", "other", "--memory", "lots")
	wantExit(t, err, 2)
	wantContains(t, "stderr", errOut, `invalid size "lots"`, "512M, 1G, 1.5GiB", "usage: airlock create NAME")
}

func TestLsAndGet(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "alpha", "--cpu", "2", "--memory", "1G", "--label", "team=x")
	n.must(t, "create", "beta")
	n.must(t, "suspend", "beta")
	alpha := n.sandbox(t, "alpha")

	out := n.must(t, "ls")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || strings.Join(strings.Fields(lines[0]), " ") != "NAME ID STATE IMAGE CPU MEMORY CREATED" {
		t.Fatalf("ls =\n%s", out)
	}
	row := regexp.MustCompile(`^alpha ` + alpha.ID + ` running host 2 1GiB \d+s ago$`)
	if got := strings.Join(strings.Fields(lines[1]), " "); !row.MatchString(got) {
		t.Errorf("ls row = %q, want %s", got, row)
	}

	out = n.must(t, "ls", "--state", "suspended", "-o", "json")
	var list []api.Sandbox
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list) != 1 || list[0].Name != "beta" {
		t.Errorf("ls --state suspended -o json = %q (%v), want beta only", out, err)
	}
	out = n.must(t, "ls", "--label", "team=x")
	if strings.Contains(out, "beta") || !strings.Contains(out, "alpha") {
		t.Errorf("ls --label team=x =\n%s\nwant alpha only", out)
	}

	out = n.must(t, "get", "alpha")
	wantContains(t, "get", out, "name:", "alpha", "memory:", "1GiB", "labels:", "team=x", "pids:")

	_, errOut, err := n.run(bg, "", "get", "nope")
	wantExit(t, err, 1)
	wantContains(t, "stderr", errOut, "nope", "(not_found)")
}

func TestExec(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	tests := []struct {
		name   string
		args   []string
		stdin  string
		code   int
		out    string
		errOut string
	}{
		{name: "output", args: []string{"box", "--", "echo", "hi", "there"}, out: "hi there\n"},
		{name: "env and cwd", args: []string{"box", "--env", "K=V", "--cwd", "/tmp", "--", "sh", "-c", "echo $K; pwd"}, out: "V\n/tmp\n"},
		{name: "no --", args: []string{"box", "printf", "%s", "-n"}, out: "-n"},
		{name: "exit code", args: []string{"box", "--", "sh", "-c", "echo oops >&2; exit 7"}, code: 7, errOut: "oops\n"},
		{name: "timeout", args: []string{"box", "--timeout", "1s", "--", "sleep", "30"}, code: 124, errOut: "airlock: command timed out after 1s\n"},
		{name: "oom", args: []string{"box", "--", "sh", "-c", "echo 1 > .oom-kills; kill -KILL $$"}, code: 137, errOut: "airlock: command killed: out of memory (the sandbox's memory limit)\n"},
		{name: "signal", args: []string{"box", "--", "sh", "-c", "kill -TERM $$"}, code: 143, errOut: "airlock: command killed by SIGTERM\n"},
		{name: "stdin", args: []string{"box", "--stdin", "--", "cat"}, stdin: "from stdin", out: "from stdin"},
		{name: "missing command", args: []string{"box"}, code: 2},
		{name: "missing sandbox", args: []string{"nope", "--", "echo"}, code: 1, errOut: "(not_found)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, err := n.run(bg, tt.stdin, append([]string{"exec"}, tt.args...)...)
			wantExit(t, err, tt.code)
			switch tt.code {
			case 2:
				wantContains(t, "stderr", errOut, "missing the command", "usage: airlock exec")
			case 1:
				wantContains(t, "stderr", errOut, tt.errOut)
			default:
				if out != tt.out || errOut != tt.errOut {
					t.Errorf("stdout, stderr = %q, %q; want %q, %q", out, errOut, tt.out, tt.errOut)
				}
			}
		})
	}

	out, _, err := n.run(bg, "", "exec", "-o", "json", "box", "--", "sh", "-c", "echo oops >&2; exit 3")
	wantExit(t, err, 3)
	var res api.ExecResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || res.ExitCode != 3 || res.Stderr != "oops\n" {
		t.Errorf("exec -o json = %q (%v), want the collected result", out, jerr)
	}
}

func TestExecCancel(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	marker := filepath.Join(t.TempDir(), "alive")
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	pr, pw := newLineWaiter()
	done := make(chan error, 1)
	var errOut bytes.Buffer
	script := "echo started; while :; do touch " + marker + "; sleep 0.05; done"
	go func() {
		done <- Run(ctx, []string{"exec", "--socket", n.Socket, "box", "--", "sh", "-c", script}, strings.NewReader(""), pw, &errOut)
	}()
	<-pr // the first line arrived: the exec is running
	cancel()
	wantExit(t, <-done, 130)
	if errOut.String() != "airlock: cancelled\n" {
		t.Errorf("stderr = %q", errOut.String())
	}
	// The daemon saw the connection close and stopped the command: the marker, touched
	// every 50 ms while it runs, ages (or was never made).
	deadline := time.Now().Add(10 * time.Second)
	for {
		time.Sleep(200 * time.Millisecond)
		fi, err := os.Stat(marker)
		if (errors.Is(err, os.ErrNotExist) || err == nil && time.Since(fi.ModTime()) > time.Second) && time.Now().After(deadline.Add(-8*time.Second)) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command still runs after the CLI was cancelled")
		}
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
	n := newNode(t)
	out, _, err := n.run(bg, "", "run", "--memory", "1G", "--", "sh", "-c", "exit 4")
	wantExit(t, err, 4)
	if out != "" {
		t.Errorf("stdout = %q", out)
	}
	list, err := n.Client.List(bg, client.ListOptions{})
	if err != nil || len(list) != 1 {
		t.Fatalf("sandboxes = %v, %v; want one", list, err)
	}
	sb := list[0]
	if !strings.HasPrefix(sb.Name, "run-") || sb.State != api.StateTerminated || sb.Limits.Memory != 1<<30 {
		t.Errorf("sandbox %+v; want a terminated run-* with 1GiB", sb)
	}
	ops, _ := n.Store.ListOperations(bg, store.OperationFilter{})
	keyed := false
	for _, op := range ops {
		keyed = keyed || (op.Kind == "create" && op.IdempotencyKey == sb.Name)
	}
	if !keyed {
		t.Errorf("no create of %s with its name as idempotency key among %d operations", sb.Name, len(ops))
	}

	ctx, cancel := context.WithCancel(bg)
	pr, pw := newLineWaiter()
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, []string{"--socket", n.Socket, "run", "--", "sh", "-c", "echo up; sleep 60"}, strings.NewReader(""), pw, &bytes.Buffer{})
	}()
	<-pr
	cancel()
	wantExit(t, <-done, 130)
	list, _ = n.Client.List(bg, client.ListOptions{})
	for _, sb := range list {
		if sb.State != api.StateTerminated {
			t.Errorf("after Ctrl-C, sandbox %s is %s, want terminated", sb.Name, sb.State)
		}
	}
}

func TestShell(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	out, _, err := n.run(bg, "hello\n", "shell", "box", "--", "sh", "-c", "read x; echo got:$x; exit 3")
	wantExit(t, err, 3)
	wantContains(t, "stdout", out, "got:hello")
}

func TestCp(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	id := n.sandbox(t, "box").ID
	n.must(t, "exec", "box", "--", "mkdir", "app", "dir")
	dir := t.TempDir()
	local := filepath.Join(dir, "run.sh")
	if err := os.WriteFile(local, []byte("#!/bin/sh\n"), 0o750); err != nil {
		t.Fatal(err)
	}

	n.must(t, "cp", local, "box:/app/run.sh")
	b, err := os.ReadFile(n.Driver.Path(id, "/app/run.sh"))
	fi, _ := os.Stat(n.Driver.Path(id, "/app/run.sh"))
	if err != nil || string(b) != "#!/bin/sh\n" || fi.Mode().Perm() != 0o750 {
		t.Errorf("uploaded %q (%v), want the script with mode 750", b, err)
	}
	n.must(t, "cp", local, "box:/dir")
	if _, err := os.Stat(n.Driver.Path(id, "/dir/run.sh")); err != nil {
		t.Errorf("cp into a directory: %v, want /dir/run.sh", err)
	}
	_, _, err = n.run(bg, "piped", "cp", "-", "box:/p.txt")
	wantExit(t, err, 0)
	if b, _ := os.ReadFile(n.Driver.Path(id, "/p.txt")); string(b) != "piped" {
		t.Errorf("cp - wrote %q", b)
	}
	if out := n.must(t, "cp", "box:/p.txt", "-"); out != "piped" {
		t.Errorf("cp to - = %q", out)
	}
	os.Remove(local)
	n.must(t, "cp", "box:/app/run.sh", dir)
	if b, err := os.ReadFile(local); err != nil || string(b) != "#!/bin/sh\n" {
		t.Errorf("downloaded %q, %v", b, err)
	}

	tests := []struct {
		name   string
		args   []string
		code   int
		errOut string
	}{
		{"local directory", []string{dir, "box:/x"}, 1, "is a directory: copy a tree with cp -r"},
		{"remote directory", []string{"box:/dir", dir}, 1, "box:/dir is a directory: copy a tree with cp -r"},
		{"two local", []string{local, "other"}, 2, "exactly one of SRC and DST"},
		{"two remote", []string{"box:/a", "box:/b"}, 2, "exactly one of SRC and DST"},
		{"relative remote", []string{local, "box:rel"}, 2, "must be absolute"},
		{"missing remote", []string{"box:/none", dir}, 1, "not_found"},
		{"-r and --extract", []string{"-r", "--extract", local, "box:/x"}, 2, "do not go together"},
		{"--max-files without -r", []string{"--max-files", "5", "box:/a", dir}, 2, "bound a tree download"},
		{"--extract out", []string{"--extract", "box:/a", dir}, 2, "unpacks into a sandbox"},
		{"-r of a file", []string{"-r", local, "box:/x"}, 1, "is not a directory"},
		{"-r from stdin", []string{"-r", "-", "box:/x"}, 2, "cp --extract -"},
		{"bad --max-bytes", []string{"-r", "--max-bytes", "lots", "box:/a", dir}, 2, "--max-bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, errOut, err := n.run(bg, "", append([]string{"cp"}, tt.args...)...)
			wantExit(t, err, tt.code)
			wantContains(t, "stderr", errOut, tt.errOut)
		})
	}
}

func TestRmAndOps(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	v := n.sandbox(t, "box").Version
	_, errOut, err := n.run(bg, "", "rm", "box", "--if-match", strconv.FormatInt(v+7, 10))
	wantExit(t, err, 1)
	wantContains(t, "stderr", errOut, "(version_conflict)")
	out := n.must(t, "rm", "-v", "box", "--if-match", strconv.FormatInt(v, 10))
	wantContains(t, "rm", out, "operation:", "op_", "terminate", "terminated")
	if st := n.sandbox(t, "box").State; st != api.StateTerminated {
		t.Errorf("rm left the sandbox %s", st)
	}

	n.Driver.FailNextStart(errors.New("the runtime broke"))
	_, errOut, err = n.run(bg, "", "create", "doomed", "-o", "json")
	wantExit(t, err, 1)
	var body api.ErrorBody
	if jerr := json.Unmarshal([]byte(errOut), &body); jerr != nil || body.Error.Details["operation_id"] == nil {
		t.Fatalf("failed create = %q (%v); want an error naming its operation", errOut, jerr)
	}
	opID := body.Error.Details["operation_id"].(string)
	out = n.must(t, "ops", "get", opID)
	wantContains(t, "ops get", out, opID, "failed", "(unavailable)")
	_, _, err = n.run(bg, "", "ops", "nope")
	wantExit(t, err, 2)
}

// rootfsArchive writes a gzipped tar of a one-file root filesystem.
func rootfsArchive(t *testing.T, path string) {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	tw.WriteHeader(&tar.Header{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755})
	body := []byte("alpine\n")
	tw.WriteHeader(&tar.Header{Name: "etc/hostname", Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(body))})
	tw.Write(body)
	tw.Close()
	zw.Close()
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestImage(t *testing.T) {
	n := newNode(t)
	archive := filepath.Join(t.TempDir(), "Alpine.tar.gz")
	rootfsArchive(t, archive)
	out, errOut, err := n.run(bg, "", "image", "import", archive)
	wantExit(t, err, 0)
	if errOut != "" {
		t.Errorf("stderr = %q, want no progress off a terminal", errOut)
	}
	wantContains(t, "import", out, "alpine", "sha256:")

	bad := filepath.Join(t.TempDir(), "bad.tar")
	os.WriteFile(bad, []byte("junk"), 0o644)
	_, errOut, err = n.run(bg, "", "image", "import", bad, "--name", "x")
	wantExit(t, err, 1)
	wantContains(t, "stderr", errOut, "(invalid_argument)")

	out = n.must(t, "image", "ls")
	wantContains(t, "image ls", out, "host", "built in", "alpine")
	if out := n.must(t, "image", "rm", "alpine"); out != "removed alpine\n" {
		t.Errorf("image rm = %q", out)
	}
	_, _, err = n.run(bg, "", "image", "rm", "ghost")
	wantExit(t, err, 1)
	out = n.must(t, "image", "--help")
	wantContains(t, "image --help", out, "image import")
	_, errOut, err = n.run(bg, "", "image")
	wantExit(t, err, 2)
	wantContains(t, "stderr", errOut, "image import", "image ls", "image rm")
}

// TestHostileTextIsEscaped checks that text a sandbox wrote reaches the terminal with its
// control characters shown, not acted on, while a command's own output stays as it is.
// The sandbox's agent here is the test's: it answers with hostile text.
func TestHostileTextIsEscaped(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	id := n.sandbox(t, "box").ID
	n.Driver.SetAgent(id, func(c net.Conn) {
		_, p, err := agentproto.ReadFrame(c)
		if err != nil {
			return
		}
		req, _ := agentproto.DecodeRequest(p)
		if req.Exec != nil && strings.Join(req.Exec.Argv, " ") == "agenterr" {
			b, _ := json.Marshal(agentproto.RemoteError{Code: "internal", Message: "agent says \x1b[2J"})
			agentproto.WriteFrame(c, agentproto.FrameError, b)
			return
		}
		agentproto.WriteFrame(c, agentproto.FrameStdout, []byte("red \x1b[31mtext\n"))
		b, _ := json.Marshal(agentproto.ExitResult{State: agentproto.StateFailed, ExitCode: 1,
			Error: "gone\x1b]0;pwned\x07 \u009b2J \u202eevil\tend\nline"})
		agentproto.WriteFrame(c, agentproto.FrameResult, b)
	})
	raw := func(s string) bool { return strings.ContainsAny(s, "\x1b\x07\u009b\u202e") }
	out, errOut, err := n.run(bg, "", "exec", "box", "--", "hostile")
	wantExit(t, err, 1)
	if out != "red \x1b[31mtext\n" {
		t.Errorf("the command's own output = %q; want it unchanged", out)
	}
	if raw(errOut) {
		t.Errorf("stderr of a failed command carries raw control characters: %q", errOut)
	}
	wantContains(t, "stderr", errOut, `gone\x1b]0;pwned\x07`, `\u009b2J`, `\u202eevil`, "\tend\nline")

	_, errOut, err = n.run(bg, "", "exec", "box", "--", "agenterr")
	wantExit(t, err, 1)
	if raw(errOut) {
		t.Errorf("an error from the agent reached stderr raw: %q", errOut)
	}

	out, _, _ = n.run(bg, "", "-o", "json", "exec", "box", "--", "hostile")
	if raw(out) || !strings.Contains(out, `\u009b2J`) {
		t.Errorf("JSON output carries raw control characters or lost them: %q", out)
	}
	var res api.ExecResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || !strings.Contains(res.Error, "\u009b2J") {
		t.Errorf("JSON output does not decode to the same error: %v, %q", err, res.Error)
	}
}

func TestStatus(t *testing.T) {
	n := newNode(t)
	out := n.must(t, "status")
	wantContains(t, "status", out, "airlock 1.2.3", "OK", "fake runtime", "store", "cleanups", "0 pending")

	n.Manager.AddProbe(func(context.Context) (runtime.Check, bool) {
		return runtime.Check{Name: "cgroup memory", OK: false, Detail: "controller not mounted", Degrades: "memory limits are not enforced"}, true
	})
	out, errOut, err := n.run(bg, "", "status")
	wantExit(t, err, 1)
	wantContains(t, "status", out, "MISSING", "cgroup memory", "controller not mounted", "memory limits are not enforced")
	st, err := n.Client.Status(bg)
	if err != nil {
		t.Fatal(err)
	}
	wantContains(t, "stderr", errOut, fmt.Sprintf("1 of %d checks failed", len(st.Checks)))
}

func TestVersionAndHelp(t *testing.T) {
	n := newNode(t)
	if out := n.must(t, "version"); out != "client: dev\nserver: 1.2.3\n" {
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
	wantContains(t, "cp -h", stdout.String(), "-r (--recursive) copies a directory tree", "--extract")
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
	n := testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"alice"}})
	t.Setenv("AIRLOCK_TOKEN", n.Token(t, "alice"))
	var stdout, stderr bytes.Buffer
	wantExit(t, Run(bg, []string{"create", "mine", "--addr", n.Addr}, nil, &stdout, &stderr), 0)
	if sb, err := n.Client.Get(bg, "mine"); err == nil {
		t.Errorf("the local owner sees alice's sandbox %s; want it alice's only", sb.ID)
	}
	t.Setenv("AIRLOCK_TOKEN", "not-a-token-of-anyone")
	stderr.Reset()
	wantExit(t, Run(bg, []string{"ls", "--addr", n.Addr}, nil, &stdout, &stderr), 1)
	wantContains(t, "stderr", stderr.String(), "(unauthenticated)")
	stdout.Reset()
	wantExit(t, Run(bg, []string{"--addr", "h:1", "help", "exec"}, nil, &stdout, &stderr), 0)
	wantContains(t, "help after global flags", stdout.String(), "usage: airlock exec")
}

func TestUsersRolesTokens(t *testing.T) {
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"seed"}})}
	if out := n.must(t, "whoami"); !strings.Contains(out, "local (roles: admin)") {
		t.Errorf("whoami over the socket as root = %q", out)
	}
	n.must(t, "user", "create", "alice", "--role", "developer")
	secret := strings.TrimSpace(n.must(t, "token", "create", "--user", "alice", "--name", "laptop"))
	if !strings.HasPrefix(secret, "al_") {
		t.Fatalf("token create printed %q; want the secret", secret)
	}
	as := func(args ...string) (string, string, error) {
		var out, errOut bytes.Buffer
		err := Run(bg, append(args, "--addr", n.Addr, "--token", secret), nil, &out, &errOut)
		return out.String(), errOut.String(), err
	}
	out, errOut, err := as("whoami")
	if err != nil {
		t.Fatalf("whoami as alice over TCP: %v\n%s", err, errOut)
	}
	wantContains(t, "whoami as alice", out, "alice (roles: developer)", "sandbox.exec")
	_, errOut, err = as("user", "ls")
	wantExit(t, err, 1)
	wantContains(t, "user ls as alice", errOut, "admin", "(permission_denied)")

	n.must(t, "role", "create", "auditor", "--permission", "audit.read,snapshot.*")
	n.must(t, "user", "roles", "alice", "--role", "auditor")
	_, errOut, err = as("create", "box")
	wantExit(t, err, 1)
	wantContains(t, "create as an auditor", errOut, "sandbox.create", "(permission_denied)")
	_, errOut, err = n.run(bg, "", "role", "rm", "auditor")
	wantExit(t, err, 1)
	wantContains(t, "role rm of a role in use", errOut, "alice")
	wantContains(t, "user ls", n.must(t, "user", "ls"), "alice", "auditor", "local", "admin")
	wantContains(t, "role ls", n.must(t, "role", "ls"), "developer", "built in", "auditor", "custom")

	toks := n.must(t, "token", "ls", "--user", "alice")
	id := regexp.MustCompile(`tok_[a-z0-9]+`).FindString(toks)
	wantContains(t, "token ls", toks, "laptop", "active")
	if strings.Contains(toks, secret[3:]) {
		t.Errorf("token ls shows the secret: %q", toks)
	}
	n.must(t, "token", "revoke", id)
	_, errOut, err = as("whoami")
	wantExit(t, err, 1)
	wantContains(t, "whoami with a revoked token", errOut, "(unauthenticated)")
	n.must(t, "user", "rm", "alice")
	_, errOut, err = n.run(bg, "", "user", "create", "Bad", "--role", "viewer")
	wantExit(t, err, 1)
	wantContains(t, "a bad name", errOut, "invalid identity name", "(invalid_argument)")
}

func TestAuditVerbs(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "box")
	n.must(t, "exec", "box", "--", "true")
	out := n.must(t, "audit", "ls", "--sandbox", "box")
	wantContains(t, "audit ls --sandbox box", out, "SEQ", "exec", "succeeded", "local")
	out = n.must(t, "audit", "ls", "--action", "POST /v1/sandboxes", "--since", "1h")
	wantContains(t, "audit ls --action", out, "POST /v1/sandboxes", "201")
	if strings.Contains(out, "\texec\t") || strings.Contains(out, " exec ") {
		t.Errorf("audit ls --action lists other actions: %q", out)
	}
	wantContains(t, "audit verify", n.must(t, "audit", "verify"), "the audit log is intact")
	_, errOut, err := n.run(bg, "", "audit", "ls", "--since", "yesterday")
	wantExit(t, err, 2)
	wantContains(t, "a bad --since", errOut, "RFC 3339")
}

// TestSecretWithoutHostsAndRm: a secret meant for a file needs no allowed hosts (only
// proxy delivery does, and says so), and a secret, revoked or not, can be removed, which
// frees its name.
func TestSecretWithoutHostsAndRm(t *testing.T) {
	n := newNode(t)
	wantContains(t, "secret create without hosts", n.mustIn(t, "pw-1\n", "secret", "create", "--name", "db", "--type", "password"), "allowed hosts: -")
	n.must(t, "create", "app")
	n.must(t, "secret", "bind", "db", "--sandbox", "app", "--target", "/etc/app/db-password", "--delivery", "file")
	_, errOut, err := n.run(bg, "", "secret", "bind", "db", "--sandbox", "app", "--target", "DB_PASSWORD")
	wantExit(t, err, 1)
	wantContains(t, "proxy delivery of a secret without hosts", errOut, "no allowed hosts", "file or env", "(invalid_argument)")

	_, errOut, err = n.run(bg, "", "secret", "rm", "db")
	wantExit(t, err, 2)
	wantContains(t, "rm without --yes", errOut, "--yes")
	n.must(t, "secret", "revoke", "db", "--yes")
	wantContains(t, "secret rm of a revoked secret", n.must(t, "secret", "rm", "db", "--yes"), "removed db")
	if out := n.must(t, "secret", "ls"); strings.Contains(out, "db") {
		t.Errorf("secret ls still lists the removed secret: %q", out)
	}
	_, errOut, err = n.run(bg, "", "secret", "rm", "db", "--yes")
	wantExit(t, err, 1)
	wantContains(t, "rm of a removed secret", errOut, "not found")
	// The name is free again, and an active secret is revoked and removed in one step.
	n.mustIn(t, "pw-2\n", "secret", "create", "--name", "db", "--type", "password")
	n.must(t, "secret", "rm", "db", "--yes")
}

// Secrets go in through standard input and never come out: no answer, listing, log
// record or file of the node holds the value, in the clear, base64 or hex.
func TestSecretVerbs(t *testing.T) {
	n := newNode(t)
	value := "sk-live-" + strings.Repeat("9fQ", 10)
	var outputs []string
	run := func(stdin string, args ...string) string {
		t.Helper()
		out, errOut, err := n.run(bg, stdin, args...)
		outputs = append(outputs, out, errOut)
		if err != nil {
			t.Fatalf("airlock %s: %v\n%s", strings.Join(args, " "), err, errOut)
		}
		return out
	}
	out := run(value+"\n", "secret", "create", "--name", "stripe", "--type", "token", "--allowed-hosts", "api.stripe.com", "--description", "payments")
	wantContains(t, "secret create", out, "stripe", "api.stripe.com", "sk-l…fQ", "hmac-sha256:")
	wantContains(t, "secret ls", run("", "secret", "ls"), "stripe", "token", "sk-l…fQ")
	run("", "-o", "json", "secret", "get", "stripe")
	out = run(value+"2\n", "secret", "rotate", "stripe")
	wantContains(t, "secret rotate", out, "version 2", "running processes keep theirs until they restart")
	run("", "secret", "rekey")

	run("", "create", "payer")
	out = run("", "secret", "bind", "stripe", "--sandbox", "payer", "--target", "STRIPE_KEY")
	wantContains(t, "secret bind", out, "proxy delivery at STRIPE_KEY", "for api.stripe.com")
	out, errOut, err := n.run(bg, "", "secret", "bind", "stripe", "--sandbox", "payer", "--target", "STRIPE_RAW", "--delivery", "env")
	if err != nil {
		t.Fatalf("secret bind --delivery env: %v\n%s", err, errOut)
	}
	outputs = append(outputs, out, errOut)
	wantContains(t, "env delivery's warning", errOut, "higher-risk")
	wantContains(t, "secret get with bindings", run("", "secret", "get", "stripe"), "bound:", "STRIPE_KEY", "env delivery at STRIPE_RAW", "risk high")
	run("local-value\n", "secret", "create", "--name", "loop", "--type", "token", "--allowed-hosts", "localhost")
	_, errOut, err = n.run(bg, "", "secret", "bind", "loop", "--sandbox", "payer", "--target", "LOOP")
	wantExit(t, err, 1)
	wantContains(t, "a secret whose own host is loopback", errOut, "loopback", "(failed_precondition)")
	if strings.Contains(run("", "secret", "get", "loop"), "bound:") {
		t.Error("the refused binding was kept")
	}
	_, errOut, err = n.run(bg, "", "secret", "bind", "stripe", "--sandbox", "payer", "--target", "/etc/key", "--delivery", "file", "--scope", "execution")
	wantExit(t, err, 1)
	wantContains(t, "file delivery per execution", errOut, "per sandbox", "(invalid_argument)")
	_, errOut, err = n.run(bg, "", "secret", "unbind", "stripe", "--sandbox", "payer")
	wantExit(t, err, 2)
	wantContains(t, "unbind without --yes", errOut, "--yes")
	wantContains(t, "secret unbind", run("", "secret", "unbind", "stripe", "--sandbox", "payer", "--yes"), "removed 2 binding(s)")

	_, errOut, err = n.run(bg, "", "secret", "revoke", "stripe")
	wantExit(t, err, 2)
	wantContains(t, "revoke without --yes", errOut, "--yes")
	run("", "secret", "revoke", "stripe", "--yes")
	_, errOut, err = n.run(bg, "", "secret", "create", "--name", "empty", "--type", "password", "--allowed-hosts", "db.example.com")
	wantExit(t, err, 1)
	wantContains(t, "an empty value", errOut, "empty", "(invalid_argument)")
	run("", "audit", "ls")

	needles := map[string]string{"plaintext": value, "base64": base64.StdEncoding.EncodeToString([]byte(value)),
		"hex": hex.EncodeToString([]byte(value))}
	for what, needle := range needles {
		for _, o := range outputs {
			if strings.Contains(o, needle) {
				t.Errorf("a CLI output holds the %s value: %q", what, o)
			}
		}
		filepath.Walk(n.Dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(needle)) {
					t.Errorf("%s holds the %s value", p, what)
				}
			}
			return nil
		})
	}
}

func TestTokenCreateFormatE2B(t *testing.T) {
	n := &node{testenv.NewFakeNode(t, testenv.FakeOptions{Owners: []string{"seed"}})}
	n.must(t, "user", "create", "carol", "--role", "developer")
	secret := strings.TrimSpace(n.must(t, "token", "create", "--user", "carol", "--format", "e2b"))
	if !regexp.MustCompile(`^e2b_[0-9a-f]{40}$`).MatchString(secret) {
		t.Fatalf("token create --format e2b printed %q; want e2b_ and 40 hex digits", secret)
	}
	// The same kind of token: it is a bearer token on Airlock's API too.
	var out, errOut bytes.Buffer
	if err := Run(bg, []string{"whoami", "--addr", n.Addr, "--token", secret}, nil, &out, &errOut); err != nil {
		t.Fatalf("whoami with the e2b token: %v\n%s", err, errOut.String())
	}
	wantContains(t, "whoami with the e2b token", out.String(), "carol (roles: developer)")
	var stdout, stderr bytes.Buffer
	wantExit(t, Run(bg, []string{"token", "create", "--user", "carol", "--format", "xyz"}, nil, &stdout, &stderr), 2)
	wantContains(t, "token create --format xyz", stderr.String(), "airlock or e2b")
}

// writeCounter counts the writes it is given.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

func (w *writeCounter) WriteString(s string) (int, error) { return w.Write([]byte(s)) }

// TestTableIsOneWrite: a table reaches standard output in one write, not a write per
// cell and gap (a system call each, on a terminal).
func TestTableIsOneWrite(t *testing.T) {
	n := newNode(t)
	n.must(t, "create", "one")
	n.must(t, "create", "two")
	var out writeCounter
	var errOut bytes.Buffer
	if err := Run(bg, []string{"--socket", n.Socket, "ls"}, strings.NewReader(""), &out, &errOut); err != nil {
		t.Fatalf("airlock ls: %v\n%s", err, errOut.String())
	}
	if lines := strings.Count(out.String(), "\n"); out.writes != 1 || lines != 3 {
		t.Errorf("airlock ls: %d writes of %d lines, want 1 write of 3 lines:\n%s", out.writes, lines, out.String())
	}
}
