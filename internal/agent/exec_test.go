package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
)

func TestExecStates(t *testing.T) {
	c, _ := startAgent(t, Options{})
	tests := []struct {
		name      string
		spec      agentproto.ExecSpec
		state     string
		code      int
		signal    string
		errSubstr string
	}{
		{"succeeded", agentproto.ExecSpec{Shell: "exit 0"}, agentproto.StateSucceeded, 0, "", ""},
		{"argv", agentproto.ExecSpec{Argv: []string{"true"}}, agentproto.StateSucceeded, 0, "", ""},
		{"failed with code", agentproto.ExecSpec{Shell: "exit 3"}, agentproto.StateFailed, 3, "", ""},
		{"missing binary in PATH", agentproto.ExecSpec{Argv: []string{"no-such-binary-xyz"}}, agentproto.StateFailed, 127, "", "not found"},
		{"missing binary by path", agentproto.ExecSpec{Argv: []string{"/no/such/binary"}}, agentproto.StateFailed, 127, "", "not found"},
		{"not executable", agentproto.ExecSpec{Argv: []string{"/etc/passwd"}}, agentproto.StateFailed, 126, "", "cannot execute /etc/passwd: permission denied (not executable: mode -rw-r--r--)"},
		{"a directory", agentproto.ExecSpec{Argv: []string{"/etc/"}}, agentproto.StateFailed, 126, "", "cannot execute /etc/: permission denied (a directory)"},
		{"through a file", agentproto.ExecSpec{Argv: []string{"/etc/passwd/x"}}, agentproto.StateFailed, 126, "", "cannot execute /etc/passwd/x: not a directory"},
		{"bad cwd", agentproto.ExecSpec{Argv: []string{"true"}, Cwd: "/no/such/dir"}, agentproto.StateFailed, 126, "", "working directory"},
		{"timeout", agentproto.ExecSpec{Shell: "sleep 10", TimeoutMS: 200}, agentproto.StateTimeout, -1, "SIGKILL", ""},
		{"killed by signal", agentproto.ExecSpec{Shell: "kill -KILL $$"}, agentproto.StateKilled, 137, "SIGKILL", ""},
		{"killed by SIGTERM", agentproto.ExecSpec{Shell: "kill -TERM $$"}, agentproto.StateKilled, 143, "SIGTERM", ""},
	}
	for _, tt := range tests {
		res, err := c.Exec(ctxT(t), tt.spec, nil, nil, nil)
		if err != nil {
			t.Errorf("%s: Exec: %v", tt.name, err)
			continue
		}
		if res.State != tt.state || res.ExitCode != tt.code || res.Signal != tt.signal {
			t.Errorf("%s: got state %q code %d signal %q, want %q %d %q (result %+v)",
				tt.name, res.State, res.ExitCode, res.Signal, tt.state, tt.code, tt.signal, res)
		}
		if !strings.Contains(res.Error, tt.errSubstr) {
			t.Errorf("%s: got error %q, want it to contain %q", tt.name, res.Error, tt.errSubstr)
		}
	}
}

func TestExecCancel(t *testing.T) {
	c, _ := startAgent(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	// The background sleep is in the same process group, so cancel must reach it too.
	res, err := c.Exec(ctx, agentproto.ExecSpec{Shell: "sleep 30 & sleep 30"}, nil, nil, nil)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if res.State != agentproto.StateCancelled {
		t.Errorf("got state %q, want %q (result %+v)", res.State, agentproto.StateCancelled, res)
	}
	waitNoChildren(t)
}

func TestExecOutput(t *testing.T) {
	c, _ := startAgent(t, Options{Env: append(os.Environ(), "BASE=base", "OVER=old")})
	workdir := t.TempDir()
	tests := []struct {
		name       string
		spec       agentproto.ExecSpec
		stdin      io.Reader
		stdout     string
		stderr     string
		stdoutSize int
	}{
		{"stdout and stderr", agentproto.ExecSpec{Shell: "echo out; echo err >&2"}, nil, "out\n", "err\n", 0},
		{"stdin", agentproto.ExecSpec{Argv: []string{"cat"}}, strings.NewReader("hello\nworld\n"), "hello\nworld\n", "", 0},
		{"no stdin is /dev/null", agentproto.ExecSpec{Argv: []string{"cat"}}, nil, "", "", 0},
		{"big stdin", agentproto.ExecSpec{Argv: []string{"wc", "-c"}}, bytes.NewReader(make([]byte, 300000)), "300000\n", "", 0},
		{"big stdout", agentproto.ExecSpec{Shell: "head -c 1000000 /dev/zero"}, nil, "", "", 1000000},
		{"env", agentproto.ExecSpec{Shell: `echo "$FOO $BASE $OVER"`, Env: []string{"FOO=bar", "OVER=new"}}, nil, "bar base new\n", "", 0},
		{"cwd", agentproto.ExecSpec{Argv: []string{"pwd"}, Cwd: workdir}, nil, workdir + "\n", "", 0},
		{"default cwd", agentproto.ExecSpec{Argv: []string{"pwd"}}, nil, "/\n", "", 0},
	}
	for _, tt := range tests {
		var stdout, stderr bytes.Buffer
		res, err := c.Exec(ctxT(t), tt.spec, tt.stdin, &stdout, &stderr)
		if err != nil {
			t.Errorf("%s: Exec: %v", tt.name, err)
			continue
		}
		if res.State != agentproto.StateSucceeded {
			t.Errorf("%s: got state %q, want succeeded (result %+v, stderr %q)", tt.name, res.State, res, stderr.String())
		}
		if tt.stdoutSize > 0 {
			if stdout.Len() != tt.stdoutSize {
				t.Errorf("%s: got %d stdout bytes, want %d", tt.name, stdout.Len(), tt.stdoutSize)
			}
		} else if stdout.String() != tt.stdout {
			t.Errorf("%s: got stdout %q, want %q", tt.name, stdout.String(), tt.stdout)
		}
		if stderr.String() != tt.stderr {
			t.Errorf("%s: got stderr %q, want %q", tt.name, stderr.String(), tt.stderr)
		}
	}
}

// orderWriter records which stream each chunk came from, in arrival order.
type orderWriter struct {
	log  *syncBuffer
	name string
}

func (w orderWriter) Write(p []byte) (int, error) {
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line != "" {
			w.log.Write([]byte(w.name + ":" + line))
		}
	}
	return len(p), nil
}

func TestExecOutputOrder(t *testing.T) {
	c, _ := startAgent(t, Options{})
	log := &syncBuffer{}
	spec := agentproto.ExecSpec{Shell: "echo 1; sleep 0.1; echo 2 >&2; sleep 0.1; echo 3; sleep 0.1; echo 4 >&2"}
	if _, err := c.Exec(ctxT(t), spec, nil, orderWriter{log, "out"}, orderWriter{log, "err"}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if got, want := log.String(), "out:1\nerr:2\nout:3\nerr:4\n"; got != want {
		t.Errorf("got interleaving %q, want %q", got, want)
	}
}

func TestExecUID(t *testing.T) {
	require(t, os.Geteuid() == 0, "changing uid needs root")
	c, _ := startAgent(t, Options{})
	uid, gid := uint32(65534), uint32(65533)
	var out bytes.Buffer
	res, err := c.Exec(ctxT(t), agentproto.ExecSpec{Shell: "echo $(id -u) $(id -g)", UID: &uid, GID: &gid}, nil, &out, nil)
	if err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if res.State != agentproto.StateSucceeded || out.String() != "65534 65533\n" {
		t.Errorf("got state %q output %q, want succeeded %q", res.State, out.String(), "65534 65533\n")
	}
}

// TestExecReapsOrphans: a child forks a grandchild that outlives it; the grandchild is
// re-parented to the agent (a subreaper here, PID 1 in a sandbox) and reaped, leaving
// no zombie behind.
func TestExecReapsOrphans(t *testing.T) {
	c, _ := startAgent(t, Options{})
	res, err := c.Exec(ctxT(t), agentproto.ExecSpec{Shell: "sleep 3 >/dev/null 2>&1 & echo $!"}, nil, io.Discard, nil)
	if err != nil || res.State != agentproto.StateSucceeded {
		t.Fatalf("Exec: %+v, %v; want succeeded", res, err)
	}
	if kids := children(t); len(kids) == 0 {
		t.Errorf("the orphaned grandchild was not re-parented to the agent (no children seen)")
	}
	waitNoChildren(t)
}

func TestExecBackgroundDoesNotHoldCall(t *testing.T) {
	c, _ := startAgent(t, Options{})
	var out bytes.Buffer
	// The background sleep inherits stdout; the call still ends when sh exits.
	res, err := c.Exec(ctxT(t), agentproto.ExecSpec{Shell: "sleep 0.5 & echo done"}, nil, &out, nil)
	if err != nil || res.State != agentproto.StateSucceeded || out.String() != "done\n" {
		t.Fatalf("Exec: %+v, %q, %v; want succeeded with %q", res, out.String(), err, "done\n")
	}
	waitNoChildren(t)
}

// rawCall sends frames on a fresh connection and returns the frames that come back.
func rawCall(t *testing.T, c *Client, frames ...[]byte) (types []agentproto.FrameType, payloads [][]byte) {
	t.Helper()
	conn, err := c.Dial(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	for _, f := range frames {
		if _, err := conn.Write(f); err != nil {
			t.Fatal(err)
		}
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		ft, p, err := agentproto.ReadFrame(conn)
		if err != nil {
			return types, payloads
		}
		types = append(types, ft)
		payloads = append(payloads, p)
	}
}

func requestFrame(t *testing.T, req agentproto.Request) []byte {
	b, err := json.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	return encodeFrame(t, agentproto.FrameRequest, b)
}

func TestDamagedRequestIsNotRun(t *testing.T) {
	c, root := startAgent(t, Options{})
	marker := filepath.Join(root, "ran")
	for i, damage := range []func([]byte) []byte{
		func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, // checksum
		func(b []byte) []byte { b[20] ^= 0x20; return b },    // payload byte
	} {
		f := damage(requestFrame(t, agentproto.Request{Op: agentproto.OpExec, Exec: &agentproto.ExecSpec{Argv: []string{"touch", marker}}}))
		types, payloads := rawCall(t, c, f)
		if len(types) != 1 || types[0] != agentproto.FrameError {
			t.Fatalf("damage %d: got frames %q, want one Error frame", i, types)
		}
		var re agentproto.RemoteError
		if err := json.Unmarshal(payloads[0], &re); err != nil || re.Code != agentproto.CodeChecksum {
			t.Errorf("damage %d: got error %s, want code %q", i, payloads[0], agentproto.CodeChecksum)
		}
	}
	if err := c.Ping(ctxT(t)); err != nil {
		t.Fatalf("Ping after damaged requests: %v", err)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a damaged request was run: stat %s: %v", marker, err)
	}
}

func TestDamagedStdinFrame(t *testing.T) {
	c, _ := startAgent(t, Options{})
	bad := encodeFrame(t, agentproto.FrameStdin, []byte("data"))
	bad[len(bad)-1] ^= 1
	req := requestFrame(t, agentproto.Request{Op: agentproto.OpExec, Exec: &agentproto.ExecSpec{Argv: []string{"cat"}, Stdin: true}})
	types, payloads := rawCall(t, c, req, bad)
	if len(types) == 0 || types[len(types)-1] != agentproto.FrameError {
		t.Fatalf("got frames %q, want the call to end with an Error frame", types)
	}
	var re agentproto.RemoteError
	if err := json.Unmarshal(payloads[len(payloads)-1], &re); err != nil || re.Code != agentproto.CodeChecksum {
		t.Errorf("got error %s, want code %q", payloads[len(payloads)-1], agentproto.CodeChecksum)
	}
	waitNoChildren(t)
}

// fakeAgent answers every connection with the frames from answer, after reading the request.
func fakeAgent(t *testing.T, answer func(net.Conn)) *Client {
	t.Helper()
	sock := filepath.Join(shortDir(t), "f.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			if _, _, err := agentproto.ReadFrame(conn); err == nil {
				answer(conn)
			}
			conn.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return SocketClient(sock)
}

func TestClientSeesDamagedFrame(t *testing.T) {
	c := fakeAgent(t, func(conn net.Conn) {
		out := encodeFrame(t, agentproto.FrameStdout, []byte("hi"))
		out[len(out)-2] ^= 4
		conn.Write(out)
	})
	if err := c.Ping(ctxT(t)); !errors.Is(err, agentproto.ErrChecksum) {
		t.Errorf("Ping: got %v, want ErrChecksum", err)
	}
	if _, err := c.Exec(ctxT(t), agentproto.ExecSpec{Argv: []string{"true"}}, nil, nil, nil); !errors.Is(err, agentproto.ErrChecksum) {
		t.Errorf("Exec: got %v, want ErrChecksum", err)
	}
	if _, err := c.Download(ctxT(t), "/x", io.Discard); !errors.Is(err, agentproto.ErrChecksum) {
		t.Errorf("Download: got %v, want ErrChecksum", err)
	}
}

func TestPTY(t *testing.T) {
	c, _ := startAgent(t, Options{})
	tests := []struct {
		name   string
		spec   agentproto.ExecSpec
		resize *agentproto.Resize
		input  string
		want   []string
	}{
		{"echo and size", agentproto.ExecSpec{Shell: "stty size; read x; echo got:$x", Rows: 30, Cols: 100}, nil, "abc\n",
			[]string{"30 100", "abc", "got:abc"}},
		{"resize", agentproto.ExecSpec{Shell: "read x; stty size"}, &agentproto.Resize{Rows: 40, Cols: 120}, "\n",
			[]string{"40 120"}},
		{"is a tty", agentproto.ExecSpec{Shell: "test -t 0 && test -t 1 && echo tty:$TERM"}, nil, "",
			[]string{"tty:xterm"}},
	}
	for _, tt := range tests {
		p, err := c.PTY(ctxT(t), tt.spec)
		if err != nil {
			t.Fatalf("%s: PTY: %v", tt.name, err)
		}
		if tt.resize != nil {
			if err := p.Resize(tt.resize.Rows, tt.resize.Cols); err != nil {
				t.Errorf("%s: Resize: %v", tt.name, err)
			}
		}
		if tt.input != "" {
			if _, err := p.Write([]byte(tt.input)); err != nil {
				t.Errorf("%s: Write: %v", tt.name, err)
			}
		}
		out, err := io.ReadAll(p)
		if err != nil {
			t.Errorf("%s: reading output: %v", tt.name, err)
		}
		res, err := p.Wait()
		if err != nil || res.State != agentproto.StateSucceeded {
			t.Errorf("%s: Wait: %+v, %v; want succeeded", tt.name, res, err)
		}
		for _, w := range tt.want {
			if !strings.Contains(string(out), w) {
				t.Errorf("%s: output %q does not contain %q", tt.name, out, w)
			}
		}
	}
}

func TestPTYClose(t *testing.T) {
	c, _ := startAgent(t, Options{})
	p, err := c.PTY(ctxT(t), agentproto.ExecSpec{Argv: []string{"sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	res, err := p.Wait()
	if err != nil || res.State != agentproto.StateCancelled {
		t.Errorf("Wait after Close: %+v, %v; want cancelled", res, err)
	}
}

func encodeFrame(t testing.TB, ft agentproto.FrameType, p []byte) []byte {
	var b bytes.Buffer
	if err := agentproto.WriteFrame(&b, ft, p); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// Every process the agent starts has the highest OOM score (given once it has
// started: the shell's child reads it after a moment).
func TestExecOOMScore(t *testing.T) {
	c, _ := startAgent(t, Options{})
	out, res, err := execOut(ctxT(t), c, "sh", "-c", "sleep 0.1; cat /proc/self/oom_score_adj")
	if err != nil || res.State != agentproto.StateSucceeded || out != "1000\n" {
		t.Fatalf("oom_score_adj of an exec: %q, %+v, %v; want 1000", out, res, err)
	}
}
