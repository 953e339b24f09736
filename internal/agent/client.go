package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// Client calls an agent, one connection per call, each made by Dial. It is safe for
// concurrent use. The connection is whatever channel the runtime driver vouches for; the
// client never picks an address itself.
//
// Everything the agent sends is bounded before the daemon acts on it: a frame by
// MaxPayload, a call that answers with one frame by callTimeout, an exec with a timeout
// by that timeout plus replyGrace, a cancelled call by cancelWait, the output of a call
// by MaxRead, a listing by its count of entries, and the agent's text (its errors, a
// result's error) by maxAgentText.
type Client struct {
	Dial func(ctx context.Context) (net.Conn, error)
	// MaxRead bounds the bytes (payload and framing) of output one exec or send reads
	// (0: no bound, for calls streamed to a client that can hang up). Past it the client
	// cancels the command, drops further output and fails the call if the agent does not
	// answer within cancelSlack more bytes.
	MaxRead int64
}

// ErrReplyTooLarge reports an agent that kept sending after its output limit.
var ErrReplyTooLarge = errors.New("agent: reply too large")

// ErrReplyTimeout reports an agent that did not answer in time.
var ErrReplyTimeout = errors.New("agent: no reply in time")

// callTimeout bounds a call answered by a single frame (a variable for tests).
var callTimeout = 5 * time.Minute

// replyGrace is how long past a command's own timeout the agent has to report its end.
const replyGrace = 30 * time.Second

// cancelSlack is how much output a cancelled call still reads while it waits for the
// agent's result.
const cancelSlack = 4 * agentproto.MaxPayload

// frameOverhead is what a frame costs beyond its payload: type, length and checksum.
const frameOverhead = 9

// OpenRaw dials the agent and sends req, returning the connection for a caller that
// speaks the frames itself (a terminal relayed to a client).
func (c *Client) OpenRaw(ctx context.Context, req *agentproto.Request) (net.Conn, error) {
	k, err := c.open(ctx, req)
	if err != nil {
		return nil, err
	}
	return k.conn, nil
}

// cancelWait bounds how long a cancelled call waits for the agent's final result (a
// variable only so that a test on a loaded machine can wait longer).
var cancelWait = 5 * time.Second

// call is one connection carrying one request.
type call struct {
	conn       net.Conn
	mu         sync.Mutex // serialises frame writes
	maxRead    int64      // see Client.MaxRead
	cancelOnce sync.Once
	// kept says the request asked the agent to keep the connection (a KeptConn);
	// spoiled that the call may have left it unfit to carry another (a Cancel sent).
	kept    bool
	spoiled atomic.Bool
}

// keepable says whether a request may ask the agent to keep its connection: a ping,
// and an exec without stdin (whose client sends nothing after the request).
func keepable(req *agentproto.Request) bool {
	return req.Op == agentproto.OpPing || req.Op == agentproto.OpExec && req.Exec != nil && !req.Exec.Stdin
}

// open dials and sends req. ctx and callTimeout bound the send: a request larger than
// the connection's buffer waits for an agent that may never read it. On a kept
// connection the agent may have closed since, without having read anything: a send
// that fails on one is made again on another.
func (c *Client) open(ctx context.Context, req *agentproto.Request) (*call, error) {
	for tries := 0; ; tries++ {
		conn, err := c.Dial(ctx)
		if err != nil {
			return nil, fmt.Errorf("agent: dial: %w", err)
		}
		kc, ok := conn.(KeptConn)
		req.Keep = ok && keepable(req) && kc.Keepable()
		stop := context.AfterFunc(ctx, func() { conn.Close() })
		_ = conn.SetWriteDeadline(time.Now().Add(callTimeout))
		b, err := json.Marshal(req)
		if err == nil {
			err = agentproto.WriteFrame(conn, agentproto.FrameRequest, b)
		}
		if !stop() {
			conn.Close()
			return nil, ctx.Err()
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			conn.Close()
			return nil, ctxErr(ctx, err)
		}
		if err != nil {
			conn.Close()
			if ok && kc.Reused() && tries <= poolMax {
				continue
			}
			return nil, fmt.Errorf("agent: send request: %w", err)
		}
		_ = conn.SetWriteDeadline(time.Time{})
		return &call{conn: conn, maxRead: c.MaxRead, kept: req.Keep}, nil
	}
}

// end closes the call's connection, or hands it back to its pool when the request
// asked the agent to keep it and the call ended with the agent's answer (err nil or
// the agent's own error) and nothing else sent.
func (k *call) end(err error) {
	var re *agentproto.RemoteError
	if k.kept && !k.spoiled.Load() && (err == nil || errors.As(err, &re)) {
		k.conn.(KeptConn).Keep()
		return
	}
	k.conn.Close()
}

// keepRefused reports an agent that predates kept connections refusing a request that
// asked for one: it ran nothing, and the call can be made again without it.
func (k *call) keepRefused(err error) bool {
	var re *agentproto.RemoteError
	if !k.kept || !errors.As(err, &re) || !strings.Contains(re.Message, `unknown field "keep"`) {
		return false
	}
	k.conn.(KeptConn).Refused()
	k.spoiled.Store(true)
	return true
}

// cancel asks the agent to stop the call and bounds what is left of it by cancelWait.
// The deadline comes before the Cancel frame: a write that holds the connection (stdin
// to an agent that reads nothing) must not keep the caller waiting for ever.
func (k *call) cancel() {
	k.cancelOnce.Do(func() {
		k.spoiled.Store(true)
		_ = k.conn.SetDeadline(time.Now().Add(cancelWait))
		_ = k.send(agentproto.FrameCancel, nil)
	})
}

func (k *call) send(t agentproto.FrameType, p []byte) error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return agentproto.WriteFrame(k.conn, t, p)
}

// simple runs a call whose answer is a single Result or Error frame.
func (c *Client) simple(ctx context.Context, req *agentproto.Request, v any) error {
	return c.simpleThen(ctx, req, v, nil)
}

// simpleThen is simple, and then, after a Result, calls then (if set) with the call's
// connection, under the same context and deadline.
func (c *Client) simpleThen(ctx context.Context, req *agentproto.Request, v any, then func(net.Conn) error) error {
	k, err := c.open(ctx, req)
	if err != nil {
		return err
	}
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	_ = k.conn.SetReadDeadline(time.Now().Add(callTimeout))
	t, p, err := agentproto.ReadFrame(k.conn)
	if err != nil {
		stop()
		k.conn.Close()
		return ctxErr(ctx, err)
	}
	if then == nil {
		err := finish(t, p, v)
		if !stop() {
			k.spoiled.Store(true)
		}
		refused := k.keepRefused(err)
		k.end(err)
		if refused {
			return c.simpleThen(ctx, req, v, nil)
		}
		return err
	}
	defer k.conn.Close()
	defer stop()
	if err := finish(t, p, v); err != nil {
		return err
	}
	if err := then(k.conn); err != nil {
		return ctxErr(ctx, err)
	}
	return nil
}

// ctxErr prefers the context's error when the context ended the call, and says so
// when the agent let a deadline pass.
func ctxErr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%w: the sandbox's agent let its deadline pass without answering", ErrReplyTimeout)
	}
	return fmt.Errorf("agent: %w", err)
}

// Quiesce has the agent close every connection it holds, and returns once it has
// closed this call's own too (the end of its stream): nothing of the host is open in
// the sandbox then but the agent's channel, until the next call. An agent that writes
// past its answer instead has not closed it: that fails.
func (c *Client) Quiesce(ctx context.Context) error {
	return c.simpleThen(ctx, &agentproto.Request{Op: agentproto.OpQuiesce}, nil, func(conn net.Conn) error {
		var b [1]byte
		switch n, err := conn.Read(b[:]); {
		case n > 0:
			return errors.New("quiesce: the agent wrote past its answer instead of closing the connection")
		case err == io.EOF:
			return nil
		default:
			return err
		}
	})
}

// Ping checks that the agent answers.
func (c *Client) Ping(ctx context.Context) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpPing}, nil)
}

// stream reads Stdout/Stderr frames into the writers until the Result (into v) or an
// Error. When ctx ends it sends Cancel and still waits (a bounded time) for the result.
// Past maxRead bytes of output it does the same, drops further output and reports in
// the result's Error that the command was stopped.
func (k *call) stream(ctx context.Context, stdout, stderr io.Writer, v any) error {
	stop := context.AfterFunc(ctx, k.cancel)
	defer func() {
		if !stop() {
			k.spoiled.Store(true) // the cancel may still be on its way
		}
	}()
	var read int64
	over := false
	for {
		t, p, err := agentproto.ReadFrame(k.conn)
		if err != nil {
			return ctxErr(ctx, err)
		}
		if t == agentproto.FrameStdout || t == agentproto.FrameStderr {
			read += int64(len(p)) + frameOverhead
			if k.maxRead > 0 && read > k.maxRead {
				if read > k.maxRead+cancelSlack {
					return fmt.Errorf("%w: it kept sending output past %d bytes after the command was stopped", ErrReplyTooLarge, k.maxRead)
				}
				over = true
				k.cancel()
				continue
			}
		}
		switch t {
		case agentproto.FrameStdout:
			if stdout != nil {
				_, _ = stdout.Write(p)
			}
		case agentproto.FrameStderr:
			if stderr != nil {
				_, _ = stderr.Write(p)
			}
		default:
			err := finish(t, p, v)
			if err == nil && over {
				noteStopped(v, k.maxRead)
			}
			return err
		}
	}
}

// noteStopped says in a result that the daemon stopped the command for its output.
func noteStopped(v any, limit int64) {
	msg := fmt.Sprintf("the command was stopped: it wrote more than %d bytes of output, the limit of a call whose output is not streamed", limit)
	switch r := v.(type) {
	case *agentproto.ExitResult:
		r.Error = msg
	case *agentproto.SendResult:
		r.Error = msg
	}
}

// Exec runs spec to completion, streaming its output into stdout and stderr (either may
// be nil). A non-nil stdin is copied to the process (spec.Stdin is set); the copy runs in
// its own goroutine, which ends at the first Read that returns after the call is over.
// If ctx ends mid-run, the agent kills the process and Exec returns its "cancelled"
// result. The error reports a failed call, not a failed command.
func (c *Client) Exec(ctx context.Context, spec agentproto.ExecSpec, stdin io.Reader, stdout, stderr io.Writer) (*agentproto.ExitResult, error) {
	spec.Stdin = stdin != nil
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpExec, Exec: &spec})
	if err != nil {
		return nil, err
	}
	if spec.TimeoutMS > 0 {
		// The agent ends the command at its timeout; one that does not answer soon after
		// is not waited for.
		_ = k.conn.SetReadDeadline(time.Now().Add(time.Duration(spec.TimeoutMS)*time.Millisecond + replyGrace))
	}
	if stdin != nil {
		go k.copyStdin(stdin)
	}
	var res agentproto.ExitResult
	err = k.stream(ctx, stdout, stderr, &res)
	refused := k.keepRefused(err)
	k.end(err)
	if refused {
		return c.Exec(ctx, spec, stdin, stdout, stderr)
	}
	if err != nil {
		return nil, err
	}
	return &res, nil
}

func (k *call) copyStdin(r io.Reader) {
	buf := make([]byte, copyBuf)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if k.send(agentproto.FrameStdin, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = k.send(agentproto.FrameStdinClose, nil)
			return
		}
	}
}

// PTY is a process running under a pseudo-terminal. Read its output until io.EOF (it
// ends when the process has exited); Wait returns how it ended.
type PTY struct {
	k    *call
	out  *io.PipeReader
	done chan struct{}
	res  *agentproto.ExitResult
	err  error
	stop func() bool
}

// PTY starts spec under a pseudo-terminal of spec.Rows × spec.Cols. Ending ctx kills it.
func (c *Client) PTY(ctx context.Context, spec agentproto.ExecSpec) (*PTY, error) {
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpPTY, Exec: &spec})
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	p := &PTY{k: k, out: pr, done: make(chan struct{})}
	p.stop = context.AfterFunc(ctx, k.cancel)
	go func() {
		defer close(p.done)
		var res agentproto.ExitResult
		// Output the reader has stopped wanting (Close) is dropped; the result still counts.
		err := k.stream(context.Background(), discardOnClose{pw}, nil, &res)
		if err == nil {
			p.res = &res
		}
		p.err = err
		pw.CloseWithError(err)
		k.conn.Close()
	}()
	return p, nil
}

type discardOnClose struct{ w *io.PipeWriter }

func (d discardOnClose) Write(b []byte) (int, error) {
	_, _ = d.w.Write(b)
	return len(b), nil
}

// Read reads the terminal's output.
func (p *PTY) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write sends keystrokes to the terminal.
func (p *PTY) Write(b []byte) (int, error) {
	for off := 0; off < len(b); {
		n := min(len(b)-off, copyBuf)
		if err := p.k.send(agentproto.FrameStdin, b[off:off+n]); err != nil {
			return off, err
		}
		off += n
	}
	return len(b), nil
}

// Resize changes the terminal's size.
func (p *PTY) Resize(rows, cols uint16) error {
	b, _ := json.Marshal(agentproto.Resize{Rows: rows, Cols: cols})
	return p.k.send(agentproto.FrameResize, b)
}

// Wait waits for the process to end. Read the output concurrently (or Close), or the
// agent stalls once the terminal's buffer is full.
func (p *PTY) Wait() (*agentproto.ExitResult, error) {
	<-p.done
	p.stop()
	return p.res, p.err
}

// Close kills the process if it still runs, drops unread output and waits (at most
// cancelWait) for the end.
func (p *PTY) Close() error {
	p.k.cancel()
	p.out.Close()
	_, err := p.Wait()
	return err
}

// SessionWatch is the open start call of a watched session.
type SessionWatch struct{ k *call }

// StartSessionWatched starts a session as StartSession does and keeps the call open:
// the watch's Wait returns how the session ended. The watch is nil when the agent
// predates watching.
func (c *Client) StartSessionWatched(ctx context.Context, spec agentproto.SessionSpec) (_ *agentproto.SessionInfo, _ *SessionWatch, err error) {
	spec.Watch = true
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpSessionStart, Session: &spec})
	if err != nil {
		return nil, nil, err
	}
	var w *SessionWatch
	defer func() {
		if w == nil || err != nil {
			k.conn.Close()
		}
	}()
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	defer stop()
	_ = k.conn.SetReadDeadline(time.Now().Add(callTimeout))
	t, p, err := agentproto.ReadFrame(k.conn)
	if err != nil {
		return nil, nil, ctxErr(ctx, err)
	}
	var info agentproto.SessionInfo
	if t == agentproto.FrameData {
		if err := json.Unmarshal(p, &info); err != nil {
			return nil, nil, decodeErr("session", err)
		}
		w = &SessionWatch{k: k}
	} else if err := finish(t, p, &info); err != nil {
		return nil, nil, err
	}
	if err := checkSession(&info); err != nil {
		return nil, nil, err
	}
	_ = k.conn.SetReadDeadline(time.Time{})
	return &info, w, nil
}

// Wait returns how the session ended, once it has; Close ends the wait first.
func (w *SessionWatch) Wait() (*agentproto.SessionEnd, error) {
	t, p, err := agentproto.ReadFrame(w.k.conn)
	if err != nil {
		return nil, fmt.Errorf("agent: %w", err)
	}
	var end agentproto.SessionEnd
	if err := finish(t, p, &end); err != nil {
		return nil, err
	}
	return &end, nil
}

// Close ends the watch; the session runs on.
func (w *SessionWatch) Close() error { return w.k.conn.Close() }

// StartSession starts a long-lived session process.
func (c *Client) StartSession(ctx context.Context, spec agentproto.SessionSpec) (*agentproto.SessionInfo, error) {
	var info agentproto.SessionInfo
	if err := c.simple(ctx, &agentproto.Request{Op: agentproto.OpSessionStart, Session: &spec}, &info); err != nil {
		return nil, err
	}
	if err := checkSession(&info); err != nil {
		return nil, err
	}
	return &info, nil
}

// maxSessionList bounds a list of sessions: a real agent's entry takes at least 40
// bytes, so no real reply of one frame holds more.
const maxSessionList = agentproto.MaxPayload / 40

// Send sends input to session id and streams the reply into stdout and stderr (either
// may be nil). A session serves one send at a time; another gets a "busy" RemoteError.
// If ctx ends mid-reply, the agent interrupts a python session (a shell or raw one runs
// the input to its end) and Send returns the "cancelled" result once the session is
// free again, or ctx's error if that takes longer than a few seconds.
func (c *Client) Send(ctx context.Context, id, input string, stdout, stderr io.Writer) (*agentproto.SendResult, error) {
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpSessionSend, SessionID: id, Input: input})
	if err != nil {
		return nil, err
	}
	defer k.conn.Close()
	var res agentproto.SendResult
	if err := k.stream(ctx, stdout, stderr, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// SessionLogs streams the log of background session id into stdout and stderr: its
// last tail lines (0: all it keeps) and, with follow, what the process writes after,
// until it ends or ctx does.
func (c *Client) SessionLogs(ctx context.Context, id string, tail int, follow bool, stdout, stderr io.Writer) (*agentproto.LogsResult, error) {
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpSessionLogs, SessionID: id, Tail: tail, Follow: follow})
	if err != nil {
		return nil, err
	}
	defer k.conn.Close()
	var res agentproto.LogsResult
	if err := k.stream(ctx, stdout, stderr, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// SetLifetime moves the end of the agent's lifetime, when it stops everything on its own
// clock, to end (zero: never).
func (c *Client) SetLifetime(ctx context.Context, end time.Time) error {
	var d int64
	if !end.IsZero() {
		d = end.Unix()
	}
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpSetLifetime, Deadline: d}, nil)
}

// CloseSession kills session id.
func (c *Client) CloseSession(ctx context.Context, id string) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpSessionClose, SessionID: id}, nil)
}

// ListSessions lists the running sessions.
func (c *Client) ListSessions(ctx context.Context) ([]agentproto.SessionInfo, error) {
	var raw json.RawMessage
	if err := c.simple(ctx, &agentproto.Request{Op: agentproto.OpSessionList}, &raw); err != nil {
		return nil, err
	}
	out, err := decodeList[agentproto.SessionInfo](raw, maxSessionList, "session list")
	if err != nil {
		return nil, err
	}
	for i := range out {
		if err := checkSession(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Upload writes r to path atomically (a temporary file renamed into place), creating
// missing parent directories. mode 0 means 0644; uid or gid -1 leaves the owner as is.
func (c *Client) Upload(ctx context.Context, path string, mode uint32, uid, gid int, r io.Reader) (int64, error) {
	return c.upload(ctx, &agentproto.Request{Op: agentproto.OpFileUpload, Path: path, Mode: mode, UID: uid, GID: gid}, r)
}

// UploadInPlace is Upload writing the file under its own name (see
// agentproto.Request.InPlace): a watcher sees the file itself created and written.
func (c *Client) UploadInPlace(ctx context.Context, path string, mode uint32, uid, gid int, r io.Reader) (int64, error) {
	return c.upload(ctx, &agentproto.Request{Op: agentproto.OpFileUpload, Path: path, Mode: mode, UID: uid, GID: gid, InPlace: true}, r)
}

func (c *Client) upload(ctx context.Context, req *agentproto.Request, r io.Reader) (int64, error) {
	var res agentproto.SizeResult
	sent, err := c.stream(ctx, req, r, &res)
	if err != nil {
		return 0, err
	}
	if res.Size != sent {
		return 0, fmt.Errorf("%w: upload %s: sent %d bytes, the agent wrote %d", agentproto.ErrBadReply, req.Path, sent, res.Size)
	}
	return res.Size, nil
}

// stream sends r in Data frames after req, then End, and decodes the agent's Result
// into res; it returns the bytes sent.
func (c *Client) stream(ctx context.Context, req *agentproto.Request, r io.Reader, res any) (int64, error) {
	path := req.Path
	k, err := c.open(ctx, req)
	if err != nil {
		return 0, err
	}
	defer k.conn.Close()
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	defer stop()
	buf := make([]byte, copyBuf)
	var sent int64
	for {
		n, rerr := r.Read(buf)
		if n > 0 {
			// An agent that stops reading fails the upload after callTimeout.
			_ = k.conn.SetWriteDeadline(time.Now().Add(callTimeout))
			if err := k.send(agentproto.FrameData, buf[:n]); err != nil {
				return 0, k.early(ctx, err)
			}
			sent += int64(n)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			// Wait (bounded) for the agent's answer to the cancel: by then it has removed
			// what it wrote, so nothing of the upload is left once Upload returns.
			if k.send(agentproto.FrameCancel, nil) == nil {
				_ = k.conn.SetReadDeadline(time.Now().Add(cancelWait))
				_, _, _ = agentproto.ReadFrame(k.conn)
			}
			return 0, fmt.Errorf("agent: upload %s: read: %w", path, rerr)
		}
	}
	_ = k.conn.SetDeadline(time.Now().Add(callTimeout))
	if err := k.send(agentproto.FrameEnd, nil); err != nil {
		return 0, k.early(ctx, err)
	}
	t, p, err := agentproto.ReadFrame(k.conn)
	if err != nil {
		return 0, ctxErr(ctx, err)
	}
	if err := finish(t, p, res); err != nil {
		return 0, err
	}
	return sent, nil
}

// early explains a failed write: the agent may have refused the call (and closed) before
// reading everything, in which case its Error frame is waiting to be read.
func (k *call) early(ctx context.Context, werr error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	_ = k.conn.SetReadDeadline(time.Now().Add(time.Second))
	if t, p, err := agentproto.ReadFrame(k.conn); err == nil && t == agentproto.FrameError {
		return finish(t, p, nil)
	}
	return ctxErr(ctx, werr)
}

// Download copies the file at path into w and returns its size.
func (c *Client) Download(ctx context.Context, path string, w io.Writer) (int64, error) {
	return c.download(ctx, &agentproto.Request{Op: agentproto.OpFileDownload, Path: path}, w)
}

// ErrNoRangedRead reports an agent that cannot send part of a file (it predates
// file.read); Download the whole file instead.
var ErrNoRangedRead = errors.New("agent: this sandbox's agent cannot send part of a file")

// DownloadRange writes length bytes (0: all) of the file at path, from offset, to w. A
// part past the end of the file is empty. An agent that cannot send a part answers
// ErrNoRangedRead, having sent nothing.
func (c *Client) DownloadRange(ctx context.Context, path string, offset, length int64, w io.Writer) (int64, error) {
	if length > 0 {
		w = &capWriter{w: w, left: length} // the agent's say-so does not make it longer
	}
	n, err := c.download(ctx, &agentproto.Request{Op: agentproto.OpFileRead, Path: path, Offset: offset, Length: length}, w)
	var re *agentproto.RemoteError
	if n == 0 && errors.As(err, &re) && strings.HasPrefix(re.Message, "unknown op") {
		return 0, ErrNoRangedRead
	}
	return n, err
}

// capWriter passes on at most left bytes and fails past them.
type capWriter struct {
	w    io.Writer
	left int64
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		return 0, fmt.Errorf("%w: the agent sent more of the file than was asked for", agentproto.ErrBadReply)
	}
	n, err := c.w.Write(p)
	c.left -= int64(n)
	return n, err
}

func (c *Client) download(ctx context.Context, req *agentproto.Request, w io.Writer) (int64, error) {
	path := req.Path
	k, err := c.open(ctx, req)
	if err != nil {
		return 0, err
	}
	defer k.conn.Close()
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	defer stop()
	var n int64
	for {
		// Each frame must come within callTimeout: a silent agent does not hold the
		// download for ever, however long the file.
		_ = k.conn.SetReadDeadline(time.Now().Add(callTimeout))
		t, p, err := agentproto.ReadFrame(k.conn)
		if err != nil {
			return n, ctxErr(ctx, err)
		}
		if t != agentproto.FrameData {
			var res agentproto.SizeResult
			if err := finish(t, p, &res); err != nil {
				return n, err
			}
			if res.Size != n {
				return n, fmt.Errorf("%w: download %s: got %d bytes, agent sent %d", agentproto.ErrBadReply, path, n, res.Size)
			}
			return n, nil
		}
		m, err := w.Write(p)
		n += int64(m)
		if err != nil {
			return n, fmt.Errorf("agent: download %s: write: %w", path, err)
		}
	}
}

// MaxListEntries bounds a listing the client takes from an agent, and maxListBytes
// what its frames may add up to.
const (
	MaxListEntries = 100_000
	maxListBytes   = 64 << 20
)

// List lists the directory at path, sorted by name; symlinks are not followed. A
// directory of more than MaxListEntries entries is refused.
func (c *Client) List(ctx context.Context, path string) ([]agentproto.FileInfo, error) {
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpFileList, Path: path, Chunked: true})
	if err != nil {
		return nil, err
	}
	defer k.conn.Close()
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	defer stop()
	_ = k.conn.SetReadDeadline(time.Now().Add(callTimeout))
	var (
		out   []agentproto.FileInfo
		total int
	)
	for {
		t, p, err := agentproto.ReadFrame(k.conn)
		if err != nil {
			return nil, ctxErr(ctx, err)
		}
		if total += len(p); total > maxListBytes {
			return nil, fmt.Errorf("%w: a listing of %s over %d bytes", agentproto.ErrBadReply, path, maxListBytes)
		}
		isResult := t == agentproto.FrameResult
		if t != agentproto.FrameData && !(isResult && len(p) > 0 && p[0] == '[') {
			if err := finish(t, p, nil); err != nil {
				return nil, err
			}
			break
		}
		// Entries come in Data frames, or all in the Result from an agent that does
		// not chunk. None is decoded past MaxListEntries.
		part, err := decodeList[agentproto.FileInfo](p, MaxListEntries-len(out), "listing")
		if errors.Is(err, errTooMany) {
			return nil, errdefs.Invalid("%s has more than %d entries, more than a listing takes", path, MaxListEntries)
		}
		if err != nil {
			return nil, err
		}
		out = append(out, part...)
		if isResult {
			break
		}
	}
	for i := range out {
		if err := out[i].Check(false); err != nil {
			return nil, err
		}
		if err := checkOwner(&out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Stat describes the file at path (following symlinks inside the root).
func (c *Client) Stat(ctx context.Context, path string) (*agentproto.FileInfo, error) {
	var fi agentproto.FileInfo
	if err := c.simple(ctx, &agentproto.Request{Op: agentproto.OpFileStat, Path: path}, &fi); err != nil {
		return nil, err
	}
	if err := fi.Check(true); err != nil {
		return nil, err
	}
	if err := checkOwner(&fi); err != nil {
		return nil, err
	}
	return &fi, nil
}

// Mkdir creates the directory path (mode 0755); parents works like mkdir -p.
func (c *Client) Mkdir(ctx context.Context, path string, parents bool) error {
	return c.MkdirAs(ctx, path, parents, -1, -1)
}

// MkdirAs is Mkdir with the directories it makes owned by uid and gid (-1: the agent's).
func (c *Client) MkdirAs(ctx context.Context, path string, parents bool, uid, gid int) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpFileMkdir, Path: path, Parents: parents, UID: uid, GID: gid}, nil)
}

// Remove removes path; recursive works like rm -r. An empty directory needs no recursive.
func (c *Client) Remove(ctx context.Context, path string, recursive bool) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpFileRemove, Path: path, Recursive: recursive}, nil)
}

var _ io.ReadWriter = (*PTY)(nil)

// DialPort connects through the agent to a TCP port on the sandbox's loopback. The
// connection it returns carries that port's bytes: what the sandbox sends through it is
// the caller's to bound, like any connection to sandbox code.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpPortDial, Port: port})
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	_ = k.conn.SetReadDeadline(time.Now().Add(portDialTimeout + replyGrace))
	t, p, err := agentproto.ReadFrame(k.conn)
	if !stop() {
		k.conn.Close()
		return nil, ctx.Err()
	}
	if err == nil {
		err = finish(t, p, nil)
	} else {
		err = ctxErr(ctx, err)
	}
	if err != nil {
		k.conn.Close()
		return nil, err
	}
	_ = k.conn.SetReadDeadline(time.Time{})
	return k.conn, nil
}
