package agent

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// procCtx bounds one process test: every stream it opens ends with it.
func procCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// procRead collects a process's output until stdout holds want ("": until the end).
type procRead struct {
	stdout, stderr strings.Builder
	end            *agentproto.ExitResult
}

func readProc(t *testing.T, p *Proc, want string) *procRead {
	t.Helper()
	r := &procRead{}
	for r.end == nil && (want == "" || !strings.Contains(r.stdout.String(), want)) {
		out, err := p.Recv()
		if err != nil {
			t.Fatalf("process %d: Recv: %v (stdout so far %q, stderr %q)", p.PID, err, r.stdout.String(), r.stderr.String())
		}
		if out.Stderr {
			r.stderr.Write(out.Data)
		} else {
			r.stdout.Write(out.Data)
		}
		r.end = out.End
	}
	if want != "" && r.end != nil && !strings.Contains(r.stdout.String(), want) {
		t.Fatalf("process %d ended (%+v) before writing %q; stdout %q", p.PID, r.end, want, r.stdout.String())
	}
	return r
}

// startProc starts spec and makes sure the process is gone when the test ends.
func startProc(t *testing.T, c *Client, spec agentproto.ProcSpec) *Proc {
	t.Helper()
	p, err := c.ProcStart(procCtx(t), spec)
	if err != nil {
		t.Fatalf("ProcStart(%q): %v", spec.Argv, err)
	}
	t.Cleanup(func() {
		p.Close()
		_ = c.ProcSignal(context.Background(), p.PID, "", syscall.SIGKILL) // not_found once it ended
	})
	return p
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestProcStartStreams(t *testing.T) {
	c, _ := startAgent(t, Options{})
	p := startProc(t, c, agentproto.ProcSpec{Argv: sh("echo out; echo err >&2; exit 3")})
	if p.PID <= 0 {
		t.Errorf("got pid %d, want a process id", p.PID)
	}
	r := readProc(t, p, "")
	if r.stdout.String() != "out\n" || r.stderr.String() != "err\n" {
		t.Errorf("got stdout %q stderr %q, want %q %q", r.stdout.String(), r.stderr.String(), "out\n", "err\n")
	}
	if r.end.State != agentproto.StateFailed || r.end.ExitCode != 3 {
		t.Errorf("got end %+v, want state failed, exit code 3", r.end)
	}
	if _, err := p.Recv(); err != io.EOF {
		t.Errorf("Recv after the end: got %v, want io.EOF", err)
	}
	// The process left the table before its end was sent.
	err := c.ProcSignal(procCtx(t), p.PID, "", syscall.SIGTERM)
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "no process") {
		t.Errorf("signal after the end: got %v, want not found naming the process", err)
	}
}

// TestProcAttach: a second call attached by tag sees what the process writes after, as
// the call that started it does.
func TestProcAttach(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx := procCtx(t)
	p1 := startProc(t, c, agentproto.ProcSpec{Argv: sh("echo ready; read x; echo first:$x; read y; echo second:$y >&2"), Tag: "job", Stdin: true})
	readProc(t, p1, "ready")
	p2, err := c.ProcAttach(ctx, 0, "job")
	if err != nil {
		t.Fatalf("ProcAttach by tag: %v", err)
	}
	defer p2.Close()
	if p2.PID != p1.PID {
		t.Errorf("attach by tag: got pid %d, want %d", p2.PID, p1.PID)
	}
	if err := c.ProcInput(ctx, 0, "job", []byte("a\n")); err != nil {
		t.Fatalf("ProcInput by tag: %v", err)
	}
	for i, p := range []*Proc{p1, p2} {
		if r := readProc(t, p, "first:a\n"); r.stdout.String() != "first:a\n" {
			t.Errorf("call %d: got stdout %q, want %q", i+1, r.stdout.String(), "first:a\n")
		}
	}
	if err := c.ProcInput(ctx, p1.PID, "", []byte("b\n")); err != nil {
		t.Fatalf("ProcInput by pid: %v", err)
	}
	for i, p := range []*Proc{p1, p2} {
		r := readProc(t, p, "")
		if r.stderr.String() != "second:b\n" || r.end.State != agentproto.StateSucceeded {
			t.Errorf("call %d: got stderr %q end %+v, want %q and succeeded", i+1, r.stderr.String(), r.end, "second:b\n")
		}
	}
}

// TestProcDetach: the process outlives the call that started it; it is listed, can be
// attached to again, and a signal ends it.
func TestProcDetach(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx := procCtx(t)
	spec := agentproto.ProcSpec{Argv: []string{"sleep", "60"}, Env: []string{"MARK=1"}, Tag: "bg"}
	p := startProc(t, c, spec)
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if _, err := p.Recv(); !errors.Is(err, ErrStreamClosed) {
		t.Errorf("Recv after Close: got %v, want ErrStreamClosed", err)
	}
	list, err := c.ProcList(ctx)
	want := agentproto.ProcInfo{PID: p.PID, Tag: "bg", Argv: spec.Argv, Env: spec.Env, Cwd: "/"}
	if err != nil || len(list) != 1 || !procInfoEqual(list[0], want) {
		t.Fatalf("ProcList after Close: got %+v, %v; want [%+v]", list, err, want)
	}
	p2, err := c.ProcAttach(ctx, p.PID, "")
	if err != nil {
		t.Fatalf("ProcAttach by pid: %v", err)
	}
	defer p2.Close()
	if err := c.ProcSignal(ctx, 0, "bg", syscall.SIGTERM); err != nil {
		t.Fatalf("ProcSignal SIGTERM: %v", err)
	}
	r := readProc(t, p2, "")
	if r.end.State != agentproto.StateKilled || r.end.ExitCode != 143 || r.end.Signal != "SIGTERM" {
		t.Errorf("end after SIGTERM: got %+v, want killed, 143, SIGTERM", r.end)
	}
	if list, err := c.ProcList(ctx); err != nil || len(list) != 0 {
		t.Errorf("ProcList after the end: got %+v, %v; want none", list, err)
	}
}

func procInfoEqual(a, b agentproto.ProcInfo) bool {
	return a.PID == b.PID && a.Tag == b.Tag && slices.Equal(a.Argv, b.Argv) && slices.Equal(a.Env, b.Env) && a.Cwd == b.Cwd && a.PTY == b.PTY
}

// TestProcGoneSubscriber: a call that hung up does not hold the output back from the
// others.
func TestProcGoneSubscriber(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx := procCtx(t)
	p1 := startProc(t, c, agentproto.ProcSpec{Argv: sh("read x; head -c 3000000 /dev/zero; echo; echo done"), Stdin: true})
	p2, err := c.ProcAttach(ctx, p1.PID, "")
	if err != nil {
		t.Fatalf("ProcAttach: %v", err)
	}
	p2.Close()
	if err := c.ProcInput(ctx, p1.PID, "", []byte("go\n")); err != nil {
		t.Fatalf("ProcInput: %v", err)
	}
	r := readProc(t, p1, "")
	if n := r.stdout.Len(); n != 3000006 || r.end.State != agentproto.StateSucceeded {
		t.Errorf("got %d bytes of stdout and end %+v; want 3000006 bytes, succeeded", n, r.end)
	}
}

func TestProcStdin(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx := procCtx(t)
	p := startProc(t, c, agentproto.ProcSpec{Argv: []string{"cat"}, Stdin: true})
	big := strings.Repeat("x", 200000) + "\n"
	for _, in := range []string{"hello\n", big} {
		if err := c.ProcInput(ctx, p.PID, "", []byte(in)); err != nil {
			t.Fatalf("ProcInput: %v", err)
		}
	}
	if err := c.ProcCloseStdin(ctx, p.PID, ""); err != nil {
		t.Fatalf("ProcCloseStdin: %v", err)
	}
	r := readProc(t, p, "")
	if r.stdout.String() != "hello\n"+big || r.end.State != agentproto.StateSucceeded {
		t.Errorf("got %d bytes of stdout (%.20q…) and end %+v; want the %d bytes sent and succeeded", r.stdout.Len(), r.stdout.String(), r.end, len(big)+6)
	}
	if err := c.ProcInput(ctx, p.PID, "", make([]byte, agentproto.MaxPayload+1)); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ProcInput of more than MaxPayload: got %v, want invalid argument", err)
	}
}

func TestProcStdinNotRequested(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx := procCtx(t)
	// It waits before its cat, which reads /dev/null and ends at once: the calls below
	// must reach a process that is still there.
	p := startProc(t, c, agentproto.ProcSpec{Argv: sh("echo ready; sleep 3; cat; echo eof")})
	readProc(t, p, "ready")
	for name, err := range map[string]error{
		"input":       c.ProcInput(ctx, p.PID, "", []byte("x")),
		"close stdin": c.ProcCloseStdin(ctx, p.PID, ""),
	} {
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "stdin was not requested") {
			t.Errorf("%s: got %v, want a failed precondition saying stdin was not requested", name, err)
		}
	}
	err := c.ProcResize(ctx, p.PID, "", 10, 10)
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("resize without a PTY: got %v, want failed precondition", err)
	}
	// Without stdin, cat reads /dev/null and ends at once.
	if r := readProc(t, p, ""); !strings.Contains(r.stdout.String(), "eof") || r.end.State != agentproto.StateSucceeded {
		t.Errorf("got stdout %q end %+v, want eof and succeeded", r.stdout.String(), r.end)
	}
}

func TestProcPTY(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx := procCtx(t)
	p := startProc(t, c, agentproto.ProcSpec{Argv: sh("stty size; test -t 0 && echo tty:$TERM; read x; stty size; echo got:$x"), PTY: true, Rows: 30, Cols: 100, Stdin: true})
	if !p.PTY {
		t.Errorf("the start of a terminal process does not say it is one")
	}
	r := readProc(t, p, "tty:xterm")
	if !strings.Contains(r.stdout.String(), "30 100") {
		t.Errorf("first size: got %q, want 30 100", r.stdout.String())
	}
	if err := c.ProcResize(ctx, p.PID, "", 40, 120); err != nil {
		t.Fatalf("ProcResize: %v", err)
	}
	err := c.ProcCloseStdin(ctx, p.PID, "")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "Ctrl-D") {
		t.Errorf("close stdin of a PTY process: got %v, want a failed precondition saying to send Ctrl-D", err)
	}
	if err := c.ProcInput(ctx, p.PID, "", []byte("abc\n")); err != nil {
		t.Fatalf("ProcInput: %v", err)
	}
	r = readProc(t, p, "")
	for _, want := range []string{"40 120", "got:abc"} {
		if !strings.Contains(r.stdout.String(), want) {
			t.Errorf("output %q does not contain %q", r.stdout.String(), want)
		}
	}
	if r.stderr.Len() != 0 || r.end.State != agentproto.StateSucceeded {
		t.Errorf("got stderr %q end %+v; want none (a PTY's output is stdout) and succeeded", r.stderr.String(), r.end)
	}
}

func TestProcErrors(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := procCtx(t)
	writeFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n")
	p := startProc(t, c, agentproto.ProcSpec{Argv: []string{"sleep", "60"}, Tag: "taken"})
	const unknown = 1<<22 - 1
	calls := []struct {
		name  string
		err   error
		class error
		text  string
	}{
		{"attach unknown pid", attachErr(c.ProcAttach(ctx, unknown, "")), errdefs.ErrNotFound, "4194303"},
		{"attach unknown tag", attachErr(c.ProcAttach(ctx, 0, "nope")), errdefs.ErrNotFound, `"nope"`},
		{"input unknown pid", c.ProcInput(ctx, unknown, "", []byte("x")), errdefs.ErrNotFound, "4194303"},
		{"signal unknown tag", c.ProcSignal(ctx, 0, "nope", syscall.SIGTERM), errdefs.ErrNotFound, `"nope"`},
		{"resize unknown pid", c.ProcResize(ctx, unknown, "", 1, 1), errdefs.ErrNotFound, "4194303"},
		{"close stdin unknown pid", c.ProcCloseStdin(ctx, unknown, ""), errdefs.ErrNotFound, "4194303"},
		{"no pid nor tag", c.ProcSignal(ctx, 0, "", syscall.SIGTERM), errdefs.ErrInvalidArgument, "pid or its tag"},
		{"tag in use", attachErr(c.ProcStart(ctx, agentproto.ProcSpec{Argv: []string{"true"}, Tag: "taken"})), errdefs.ErrAlreadyExists, `"taken"`},
		{"signal not allowed", c.ProcSignal(ctx, p.PID, "", syscall.SIGSTOP), errdefs.ErrInvalidArgument, "SIGTERM, SIGKILL, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2"},
		{"no argv", attachErr(c.ProcStart(ctx, agentproto.ProcSpec{})), errdefs.ErrInvalidArgument, "argv"},
		{"bad env", attachErr(c.ProcStart(ctx, agentproto.ProcSpec{Argv: []string{"true"}, Env: []string{"NOEQUALS"}})), errdefs.ErrInvalidArgument, "NOEQUALS"},
		{"missing program", attachErr(c.ProcStart(ctx, agentproto.ProcSpec{Argv: []string{"no-such-binary-xyz"}})), errdefs.ErrNotFound, "no-such-binary-xyz"},
		{"unknown user", attachErr(c.ProcStart(ctx, agentproto.ProcSpec{Argv: []string{"true"}, User: "mallory"})), errdefs.ErrNotFound, `no user "mallory" in the sandbox`},
		{"resize to nothing", c.ProcResize(ctx, p.PID, "", 0, 80), errdefs.ErrInvalidArgument, "row"},
	}
	for _, tt := range calls {
		if !errors.Is(tt.err, tt.class) || !strings.Contains(fmtErr(tt.err), tt.text) {
			t.Errorf("%s: got %v, want %v naming %s", tt.name, tt.err, tt.class, tt.text)
		}
	}
	// The failed starts left no process behind and held no place in the table.
	if list, err := c.ProcList(ctx); err != nil || len(list) != 1 || list[0].PID != p.PID {
		t.Errorf("ProcList: got %+v, %v; want only %d", list, err, p.PID)
	}
}

// attachErr keeps the error of a call that returns a stream, closing the stream.
func attachErr(p *Proc, err error) error {
	if p != nil {
		p.Close()
	}
	return err
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestProcUser(t *testing.T) {
	require(t, os.Geteuid() == 0, "running a process as another user needs root")
	c, root := startAgent(t, Options{})
	home := t.TempDir()
	writeFile(t, filepath.Join(root, "etc/passwd"), "root:x:0:0:root:/root:/bin/sh\n"+
		"alice:x:1234:1235:Alice:/no/such/home:/bin/sh\n"+
		"bob:x:0:0:Bob:"+home+":/bin/sh\n")
	script := sh(`echo "$(id -u) $(id -g) $HOME $USER $LOGNAME $EXTRA"; pwd`)
	tests := []struct {
		user string
		env  []string
		want string
	}{
		{"alice", nil, "1234 1235 /no/such/home alice alice \n/\n"},
		{"bob", []string{"EXTRA=x", "USER=override"}, "0 0 " + home + " override bob x\n" + home + "\n"},
	}
	for _, tt := range tests {
		p := startProc(t, c, agentproto.ProcSpec{Argv: script, User: tt.user, Env: tt.env})
		r := readProc(t, p, "")
		if r.stdout.String() != tt.want || r.end.State != agentproto.StateSucceeded {
			t.Errorf("user %s: got %q (stderr %q, end %+v), want %q", tt.user, r.stdout.String(), r.stderr.String(), r.end, tt.want)
		}
	}
	// No user: as exec runs a command, in the agent's working directory.
	p := startProc(t, c, agentproto.ProcSpec{Argv: []string{"pwd"}})
	if r := readProc(t, p, ""); r.stdout.String() != "/\n" {
		t.Errorf("no user: got pwd %q, want %q", r.stdout.String(), "/\n")
	}
}

func TestUserLookup(t *testing.T) {
	c, root := startAgent(t, Options{})
	ctx := procCtx(t)
	long := "long:x:1:1::/" + strings.Repeat("l", maxAccountLine) + ":/bin/sh\n" // skipped whole
	writeFile(t, filepath.Join(root, "etc/passwd"), "# comment\nbroken line\nroot:x:0:0:root:/root:/bin/sh\n"+long+"alice:x:1234:1235::/home/alice:/bin/sh\n")
	u, err := c.LookupUser(ctx, "alice")
	if err != nil || *u != (agentproto.UserInfo{Name: "alice", UID: 1234, GID: 1235, Home: "/home/alice"}) {
		t.Errorf("LookupUser(alice): got %+v, %v", u, err)
	}
	u, err = c.LookupUser(ctx, "root")
	if err != nil || *u != (agentproto.UserInfo{Name: "root", UID: 0, GID: 0, Home: "/root"}) {
		t.Errorf("LookupUser(root): got %+v, %v", u, err)
	}
	u, err = c.LookupUser(ctx, "")
	if err != nil || u.UID != uint32(os.Geteuid()) || u.Home == "" {
		t.Errorf("LookupUser(\"\"): got %+v, %v; want uid %d with a home", u, err, os.Geteuid())
	}
	if os.Geteuid() == 0 && (u.Name != "root" || u.Home != "/root") {
		t.Errorf("LookupUser(\"\") as root: got %+v, want root with home /root", u)
	}
	if _, err := c.LookupUser(ctx, "long"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("LookupUser(long), whose line is too long: got %v, want not found", err)
	}
	_, err = c.LookupUser(ctx, "mallory")
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), `no user "mallory"`) {
		t.Errorf("LookupUser(mallory): got %v, want not found naming the user", err)
	}
}

// TestProcClientRefusesBadStart: a start answered by a pid that is no pid, or by a pid
// other than the one attached to, is refused.
func TestProcClientRefusesBadStart(t *testing.T) {
	for _, pid := range []int{0, -1, 1 << 30, 77} {
		c := fakeAgent(t, func(conn net.Conn) {
			b, _ := json.Marshal(agentproto.ProcStarted{PID: pid})
			agentproto.WriteFrame(conn, agentproto.FrameStarted, b)
		})
		p, err := c.ProcAttach(procCtx(t), 42, "")
		if attachErr(p, err); !errors.Is(err, agentproto.ErrBadReply) {
			t.Errorf("attach to 42 answered by pid %d: got %v, want ErrBadReply", pid, err)
		}
	}
	c := fakeAgent(t, func(conn net.Conn) {
		agentproto.WriteFrame(conn, agentproto.FrameStdout, []byte("early"))
	})
	if p, err := c.ProcStart(procCtx(t), agentproto.ProcSpec{Argv: []string{"x"}}); !errors.Is(attachErr(p, err), agentproto.ErrBadReply) {
		t.Errorf("start answered by output before Started: got %v, want ErrBadReply", err)
	}
}

// TestProcListFitsAFrame: a table of the most processes, each with a large environment
// and the longest tag of characters JSON escapes, is listed within one frame, every
// process with its pid and tag.
func TestProcListFitsAFrame(t *testing.T) {
	env := []string{"BIG=" + strings.Repeat("e", 64<<10)}
	tag := strings.Repeat("<", maxTag)
	infos := make([]agentproto.ProcInfo, maxProcs)
	for i := range infos {
		infos[i] = agentproto.ProcInfo{PID: i + 1, Tag: tag, Argv: []string{"sleep", "60"}, Env: env, Cwd: "/", PTY: i%2 == 0}
	}
	b := procListJSON(infos)
	if len(b) > agentproto.MaxPayload {
		t.Fatalf("listing of %d bytes, more than a frame's %d", len(b), agentproto.MaxPayload)
	}
	var got []agentproto.ProcInfo
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("listing does not decode: %v", err)
	}
	if len(got) != len(infos) {
		t.Fatalf("got %d entries, want %d", len(got), len(infos))
	}
	full := 0
	for i, info := range got {
		if info.PID != i+1 || info.Tag != tag || info.PTY != (i%2 == 0) {
			t.Errorf("entry %d: got pid %d tag %.10q… pty %v, want pid %d with its tag and PTY flag", i, info.PID, info.Tag, info.PTY, i+1)
		}
		if len(info.Env) > 0 {
			full++
		}
	}
	if full == 0 || full == len(infos) {
		t.Errorf("%d of %d entries sent whole; want the first ones whole and the rest short", full, len(infos))
	}
}

// TestProcTableBound: past the bound a start is refused until a process ends, and a
// start that failed holds no place.
func TestProcTableBound(t *testing.T) {
	defer func(n int) { maxProcs = n }(maxProcs)
	maxProcs = 2
	c, _ := startAgent(t, Options{})
	ctx := procCtx(t)
	if p, err := c.ProcStart(ctx, agentproto.ProcSpec{Argv: []string{"no-such-binary-xyz"}}); attachErr(p, err) == nil {
		t.Fatalf("start of a missing program succeeded")
	}
	p1 := startProc(t, c, agentproto.ProcSpec{Argv: []string{"sleep", "60"}})
	startProc(t, c, agentproto.ProcSpec{Argv: []string{"sleep", "60"}})
	_, err := c.ProcStart(ctx, agentproto.ProcSpec{Argv: []string{"true"}})
	if !errors.Is(err, errdefs.ErrQuotaExceeded) || !strings.Contains(err.Error(), "2 processes") {
		t.Fatalf("start past the bound: got %v, want quota exceeded naming the bound", err)
	}
	if err := c.ProcSignal(ctx, p1.PID, "", syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	readProc(t, p1, "")
	p3 := startProc(t, c, agentproto.ProcSpec{Argv: []string{"true"}})
	if r := readProc(t, p3, ""); r.end.State != agentproto.StateSucceeded {
		t.Errorf("start after a process ended: got end %+v, want succeeded", r.end)
	}
}

// TestProcShutdown: when the agent stops, the processes of its table are stopped, the
// calls attached to them get their end, and Serve returns.
func TestProcShutdown(t *testing.T) {
	sock := filepath.Join(shortDir(t), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	opts := Options{Root: t.TempDir(), Env: os.Environ(), Grace: 200 * time.Millisecond}
	go func() { done <- Serve(ctx, ln, opts) }()
	c := SocketClient(sock)
	p := startProc(t, c, agentproto.ProcSpec{Argv: []string{"sleep", "60"}})
	detached := startProc(t, c, agentproto.ProcSpec{Argv: sh("trap '' TERM; sleep 60")})
	detached.Close()
	cancel()
	r := readProc(t, p, "")
	if r.end.State != agentproto.StateKilled || r.end.Signal != "SIGTERM" {
		t.Errorf("attached call at shutdown: got end %+v, want killed by SIGTERM", r.end)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Serve did not return within 15 s of its context's end")
	}
	waitNoChildren(t)
}

// TestProcTimeout: a process with a timeout is killed, group and all, when it passes,
// on the agent's clock, and ends with state timeout; a negative timeout is refused.
func TestProcTimeout(t *testing.T) {
	c, _ := startAgent(t, Options{})
	start := time.Now()
	p := startProc(t, c, agentproto.ProcSpec{Argv: sh("sleep 30 & sleep 30; echo never"), TimeoutMS: 200})
	r := readProc(t, p, "")
	if r.end.State != agentproto.StateTimeout || r.stdout.String() != "" {
		t.Errorf("got end %+v, stdout %q; want state timeout and nothing printed", r.end, r.stdout.String())
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("the process ended after %v, want soon after its 200 ms", d)
	}
	if _, err := c.ProcStart(procCtx(t), agentproto.ProcSpec{Argv: sh("true"), TimeoutMS: -1}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("a negative timeout: %v, want invalid_argument", err)
	}
}
