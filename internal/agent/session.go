package agent

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	_ "embed"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"golang.org/x/sys/unix"
)

//go:embed pydriver.py
var pyDriver string

// rawQuiet ends a raw session's reply once its output has been quiet this long.
const rawQuiet = 200 * time.Millisecond

// chunk is a piece of a session's output; eof marks the end of one stream.
type chunk struct {
	t   agentproto.FrameType
	b   []byte
	eof bool
}

// session is a long-lived process with piped stdin, stdout and stderr. Two readers feed
// its output into out; a send consumes it. Between sends output waits in out (and then
// in the pipes), so nothing is lost and the next reply begins with it.
type session struct {
	info     agentproto.SessionInfo
	p        *proc
	stdin    *os.File
	out      chan chunk
	stop     chan struct{} // closed at teardown: readers stop waiting for a consumer
	exited   atomic.Bool
	limit    time.Time     // drain limit, written before exited is set
	sem      chan struct{} // holds one token while a send runs
	draining atomic.Bool   // the running send was cancelled and is consuming its reply
	readers  sync.WaitGroup
	log      *sessionLog // a background session's output; nil for the others
	closed   atomic.Bool // session.close ended it
}

func sessionArgv(spec *agentproto.SessionSpec) ([]string, error) {
	switch spec.Kind {
	case agentproto.SessionPython:
		interp := spec.Argv
		if len(interp) == 0 {
			interp = []string{"python3"}
		}
		return append(slices.Clone(interp), "-u", "-c", pyDriver), nil
	case agentproto.SessionShell:
		if len(spec.Argv) > 0 {
			return spec.Argv, nil
		}
		return []string{"/bin/sh"}, nil
	case agentproto.SessionRaw:
		if len(spec.Argv) == 0 {
			return nil, errdefs.Invalid("a raw session needs argv")
		}
		return spec.Argv, nil
	}
	return nil, errdefs.Invalid("unknown session kind %q (want python, shell or raw)", spec.Kind)
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (s *server) handleSessionStart(c net.Conn, fw *frameWriter, spec *agentproto.SessionSpec) error {
	if spec == nil {
		return errdefs.Invalid("session spec is required")
	}
	argv, err := sessionArgv(spec)
	if err != nil {
		return err
	}
	var files [6]*os.File // inR, inW, outR, outW, errR, errW
	for i := 0; i < 6; i += 2 {
		if files[i], files[i+1], err = os.Pipe(); err != nil {
			for _, f := range files[:i] {
				f.Close()
			}
			return err
		}
	}
	p, err := s.spawn(launch{
		argv: argv, env: mergeEnv(s.opts.Env, spec.Env), dir: spec.Cwd,
		uid: spec.UID, gid: spec.GID, files: []*os.File{files[0], files[3], files[5]},
	})
	files[0].Close()
	files[3].Close()
	files[5].Close()
	if err != nil {
		files[1].Close()
		files[2].Close()
		files[4].Close()
		var se *startError
		if errors.As(err, &se) {
			if se.code == 127 {
				return errdefs.NotFound("%s", se.msg)
			}
			return errdefs.Invalid("%s", se.msg)
		}
		return err
	}
	ss := &session{
		info:  agentproto.SessionInfo{ID: "ses_" + randomHex(8), Kind: spec.Kind, PID: p.pid, StartedMS: time.Now().UnixMilli()},
		p:     p,
		stdin: files[1],
		out:   make(chan chunk, 16),
		sem:   make(chan struct{}, 1),
		stop:  make(chan struct{}),
	}
	if spec.Log {
		ss.log, ss.info.Log = newSessionLog(), true
	}
	s.mu.Lock()
	s.sessions[ss.info.ID] = ss
	s.wg.Add(3)
	s.mu.Unlock()
	ss.readers.Add(2)
	go func() { defer s.wg.Done(); ss.read(files[2], agentproto.FrameStdout) }()
	go func() { defer s.wg.Done(); ss.read(files[4], agentproto.FrameStderr) }()
	go func() { defer s.wg.Done(); s.watchSession(ss, files[2], files[4]) }()
	if !spec.Watch {
		return fw.json(agentproto.FrameResult, ss.info)
	}
	if err := fw.json(agentproto.FrameData, ss.info); err != nil {
		return err
	}
	return s.waitSession(c, fw, ss)
}

// waitSession answers how ss ended, once it has, unless the caller goes first.
func (s *server) waitSession(c net.Conn, fw *frameWriter, ss *session) error {
	ctl := watch(c, func(agentproto.FrameType, []byte) error { return nil })
	defer func() { c.Close(); <-ctl.done }()
	s.parked.Add(1) // a wait is no work: the agent trims its memory as when idle
	s.trim.Reset(idleTrim)
	gone := false
	select {
	case <-ss.p.done:
	case <-ctl.cancel:
		gone = true
	}
	s.parked.Add(-1)
	if gone {
		return nil
	}
	end := agentproto.SessionEnd{State: agentproto.StateExited, ExitCode: ss.exitResult().ExitCode}
	if ss.closed.Load() {
		end.State = agentproto.StateClosed
	}
	return reply(fw, ctl, end)
}

func (ss *session) read(f *os.File, t agentproto.FrameType) {
	defer ss.readers.Done()
	buf := make([]byte, copyBuf)
	for {
		if ss.exited.Load() {
			d := time.Now().Add(drainIdle)
			if d.After(ss.limit) {
				d = ss.limit
			}
			_ = f.SetReadDeadline(d)
		}
		n, err := f.Read(buf)
		if ss.log != nil {
			if n > 0 {
				ss.log.add(t, bytes.Clone(buf[:n]))
			}
			if err != nil {
				return
			}
			continue
		}
		c := chunk{t: t, b: bytes.Clone(buf[:n]), eof: err != nil}
		if n > 0 || c.eof {
			select {
			case ss.out <- c:
			case <-ss.stop:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// watchSession tears a session down once its process has exited: it lets a running
// send drain the output, then stops the readers and forgets the session.
func (s *server) watchSession(ss *session, outR, errR *os.File) {
	<-ss.p.done
	ss.limit = time.Now().Add(drainMax)
	ss.exited.Store(true)
	outR.SetReadDeadline(time.Now().Add(drainIdle))
	errR.SetReadDeadline(time.Now().Add(drainIdle))
	readersDone := make(chan struct{})
	go func() { ss.readers.Wait(); close(readersDone) }()
	t := time.NewTimer(drainMax)
	select {
	case <-readersDone:
	case <-t.C:
	}
	t.Stop()
	close(ss.stop)
	<-readersDone
	ss.stdin.Close()
	outR.Close()
	errR.Close()
	s.untrack(ss.p)
	s.mu.Lock()
	delete(s.sessions, ss.info.ID)
	if ss.log != nil {
		ss.log.close()
		s.keepEndedLog(ss)
	}
	s.mu.Unlock()
}

func (s *server) session(id string) (*session, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok || ss.ended() {
		return nil, errdefs.NotFound("session %q not found (it may have exited)", id)
	}
	return ss, nil
}

// ended reports whether the session's process has exited.
func (ss *session) ended() bool {
	select {
	case <-ss.p.done:
		return true
	default:
		return false
	}
}

func (s *server) listSessions() []agentproto.SessionInfo {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]agentproto.SessionInfo, 0, len(s.sessions))
	for _, ss := range s.sessions {
		// An ended background session stays listed while its output drains, before
		// watchSession moves it to endedLogs: its log is readable all along.
		if !ss.ended() || ss.log != nil {
			out = append(out, ss.infoNow())
		}
	}
	for _, ss := range s.endedLogs {
		out = append(out, ss.infoNow())
	}
	slices.SortFunc(out, func(a, b agentproto.SessionInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

func (s *server) handleSessionClose(fw *frameWriter, id string) error {
	ss, err := s.session(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	delete(s.sessions, id)
	s.mu.Unlock()
	ss.closed.Store(true)
	ss.p.kill(unix.SIGKILL)
	<-ss.p.done
	return fw.json(agentproto.FrameResult, struct{}{})
}

// drainWait is how long a send waits for a cancelled send to finish consuming its reply.
const drainWait = 5 * time.Second

// acquire reserves the session for one send. Another running send makes it busy, except
// a cancelled one that is only consuming the rest of its reply: that one is waited for.
func (ss *session) acquire() error {
	select {
	case ss.sem <- struct{}{}:
		return nil
	default:
	}
	busy := &agentproto.RemoteError{Code: agentproto.CodeBusy, Message: fmt.Sprintf("session %s is serving another send", ss.info.ID)}
	if !ss.draining.Load() {
		return busy
	}
	t := time.NewTimer(drainWait)
	defer t.Stop()
	select {
	case ss.sem <- struct{}{}:
		return nil
	case <-t.C:
		return busy
	}
}

func (ss *session) release() {
	ss.draining.Store(false)
	<-ss.sem
}

func (s *server) handleSessionSend(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	ss, err := s.session(req.SessionID)
	if err != nil {
		return err
	}
	if ss.log != nil {
		return errdefs.Invalid("session %q runs in the background: its output is in its log (airlock logs), and it takes no input", req.SessionID)
	}
	if err := ss.acquire(); err != nil {
		return err
	}
	released := false
	defer func() {
		if !released {
			ss.release()
		}
	}()

	marker := "__airlock_end_" + randomHex(16) + "__"
	var msg string
	switch ss.info.Kind {
	case agentproto.SessionPython:
		b, err := json.Marshal(map[string]string{"code": req.Input, "marker": marker})
		if err != nil {
			return err
		}
		msg = string(b) + "\n"
	case agentproto.SessionShell:
		msg = req.Input
		if !strings.HasSuffix(msg, "\n") {
			msg += "\n"
		}
		msg += fmt.Sprintf("__airlock_rc=$?; printf '%%s %%d\\n' '%s' \"$__airlock_rc\"; printf '%%s\\n' '%s' >&2\n", marker, marker)
	default:
		msg = req.Input + "\n"
	}
	ctl := watch(c, func(agentproto.FrameType, []byte) error { return nil })
	defer func() { c.Close(); <-ctl.done }()
	// Write while collecting, or a big input and a chatty process block each other.
	// A write error means the process is gone; collect reports that.
	wrote := make(chan struct{})
	go func() {
		defer close(wrote)
		_, _ = ss.stdin.WriteString(msg)
	}()
	res := ss.collect(fw, marker, ctl)
	select {
	case <-wrote:
	default: // a raw session's reply ended before it read all its input
		_ = ss.stdin.SetWriteDeadline(time.Now())
		<-wrote
		_ = ss.stdin.SetWriteDeadline(time.Time{})
	}
	// Free the session before answering: a client may send again as soon as it has the result.
	released = true
	ss.release()
	return reply(fw, ctl, res)
}

// collect forwards the reply to one send until it ends: both end markers seen (python,
// shell), quiet output (raw) or the process gone. After a cancel it keeps consuming
// without forwarding, so the next send starts clean, and the result is "cancelled"; a
// python session is interrupted (SIGINT), a shell or raw one runs its input to the end.
func (ss *session) collect(fw *frameWriter, marker string, ctl *control) *agentproto.SendResult {
	if ss.info.Kind == agentproto.SessionRaw {
		return ss.collectRaw(fw, ctl)
	}
	scan := map[agentproto.FrameType]*markerScanner{
		agentproto.FrameStdout: {marker: []byte(marker)},
		agentproto.FrameStderr: {marker: []byte(marker)},
	}
	cancel := ctl.cancel
	forward := true
	eofs := 0
	status := ""
	for {
		if scan[agentproto.FrameStdout].found && scan[agentproto.FrameStderr].found {
			if !forward {
				return &agentproto.SendResult{State: agentproto.StateCancelled, ExitCode: -1}
			}
			return markerResult(ss.info.Kind, status)
		}
		if eofs == 2 {
			return ss.exitResult()
		}
		select {
		case c := <-ss.out:
			if c.eof {
				eofs++
				continue
			}
			emit, found, st := scan[c.t].feed(c.b)
			if found && c.t == agentproto.FrameStdout {
				status = st
			}
			if forward && len(emit) > 0 {
				_ = fw.frame(c.t, emit)
			}
		case <-ss.stop:
			return ss.exitResult()
		case <-cancel:
			cancel, forward = nil, false
			ss.draining.Store(true)
			if ss.info.Kind == agentproto.SessionPython {
				_ = unix.Kill(ss.p.pid, unix.SIGINT)
			}
		}
	}
}

func (ss *session) collectRaw(fw *frameWriter, ctl *control) *agentproto.SendResult {
	quiet := time.NewTimer(rawQuiet)
	defer quiet.Stop()
	cancel := ctl.cancel
	forward := true
	eofs := 0
	for eofs < 2 {
		select {
		case c := <-ss.out:
			if c.eof {
				eofs++
				continue
			}
			if forward {
				_ = fw.frame(c.t, c.b)
			}
			quiet.Reset(rawQuiet)
		case <-quiet.C:
			if !forward {
				return &agentproto.SendResult{State: agentproto.StateCancelled, ExitCode: -1}
			}
			return &agentproto.SendResult{State: agentproto.StateSucceeded}
		case <-ss.stop:
			return ss.exitResult()
		case <-cancel:
			cancel, forward = nil, false
			ss.draining.Store(true)
		}
	}
	return ss.exitResult()
}

func markerResult(kind, status string) *agentproto.SendResult {
	if kind == agentproto.SessionPython {
		if status == "ok" {
			return &agentproto.SendResult{State: agentproto.StateSucceeded}
		}
		return &agentproto.SendResult{State: agentproto.StateFailed, ExitCode: 1}
	}
	code, err := strconv.Atoi(status)
	if err != nil {
		return &agentproto.SendResult{State: agentproto.StateFailed, ExitCode: -1, Error: "unreadable exit status " + strconv.Quote(status)}
	}
	if code == 0 {
		return &agentproto.SendResult{State: agentproto.StateSucceeded}
	}
	return &agentproto.SendResult{State: agentproto.StateFailed, ExitCode: code}
}

func (ss *session) exitResult() *agentproto.SendResult {
	<-ss.p.done
	ws := ss.p.ws
	r := &agentproto.SendResult{State: agentproto.StateExited, ExitCode: ws.ExitStatus(), Error: "the session process exited"}
	if ws.Signaled() {
		r.ExitCode = 128 + int(ws.Signal())
		r.Error = "the session process was killed by " + unix.SignalName(ws.Signal())
	}
	return r
}
