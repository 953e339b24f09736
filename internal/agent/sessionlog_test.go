package agent

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
)

// TestBackgroundSessionLogs: a background session's output goes to its log, not to
// sends: the tail reads its last lines, a follow sees what comes after until the process
// ends, and the log stays readable (and listed) once it has.
func TestBackgroundSessionLogs(t *testing.T) {
	c, _ := startAgent(t, Options{})
	info, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionRaw, Log: true,
		Argv: []string{"/bin/sh", "-c", "echo oops >&2; sleep 0.2; for i in 1 2 3 4; do echo line$i; done; sleep 1; echo late; exit 3"}})
	if err != nil {
		t.Fatal(err)
	}
	if !info.Log {
		t.Errorf("session %+v is not marked as a background one", info)
	}
	// The first lines are in before anything asks for them.
	var out bytes.Buffer
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		out.Reset()
		if _, err := c.SessionLogs(ctxT(t), info.ID, 0, false, &out, &out); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(out.String(), "line4") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	var tail, tailErr bytes.Buffer
	res, err := c.SessionLogs(ctxT(t), info.ID, 2, false, &tail, &tailErr)
	if err != nil || res.State != "running" {
		t.Fatalf("logs --tail 2 = %+v, %v; want the running state", res, err)
	}
	if tail.String() != "line3\nline4\n" || tailErr.String() != "" {
		t.Errorf("the last two lines: stdout %q, stderr %q; want line3 and line4", tail.String(), tailErr.String())
	}
	if !strings.Contains(out.String(), "oops\n") {
		t.Errorf("the whole log %q lacks what went to stderr", out.String())
	}
	// A send is refused: the session takes no input that way.
	if _, err := c.Send(ctxT(t), info.ID, "go", nil, nil); err == nil {
		t.Error("a send to a background session was accepted")
	}
	// Follow until the process ends; the line it writes after starting is seen.
	var follow bytes.Buffer
	done := make(chan *agentproto.LogsResult, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		r, err := c.SessionLogs(ctx, info.ID, 1, true, &follow, &follow)
		if err != nil {
			t.Errorf("follow: %v", err)
		}
		done <- r
	}()
	r := <-done
	if r == nil || r.State != agentproto.StateExited || r.ExitCode != 3 {
		t.Fatalf("follow ended with %+v, want the exited state and code 3", r)
	}
	if follow.String() != "line4\nlate\n" {
		t.Errorf("follow printed %q, want the last line before it started and the one after", follow.String())
	}
	// Ended, its log is still there and listed with how it ended.
	list, err := c.ListSessions(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, s := range list {
		if s.ID == info.ID {
			found = s.Exited && s.Log
		}
	}
	if !found {
		t.Errorf("sessions %+v: the ended background session is not listed as exited", list)
	}
}

// TestSessionLogIsBounded: past logMax the oldest output is dropped, never the newest.
func TestSessionLogIsBounded(t *testing.T) {
	l := newSessionLog()
	line := strings.Repeat("x", 1023) + "\n"
	for i := 0; i < 3000; i++ {
		l.add(agentproto.FrameStdout, []byte(fmt.Sprintf("%04d", i)+line[4:]))
	}
	chunks, _, _, _ := l.since(0)
	var total int
	for _, ch := range chunks {
		total += len(ch.b)
	}
	if total > logMax || !strings.HasPrefix(string(chunks[len(chunks)-1].b), "2999") {
		t.Errorf("log holds %d bytes ending %q; want at most %d ending with the newest line", total, chunks[len(chunks)-1].b[:4], logMax)
	}
	seq, skip, _ := l.tail(3)
	rest, _, _, _ := l.since(seq)
	var got []byte
	for i, ch := range rest {
		if i == 0 {
			got = append(got, ch.b[skip:]...)
		} else {
			got = append(got, ch.b...)
		}
	}
	if lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n"); len(lines) != 3 || !strings.HasPrefix(lines[0], "2997") {
		t.Errorf("the last 3 lines begin %q (%d lines), want 2997, 2998 and 2999", got[:4], len(lines))
	}
}

// TestBackgroundSessionListedWhileDraining: a background session whose process has
// exited stays listed, with how it ended, while the output of a child that outlives it
// still drains, before the session is torn down.
func TestBackgroundSessionListedWhileDraining(t *testing.T) {
	c, _ := startAgent(t, Options{})
	// The shell exits at once; its child keeps writing to the pipe for about a second.
	info, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionRaw, Log: true,
		Argv: []string{"/bin/sh", "-c", "(for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do echo x; sleep 0.05; done) & exit 4"}})
	if err != nil {
		t.Fatal(err)
	}
	sawExited := false
	for deadline := time.Now().Add(700 * time.Millisecond); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		list, err := c.ListSessions(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(list, func(s agentproto.SessionInfo) bool { return s.ID == info.ID })
		if i < 0 {
			t.Fatalf("session %s is missing from the list %+v (exited and listed before: %v)", info.ID, list, sawExited)
		}
		if list[i].Exited {
			if list[i].ExitCode != 4 || !list[i].Log {
				t.Fatalf("the exited session is listed as %+v, want exit code 4 and a log", list[i])
			}
			sawExited = true
		}
	}
	if !sawExited {
		t.Error("the session was never listed as exited while its child still wrote")
	}
}
