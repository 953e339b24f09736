package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"golang.org/x/sys/unix"
)

// proc is one process the agent started: the leader of its own process group.
type proc struct {
	pid   int
	start time.Time
	done  chan struct{} // closed once the reaper has its status
	ws    unix.WaitStatus
	end   time.Time
}

// kill signals the process's whole group.
func (p *proc) kill(sig syscall.Signal) {
	if p.pid > 0 { // never kill(0) or kill(-1) by accident
		_ = unix.Kill(-p.pid, sig)
	}
}

// launch describes a process to start.
type launch struct {
	argv  []string
	env   []string
	dir   string
	uid   *uint32
	gid   *uint32
	files []*os.File // become fds 0, 1, 2 in the child
	tty   bool       // new session with files[0] as the controlling terminal
}

// startError is a process that could not be started, with the exit code a shell would give.
type startError struct {
	code int
	msg  string
}

func (e *startError) Error() string { return e.msg }

// spawn starts l as a tracked process. The returned error is a *startError when the
// command itself is at fault (missing executable, bad working directory).
func (s *server) spawn(l launch) (*proc, error) {
	if len(l.argv) == 0 {
		return nil, &startError{code: 127, msg: "empty command"}
	}
	dir := l.dir
	if dir == "" {
		dir = s.opts.Workdir
	}
	if fi, err := os.Stat(dir); err != nil {
		return nil, &startError{code: 126, msg: fmt.Sprintf("working directory %s: %v", dir, errors.Unwrap(err))}
	} else if !fi.IsDir() {
		return nil, &startError{code: 126, msg: fmt.Sprintf("working directory %s: not a directory", dir)}
	}
	path, err := lookPath(l.argv[0], envValue(l.env, "PATH"), dir)
	if err != nil {
		return nil, err
	}
	sys := &syscall.SysProcAttr{Setpgid: !l.tty}
	if l.tty {
		sys.Setsid, sys.Setctty, sys.Ctty = true, true, 0
	}
	if l.uid != nil || l.gid != nil {
		cred := &syscall.Credential{Uid: uint32(os.Geteuid()), Gid: uint32(os.Getegid())}
		if l.uid != nil {
			cred.Uid, cred.Gid = *l.uid, *l.uid
		}
		if l.gid != nil {
			cred.Gid = *l.gid
		}
		sys.Credential = cred
	}
	fds := make([]uintptr, len(l.files))
	for i, f := range l.files {
		fds[i] = f.Fd()
	}
	attr := &syscall.ProcAttr{Dir: dir, Env: l.env, Files: fds, Sys: sys}
	p := &proc{done: make(chan struct{})}
	if err := s.track(p); err != nil {
		return nil, err
	}
	pid, err := theReaper.start(func() (int, error) {
		p.start = time.Now()
		return syscall.ForkExec(path, l.argv, attr)
	}, func(ws unix.WaitStatus) {
		p.ws, p.end = ws, time.Now()
		close(p.done)
	})
	if err != nil {
		s.untrack(p)
		close(p.done) // shutdown may be waiting for it
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		return nil, &startError{code: code, msg: fmt.Sprintf("start %s: %v", l.argv[0], err)}
	}
	markOOMFirst(pid)
	s.mu.Lock()
	p.pid = pid
	closing := s.closing
	s.mu.Unlock()
	if closing {
		p.kill(unix.SIGKILL)
	}
	return p, nil
}

// track records p so shutdown can signal it; it refuses new processes during shutdown.
func (s *server) track(p *proc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return errUnavailable("the agent is shutting down")
	}
	s.procs[p] = struct{}{}
	return nil
}

func (s *server) untrack(p *proc) {
	s.mu.Lock()
	delete(s.procs, p)
	s.mu.Unlock()
}

// result turns a wait status into an ExitResult. timedOut and cancelled name why the
// agent killed the process, if it did.
func (p *proc) result(timedOut, cancelled bool) *agentproto.ExitResult {
	r := &agentproto.ExitResult{DurationMS: p.end.Sub(p.start).Milliseconds()}
	switch {
	case timedOut:
		r.State, r.ExitCode = agentproto.StateTimeout, -1
	case cancelled:
		r.State, r.ExitCode = agentproto.StateCancelled, -1
	case p.ws.Signaled():
		r.State, r.ExitCode = agentproto.StateKilled, 128+int(p.ws.Signal())
		r.Signal = unix.SignalName(p.ws.Signal())
	case p.ws.ExitStatus() == 0:
		r.State = agentproto.StateSucceeded
	default:
		r.State, r.ExitCode = agentproto.StateFailed, p.ws.ExitStatus()
	}
	if p.ws.Signaled() && (timedOut || cancelled) {
		r.Signal = unix.SignalName(p.ws.Signal())
	}
	return r
}

// lookPath finds file in the PATH of the child's environment, as execvp would.
func lookPath(file, pathEnv, dir string) (string, error) {
	check := func(p string) error {
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if fi.IsDir() {
			return fmt.Errorf("%w (a directory)", unix.EACCES)
		}
		if fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%w (not executable: mode %v)", unix.EACCES, fi.Mode().Perm())
		}
		return nil
	}
	if strings.Contains(file, "/") {
		if err := check(file); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return "", &startError{code: 127, msg: fmt.Sprintf("executable not found: %s", file)}
			}
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is said once, below
			}
			return "", &startError{code: 126, msg: fmt.Sprintf("cannot execute %s: %v", file, err)}
		}
		return file, nil
	}
	if pathEnv == "" {
		pathEnv = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		p := filepath.Join(d, file)
		if check(p) == nil {
			return p, nil
		}
	}
	return "", &startError{code: 127, msg: fmt.Sprintf("executable not found in PATH: %s", file)}
}

// mergeEnv returns base with each K=V of extra replacing or adding K.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	index := make(map[string]int, len(base)+len(extra))
	for _, kvs := range [][]string{base, extra} {
		for _, kv := range kvs {
			k, _, _ := strings.Cut(kv, "=")
			if i, ok := index[k]; ok {
				out[i] = kv
				continue
			}
			index[k] = len(out)
			out = append(out, kv)
		}
	}
	return out
}

func envValue(env []string, key string) string {
	for i := len(env) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(env[i], "="); ok && k == key {
			return v
		}
	}
	return ""
}
