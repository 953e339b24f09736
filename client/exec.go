package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockhq/airlock/api"
)

// Exec runs a command to completion and returns its collected output. How the command
// ended (including timeout or oom_killed) is in the result, not the error.
func (c *Client) Exec(ctx context.Context, ref string, req api.ExecRequest) (*api.ExecResult, error) {
	req.Stream = false
	var res api.ExecResult
	r := request{method: http.MethodPost, path: sandboxPath(ref, "exec"), in: req}
	if err := c.do(ctx, r, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ExecStream runs a command and writes its output to stdout and stderr (either may be
// nil) as the sandbox produces it. Cancelling ctx closes the connection, which cancels
// the command in the sandbox; ExecStream then returns ctx's error.
func (c *Client) ExecStream(ctx context.Context, ref string, req api.ExecRequest, stdout, stderr io.Writer) (*api.ExecResult, error) {
	req.Stream = true
	r := request{method: http.MethodPost, path: sandboxPath(ref, "exec"), in: req}
	return c.stream(ctx, r, stdout, stderr)
}

// StartSession starts a long-lived process (a REPL or a shell) in the sandbox.
func (c *Client) StartSession(ctx context.Context, ref string, req api.SessionRequest) (*api.Session, error) {
	var s api.Session
	r := request{method: http.MethodPost, path: sandboxPath(ref, "sessions"), in: req}
	if err := c.do(ctx, r, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListSessions returns the sandbox's live sessions.
func (c *Client) ListSessions(ctx context.Context, ref string) ([]api.Session, error) {
	var out api.SessionList
	if err := c.do(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "sessions")}, &out); err != nil {
		return nil, err
	}
	return out.Sessions, nil
}

// Send gives input to a session and returns the reply's collected output.
func (c *Client) Send(ctx context.Context, ref, sid, input string) (*api.ExecResult, error) {
	var res api.ExecResult
	r := request{method: http.MethodPost, path: sandboxPath(ref, "sessions", sid, "send"), in: api.SendRequest{Input: input}}
	if err := c.do(ctx, r, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// SendStream gives input to a session and writes the reply to stdout and stderr as it
// arrives, like ExecStream.
func (c *Client) SendStream(ctx context.Context, ref, sid, input string, stdout, stderr io.Writer) (*api.ExecResult, error) {
	r := request{method: http.MethodPost, path: sandboxPath(ref, "sessions", sid, "send"), in: api.SendRequest{Input: input, Stream: true}}
	return c.stream(ctx, r, stdout, stderr)
}

// SessionLogs streams the log of background session sid (see api.SessionRequest's
// Background) into stdout and stderr: its last tail lines (0: all it keeps) and, with
// follow, what the process writes after, until it ends or ctx does. The result's state
// is running or exited, with the exit code.
func (c *Client) SessionLogs(ctx context.Context, ref, sid string, tail int, follow bool, stdout, stderr io.Writer) (*api.ExecResult, error) {
	q := url.Values{}
	if tail > 0 {
		q.Set("tail", strconv.Itoa(tail))
	}
	if follow {
		q.Set("follow", "true")
	}
	return c.stream(ctx, request{method: http.MethodGet, path: sandboxPath(ref, "sessions", sid, "logs"), query: q}, stdout, stderr)
}

// CloseSession ends a session and its process.
func (c *Client) CloseSession(ctx context.Context, ref, sid string) error {
	return c.do(ctx, request{method: http.MethodDelete, path: sandboxPath(ref, "sessions", sid)}, nil)
}

// stream performs r and reads its NDJSON ExecEvents until the exit event.
func (c *Client) stream(ctx context.Context, r request, stdout, stderr io.Writer) (*api.ExecResult, error) {
	resp, err := c.send(ctx, r)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	res, err := readExecEvents(resp.Body, stdout, stderr)
	if err != nil && ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return res, err
}

// errNoResult reports a stream that ended before its exit event: the connection broke,
// and how the command ended is unknown.
var errNoResult = errors.New("stream ended without a result")

// readExecEvents copies output events to stdout and stderr and returns the exit event's
// result. Unknown event types are skipped, so newer daemons can add some.
func readExecEvents(body io.Reader, stdout, stderr io.Writer) (*api.ExecResult, error) {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	dec := json.NewDecoder(body)
	for {
		var ev api.ExecEvent
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: %w", errNoResult, io.ErrUnexpectedEOF)
			}
			return nil, fmt.Errorf("read stream: %w", err)
		}
		switch ev.Type {
		case "stdout", "stderr":
			w := stdout
			if ev.Type == "stderr" {
				w = stderr
			}
			data := ev.Data
			if len(ev.Bytes) > 0 {
				data = string(ev.Bytes)
			}
			if _, err := io.WriteString(w, data); err != nil {
				return nil, fmt.Errorf("write %s: %w", ev.Type, err)
			}
		case "exit":
			if ev.Result == nil {
				return nil, errors.New("exit event without a result")
			}
			return ev.Result, nil
		case "error":
			return nil, streamError(ev.Error)
		}
	}
}
