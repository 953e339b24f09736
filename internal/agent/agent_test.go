package agent

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"golang.org/x/sys/unix"
)

func TestMainFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"no socket", nil},
		{"unknown flag", []string{"--socket", "/tmp/x.sock", "--bogus"}},
		{"bad env", []string{"--socket", "/tmp/x.sock", "--env", "NOEQUALS"}},
		{"negative procs", []string{"--socket", "/tmp/x.sock", "--procs", "-1"}},
	}
	for _, tt := range tests {
		if err := Main(context.Background(), tt.args); err == nil {
			t.Errorf("%s: Main(%q) = nil, want an error", tt.name, tt.args)
		}
	}
}

// TestMainDeadline runs Main in-process with a deadline two seconds away: it must stop a
// running exec (SIGTERM, then SIGKILL for one that ignores it) and return nil.
func TestMainDeadline(t *testing.T) {
	dir := shortDir(t)
	sock := filepath.Join(dir, "a.sock")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	readyFD, err := unix.Dup(int(pw.Fd())) // Main closes it
	pw.Close()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second).Unix()
	args := []string{
		"--socket", sock, "--root", t.TempDir(), "--workdir", "/tmp",
		"--deadline", strconv.FormatInt(deadline, 10), "--ready-fd", strconv.Itoa(readyFD),
		"--env", "AGENT_TEST=1", "--procs", "1",
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0)) // Main sets this process's
	mainErr := make(chan error, 1)
	go func() { mainErr <- Main(context.Background(), args) }()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("ready fd: got %q, %v; want %q", line, err, "ready\n")
	}
	if n := runtime.GOMAXPROCS(0); n != 1 {
		t.Errorf("with --procs 1 the agent runs %d threads of Go code at once, want 1", n)
	}

	c := SocketClient(sock)
	var out syncBuffer
	res, err := c.Exec(ctxT(t), agentproto.ExecSpec{Shell: "echo $AGENT_TEST $(pwd)"}, nil, &out, nil)
	if err != nil || res.State != agentproto.StateSucceeded || out.String() != "1 /tmp\n" {
		t.Errorf("exec with --env and --workdir: got %+v, %q, %v; want succeeded %q", res, out.String(), err, "1 /tmp\n")
	}
	type outcome struct {
		res *agentproto.ExitResult
		err error
	}
	polite, stubborn := make(chan outcome, 1), make(chan outcome, 1)
	go func() {
		r, err := c.Exec(ctxT(t), agentproto.ExecSpec{Argv: []string{"sleep", "60"}}, nil, nil, nil)
		polite <- outcome{r, err}
	}()
	go func() {
		r, err := c.Exec(ctxT(t), agentproto.ExecSpec{Shell: "trap '' TERM; sleep 60"}, nil, nil, nil)
		stubborn <- outcome{r, err}
	}()

	select {
	case err := <-mainErr:
		if err != nil {
			t.Errorf("Main returned %v, want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Main did not return after its deadline")
	}
	for _, tt := range []struct {
		name   string
		ch     chan outcome
		signal string
	}{{"sleep", polite, "SIGTERM"}, {"sleep ignoring SIGTERM", stubborn, "SIGKILL"}} {
		o := <-tt.ch
		if o.err != nil || o.res.State != agentproto.StateKilled || o.res.Signal != tt.signal {
			t.Errorf("%s at deadline: got %+v, %v; want killed by %s", tt.name, o.res, o.err, tt.signal)
		}
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket %s left behind: %v", sock, err)
	}
	waitNoChildren(t)
}

// TestAgentProcess runs the agent as a separate process (this test binary re-executed),
// checks that it serves, reports its memory, and stops cleanly on SIGTERM.
func TestAgentProcess(t *testing.T) {
	sock := filepath.Join(shortDir(t), "a.sock")
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	cmd := exec.Command(os.Args[0], "--socket", sock, "--root", t.TempDir(), "--ready-fd", "3")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if line, err := bufio.NewReader(pr).ReadString('\n'); err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("ready fd: got %q, %v", line, err)
	}
	c := SocketClient(sock)
	var out syncBuffer
	res, err := c.Exec(ctxT(t), agentproto.ExecSpec{Shell: "echo hi"}, nil, &out, nil)
	if err != nil || res.State != agentproto.StateSucceeded || out.String() != "hi\n" {
		t.Errorf("Exec: got %+v, %q, %v; want succeeded %q", res, out.String(), err, "hi\n")
	}
	if status, err := os.ReadFile("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/status"); err == nil {
		for _, l := range strings.Split(string(status), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				t.Logf("agent (test binary) %s", strings.Join(strings.Fields(l), " "))
			}
		}
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("agent exit after SIGTERM: %v, want status 0", err)
	}
}

// TestIdleTrim: the agent gives memory back once after a burst of calls, when it has
// been idle for idleTrim, and neither trims nor wakes again until there were new calls.
func TestIdleTrim(t *testing.T) {
	var trims atomic.Int32
	freeOSMemory = func() { trims.Add(1) }
	defer func() { freeOSMemory = debug.FreeOSMemory }()
	c, _ := startAgent(t, Options{})
	time.Sleep(2 * idleTrim)
	if n := trims.Load(); n != 0 {
		t.Fatalf("trimmed %d times before any call, want 0", n)
	}
	for range 5 {
		if err := c.Ping(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	if n := trims.Load(); n != 0 {
		t.Fatalf("trimmed %d times right after the calls, want 0 until idle", n)
	}
	deadline := time.Now().Add(5 * idleTrim)
	for trims.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(2 * idleTrim)
	if n := trims.Load(); n != 1 {
		t.Fatalf("trimmed %d times after the burst and a quiet spell, want 1", n)
	}
	// Idle, the agent does not even wake to check: thousands of idle sandboxes would
	// otherwise keep the host's CPUs busy.
	checks := trimChecks.Load()
	time.Sleep(3 * idleTrim)
	if n := trimChecks.Load() - checks; n != 0 {
		t.Errorf("an idle agent checked whether to trim %d times in %v, want 0", n, 3*idleTrim)
	}
}

// TestDropTextPages: dropping the executable's read-only pages leaves fewer of them
// resident (that the process runs on is what every later test shows).
func TestDropTextPages(t *testing.T) {
	rssFile := func() int {
		b, err := os.ReadFile("/proc/self/status")
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "RssFile:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
				return n
			}
		}
		t.Skip("no RssFile in /proc/self/status")
		return 0
	}
	before := rssFile()
	dropTextPages()
	after := rssFile()
	if after >= before {
		t.Errorf("RssFile %d kB before, %d kB after dropping text pages; want fewer", before, after)
	}
}
