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
	"golang.org/x/sys/unix"
)

// procEntry is one process of the table.
type procEntry struct {
	p       *proc
	info    agentproto.ProcInfo
	master  *os.File      // the PTY's master; nil without a PTY
	outs    []*os.File    // what the pumps read: stdout and stderr, or the master
	piped   bool          // stdin was requested
	timeout time.Duration // 0: none; else the process is killed that long after it started

	inMu  sync.Mutex // one input write at a time, in the order they came
	stMu  sync.Mutex // guards stdin
	stdin *os.File   // the stdin pipe's write end; nil once closed or if never requested

	deliverMu sync.Mutex // one frame at a time to every call; guards scratch
	scratch   []*procSub
	subsMu    sync.Mutex // guards subs and res
	subs      map[*procSub]bool
	res       []byte // the JSON ExitResult, once the process has ended and its output was sent

	pumps  sync.WaitGroup
	exited atomic.Bool
	limit  time.Time // drain limit, written before exited is set
}

// procSub is one call attached to a process.
type procSub struct {
	fw   *frameWriter
	done chan struct{} // closed once the result was sent or a write failed
	once sync.Once
}

func (sub *procSub) end() { sub.once.Do(func() { close(sub.done) }) }

func (e *procEntry) ended() bool {
	select {
	case <-e.p.done:
		return true
	default:
		return false
	}
}

// follow serves one call attached to e: Started, then the output from now on, then the
// result. then (if not nil) runs once the call is subscribed, whether or not its
// client is still there. follow returns when the result was sent or the client is gone.
func (e *procEntry) follow(c net.Conn, fw *frameWriter, then func()) {
	ctl := watch(c, func(agentproto.FrameType, []byte) error { return nil })
	defer func() { c.Close(); <-ctl.done }()
	sub := &procSub{fw: fw, done: make(chan struct{})}
	// Between frames: once the client has Started, every later piece of output is its.
	e.deliverMu.Lock()
	ok := fw.json(agentproto.FrameStarted, agentproto.ProcStarted{PID: e.info.PID, PTY: e.info.PTY}) == nil
	e.subsMu.Lock()
	res := e.res
	if ok && res == nil {
		e.subs[sub] = true
	}
	e.subsMu.Unlock()
	e.deliverMu.Unlock()
	if then != nil {
		then()
	}
	if !ok {
		return
	}
	if res != nil {
		_ = fw.frame(agentproto.FrameResult, res)
		return
	}
	select {
	case <-sub.done:
	case <-ctl.cancel: // the client hung up (or cancelled): detach
		e.unsubscribe(sub)
	}
}

func (e *procEntry) unsubscribe(sub *procSub) {
	e.subsMu.Lock()
	delete(e.subs, sub)
	e.subsMu.Unlock()
}

// deliver sends one frame to every attached call; a call whose write fails is dropped.
func (e *procEntry) deliver(t agentproto.FrameType, b []byte) {
	e.deliverMu.Lock()
	defer e.deliverMu.Unlock()
	e.subsMu.Lock()
	subs := e.scratch[:0]
	for sub := range e.subs {
		subs = append(subs, sub)
	}
	e.subsMu.Unlock()
	for _, sub := range subs {
		if sub.fw.frame(t, b) != nil {
			e.unsubscribe(sub)
			sub.end()
		}
	}
	clear(subs)
	e.scratch = subs[:0]
}

// finish sends the result to every attached call and answers later ones with it.
func (e *procEntry) finish(res *agentproto.ExitResult) {
	b, _ := json.Marshal(res)
	e.deliverMu.Lock()
	defer e.deliverMu.Unlock()
	e.subsMu.Lock()
	e.res = b
	subs := e.subs
	e.subs = nil
	e.subsMu.Unlock()
	for sub := range subs {
		_ = sub.fw.frame(agentproto.FrameResult, b)
		sub.end()
	}
}

// pump reads one output file into frames of type t until it fails, or, once the
// process has exited, until the output stops coming or the drain limit passes.
func (e *procEntry) pump(f *os.File, t agentproto.FrameType) {
	buf := make([]byte, copyBuf)
	for {
		if e.exited.Load() {
			d := time.Now().Add(drainIdle)
			if d.After(e.limit) {
				d = e.limit
			}
			_ = f.SetReadDeadline(d)
		}
		n, err := f.Read(buf)
		if n > 0 {
			e.deliver(t, buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// closeStdin closes the stdin pipe, if open.
func (e *procEntry) closeStdin() {
	e.stMu.Lock()
	defer e.stMu.Unlock()
	if e.stdin != nil {
		e.stdin.Close()
		e.stdin = nil
	}
}

// input returns where the process's input goes: its terminal or its stdin pipe.
func (e *procEntry) input() (*os.File, error) {
	if e.master != nil {
		return e.master, nil
	}
	e.stMu.Lock()
	defer e.stMu.Unlock()
	switch {
	case !e.piped:
		return nil, errdefs.Precondition("process %d was started without stdin: stdin was not requested", e.info.PID)
	case e.stdin == nil:
		return nil, errdefs.Precondition("the stdin of process %d is closed", e.info.PID)
	}
	return e.stdin, nil
}

// write writes b to w (from input), giving up when cancel closes.
func (e *procEntry) write(w *os.File, b []byte, cancel <-chan struct{}) error {
	e.inMu.Lock()
	defer e.inMu.Unlock()
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-cancel:
			_ = w.SetWriteDeadline(time.Now())
		case <-stop:
		}
	}()
	_, err := w.Write(b)
	close(stop)
	<-stopped
	_ = w.SetWriteDeadline(time.Time{})
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errdefs.Unavailable("input to process %d stopped: the caller hung up", e.info.PID)
	case e.ended():
		return errdefs.NotFound("process %d has ended", e.info.PID)
	case errors.Is(err, os.ErrClosed):
		return errdefs.Precondition("the stdin of process %d is closed", e.info.PID)
	case errors.Is(err, unix.EPIPE):
		return errdefs.Precondition("process %d no longer reads its stdin", e.info.PID)
	}
	return err
}
