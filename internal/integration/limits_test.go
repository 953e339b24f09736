package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/testenv"
)

// cgroupFile reads one file of a sandbox's cgroup in a v1 controller (or the unified
// hierarchy on v2, where controller is ignored).
func cgroupFile(t testing.TB, n *testenv.Node, id, controller, file string) string {
	t.Helper()
	p := filepath.Join("/sys/fs/cgroup", controller, n.CgroupParent, id, file)
	if cgroupV2() {
		p = filepath.Join("/sys/fs/cgroup", n.CgroupParent, id, file)
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("read cgroup file: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// TestLimits checks that every limit of DESIGN.md §5 is set on the host, that hitting
// one ends the exec with the right state, and that the host and other sandboxes keep
// running.
func TestLimits(t *testing.T) {
	n := testenv.NewNode(t)
	misc := n.Create(t, api.CreateSandboxRequest{Name: "lim-misc", Limits: api.Limits{CPU: 0.5, OpenFiles: 128}})

	t.Run("memory", func(t *testing.T) {
		mem := n.Create(t, api.CreateSandboxRequest{Name: "lim-mem", Limits: api.Limits{Memory: 64 << 20}})
		if cgroupV2() {
			if got := cgroupFile(t, n, mem.ID, "", "memory.max"); got != "67108864" {
				t.Errorf("memory.max: got %s, want 67108864", got)
			}
			if got := cgroupFile(t, n, mem.ID, "", "memory.swap.max"); got != "0" {
				t.Errorf("memory.swap.max: got %s, want 0 (no swap)", got)
			}
		} else {
			if got := cgroupFile(t, n, mem.ID, "memory", "memory.limit_in_bytes"); got != "67108864" {
				t.Errorf("memory.limit_in_bytes: got %s, want 67108864", got)
			}
			if _, err := os.Stat("/sys/fs/cgroup/memory/memory.memsw.limit_in_bytes"); err == nil {
				if got := cgroupFile(t, n, mem.ID, "memory", "memory.memsw.limit_in_bytes"); got != "67108864" {
					t.Errorf("memory.memsw.limit_in_bytes: got %s, want 67108864 (no swap)", got)
				}
			}
		}
		// b"x" * n writes every page, unlike bytearray(n), which the kernel may leave unmapped.
		res := python(t, n, mem.Name, `b = b"x" * (512 << 20); print(len(b))`)
		if res.State != api.ExecOOMKilled {
			t.Errorf("allocate 512 MiB under a 64 MiB limit: got state %q exit %d signal %q error %q, want %q",
				res.State, res.ExitCode, res.Signal, res.Error, api.ExecOOMKilled)
		}
		if got := mustRun(t, n, mem.Name, "true; echo alive"); got != "alive\n" {
			t.Errorf("the OOM-killed sandbox afterwards: got %q, want alive", got)
		}
		if got := mustRun(t, n, misc.Name, "echo ok"); got != "ok\n" {
			t.Errorf("another sandbox after the OOM: got %q, want ok", got)
		}
		if sb, err := n.Client.Get(background, mem.Name); err != nil || sb.State != api.StateRunning {
			t.Errorf("the OOM-killed sandbox: got %v, %v; want it running", sb, err)
		}
	})

	t.Run("fork bomb", func(t *testing.T) {
		bomb := n.Create(t, api.CreateSandboxRequest{Name: "lim-bomb", Limits: api.Limits{PIDs: 64, CPU: 0.5}})
		if got := cgroupFile(t, n, bomb.ID, "pids", "pids.max"); got != "64" {
			t.Errorf("pids.max: got %s, want 64", got)
		}
		ctx, cancel := context.WithTimeout(background, time.Minute)
		defer cancel()
		res, err := n.Client.Exec(ctx, bomb.Name, api.ExecRequest{Argv: []string{"bash", "-c", ":(){ :|:& };:; sleep 60"}, Timeout: "5s"})
		if err != nil {
			t.Fatalf("fork bomb exec: got error %v, want a result", err)
		}
		if res.State != api.ExecTimeout && res.State != api.ExecFailed {
			t.Errorf("fork bomb: got state %q exit %d, want %q or %q", res.State, res.ExitCode, api.ExecTimeout, api.ExecFailed)
		}
		if _, err := n.Client.Status(background); err != nil {
			t.Errorf("daemon status after the fork bomb: %v", err)
		}
		if got := mustRun(t, n, misc.Name, "echo ok"); got != "ok\n" {
			t.Errorf("another sandbox after the fork bomb: got %q, want ok", got)
		}
		if out, err := exec.Command("sh", "-c", "echo forked").Output(); err != nil || string(out) != "forked\n" {
			t.Errorf("host fork after the fork bomb: got %q, %v", out, err)
		}
		if ev := cgroupFile(t, n, bomb.ID, "pids", "pids.events"); ev == "max 0" || !strings.HasPrefix(ev, "max ") {
			t.Errorf("pids.events: got %q, want a non-zero max count (the bomb reached the limit)", ev)
		}
		evs, err := n.Client.Events(background, bomb.Name, 0)
		if err != nil {
			t.Fatal(err)
		}
		hit := false
		for _, ev := range evs {
			hit = hit || (ev.Type == "limit" && ev.Cause == "pids")
		}
		if !hit {
			t.Errorf("no pids limit event after the fork bomb: %+v", evs)
		}
		// The bomb's process group is killed with the exec, so nothing of it is left and
		// the sandbox recovers.
		err = retry(10*time.Second, func() error {
			res, err := n.Client.Exec(background, bomb.Name, api.ExecRequest{Shell: "ps -eo comm", Timeout: "10s"})
			if err != nil {
				return err
			}
			if res.State != api.ExecSucceeded {
				return fmt.Errorf("ps: state %q exit %d stderr %q", res.State, res.ExitCode, res.Stderr)
			}
			if strings.Contains(res.Stdout, "bash") {
				return fmt.Errorf("bomb processes left: %q", res.Stdout)
			}
			return nil
		})
		if err != nil {
			t.Errorf("the bombed sandbox after its exec ended: %v; want ps to run and no bash left", err)
		}
	})

	t.Run("cpu", func(t *testing.T) {
		if cgroupV2() {
			if got := cgroupFile(t, n, misc.ID, "", "cpu.max"); got != "50000 100000" {
				t.Errorf("cpu.max: got %q, want \"50000 100000\"", got)
			}
			return
		}
		if got := cgroupFile(t, n, misc.ID, "cpu", "cpu.cfs_quota_us"); got != "50000" {
			t.Errorf("cpu.cfs_quota_us: got %s, want 50000", got)
		}
		if got := cgroupFile(t, n, misc.ID, "cpu", "cpu.cfs_period_us"); got != "100000" {
			t.Errorf("cpu.cfs_period_us: got %s, want 100000", got)
		}
	})

	t.Run("open files", func(t *testing.T) {
		if got := strings.TrimSpace(mustRun(t, n, misc.Name, "ulimit -n; ulimit -Hn")); got != "128\n128" {
			t.Errorf("ulimit -n and -Hn: got %q, want 128 and 128", got)
		}
	})

	t.Run("exec end states", func(t *testing.T) {
		tests := []struct { // wantExit -1 and wantSignal "*" accept any
			name       string
			req        api.ExecRequest
			wantState  string
			wantExit   int
			wantSignal string
		}{
			{"timeout", api.ExecRequest{Shell: "sleep 30", Timeout: "500ms"}, api.ExecTimeout, -1, "*"},
			{"missing binary argv", api.ExecRequest{Argv: []string{"itest-no-such-binary"}}, api.ExecFailed, 127, ""},
			{"missing binary shell", api.ExecRequest{Shell: "itest-no-such-binary"}, api.ExecFailed, 127, ""},
			{"exit 3", api.ExecRequest{Shell: "exit 3"}, api.ExecFailed, 3, ""},
			{"kill -9 self", api.ExecRequest{Shell: "kill -9 $$"}, api.ExecKilled, -1, "SIGKILL"},
			{"success", api.ExecRequest{Shell: "true"}, api.ExecSucceeded, 0, ""},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				res, err := n.Client.Exec(background, misc.Name, tt.req)
				if err != nil {
					t.Fatalf("exec: %v", err)
				}
				if res.State != tt.wantState || (tt.wantExit >= 0 && res.ExitCode != tt.wantExit) || (tt.wantSignal != "*" && res.Signal != tt.wantSignal) {
					t.Errorf("got state %q exit %d signal %q (error %q), want state %q exit %d signal %q",
						res.State, res.ExitCode, res.Signal, res.Error, tt.wantState, tt.wantExit, tt.wantSignal)
				}
			})
		}
	})

	t.Run("stream order", func(t *testing.T) {
		const lines = 500
		var out bytes.Buffer
		res, err := n.Client.ExecStream(background, misc.Name, api.ExecRequest{
			Shell: fmt.Sprintf("i=1; while [ $i -le %d ]; do echo line-$i; i=$((i+1)); done", lines),
		}, &out, nil)
		if err != nil {
			t.Fatalf("stream: %v", err)
		}
		if res.State != api.ExecSucceeded {
			t.Errorf("stream result: got %q, want succeeded", res.State)
		}
		got := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
		if len(got) != lines {
			t.Fatalf("got %d lines, want %d", len(got), lines)
		}
		for i, line := range got {
			if want := fmt.Sprintf("line-%d", i+1); line != want {
				t.Fatalf("line %d: got %q, want %q", i+1, line, want)
			}
		}
	})

	t.Run("cancelled stream", func(t *testing.T) {
		arg := fmt.Sprintf("4%06d", time.Now().UnixNano()%1000000)
		ctx, cancel := context.WithCancel(background)
		defer cancel()
		first := &signalWriter{ch: make(chan struct{})}
		done := make(chan error, 1)
		go func() {
			_, err := n.Client.ExecStream(ctx, misc.Name, api.ExecRequest{Shell: "echo first; sleep " + arg + "; echo never"}, first, nil)
			done <- err
		}()
		select {
		case <-first.ch:
		case err := <-done:
			t.Fatalf("stream ended before its first line: %v", err)
		case <-time.After(30 * time.Second):
			t.Fatalf("no first line within 30s; want lines as they are produced")
		}
		if ps := mustRun(t, n, misc.Name, "ps -eo pid,args"); !strings.Contains(ps, "sleep "+arg) {
			t.Fatalf("sleep %s is not running before the cancel (control): ps shows %q", arg, ps)
		}
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("cancelled stream: got error %v, want context.Canceled", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("the stream did not return within 30s of cancelling")
		}
		if got := first.String(); strings.Contains(got, "never") {
			t.Errorf("output after cancel: got %q, want no \"never\"", got)
		}
		err := retry(10*time.Second, func() error {
			ps := mustRun(t, n, misc.Name, "ps -eo pid,args")
			for _, line := range strings.Split(ps, "\n") {
				if strings.Contains(line, arg) {
					return fmt.Errorf("process left: %s", strings.TrimSpace(line))
				}
			}
			return nil
		})
		if err != nil {
			t.Errorf("after cancelling the stream: %v", err)
		}
	})
}

// signalWriter collects output and closes ch on the first write.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	ch   chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.once.Do(func() { close(w.ch) })
	return w.buf.Write(p)
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
