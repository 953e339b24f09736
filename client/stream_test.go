package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/api"
	"github.com/airlockhq/airlock/internal/agentproto"
)

// ndjson answers with the given events, flushing after each.
func ndjson(events ...api.ExecEvent) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req api.ExecRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.Stream {
			writeJSON(w, 400, api.ErrorBody{Error: api.Error{Code: "invalid_argument", Message: "want stream=true"}})
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		for _, ev := range events {
			enc.Encode(ev)
			w.(http.Flusher).Flush()
		}
	}
}

func TestExecStream(t *testing.T) {
	exit := &api.ExecResult{State: api.ExecFailed, ExitCode: 3}
	tests := []struct {
		name       string
		events     []api.ExecEvent
		wantOut    string
		wantErrOut string
		wantRes    *api.ExecResult
		wantErr    string
	}{
		{
			name: "output then exit",
			events: []api.ExecEvent{
				{Type: "stdout", Data: "one\n"}, {Type: "stderr", Data: "warn\n"},
				{Type: "future_type", Data: "ignored"}, {Type: "stdout", Data: "two\n"},
				{Type: "exit", Result: exit},
			},
			wantOut: "one\ntwo\n", wantErrOut: "warn\n", wantRes: exit,
		},
		{
			name:    "error event",
			events:  []api.ExecEvent{{Type: "stdout", Data: "x"}, {Type: "error", Error: &api.Error{Code: "unavailable", Message: "agent gone"}}},
			wantOut: "x", wantErr: "agent gone (unavailable)",
		},
		{
			name:    "no exit event",
			events:  []api.ExecEvent{{Type: "stdout", Data: "x"}},
			wantOut: "x", wantErr: "stream ended without a result: unexpected EOF",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := serveUnix(t, ndjson(tt.events...))
			var out, errOut bytes.Buffer
			res, err := c.ExecStream(context.Background(), "box", api.ExecRequest{Argv: []string{"x"}}, &out, &errOut)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Errorf("err = %v, want %q", err, tt.wantErr)
				}
			} else if err != nil || !reflect.DeepEqual(*res, *tt.wantRes) {
				t.Errorf("result = %+v, %v; want %+v", res, err, tt.wantRes)
			}
			if out.String() != tt.wantOut || errOut.String() != tt.wantErrOut {
				t.Errorf("stdout, stderr = %q, %q; want %q, %q", out.String(), errOut.String(), tt.wantOut, tt.wantErrOut)
			}
		})
	}
}

// TestExecStreamCancel checks that cancelling the context closes the connection (which
// the daemon sees as the exec being cancelled) and that output arrives before the end.
func TestExecStreamCancel(t *testing.T) {
	serverSawClose := make(chan struct{})
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(api.ExecEvent{Type: "stdout", Data: "started\n"})
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(serverSawClose)
	}))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := c.ExecStream(ctx, "box", api.ExecRequest{Shell: "sleep 100"}, pw, nil)
		pw.Close()
		done <- err
	}()
	line, err := bufio.NewReader(pr).ReadString('\n')
	if err != nil || line != "started\n" {
		t.Fatalf("first line = %q, %v", line, err)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("ExecStream err = %v, want context.Canceled", err)
	}
	select {
	case <-serverSawClose:
	case <-time.After(10 * time.Second):
		t.Error("the server did not see the connection close")
	}
}

func TestSessions(t *testing.T) {
	var paths []string
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.Method+" "+r.URL.Path)
		switch {
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/sessions"):
			writeJSON(w, 201, api.Session{ID: "s1", Kind: "python", PID: 7})
		case r.Method == http.MethodGet:
			writeJSON(w, 200, api.SessionList{Sessions: []api.Session{{ID: "s1"}}})
		case strings.HasSuffix(r.URL.Path, "/send"):
			var req api.SendRequest
			json.NewDecoder(r.Body).Decode(&req)
			if req.Stream {
				json.NewEncoder(w).Encode(api.ExecEvent{Type: "stdout", Data: req.Input})
				json.NewEncoder(w).Encode(api.ExecEvent{Type: "exit", Result: &api.ExecResult{State: "succeeded"}})
				return
			}
			writeJSON(w, 200, api.ExecResult{State: "succeeded", Stdout: req.Input})
		case r.Method == http.MethodDelete:
			w.WriteHeader(204)
		}
	}))
	ctx := context.Background()
	s, err := c.StartSession(ctx, "box", api.SessionRequest{Kind: "python"})
	if err != nil || s.ID != "s1" {
		t.Fatalf("StartSession = %+v, %v", s, err)
	}
	if l, err := c.ListSessions(ctx, "box"); err != nil || len(l) != 1 {
		t.Errorf("ListSessions = %+v, %v", l, err)
	}
	if res, err := c.Send(ctx, "box", "s1", "1+1"); err != nil || res.Stdout != "1+1" {
		t.Errorf("Send = %+v, %v", res, err)
	}
	var out bytes.Buffer
	if res, err := c.SendStream(ctx, "box", "s1", "print(2)", &out, nil); err != nil || res.State != "succeeded" || out.String() != "print(2)" {
		t.Errorf("SendStream = %+v, %v, output %q", res, err, out.String())
	}
	if err := c.CloseSession(ctx, "box", "s1"); err != nil {
		t.Errorf("CloseSession: %v", err)
	}
	want := []string{"POST /v1/sandboxes/box/sessions", "GET /v1/sandboxes/box/sessions", "POST /v1/sandboxes/box/sessions/s1/send", "POST /v1/sandboxes/box/sessions/s1/send", "DELETE /v1/sandboxes/box/sessions/s1"}
	if strings.Join(paths, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests = %q, want %q", paths, want)
	}
}

// ptyEcho is a PTY endpoint that echoes stdin, reports resizes as output and ends with
// exit code 5 when stdin is closed.
func ptyEcho(t *testing.T) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "airlock-pty" || r.URL.Query().Get("rows") != "24" || r.URL.Query()["cmd"][1] != "-l" {
			writeJSON(w, 400, api.ErrorBody{Error: api.Error{Code: "invalid_argument", Message: "bad upgrade " + r.URL.RawQuery}})
			return
		}
		conn, brw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Errorf("hijack: %v", err)
			return
		}
		defer conn.Close()
		io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: airlock-pty\r\n\r\n")
		for {
			typ, p, err := agentproto.ReadFrame(brw)
			if err != nil {
				return
			}
			switch typ {
			case agentproto.FrameStdin:
				agentproto.WriteFrame(conn, agentproto.FrameStdout, p)
			case agentproto.FrameResize:
				agentproto.WriteFrame(conn, agentproto.FrameStdout, append([]byte("resize "), p...))
			case agentproto.FrameStdinClose:
				b, _ := json.Marshal(api.ExecResult{State: api.ExecFailed, ExitCode: 5})
				agentproto.WriteFrame(conn, agentproto.FrameResult, b)
				return
			}
		}
	}
}

func TestPTY(t *testing.T) {
	c := serveUnix(t, ptyEcho(t))
	p, err := c.PTY(context.Background(), "box", 24, 80, []string{"bash", "-l"})
	if err != nil {
		t.Fatalf("PTY: %v", err)
	}
	defer p.Close()
	if _, err := p.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(30, 100); err != nil {
		t.Fatal(err)
	}
	if err := p.CloseStdin(); err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(p)
	if err != nil {
		t.Fatalf("read: %v", err)
	}
	if want := `hello` + "\n" + `resize {"rows":30,"cols":100}`; string(out) != want {
		t.Errorf("output = %q, want %q", out, want)
	}
	res, err := p.Wait()
	if err != nil || res.ExitCode != 5 {
		t.Errorf("Wait = %+v, %v; want exit 5", res, err)
	}
}

func TestPTYRefused(t *testing.T) {
	c := serveUnix(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, api.ErrorBody{Error: api.Error{Code: "not_found", Message: "sandbox nope not found"}})
	}))
	_, err := c.PTY(context.Background(), "nope", 0, 0, nil)
	if !IsNotFound(err) {
		t.Errorf("err = %v, want not_found", err)
	}
}

func TestPTYWaitDiscards(t *testing.T) {
	c := serveUnix(t, ptyEcho(t))
	p, err := c.PTY(context.Background(), "box", 24, 80, []string{"sh", "-l"})
	if err != nil {
		t.Fatal(err)
	}
	wrote := make(chan error, 1)
	go func() {
		_, err := p.Write(bytes.Repeat([]byte("x"), 3*agentproto.MaxPayload/2))
		if err == nil {
			err = p.CloseStdin()
		}
		wrote <- err
	}()
	res, err := p.Wait()
	if werr := <-wrote; werr != nil {
		t.Errorf("write: %v", werr)
	}
	if err != nil || res.ExitCode != 5 {
		t.Errorf("Wait = %+v, %v; want exit 5", res, err)
	}
	if n, err := p.Read(make([]byte, 8)); n != 0 || err != io.EOF {
		t.Errorf("Read after Wait = %d, %v; want 0, EOF", n, err)
	}
}
