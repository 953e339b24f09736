package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// maxPID is the largest pid Linux hands out (pid_max's ceiling).
const maxPID = 1 << 22

// Proc is one call attached to a process of the agent's process table: its output
// from the moment of attaching, then how it ended. The process outlives the call.
// The output is not bounded by Client.MaxRead: it is meant to be streamed to a client
// that can hang up.
type Proc struct {
	PID  int
	PTY  bool // the process's output is a terminal's
	ctx  context.Context
	k    *call
	stop func() bool
	err  error // sticky: what ended the stream
}

// ProcOutput is a piece of a process's output; End is set on the last one, which
// says how the process ended and carries no Data.
type ProcOutput struct {
	Stderr bool
	Data   []byte
	End    *agentproto.ExitResult
}

// ErrStreamClosed is what Proc.Recv and Watch.Next return after Close.
var ErrStreamClosed = errors.New("agent: stream closed")

// ProcStart starts a process in the agent's process table and attaches to it; it
// returns once the agent has started the process. ctx bounds the start and then the
// stream: when ctx ends the stream is closed as by Close, and the process keeps running.
// A process that cannot start (a missing program, a bad working directory) is an error.
func (c *Client) ProcStart(ctx context.Context, spec agentproto.ProcSpec) (*Proc, error) {
	return c.procOpen(ctx, &agentproto.Request{Op: agentproto.OpProcStart, Proc: &spec}, 0)
}

// ProcAttach attaches to a running process of the table, named by pid or, when pid is
// 0, by tag; ctx governs the stream as for ProcStart.
func (c *Client) ProcAttach(ctx context.Context, pid int, tag string) (*Proc, error) {
	return c.procOpen(ctx, &agentproto.Request{Op: agentproto.OpProcAttach, PID: pid, Tag: tag}, pid)
}

func (c *Client) procOpen(ctx context.Context, req *agentproto.Request, wantPID int) (*Proc, error) {
	k, err := c.open(ctx, req)
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	fail := func(err error) (*Proc, error) {
		stop()
		k.conn.Close()
		return nil, err
	}
	_ = k.conn.SetReadDeadline(time.Now().Add(callTimeout))
	t, b, err := agentproto.ReadFrame(k.conn)
	if err != nil {
		return fail(ctxErr(ctx, err))
	}
	if t != agentproto.FrameStarted {
		return fail(firstFrame(t, b))
	}
	var st agentproto.ProcStarted
	if err := json.Unmarshal(b, &st); err != nil {
		return fail(decodeErr("start", err))
	}
	if st.PID <= 0 || st.PID > maxPID || (wantPID != 0 && st.PID != wantPID) {
		return fail(fmt.Errorf("%w: the sandbox's agent named pid %d for the process", agentproto.ErrBadReply, st.PID))
	}
	_ = k.conn.SetReadDeadline(time.Time{})
	return &Proc{PID: st.PID, PTY: st.PTY, ctx: ctx, k: k, stop: stop}, nil
}

// firstFrame explains a call whose first frame was not the one wanted: an Error is the
// agent's refusal, anything else a reply no real agent sends.
func firstFrame(t agentproto.FrameType, b []byte) error {
	if t == agentproto.FrameError {
		return finish(t, b, nil)
	}
	return fmt.Errorf("%w: a frame of type %q came first", agentproto.ErrBadReply, byte(t))
}

// Recv returns the next piece of output; after the one with End it returns io.EOF.
// It is not for concurrent use, but Close may be called while it waits.
func (p *Proc) Recv() (ProcOutput, error) {
	if p.err != nil {
		return ProcOutput{}, p.err
	}
	out, err := p.recv()
	if err != nil || out.End != nil {
		p.err = err
		if err == nil {
			p.err = io.EOF
		}
		p.stop()
		p.k.conn.Close()
	}
	return out, err
}

func (p *Proc) recv() (ProcOutput, error) {
	t, b, err := agentproto.ReadFrame(p.k.conn)
	if err != nil {
		return ProcOutput{}, streamErr(p.ctx, "process "+strconv.Itoa(p.PID), err)
	}
	switch t {
	case agentproto.FrameStdout:
		return ProcOutput{Data: b}, nil
	case agentproto.FrameStderr:
		return ProcOutput{Stderr: true, Data: b}, nil
	case agentproto.FrameResult:
		var res agentproto.ExitResult
		if err := finish(t, b, &res); err != nil {
			return ProcOutput{}, err
		}
		return ProcOutput{End: &res}, nil
	case agentproto.FrameError:
		return ProcOutput{}, finish(t, b, nil)
	}
	return ProcOutput{}, fmt.Errorf("%w: a frame of type %q in a process's output", agentproto.ErrBadReply, byte(t))
}

// streamErr explains a stream's failed read: the context's error when it ended the
// stream, ErrStreamClosed after Close.
func streamErr(ctx context.Context, what string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.Is(err, net.ErrClosed):
		return ErrStreamClosed
	}
	return fmt.Errorf("agent: %s: %w", what, err)
}

// Close detaches from the process, which keeps running.
func (p *Proc) Close() error {
	p.stop()
	if err := p.k.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// maxProcList bounds a list of processes: four times the agent's own maxProcs.
const maxProcList = 4096

// ProcList lists the live processes of the table, by pid.
func (c *Client) ProcList(ctx context.Context) ([]agentproto.ProcInfo, error) {
	var raw json.RawMessage
	if err := c.simple(ctx, &agentproto.Request{Op: agentproto.OpProcList}, &raw); err != nil {
		return nil, err
	}
	out, err := decodeList[agentproto.ProcInfo](raw, maxProcList, "process list")
	if err != nil {
		return nil, err
	}
	for _, p := range out {
		if p.PID <= 0 || p.PID > maxPID || len(p.Tag) > maxTag || len(p.Cwd) > maxPathLen {
			return nil, fmt.Errorf("%w: the sandbox's agent listed process %d, tag %.64q", agentproto.ErrBadReply, p.PID, p.Tag)
		}
	}
	return out, nil
}

// ProcInput writes data, at most agentproto.MaxPayload bytes, to the stdin (or the
// terminal) of the process named by pid, or by tag when pid is 0. It returns once the
// process's pipe or terminal took all of it.
func (c *Client) ProcInput(ctx context.Context, pid int, tag string, data []byte) error {
	if len(data) > agentproto.MaxPayload {
		return errdefs.Invalid("input of %d bytes is more than one call takes (%d)", len(data), agentproto.MaxPayload)
	}
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpProcInput, PID: pid, Tag: tag})
	if err != nil {
		return err
	}
	defer k.conn.Close()
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	defer stop()
	// The deadline bounds the write too: an agent that reads nothing holds it.
	_ = k.conn.SetDeadline(time.Now().Add(callTimeout))
	if err := k.send(agentproto.FrameData, data); err != nil {
		return k.early(ctx, err)
	}
	t, b, err := agentproto.ReadFrame(k.conn)
	if err != nil {
		return ctxErr(ctx, err)
	}
	return finish(t, b, nil)
}

// ProcCloseStdin closes the stdin of a process (not one under a PTY: send it Ctrl-D).
func (c *Client) ProcCloseStdin(ctx context.Context, pid int, tag string) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpProcCloseStdin, PID: pid, Tag: tag}, nil)
}

// ProcSignal sends sig to the process group of a process: SIGTERM, SIGKILL, SIGINT,
// SIGHUP, SIGQUIT, SIGUSR1 or SIGUSR2.
func (c *Client) ProcSignal(ctx context.Context, pid int, tag string, sig syscall.Signal) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpProcSignal, PID: pid, Tag: tag, Signal: int(sig)}, nil)
}

// ProcResize resizes the terminal of a process started with a PTY.
func (c *Client) ProcResize(ctx context.Context, pid int, tag string, rows, cols uint16) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpProcResize, PID: pid, Tag: tag, Rows: rows, Cols: cols}, nil)
}

// Rename moves from to to inside the sandbox, replacing a file or an empty directory at
// to; parent directories are not created.
func (c *Client) Rename(ctx context.Context, from, to string) error {
	return c.simple(ctx, &agentproto.Request{Op: agentproto.OpFileRename, Path: from, Dest: to}, nil)
}

// LookupUser describes the sandbox user name; "" names the user the agent runs
// processes as by default.
func (c *Client) LookupUser(ctx context.Context, name string) (*agentproto.UserInfo, error) {
	var u agentproto.UserInfo
	if err := c.simple(ctx, &agentproto.Request{Op: agentproto.OpUserLookup, User: name}, &u); err != nil {
		return nil, err
	}
	if (name != "" && u.Name != name) || len(u.Name) > maxNameLen || len(u.Home) > maxPathLen {
		return nil, fmt.Errorf("%w: the sandbox's agent answered user %.64q for user %.64q", agentproto.ErrBadReply, u.Name, name)
	}
	return &u, nil
}

// Bounds of the names an agent reports.
const (
	maxNameLen = 256  // a user or group name
	maxPathLen = 4096 // a path or symlink target
)

// Watch is a stream of changes under a directory of the sandbox.
type Watch struct {
	ctx  context.Context
	k    *call
	stop func() bool
	err  error // sticky: what ended the stream
}

// Watch watches the directory path (and, recursive, every directory below it); it
// returns once the watch is in place. ctx bounds the start and then the stream, as
// Close does.
func (c *Client) Watch(ctx context.Context, path string, recursive bool) (*Watch, error) {
	k, err := c.open(ctx, &agentproto.Request{Op: agentproto.OpFileWatch, Path: path, Recursive: recursive})
	if err != nil {
		return nil, err
	}
	stop := context.AfterFunc(ctx, func() { k.conn.Close() })
	w := &Watch{ctx: ctx, k: k, stop: stop}
	_ = k.conn.SetReadDeadline(time.Now().Add(callTimeout))
	t, b, err := agentproto.ReadFrame(k.conn)
	if err == nil && t != agentproto.FrameData {
		err = firstFrame(t, b)
	} else if err == nil && string(b) != "{}" {
		err = fmt.Errorf("%w: a watch began with %.64q", agentproto.ErrBadReply, b)
	} else if err != nil {
		err = ctxErr(ctx, err)
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	_ = k.conn.SetReadDeadline(time.Time{})
	return w, nil
}

// Next returns the next change. It returns io.EOF once the watched directory was
// removed, ErrStreamClosed after Close and ctx's error once ctx ended. It is not for
// concurrent use, but Close may be called while it waits.
func (w *Watch) Next() (agentproto.WatchEvent, error) {
	if w.err != nil {
		return agentproto.WatchEvent{}, w.err
	}
	ev, err := w.next()
	if err != nil {
		w.err = err
		w.Close()
	}
	return ev, err
}

func (w *Watch) next() (agentproto.WatchEvent, error) {
	var ev agentproto.WatchEvent
	t, b, err := agentproto.ReadFrame(w.k.conn)
	if err != nil {
		return ev, streamErr(w.ctx, "watch", err)
	}
	switch t {
	case agentproto.FrameData:
	case agentproto.FrameResult:
		return ev, io.EOF
	case agentproto.FrameError:
		return ev, finish(t, b, nil)
	default:
		return ev, fmt.Errorf("%w: a frame of type %q in a watch", agentproto.ErrBadReply, byte(t))
	}
	if err := json.Unmarshal(b, &ev); err != nil {
		return ev, fmt.Errorf("agent: decode watch event: %w", err)
	}
	return ev, checkEvent(ev)
}

// checkEvent refuses an event no real agent sends: the name is a clean path below the
// watched directory, the operation one of the five.
func checkEvent(ev agentproto.WatchEvent) error {
	switch ev.Op {
	case agentproto.WatchCreate, agentproto.WatchWrite, agentproto.WatchRemove, agentproto.WatchRename, agentproto.WatchChmod:
	default:
		return fmt.Errorf("%w: a watch event with operation %.64q", agentproto.ErrBadReply, ev.Op)
	}
	n := ev.Name
	if n == "" || len(n) > maxPathLen || path.Clean(n) != n || path.IsAbs(n) || n == ".." || strings.HasPrefix(n, "../") || strings.IndexByte(n, 0) >= 0 {
		return fmt.Errorf("%w: a watch event for %.64q, which is no path below the watched directory", agentproto.ErrBadReply, n)
	}
	return nil
}

// Close ends the watch.
func (w *Watch) Close() error {
	w.stop()
	if err := w.k.conn.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// checkOwner refuses what no real agent says of a file's owner and link target.
func checkOwner(fi *agentproto.FileInfo) error {
	for _, s := range []string{fi.Owner, fi.Group} {
		if len(s) > maxNameLen || strings.ContainsAny(s, "\x00\n") {
			return fmt.Errorf("%w: the sandbox's agent named a file's owner %.64q", agentproto.ErrBadReply, s)
		}
	}
	if len(fi.Target) > maxPathLen || strings.IndexByte(fi.Target, 0) >= 0 {
		return fmt.Errorf("%w: the sandbox's agent gave a symlink target of %d bytes", agentproto.ErrBadReply, len(fi.Target))
	}
	return nil
}
