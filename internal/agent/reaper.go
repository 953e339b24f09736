package agent

import (
	"os"
	"os/signal"
	"slices"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// reaper is the process's only caller of wait4. As PID 1 (or as a child subreaper, when
// the agent runs as an ordinary process) every orphan in the sandbox becomes our child,
// and a wait4(-1) loop would steal exit statuses from exec.Cmd.Wait; so nothing here uses
// Cmd.Wait. Instead processes are started under mu, registered with a callback before mu
// is released, and the reaper, also under mu, hands each status to its callback. Unknown
// pids are orphans and are simply reaped.
type reaper struct {
	mu      sync.Mutex
	waiters map[int]func(unix.WaitStatus)
	idle    []chan struct{} // closed when a sweep finds no children left
	refs    int
	stop    chan struct{}
	done    chan struct{}
}

// theReaper is process-wide because wait4(-1) and SIGCHLD are.
var theReaper = &reaper{waiters: make(map[int]func(unix.WaitStatus))}

// acquire starts the reaper goroutine on first use; release stops it after the last user.
func (r *reaper) acquire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.refs++
	if r.refs > 1 {
		return
	}
	if os.Getpid() != 1 {
		// Orphans of our children come to us instead of the host's init.
		_ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	r.stop = make(chan struct{})
	r.done = make(chan struct{})
	sig := make(chan os.Signal, 16)
	signal.Notify(sig, syscall.SIGCHLD)
	go r.loop(sig, r.stop, r.done)
}

func (r *reaper) release() {
	r.mu.Lock()
	r.refs--
	if r.refs > 0 {
		r.mu.Unlock()
		return
	}
	stop, done := r.stop, r.done
	r.mu.Unlock()
	close(stop)
	<-done
}

func (r *reaper) loop(sig chan os.Signal, stop, done chan struct{}) {
	defer close(done)
	defer signal.Stop(sig)
	r.sweep()
	for {
		select {
		case <-sig:
			r.sweep()
		case <-stop:
			return
		}
	}
}

// sweep reaps every child that has exited.
func (r *reaper) sweep() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if err == unix.EINTR {
			continue
		}
		if err == unix.ECHILD {
			for _, ch := range r.idle {
				close(ch)
			}
			r.idle = nil
		}
		if err != nil || pid <= 0 {
			return
		}
		if fn, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			fn(ws)
		}
	}
}

// start runs fork (which starts a process and returns its pid) with the reaper's lock held
// and registers onExit for that pid before the lock is released, so no exit is missed.
// onExit runs with the lock held and must not block.
func (r *reaper) start(fork func() (int, error), onExit func(unix.WaitStatus)) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := fork()
	if err != nil {
		return 0, err
	}
	r.waiters[pid] = onExit
	return pid, nil
}

// waitIdle waits, at most timeout, until the process has no children left: every
// process it started and every orphan that came to it has been reaped.
func (r *reaper) waitIdle(timeout time.Duration) bool {
	ch := make(chan struct{})
	r.mu.Lock()
	r.idle = append(r.idle, ch)
	r.mu.Unlock()
	r.sweep()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		r.mu.Lock()
		if i := slices.Index(r.idle, ch); i >= 0 {
			r.idle = slices.Delete(r.idle, i, i+1)
		}
		r.mu.Unlock()
		return false
	}
}
