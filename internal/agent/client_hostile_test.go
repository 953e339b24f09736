package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Tests of the client against an agent the sandbox has replaced: every reply here is
// one no real agent sends.

// replyWith answers every call with one frame.
func replyWith(ft agentproto.FrameType, payload []byte) func(net.Conn) {
	return func(conn net.Conn) {
		agentproto.WriteFrame(conn, ft, payload)
		io.Copy(io.Discard, conn)
	}
}

// pipeAgent is a client whose every call reaches answer over a net.Pipe, which buffers
// nothing: an agent that does not read holds every write. hangUp closes the agent's
// ends and gone, which answer waits on once it stops reading; the test's end hangs up
// too, and waits for every answer to return.
func pipeAgent(t *testing.T, answer func(conn net.Conn, gone <-chan struct{})) (c *Client, hangUp func()) {
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
		once  sync.Once
		gone  = make(chan struct{})
	)
	hangUp = func() {
		once.Do(func() {
			close(gone)
			mu.Lock()
			defer mu.Unlock()
			for _, conn := range conns {
				conn.Close()
			}
		})
	}
	t.Cleanup(func() { hangUp(); wg.Wait() })
	c = &Client{Dial: func(context.Context) (net.Conn, error) {
		ours, theirs := net.Pipe()
		mu.Lock()
		conns = append(conns, theirs)
		mu.Unlock()
		wg.Add(1)
		go func() { defer wg.Done(); answer(theirs, gone) }()
		return ours, nil
	}}
	return c, hangUp
}

// within fails the test unless f returns within d; if it does not, hangUp ends the call
// and within waits for f, so that nothing outlives the test.
func within(t *testing.T, d time.Duration, what string, hangUp func(), f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Errorf("%s: still waiting after %v", what, d)
		hangUp()
		<-done
	}
}

func setVar[T any](t *testing.T, p *T, v T) {
	old := *p
	*p = v
	t.Cleanup(func() { *p = old })
}

func TestClientClipsAgentText(t *testing.T) {
	huge := strings.Repeat("é", agentproto.MaxPayload/4)
	errFrame, _ := json.Marshal(agentproto.RemoteError{Code: strings.Repeat("c", 1000), Message: huge})
	result, _ := json.Marshal(agentproto.ExitResult{State: agentproto.StateFailed, Error: huge})
	digits := []byte(`{"state":"failed","exit_code":` + strings.Repeat("9", agentproto.MaxPayload-64) + `}`)
	tests := []struct {
		name  string
		ft    agentproto.FrameType
		reply []byte
	}{
		{"error frame", agentproto.FrameError, errFrame},
		{"result's error", agentproto.FrameResult, result},
		{"number of a megabyte", agentproto.FrameResult, digits},
	}
	const most = maxAgentText + maxCodeLen + 256
	for _, tt := range tests {
		c := fakeAgent(t, replyWith(tt.ft, tt.reply))
		res, err := c.Exec(ctxT(t), agentproto.ExecSpec{Argv: []string{"true"}}, nil, nil, nil)
		text := ""
		if err != nil {
			text = err.Error()
		} else {
			text = res.Error
		}
		if text == "" || len(text) > most {
			t.Errorf("%s: the client passed on %d bytes of the agent's text; want 1 to %d", tt.name, len(text), most)
		}
		var re *agentproto.RemoteError
		if errors.As(err, &re) && (len(re.Code) > most || len(re.Message) > most) {
			t.Errorf("%s: RemoteError holds a code of %d and a message of %d bytes; want at most %d", tt.name, len(re.Code), len(re.Message), most)
		}
	}
}

func TestClientRefusesImpossibleResults(t *testing.T) {
	tests := []struct {
		name string
		ft   agentproto.FrameType
		msg  string
		run  func(*Client) error
	}{
		{"exec state", agentproto.FrameResult, `{"state":"` + strings.Repeat("x", 4096) + `"}`, func(c *Client) error {
			_, err := c.Exec(ctxT(t), agentproto.ExecSpec{Argv: []string{"true"}}, nil, nil, nil)
			return err
		}},
		{"exec signal", agentproto.FrameResult, `{"state":"killed","signal":"` + strings.Repeat("S", 4096) + `"}`, func(c *Client) error {
			_, err := c.Exec(ctxT(t), agentproto.ExecSpec{Argv: []string{"true"}}, nil, nil, nil)
			return err
		}},
		{"send state", agentproto.FrameResult, `{"state":"done"}`, func(c *Client) error {
			_, err := c.Send(ctxT(t), "ses_1", "x", nil, nil)
			return err
		}},
		{"logs dropped", agentproto.FrameResult, `{"state":"running","dropped":-5}`, func(c *Client) error {
			_, err := c.SessionLogs(ctxT(t), "ses_1", 0, false, nil, nil)
			return err
		}},
		{"process end state", agentproto.FrameResult, `{"state":"` + strings.Repeat("x", 4096) + `"}`, func(c *Client) error {
			p, err := c.procOpen(ctxT(t), &agentproto.Request{Op: agentproto.OpProcAttach, PID: 7}, 7)
			if err != nil {
				return errors.New("attach: " + err.Error())
			}
			defer p.Close()
			_, err = p.Recv()
			return err
		}},
		{"session id", agentproto.FrameResult, `{"id":"../../admin","kind":"raw","pid":9}`, func(c *Client) error {
			_, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionRaw, Argv: []string{"sh"}})
			return err
		}},
		{"session pid", agentproto.FrameResult, `{"id":"ses_1","kind":"raw","pid":-1}`, func(c *Client) error {
			_, err := c.StartSession(ctxT(t), agentproto.SessionSpec{Kind: agentproto.SessionRaw, Argv: []string{"sh"}})
			return err
		}},
		{"listed session", agentproto.FrameResult, `[{"id":"ses_1","kind":"raw","pid":9},{"id":"","kind":"x"}]`, func(c *Client) error {
			_, err := c.ListSessions(ctxT(t))
			return err
		}},
		{"listed process", agentproto.FrameResult, `[{"pid":0,"tag":"` + strings.Repeat("t", 4096) + `"}]`, func(c *Client) error {
			_, err := c.ProcList(ctxT(t))
			return err
		}},
		{"listed file's name", agentproto.FrameResult, `[{"name":"` + strings.Repeat("n", 4096) + `"}]`, func(c *Client) error {
			_, err := c.List(ctxT(t), "/")
			return err
		}},
	}
	for _, tt := range tests {
		c := fakeAgent(t, func(conn net.Conn) {
			if tt.name == "process end state" {
				agentproto.WriteFrame(conn, agentproto.FrameStarted, []byte(`{"pid":7}`))
			}
			replyWith(tt.ft, []byte(tt.msg))(conn)
		})
		if err := tt.run(c); !errors.Is(err, agentproto.ErrBadReply) {
			t.Errorf("%s: err = %.200v; want ErrBadReply", tt.name, err)
		}
	}
}

// TestClientBoundsLists: a frame of "{}," is a third of a million entries; the client
// takes no more than its bound of them.
func TestClientBoundsLists(t *testing.T) {
	many := "[" + strings.Repeat(`{"pid":1},`, maxProcList) + `{"pid":1}]`
	c := fakeAgent(t, replyWith(agentproto.FrameResult, []byte(many)))
	if list, err := c.ProcList(ctxT(t)); !errors.Is(err, agentproto.ErrBadReply) {
		t.Errorf("ProcList of %d processes: %d entries, err = %v; want ErrBadReply", maxProcList+1, len(list), err)
	}
	many = "[" + strings.Repeat(`{},`, agentproto.MaxPayload/3-1) + "{}]"
	c = fakeAgent(t, replyWith(agentproto.FrameResult, []byte(many)))
	if list, err := c.ListSessions(ctxT(t)); !errors.Is(err, agentproto.ErrBadReply) {
		t.Errorf("ListSessions of a frame of {}: %d entries, err = %v; want ErrBadReply", len(list), err)
	}
	c = fakeAgent(t, replyWith(agentproto.FrameData, []byte(many)))
	if _, err := c.List(ctxT(t), "/"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("List of a frame of {}: err = %v; want a listing refused for its size", err)
	}
}

func TestClientUploadSizeMustMatch(t *testing.T) {
	c := fakeAgent(t, func(conn net.Conn) {
		for {
			ft, _, err := agentproto.ReadFrame(conn)
			if err != nil || ft == agentproto.FrameEnd {
				break
			}
		}
		agentproto.WriteFrame(conn, agentproto.FrameResult, []byte(`{"size":4611686018427387904}`))
	})
	if n, err := c.Upload(ctxT(t), "/f", 0, -1, -1, strings.NewReader("four")); !errors.Is(err, agentproto.ErrBadReply) {
		t.Errorf("Upload of 4 bytes the agent says were 2^62: n = %d, err = %v; want ErrBadReply", n, err)
	}
}

// TestClientSilentAgent: an agent that stops answering part way holds no call past its
// deadline, however long the caller's context is.
func TestClientSilentAgent(t *testing.T) {
	setVar(t, &callTimeout, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c := fakeAgent(t, func(conn net.Conn) {
		agentproto.WriteFrame(conn, agentproto.FrameData, []byte("x"))
		io.Copy(io.Discard, conn)
	})
	if _, err := c.Download(ctx, "/f", io.Discard); !errors.Is(err, ErrReplyTimeout) {
		t.Errorf("Download from a silent agent: err = %v; want ErrReplyTimeout", err)
	}
	c = fakeAgent(t, func(conn net.Conn) { io.Copy(io.Discard, conn) })
	if _, err := c.Upload(ctx, "/f", 0, -1, -1, strings.NewReader("x")); !errors.Is(err, ErrReplyTimeout) {
		t.Errorf("Upload to a silent agent: err = %v; want ErrReplyTimeout", err)
	}
}

// TestClientDeafAgent: an agent that reads nothing holds a write, but neither the
// request's nor stdin's nor a cancel's holds the caller past its context and cancelWait.
func TestClientDeafAgent(t *testing.T) {
	setVar(t, &cancelWait, 300*time.Millisecond)
	afterRequest := func(conn net.Conn, gone <-chan struct{}) {
		if _, _, err := agentproto.ReadFrame(conn); err == nil {
			<-gone
		}
	}
	short := func() context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		t.Cleanup(cancel)
		return ctx
	}

	c, hangUp := pipeAgent(t, func(_ net.Conn, gone <-chan struct{}) { <-gone })
	within(t, 10*time.Second, "Send of a request the agent does not read", hangUp, func() {
		if _, err := c.Send(short(), "ses_1", "x", nil, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Send to a deaf agent: err = %v; want the context's", err)
		}
	})
	c, hangUp = pipeAgent(t, afterRequest)
	within(t, 10*time.Second, "Exec whose stdin the agent does not read", hangUp, func() {
		if _, err := c.Exec(short(), agentproto.ExecSpec{Argv: []string{"cat"}}, endlessReader{}, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("Exec with stdin to a deaf agent: err = %v; want the context's", err)
		}
	})
	c, hangUp = pipeAgent(t, func(conn net.Conn, gone <-chan struct{}) {
		if _, _, err := agentproto.ReadFrame(conn); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond) // for stdin to hold the connection
		agentproto.WriteFrame(conn, agentproto.FrameStdout, make([]byte, 64<<10))
		<-gone
	})
	c.MaxRead = 1 << 10
	within(t, 10*time.Second, "Exec past MaxRead whose stdin the agent does not read", hangUp, func() {
		if _, err := c.Exec(ctxT(t), agentproto.ExecSpec{Argv: []string{"cat"}}, endlessReader{}, nil, nil); !errors.Is(err, ErrReplyTimeout) {
			t.Errorf("Exec past MaxRead to a deaf agent: err = %v; want ErrReplyTimeout", err)
		}
	})
	c, hangUp = pipeAgent(t, afterRequest)
	within(t, 10*time.Second, "PTY.Close", hangUp, func() {
		p, err := c.PTY(ctxT(t), agentproto.ExecSpec{Argv: []string{"sh"}})
		if err != nil {
			t.Errorf("PTY: %v", err)
			return
		}
		if err := p.Close(); !errors.Is(err, ErrReplyTimeout) {
			t.Errorf("PTY.Close with a deaf agent: err = %v; want ErrReplyTimeout", err)
		}
	})
}

// endlessReader is stdin that never ends.
type endlessReader struct{}

func (endlessReader) Read(b []byte) (int, error) { return len(b), nil }

// A watched session's start: an agent that predates watching answers the session at
// once (no watch); one that watches sends it, then its end, whose state must be one a
// real agent sends.
func TestClientSessionWatch(t *testing.T) {
	info := []byte(`{"id":"ses_1","kind":"raw","pid":7}`)
	c := fakeAgent(t, replyWith(agentproto.FrameResult, info))
	got, w, err := c.StartSessionWatched(ctxT(t), agentproto.SessionSpec{Kind: "raw", Argv: []string{"true"}})
	if err != nil || w != nil || got.ID != "ses_1" {
		t.Fatalf("an agent without watching: %+v, watch %v, %v; want the session and no watch", got, w, err)
	}
	for _, tt := range []struct{ end, want string }{
		{`{"state":"exited","exit_code":3}`, "exited 3"},
		{`{"state":"closed"}`, "closed 0"},
		{`{"state":"succeeded"}`, "bad reply"},
	} {
		c := fakeAgent(t, func(conn net.Conn) {
			agentproto.WriteFrame(conn, agentproto.FrameData, info)
			agentproto.WriteFrame(conn, agentproto.FrameResult, []byte(tt.end))
			io.Copy(io.Discard, conn)
		})
		_, w, err := c.StartSessionWatched(ctxT(t), agentproto.SessionSpec{Kind: "raw", Argv: []string{"true"}})
		if err != nil || w == nil {
			t.Fatalf("a watching agent: watch %v, %v", w, err)
		}
		end, err := w.Wait()
		w.Close()
		got := "bad reply"
		if err == nil {
			got = fmt.Sprintf("%s %d", end.State, end.ExitCode)
		} else if !errors.Is(err, agentproto.ErrBadReply) {
			got = err.Error()
		}
		if got != tt.want {
			t.Errorf("the end %s: got %s; want %s", tt.end, got, tt.want)
		}
	}
}
