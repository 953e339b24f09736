package agent

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
)

type sendStep struct {
	input        string
	state        string
	code         int
	stdout       string
	stderrSubstr string
}

func runSteps(t *testing.T, c *Client, id string, steps []sendStep) {
	t.Helper()
	for _, st := range steps {
		var stdout, stderr bytes.Buffer
		res, err := c.Send(ctxT(t), id, st.input, &stdout, &stderr)
		if err != nil {
			t.Fatalf("Send(%q): %v", st.input, err)
		}
		if res.State != st.state || res.ExitCode != st.code {
			t.Errorf("Send(%q): got state %q code %d, want %q %d (stderr %q)",
				st.input, res.State, res.ExitCode, st.state, st.code, stderr.String())
		}
		if stdout.String() != st.stdout {
			t.Errorf("Send(%q): got stdout %q, want %q", st.input, stdout.String(), st.stdout)
		}
		if !strings.Contains(stderr.String(), st.stderrSubstr) || (st.stderrSubstr == "" && stderr.Len() > 0) {
			t.Errorf("Send(%q): got stderr %q, want it to contain %q", st.input, stderr.String(), st.stderrSubstr)
		}
	}
}

func TestPythonSession(t *testing.T) {
	_, err := exec.LookPath("python3")
	require(t, err == nil, "python3 is not installed")
	c, _ := startAgent(t, Options{})
	info, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionPython})
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	if info.Kind != agentproto.SessionPython || info.PID <= 0 || !strings.HasPrefix(info.ID, "ses_") {
		t.Errorf("got session %+v, want kind python, a pid and an id ses_…", info)
	}
	runSteps(t, c, info.ID, []sendStep{
		{input: "x = 1", state: agentproto.StateSucceeded},
		{input: "x + 1", state: agentproto.StateSucceeded, stdout: "2\n"},
		{input: "def f(n):\n    return n * 2\nprint(f(x))\nf(21)", state: agentproto.StateSucceeded, stdout: "2\n42\n"},
		{input: "print('no newline', end='')", state: agentproto.StateSucceeded, stdout: "no newline"},
		{input: "print('before'); 1/0", state: agentproto.StateFailed, code: 1, stdout: "before\n", stderrSubstr: "ZeroDivisionError"},
		{input: "def broken(:", state: agentproto.StateFailed, code: 1, stderrSubstr: "SyntaxError"},
		{input: "import sys; sys.stderr.write('warn\\n'); 'x' * 3", state: agentproto.StateSucceeded, stdout: "'xxx'\n", stderrSubstr: "warn"},
		{input: "x", state: agentproto.StateSucceeded, stdout: "1\n"},
		{input: "len('" + strings.Repeat("a", 300000) + "')", state: agentproto.StateSucceeded, stdout: "300000\n"},
		{input: "print('b' * 200000)", state: agentproto.StateSucceeded, stdout: strings.Repeat("b", 200000) + "\n"},
		{input: "import sys; sys.exit(3)", state: agentproto.StateExited, code: 3},
	})
}

func TestPythonSessionBusyAndCancel(t *testing.T) {
	_, err := exec.LookPath("python3")
	require(t, err == nil, "python3 is not installed")
	// What is checked is that the cancel interrupts the session, not how fast: on a
	// machine loaded by other test packages the result can take longer than the 5 s a
	// client waits by default.
	defer func(d time.Duration) { cancelWait = d }(cancelWait)
	cancelWait = 25 * time.Second
	c, _ := startAgent(t, Options{})
	info, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionPython})
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type outcome struct {
		res *agentproto.SendResult
		err error
	}
	done := make(chan outcome, 1)
	go func() {
		res, err := c.Send(ctx, info.ID, "print('started', flush=True)\nimport time\ntime.sleep(30)",
			signalWriter{started}, nil)
		done <- outcome{res, err}
	}()
	<-started
	_, err = c.Send(ctxT(t), info.ID, "1", nil, nil)
	wantCode(t, "concurrent send", err, agentproto.CodeBusy)

	cancel() // interrupts the sleep; the session stays usable
	if o := <-done; o.err != nil || o.res.State != agentproto.StateCancelled {
		t.Errorf("cancelled Send: got %+v, %v; want state %q", o.res, o.err, agentproto.StateCancelled)
	}
	runSteps(t, c, info.ID, []sendStep{{input: "'still here'", state: agentproto.StateSucceeded, stdout: "'still here'\n"}})
	if err := c.CloseSession(ctxT(t), info.ID); err != nil {
		t.Errorf("CloseSession: %v", err)
	}
}

// signalWriter closes ch at the first write.
type signalWriter struct{ ch chan struct{} }

func (w signalWriter) Write(p []byte) (int, error) {
	select {
	case <-w.ch:
	default:
		close(w.ch)
	}
	return len(p), nil
}

func TestShellSession(t *testing.T) {
	c, _ := startAgent(t, Options{})
	info, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionShell, Env: []string{"GREETING=hi"}})
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	runSteps(t, c, info.ID, []sendStep{
		{input: "echo $GREETING", state: agentproto.StateSucceeded, stdout: "hi\n"},
		{input: "false", state: agentproto.StateFailed, code: 1},
		{input: "cd /tmp; X=5", state: agentproto.StateSucceeded},
		{input: "echo $X; pwd", state: agentproto.StateSucceeded, stdout: "5\n/tmp\n"},
		{input: "printf partial; (exit 7)", state: agentproto.StateFailed, code: 7, stdout: "partial"},
		{input: "echo oops >&2", state: agentproto.StateSucceeded, stderrSubstr: "oops"},
		{input: "head -c 100000 /dev/zero | tr '\\0' c", state: agentproto.StateSucceeded, stdout: strings.Repeat("c", 100000)},
		{input: "exit 4", state: agentproto.StateExited, code: 4},
	})
	_, err = c.Send(ctxT(t), info.ID, "echo again", nil, nil)
	wantCode(t, "send after exit", err, "not_found")
}

func TestRawSession(t *testing.T) {
	c, _ := startAgent(t, Options{})
	info, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionRaw, Argv: []string{"cat"}})
	if err != nil {
		t.Fatalf("StartSession: %v", err)
	}
	runSteps(t, c, info.ID, []sendStep{
		{input: "hello", state: agentproto.StateSucceeded, stdout: "hello\n"},
		{input: "again", state: agentproto.StateSucceeded, stdout: "again\n"},
	})
	list, err := c.ListSessions(ctxT(t))
	if err != nil || len(list) != 1 || list[0] != *info {
		t.Errorf("ListSessions: got %+v, %v; want [%+v]", list, err, *info)
	}
	if err := c.CloseSession(ctxT(t), info.ID); err != nil {
		t.Errorf("CloseSession: %v", err)
	}
	list, err = c.ListSessions(ctxT(t))
	if err != nil || len(list) != 0 {
		t.Errorf("ListSessions after close: got %+v, %v; want none", list, err)
	}
	wantCode(t, "close twice", c.CloseSession(ctxT(t), info.ID), "not_found")
}

func TestSessionStartErrors(t *testing.T) {
	c, _ := startAgent(t, Options{})
	tests := []struct {
		name string
		spec agentproto.SessionSpec
		code string
	}{
		{"unknown kind", agentproto.SessionSpec{Kind: "ruby"}, "invalid_argument"},
		{"raw without argv", agentproto.SessionSpec{Kind: agentproto.SessionRaw}, "invalid_argument"},
	}
	for _, tt := range tests {
		_, err := c.StartSession(ctxT(t), tt.spec)
		wantCode(t, tt.name, err, tt.code)
	}
	_, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionRaw, Argv: []string{"no-such-binary-xyz"}})
	wantCode(t, "missing binary", err, "not_found")
}
