package agent

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"golang.org/x/sys/unix"
)

// The process table keeps processes that outlive the calls that start them; it serves
// E2B-compatible process calls. A process is found by its pid or its tag. Its output
// goes, in order, to every call attached to it (proc.start is the first), and is dropped
// while none is: an attached call that does not read holds the output back as a full pipe
// would, one that hung up is dropped at once. Once the process has exited and its output
// was sent, each attached call gets its ExitResult and the process leaves the table.

// maxProcs bounds the live processes of the table (a variable for tests).
var maxProcs = 1024

// maxTag bounds the bytes of a tag.
const maxTag = 128

// procSignals are the signals proc.signal sends, in the order an error lists them.
var procSignals = []syscall.Signal{unix.SIGTERM, unix.SIGKILL, unix.SIGINT, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2}

// procTable indexes the live processes. Its zero value is empty.
type procTable struct {
	mu       sync.Mutex
	byPID    map[int]*procEntry
	byTag    map[string]*procEntry
	starting map[string]bool // tags held by starts under way
	held     int             // live processes and starts under way
}

// reserve holds a place (and tag) for a process about to start.
func (t *procTable) reserve(tag string) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPID == nil {
		t.byPID, t.byTag, t.starting = map[int]*procEntry{}, map[string]*procEntry{}, map[string]bool{}
	}
	if t.held >= maxProcs {
		return errdefs.Quota("the sandbox already runs %d processes started by calls, the most it keeps; end some first", maxProcs)
	}
	if tag != "" {
		if t.byTag[tag] != nil || t.starting[tag] {
			return errdefs.Exists("a running process already has the tag %q", tag)
		}
		t.starting[tag] = true
	}
	t.held++
	return nil
}

// unreserve gives back a place whose process did not start.
func (t *procTable) unreserve(tag string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.starting, tag)
	t.held--
}

// commit enters a started process in the place reserve held for it.
func (t *procTable) commit(e *procEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.byPID[e.info.PID] = e
	if e.info.Tag != "" {
		delete(t.starting, e.info.Tag)
		t.byTag[e.info.Tag] = e
	}
}

// remove takes an exited process out of the table, freeing its pid and tag.
func (t *procTable) remove(e *procEntry) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.byPID[e.info.PID] == e {
		delete(t.byPID, e.info.PID)
	}
	if e.info.Tag != "" && t.byTag[e.info.Tag] == e {
		delete(t.byTag, e.info.Tag)
	}
	t.held--
}

// find returns the live process pid names, or tag when pid is 0.
func (t *procTable) find(pid int, tag string) (*procEntry, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var e *procEntry
	switch {
	case pid != 0:
		if e = t.byPID[pid]; e == nil || e.ended() {
			return nil, errdefs.NotFound("no process %d in the sandbox's process table (it may have ended)", pid)
		}
	case tag != "":
		if e = t.byTag[tag]; e == nil || e.ended() {
			return nil, errdefs.NotFound("no process tagged %q in the sandbox (it may have ended)", tag)
		}
	default:
		return nil, errdefs.Invalid("name a process by its pid or its tag")
	}
	return e, nil
}

func (t *procTable) list() []agentproto.ProcInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]agentproto.ProcInfo, 0, len(t.byPID))
	for _, e := range t.byPID {
		if !e.ended() {
			out = append(out, e.info)
		}
	}
	slices.SortFunc(out, func(a, b agentproto.ProcInfo) int { return a.PID - b.PID })
	return out
}

// procLaunch checks spec and turns it into a launch and the process's description.
func (s *server) procLaunch(spec *agentproto.ProcSpec) (launch, agentproto.ProcInfo, error) {
	if spec == nil || len(spec.Argv) == 0 {
		return launch{}, agentproto.ProcInfo{}, errdefs.Invalid("a process needs argv: the program and its arguments")
	}
	if spec.TimeoutMS < 0 {
		return launch{}, agentproto.ProcInfo{}, errdefs.Invalid("a process's timeout must not be negative")
	}
	if len(spec.Tag) > maxTag || !utf8.ValidString(spec.Tag) {
		return launch{}, agentproto.ProcInfo{}, errdefs.Invalid("a process tag is UTF-8 text of at most %d bytes", maxTag)
	}
	for _, kv := range spec.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return launch{}, agentproto.ProcInfo{}, errdefs.Invalid("environment entry %q is not K=V", kv)
		}
	}
	l := launch{argv: spec.Argv, env: s.opts.Env, dir: spec.Cwd, tty: spec.PTY}
	if spec.User != "" {
		if err := s.runAs(spec.User, &l); err != nil {
			return launch{}, agentproto.ProcInfo{}, err
		}
	}
	l.env = mergeEnv(l.env, spec.Env)
	if spec.PTY && envValue(l.env, "TERM") == "" {
		l.env = append(l.env, "TERM=xterm-256color")
	}
	info := agentproto.ProcInfo{Tag: spec.Tag, Argv: spec.Argv, Env: spec.Env, Cwd: l.dir, PTY: spec.PTY}
	if info.Cwd == "" {
		info.Cwd = s.opts.Workdir
	}
	return l, info, nil
}

// startProc opens the process's files and spawns it; the entry it returns has no
// pumps running yet.
func (s *server) startProc(l launch, info agentproto.ProcInfo, spec *agentproto.ProcSpec) (*procEntry, error) {
	e := &procEntry{info: info, subs: map[*procSub]bool{}, piped: spec.Stdin && !spec.PTY,
		timeout: time.Duration(spec.TimeoutMS) * time.Millisecond}
	var child []*os.File // the child's ends, closed once it started
	fail := func(err error) (*procEntry, error) {
		for _, f := range append(append(child, e.outs...), e.stdin) {
			if f != nil {
				f.Close()
			}
		}
		return nil, err
	}
	if spec.PTY {
		master, tty, err := openPTY()
		if err != nil {
			return nil, err
		}
		e.master, e.outs, child = master, []*os.File{master}, []*os.File{tty}
		if err := setWinsize(master, spec.Rows, spec.Cols); err != nil {
			return fail(err)
		}
		l.files = []*os.File{tty, tty, tty}
	} else {
		var in *os.File
		var err error
		if e.piped {
			in, e.stdin, err = os.Pipe()
		} else {
			in, err = os.Open(os.DevNull)
		}
		if err != nil {
			return nil, err
		}
		child = append(child, in)
		for range 2 {
			r, w, err := os.Pipe()
			if err != nil {
				return fail(err)
			}
			e.outs, child = append(e.outs, r), append(child, w)
		}
		l.files = []*os.File{in, child[1], child[2]}
	}
	p, err := s.spawn(l)
	if err != nil {
		var se *startError
		if errors.As(err, &se) {
			if se.code == 127 {
				err = errdefs.NotFound("%s", se.msg)
			} else {
				err = errdefs.Invalid("%s", se.msg)
			}
		}
		return fail(err)
	}
	for _, f := range child {
		f.Close()
	}
	e.p, e.info.PID = p, p.pid
	return e, nil
}

// run pumps the process's output while it lives, then drains it, sends the result and
// forgets the process.
func (s *server) runProc(e *procEntry) {
	types := []agentproto.FrameType{agentproto.FrameStdout, agentproto.FrameStderr}
	for i, f := range e.outs {
		e.pumps.Add(1)
		go func() { defer e.pumps.Done(); e.pump(f, types[i]) }()
	}
	timedOut := false
	if e.timeout > 0 {
		timer := time.NewTimer(e.timeout)
		select {
		case <-e.p.done:
		case <-timer.C:
			timedOut = true
			e.p.kill(unix.SIGKILL)
			<-e.p.done
		}
		timer.Stop()
	}
	<-e.p.done
	s.table.remove(e)
	e.closeStdin()
	e.limit = time.Now().Add(drainMax)
	e.exited.Store(true)
	for _, f := range e.outs {
		_ = f.SetReadDeadline(time.Now().Add(drainIdle))
	}
	e.pumps.Wait()
	for _, f := range e.outs {
		f.Close()
	}
	e.finish(e.p.result(timedOut, false))
	s.untrack(e.p)
}

func (s *server) handleProcStart(c net.Conn, fw *frameWriter, spec *agentproto.ProcSpec) error {
	l, info, err := s.procLaunch(spec)
	if err != nil {
		return err
	}
	if err := s.table.reserve(spec.Tag); err != nil {
		return err
	}
	e, err := s.startProc(l, info, spec)
	if err != nil {
		s.table.unreserve(spec.Tag)
		return err
	}
	s.table.commit(e)
	s.wg.Add(1)
	e.follow(c, fw, func() {
		go func() { defer s.wg.Done(); s.runProc(e) }()
	})
	return nil
}

func (s *server) handleProcAttach(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	e, err := s.table.find(req.PID, req.Tag)
	if err != nil {
		return err
	}
	e.follow(c, fw, nil)
	return nil
}

// handleProcInput writes the bytes of the Data frame that follows the request to the
// process's stdin or terminal.
func (s *server) handleProcInput(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	_ = c.SetReadDeadline(time.Now().Add(requestTimeout))
	t, b, err := agentproto.ReadFrame(c)
	if err != nil {
		return err
	}
	_ = c.SetReadDeadline(time.Time{})
	if t != agentproto.FrameData {
		return errdefs.Invalid("proc.input takes its bytes in one Data frame after the request, not a frame of type %q", byte(t))
	}
	e, err := s.table.find(req.PID, req.Tag)
	if err != nil {
		return err
	}
	w, err := e.input()
	if err != nil {
		return err
	}
	ctl := watch(c, func(agentproto.FrameType, []byte) error { return nil })
	if err := e.write(w, b, ctl.cancel); err != nil {
		fw.error(err)
	} else {
		_ = fw.json(agentproto.FrameResult, struct{}{})
	}
	c.Close()
	<-ctl.done
	return nil
}

func (s *server) handleProcCloseStdin(fw *frameWriter, req *agentproto.Request) error {
	e, err := s.table.find(req.PID, req.Tag)
	if err != nil {
		return err
	}
	switch {
	case e.master != nil:
		return errdefs.Precondition("process %d reads a terminal, which has no stdin to close: send Ctrl-D (\\x04) as input to end its input", e.info.PID)
	case !e.piped:
		return errdefs.Precondition("process %d was started without stdin: stdin was not requested", e.info.PID)
	}
	e.closeStdin()
	return fw.json(agentproto.FrameResult, struct{}{})
}

func (s *server) handleProcSignal(fw *frameWriter, req *agentproto.Request) error {
	sig := syscall.Signal(req.Signal)
	if !slices.Contains(procSignals, sig) {
		names := make([]string, len(procSignals))
		for i, s := range procSignals {
			names[i] = unix.SignalName(s)
		}
		return errdefs.Invalid("signal %d is not one a process can be sent: allowed are %s", req.Signal, strings.Join(names, ", "))
	}
	e, err := s.table.find(req.PID, req.Tag)
	if err != nil {
		return err
	}
	e.p.kill(sig)
	return fw.json(agentproto.FrameResult, struct{}{})
}

func (s *server) handleProcResize(fw *frameWriter, req *agentproto.Request) error {
	if req.Rows == 0 || req.Cols == 0 {
		return errdefs.Invalid("a terminal needs at least one row and one column, not %dx%d", req.Rows, req.Cols)
	}
	e, err := s.table.find(req.PID, req.Tag)
	if err != nil {
		return err
	}
	if e.master == nil {
		return errdefs.Precondition("process %d has no terminal to resize: it was started without a PTY", e.info.PID)
	}
	if err := setWinsize(e.master, req.Rows, req.Cols); err != nil {
		return errdefs.NotFound("process %d has ended: %v", e.info.PID, err)
	}
	return fw.json(agentproto.FrameResult, struct{}{})
}

func (s *server) handleProcList(fw *frameWriter) error {
	return fw.frame(agentproto.FrameResult, procListJSON(s.table.list()))
}

// procListJSON encodes a listing within a frame: each entry whole while the space its
// pid, tag and PTY flag need is kept for those after it, past that those three alone.
// A tag is at most maxTag bytes, so the short form of maxProcs entries always fits.
func procListJSON(infos []agentproto.ProcInfo) []byte {
	short := make([][]byte, len(infos))
	budget := agentproto.MaxPayload - 2
	for i, info := range infos {
		short[i], _ = json.Marshal(agentproto.ProcInfo{PID: info.PID, Tag: info.Tag, PTY: info.PTY})
		budget -= len(short[i]) + 1
	}
	out := []byte{'['}
	for i, info := range infos {
		if i > 0 {
			out = append(out, ',')
		}
		full, err := json.Marshal(info)
		if err == nil && len(full)-len(short[i]) <= budget {
			budget -= len(full) - len(short[i])
			out = append(out, full...)
			continue
		}
		out = append(out, short[i]...)
	}
	return append(out, ']')
}
