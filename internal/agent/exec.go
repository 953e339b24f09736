package agent

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
)

// After a process exits, its output is still read while it keeps arriving at least every
// drainIdle, for at most drainMax: enough to empty the pipes, without letting a
// background process that inherited stdout hold the call open.
const (
	drainIdle = 100 * time.Millisecond
	drainMax  = 2 * time.Second
)

// pumps copy a process's output files to the client as frames, in the order read.
type pumps struct {
	wg     sync.WaitGroup
	files  []*os.File
	exited atomic.Bool
	limit  time.Time // written before exited is set
}

func startPumps(fw *frameWriter, files []*os.File, types []agentproto.FrameType) *pumps {
	ps := &pumps{files: files}
	for i, f := range files {
		ps.wg.Add(1)
		go func(f *os.File, t agentproto.FrameType) {
			defer ps.wg.Done()
			buf := make([]byte, copyBuf)
			for {
				if ps.exited.Load() {
					d := time.Now().Add(drainIdle)
					if d.After(ps.limit) {
						d = ps.limit
					}
					_ = f.SetReadDeadline(d)
				}
				n, err := f.Read(buf)
				if n > 0 {
					// A failed write means the client is gone; keep draining so the
					// process never blocks on a full pipe before it is cancelled.
					_ = fw.frame(t, buf[:n])
				}
				if err != nil {
					return
				}
			}
		}(f, types[i])
	}
	return ps
}

// finish drains what is left once the process has exited, then closes the files.
func (ps *pumps) finish() {
	ps.limit = time.Now().Add(drainMax)
	ps.exited.Store(true)
	for _, f := range ps.files {
		_ = f.SetReadDeadline(time.Now().Add(drainIdle))
	}
	ps.wg.Wait()
	for _, f := range ps.files {
		f.Close()
	}
}

// await waits for p to exit, killing its process group on timeout or cancellation.
func await(p *proc, ctl *control, timeoutMS int64, ps *pumps) *agentproto.ExitResult {
	var timeout <-chan time.Time
	if timeoutMS > 0 {
		t := time.NewTimer(time.Duration(timeoutMS) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	cancel := ctl.cancel
	var timedOut, cancelled bool
	for {
		select {
		case <-p.done:
			if timedOut || cancelled {
				p.kill(unix.SIGKILL) // whatever the group forked meanwhile
			}
			ps.finish()
			return p.result(timedOut, cancelled)
		case <-timeout:
			timedOut, timeout, cancel = true, nil, nil
			p.kill(unix.SIGKILL)
		case <-cancel:
			cancelled, timeout, cancel = true, nil, nil
			p.kill(unix.SIGKILL)
		}
	}
}

func execArgv(spec *agentproto.ExecSpec) ([]string, error) {
	if spec == nil {
		return nil, errdefs.Invalid("exec spec is required")
	}
	if len(spec.Argv) > 0 {
		return spec.Argv, nil
	}
	if spec.Shell == "" {
		return nil, errdefs.Invalid("exec needs argv or shell")
	}
	return []string{"/bin/sh", "-c", spec.Shell}, nil
}

// reply ends a streaming call: with its result, or with a checksum error if a client
// frame arrived damaged. It writes before the handler closes the connection.
func reply(fw *frameWriter, ctl *control, res any) error {
	if err := ctl.damage(); err != nil {
		fw.error(err)
		return nil
	}
	return fw.json(agentproto.FrameResult, res)
}

// reportStart answers a command that could not start with a failed result; any other
// error is returned.
func reportStart(fw *frameWriter, err error) error {
	var se *startError
	if !errors.As(err, &se) {
		return err
	}
	return fw.json(agentproto.FrameResult, &agentproto.ExitResult{State: agentproto.StateFailed, ExitCode: se.code, Error: se.msg})
}

// handleExec runs one exec. With keep (the request asked to keep the connection), once
// the process has ended it stops reading the connection, and reports the connection
// reusable if the client sent nothing after the request: the result is written only
// then, so that the client's next request is never read as part of this call.
func (s *server) handleExec(c net.Conn, fw *frameWriter, spec *agentproto.ExecSpec, keep bool) (bool, error) {
	argv, err := execArgv(spec)
	if err != nil {
		return keep, err
	}
	outR, outW, err := outputPipe()
	if err != nil {
		return false, err
	}
	errR, errW, err := outputPipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return false, err
	}
	var inR, inW *os.File
	if spec.Stdin {
		inR, inW, err = os.Pipe()
	} else {
		inR, err = s.devNull()
	}
	if err != nil {
		for _, f := range []*os.File{outR, outW, errR, errW} {
			f.Close()
		}
		return false, err
	}
	p, err := s.spawn(launch{
		argv: argv, env: mergeEnv(s.opts.Env, spec.Env), dir: spec.Cwd,
		uid: spec.UID, gid: spec.GID, files: []*os.File{inR, outW, errW},
	})
	if inW != nil {
		inR.Close() // the kept /dev/null stays open
	}
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		if inW != nil {
			inW.Close()
		}
		err = reportStart(fw, err)
		return keep && err == nil, err
	}
	defer s.untrack(p)

	ctl := watch(c, func(t agentproto.FrameType, b []byte) error {
		switch {
		case inW == nil:
		case t == agentproto.FrameStdin:
			_, _ = inW.Write(b) // the process may have closed its stdin; not an error
		case t == agentproto.FrameStdinClose:
			inW.Close()
		}
		return nil
	})
	ps := startPumps(fw, []*os.File{outR, errR}, []agentproto.FrameType{agentproto.FrameStdout, agentproto.FrameStderr})
	res := await(p, ctl, spec.TimeoutMS, ps)
	if inW != nil {
		inW.Close()
	}
	if keep && ctl.detach(c) {
		err := reply(fw, ctl, res)
		return err == nil, err
	}
	err = reply(fw, ctl, res)
	c.Close()
	<-ctl.done
	return false, err
}

// outputPipe makes a pipe for a process's output: the read end non-blocking, for the
// runtime's poller, and the write end, the child's, blocking and never polled (os.Pipe
// would register both with the poller, and Fd would then make the child's blocking
// again: six system calls an exec does not need).
func outputPipe() (r, w *os.File, err error) {
	var fds [2]int
	if err := unix.Pipe2(fds[:], unix.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if _, err := unix.FcntlInt(uintptr(fds[0]), unix.F_SETFL, unix.O_NONBLOCK); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(fds[0]), "|0"), os.NewFile(uintptr(fds[1]), "|1"), nil
}

// devNull is the agent's /dev/null, opened once for reading and kept: the stdin of
// every exec without one.
func (s *server) devNull() (*os.File, error) {
	s.nullOnce.Do(func() { s.null, s.nullErr = os.Open(os.DevNull) })
	return s.null, s.nullErr
}

// openPTY opens a pseudo-terminal pair. pty.Open leaves the master in blocking mode, so
// the master used here is a non-blocking duplicate the runtime poller manages: its reads
// honour deadlines and Close interrupts them.
func openPTY() (master, tty *os.File, err error) {
	m, tty, err := pty.Open()
	if err != nil {
		return nil, nil, err
	}
	fd, err := unix.FcntlInt(m.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	m.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		tty.Close()
		return nil, nil, err
	}
	return os.NewFile(uintptr(fd), "ptmx"), tty, nil
}

func setWinsize(f *os.File, rows, cols uint16) error {
	if rows == 0 {
		rows = 24
	}
	if cols == 0 {
		cols = 80
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ioErr error
	err = rc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	return errors.Join(err, ioErr)
}

func (s *server) handlePTY(c net.Conn, fw *frameWriter, spec *agentproto.ExecSpec) error {
	argv, err := execArgv(spec)
	if err != nil {
		return err
	}
	master, tty, err := openPTY()
	if err != nil {
		return err
	}
	if err := setWinsize(master, spec.Rows, spec.Cols); err != nil {
		master.Close()
		tty.Close()
		return err
	}
	env := mergeEnv(s.opts.Env, spec.Env)
	if envValue(env, "TERM") == "" {
		env = append(env, "TERM=xterm-256color")
	}
	p, err := s.spawn(launch{
		argv: argv, env: env, dir: spec.Cwd, uid: spec.UID, gid: spec.GID,
		files: []*os.File{tty, tty, tty}, tty: true,
	})
	tty.Close()
	if err != nil {
		master.Close()
		return reportStart(fw, err)
	}
	defer s.untrack(p)

	ctl := watch(c, func(t agentproto.FrameType, b []byte) error {
		switch t {
		case agentproto.FrameStdin:
			_, _ = master.Write(b)
		case agentproto.FrameStdinClose:
			_, _ = master.Write([]byte{4}) // ^D: end of input at the start of a line
		case agentproto.FrameResize:
			var rz agentproto.Resize
			if err := json.Unmarshal(b, &rz); err != nil {
				return errdefs.Invalid("resize: %v", err)
			}
			_ = setWinsize(master, rz.Rows, rz.Cols)
		}
		return nil
	})
	defer func() { c.Close(); <-ctl.done }()
	ps := startPumps(fw, []*os.File{master}, []agentproto.FrameType{agentproto.FrameStdout})
	res := await(p, ctl, spec.TimeoutMS, ps)
	return reply(fw, ctl, res)
}
