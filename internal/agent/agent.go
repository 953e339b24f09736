package agent

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"golang.org/x/sys/unix"
)

// Options configure Serve.
type Options struct {
	Root    string        // root of every file operation; "" means "/"
	Workdir string        // default working directory of processes; "" means "/"
	Env     []string      // base environment of every process (K=V)
	Grace   time.Duration // how long shutdown waits between SIGTERM and SIGKILL; 0 means 2s
	Logger  *slog.Logger  // nil discards
	// KeepOwner leaves files the agent writes its own user's instead of giving them the
	// owner a call names: an agent without the privilege to give files away (the fake
	// runtime's, in tests that run without root).
	KeepOwner bool
	// Lifetime is when the agent stops on its own clock (nil: never, until moved by a
	// lifetime.set call).
	Lifetime *Lifetime
	// SharedProcess says the agent shares its process with others (the fake runtime's
	// agents, in a test process that also runs PostgreSQL): its shutdown waits for its
	// own processes only, not for the process to have no children left, which another's
	// children would keep from ever happening (each shutdown then waited a second).
	SharedProcess bool
}

// errLifetimeOver is why the agent stops at the end of its lifetime.
var errLifetimeOver = errors.New("the sandbox's maximum lifetime is over")

// requestTimeout bounds how long a new connection may take to send its request.
const requestTimeout = 30 * time.Second

type server struct {
	opts   Options
	log    *slog.Logger
	rootFD int

	mu      sync.Mutex
	closing bool
	procs   map[*proc]struct{}
	conns   map[net.Conn]struct{}
	idle    map[net.Conn]struct{} // kept connections waiting for their next request

	nullOnce sync.Once // devNull
	null     *os.File
	nullErr  error
	sessions map[string]*session
	// endedLogs keeps the ended background sessions whose logs may still be read,
	// endedOrder in the order they ended (sessionlog.go).
	endedLogs  map[string]*session
	endedOrder []string
	table      procTable      // processes that outlive their calls (proc.go)
	wg         sync.WaitGroup // connection handlers, session watchers and table processes

	lastDone atomic.Int64 // when the last call ended, in unix nanoseconds
	parked   atomic.Int64 // open calls that only wait for a session to end: not work
	trim     *time.Timer  // armed by every call's end or wait: idleTrim later, trimIfIdle
}

// Main is the entry point of the hidden `airlock agent` subcommand. It serves until
// SIGTERM, SIGINT, ctx's end or the --deadline, then stops every process (SIGTERM, up
// to 2 s, SIGKILL) and returns nil; as PID 1 its return ends the container.
func Main(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // the returned error says what was wrong
	socket := fs.String("socket", "", "listen on this unix socket path")
	listenFd := fs.Int("listen-fd", -1, "listen on this inherited, bound unix socket instead of --socket")
	acceptFd := fs.Int("accept-fd", -1, "take connections handed over this inherited unix socket instead of --socket")
	root := fs.String("root", "/", "root directory of file operations")
	deadline := fs.Int64("deadline", 0, "stop at this Unix time in seconds (0: never)")
	readyFD := fs.Int("ready-fd", -1, "write \"ready\\n\" to this fd once listening, then close it")
	workdir := fs.String("workdir", "/", "default working directory of processes")
	procs := fs.Int("procs", 0, "run the agent's Go code on at most this many threads at once (0: the Go runtime's default)")
	var env envFlag
	fs.Var(&env, "env", "K=V added to the base environment (repeatable)")
	if err := fs.Parse(args); err != nil {
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
			msg = "flag provided but not defined: --" + name
		}
		return errdefs.Invalid("agent: %s; see 'airlock agent --help'", msg)
	}
	if *procs < 0 {
		return errdefs.Invalid("agent: --procs %d: give a count of threads, or 0 for the Go runtime's default", *procs)
	}
	if n := btoi(*socket != "") + btoi(*listenFd >= 0) + btoi(*acceptFd >= 0); n != 1 {
		return errdefs.Invalid("agent: exactly one of --socket, --listen-fd and --accept-fd is required")
	}
	if os.Getpid() == 1 {
		if err := protectSelf(); err != nil {
			return fmt.Errorf("agent: %w", err)
		}
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The agent's own clock: a timer, so the limit holds with the daemon down.
	var lifetime *Lifetime
	if *deadline > 0 {
		lifetime = NewLifetime(time.Unix(*deadline, 0))
	}

	var ln net.Listener
	var err error
	if *acceptFd >= 0 {
		ln, err = handoffListener(*acceptFd)
	} else {
		ln, err = listen(*socket, *listenFd)
	}
	if err != nil {
		return err
	}
	// Half the default GC target: the agent's live heap is small and bursts of calls
	// would otherwise grow it to several MiB per sandbox.
	debug.SetGCPercent(50)
	// The Go runtime runs at least two threads of Go code at once even in a sandbox
	// limited to one core, and with nothing else to run the second spins looking for
	// work each time a call wakes the agent: CPU taken from the sandbox's own processes
	// and, in a burst of calls to many sandboxes, from the host. The daemon passes the
	// sandbox's CPU limit rounded up; never more than the CPUs it may run on.
	if *procs > 0 {
		runtime.GOMAXPROCS(min(*procs, runtime.NumCPU()))
	}
	if *readyFD >= 0 {
		f := os.NewFile(uintptr(*readyFD), "ready")
		_, werr := f.WriteString("ready\n")
		cerr := f.Close()
		if err := errors.Join(werr, cerr); err != nil {
			ln.Close()
			return fmt.Errorf("agent: ready fd: %w", err)
		}
	}
	dropTextPages() // start-up is over; after the ready signal, so it does not delay it
	// The log is read on the host and sandbox code can make the agent write to it:
	// 16 KiB a second after a 256 KiB burst, and the host caps the file besides.
	logw := newRateLimitedWriter(os.Stderr, 16<<10, 256<<10)
	logger := slog.New(slog.NewTextHandler(logw, nil)).With("component", "agent")
	return Serve(ctx, ln, Options{
		Root:     *root,
		Workdir:  *workdir,
		Env:      mergeEnv(os.Environ(), env),
		Logger:   logger,
		Lifetime: lifetime,
	})
}

// listen opens the agent's listener: the inherited socket when fd >= 0, else a new
// socket at path.
func listen(path string, fd int) (net.Listener, error) {
	if fd >= 0 {
		ln, err := listenFD(fd)
		if err != nil {
			return nil, fmt.Errorf("agent: %w", err)
		}
		return ln, nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("agent: remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("agent: listen: %w", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("agent: chmod socket: %w", err)
	}
	return ln, nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

type envFlag []string

func (e *envFlag) String() string { return strings.Join(*e, ",") }

func (e *envFlag) Set(v string) error {
	if !strings.Contains(v, "=") {
		return fmt.Errorf("want K=V, got %q", v)
	}
	*e = append(*e, v)
	return nil
}

// Serve answers calls on ln until ctx ends (or Accept fails), then stops every process it
// started (SIGTERM, Options.Grace, SIGKILL; every process when PID 1), waits for its
// handlers and closes ln. It returns nil after a ctx-initiated stop.
func Serve(ctx context.Context, ln net.Listener, opts Options) error {
	if opts.Root == "" {
		opts.Root = "/"
	}
	if opts.Workdir == "" {
		opts.Workdir = "/"
	}
	if opts.Grace <= 0 {
		opts.Grace = 2 * time.Second
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	rootFD, err := unix.Open(opts.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		ln.Close()
		return fmt.Errorf("agent: open root %s: %w", opts.Root, err)
	}
	defer unix.Close(rootFD)
	theReaper.acquire()
	defer theReaper.release()
	if opts.Lifetime == nil {
		opts.Lifetime = NewLifetime(time.Time{})
	}
	ctx, endLifetime := context.WithCancelCause(ctx)
	defer endLifetime(nil)
	opts.Lifetime.start(func() { endLifetime(errLifetimeOver) })
	defer opts.Lifetime.stop()

	s := &server{
		opts:     opts,
		log:      opts.Logger,
		rootFD:   rootFD,
		procs:    make(map[*proc]struct{}),
		conns:    make(map[net.Conn]struct{}),
		idle:     make(map[net.Conn]struct{}),
		sessions: make(map[string]*session),
	}
	s.trim = time.AfterFunc(time.Hour, s.trimIfIdle) // armed by the end of the first call
	s.trim.Stop()
	defer s.trim.Stop()
	acceptErr := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			s.mu.Lock()
			if s.closing {
				s.mu.Unlock()
				c.Close()
				continue
			}
			s.conns[c] = struct{}{}
			s.wg.Add(1)
			s.mu.Unlock()
			go s.serveConn(c)
		}
	}()

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-acceptErr:
		serveErr = fmt.Errorf("agent: accept: %w", serveErr)
	}
	s.log.Info("shutting down", "reason", context.Cause(ctx))
	ln.Close()
	s.shutdown()
	if s.null != nil {
		s.null.Close()
	}
	return serveErr
}

// shutdown stops every process, gives handlers a moment to report, then closes every
// connection and waits for the handlers.
func (s *server) shutdown() {
	s.mu.Lock()
	s.closing = true
	for c := range s.idle {
		c.Close() // a kept connection between calls: nothing to wait for
	}
	procs := make([]*proc, 0, len(s.procs))
	pids := make([]int, 0, len(s.procs)) // 0 while starting: spawn then kills it itself
	for p := range s.procs {
		procs = append(procs, p)
		pids = append(pids, p.pid)
	}
	s.mu.Unlock()

	pid1 := os.Getpid() == 1
	signalAll := func(sig syscall.Signal) {
		if pid1 {
			_ = unix.Kill(-1, sig) // every process in the sandbox but us
			return
		}
		for i, p := range procs {
			select {
			case <-p.done:
			default:
				if pids[i] > 0 {
					_ = unix.Kill(-pids[i], sig)
				}
			}
		}
	}
	signalAll(unix.SIGTERM)
	allDone := make(chan struct{})
	go func() {
		for _, p := range procs {
			<-p.done
		}
		close(allDone)
	}()
	grace := time.NewTimer(s.opts.Grace)
	defer grace.Stop()
	select {
	case <-allDone:
	case <-grace.C:
		signalAll(unix.SIGKILL)
		<-allDone
	}
	if pid1 {
		_ = unix.Kill(-1, unix.SIGKILL)
	}
	// Members of the killed groups die a moment after their leaders; reap them too.
	if !s.opts.SharedProcess && !theReaper.waitIdle(time.Second) {
		s.log.Warn("children remain after shutdown")
	}

	handlers := make(chan struct{})
	go func() { s.wg.Wait(); close(handlers) }()
	t := time.NewTimer(time.Second)
	defer t.Stop()
	select {
	case <-handlers:
		return
	case <-t.C:
	}
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	<-handlers
}

// freeOSMemory is debug.FreeOSMemory; tests count the calls.
var freeOSMemory = debug.FreeOSMemory

// trimChecks counts the runs of trimIfIdle; tests check that an idle agent makes none.
var trimChecks atomic.Int32

// idleTrim is how long the agent waits after its last call before it gives the memory
// the calls grew its heap by back to the system.
const idleTrim = time.Second

// trimIfIdle returns freed heap to the system once no call has been open for idleTrim:
// a burst of execs grows the heap, and a sandbox sitting idle should not keep it. The
// end of every call arms it, so an agent nobody calls wakes for nothing (a ticker in
// each of thousands of idle sandboxes would keep the host's CPUs busy); a call still
// open re-arms it when it ends or starts to wait (a call that only waits for a
// session's end is no work).
func (s *server) trimIfIdle() {
	trimChecks.Add(1)
	s.mu.Lock()
	open, closing := len(s.conns)-int(s.parked.Load()), s.closing
	s.mu.Unlock()
	if open > 0 || closing {
		return
	}
	if quiet := time.Since(time.Unix(0, s.lastDone.Load())); quiet < idleTrim {
		s.trim.Reset(idleTrim - quiet) // a call ended since the timer was armed
		return
	}
	freeOSMemory()
	dropTextPages()
}

// keptIdle is how long a kept connection waits for its next request before the agent
// closes it. The daemon drops a connection it has not used for a while well before.
const keptIdle = 2 * time.Minute

// serveConn reads a request and runs it; after a call whose request asked to keep the
// connection and that ended cleanly, it reads the next request from it.
func (s *server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		closing := s.closing
		s.mu.Unlock()
		s.callEnded(closing)
	}()
	fw := &frameWriter{w: c}
	kept := false
	for {
		req, ok := s.readRequest(c, fw, kept)
		if !ok {
			return
		}
		keep, err := s.dispatchKept(c, fw, req)
		if err != nil {
			fw.error(err)
		}
		if !keep || !s.idleConn(c, true) {
			return
		}
		s.callEnded(false)
		kept = true
	}
}

// callEnded notes the end of a call for trimIfIdle.
func (s *server) callEnded(closing bool) {
	s.lastDone.Store(time.Now().UnixNano())
	if !closing {
		s.trim.Reset(idleTrim)
	}
}

// readRequest reads the request that opens a call, waiting at most requestTimeout for
// it, or keptIdle on a kept connection, which waits as no work (see idleConn) and
// leaves that state once a frame came.
func (s *server) readRequest(c net.Conn, fw *frameWriter, kept bool) (*agentproto.Request, bool) {
	wait := requestTimeout
	if kept {
		wait = keptIdle
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	t, payload, err := agentproto.ReadFrame(c)
	if kept && !s.idleConn(c, false) {
		return nil, false // shutting down
	}
	if err != nil {
		if errors.Is(err, agentproto.ErrChecksum) {
			s.log.Warn("damaged request frame", "err", err)
			fw.error(err)
		}
		return nil, false
	}
	_ = c.SetReadDeadline(time.Time{})
	if t != agentproto.FrameRequest {
		fw.error(errdefs.Invalid("first frame must be a request, got %q", byte(t)))
		return nil, false
	}
	req, err := agentproto.DecodeRequest(payload)
	if err != nil {
		fw.error(errdefs.Invalid("%v", err))
		return nil, false
	}
	return req, true
}

// idleConn marks c as waiting for its next request (idle) or no longer (!idle). An idle
// connection counts as no work for trimIfIdle, and shutdown closes it at once. It
// reports false when the agent is shutting down.
func (s *server) idleConn(c net.Conn, idle bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if idle {
		if s.closing {
			return false
		}
		s.idle[c] = struct{}{}
		s.parked.Add(1)
		return true
	}
	delete(s.idle, c)
	s.parked.Add(-1)
	return !s.closing
}

// dispatchKept runs req and reports whether the connection can carry the next call:
// only when the request asked for it and may (keepable: a ping, an exec without stdin),
// once the call ended cleanly.
func (s *server) dispatchKept(c net.Conn, fw *frameWriter, req *agentproto.Request) (bool, error) {
	if !req.Keep || !keepable(req) {
		return false, s.dispatch(c, fw, req)
	}
	if req.Op == agentproto.OpPing {
		err := fw.json(agentproto.FrameResult, struct{}{})
		return err == nil, err
	}
	return s.handleExec(c, fw, req.Exec, true)
}

// closeConnsBut closes every connection the agent holds but keep; their handlers end
// on their own.
func (s *server) closeConnsBut(keep net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c := range s.conns {
		if c != keep {
			c.Close()
		}
	}
}

func (s *server) dispatch(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	switch req.Op {
	case agentproto.OpPing:
		return fw.json(agentproto.FrameResult, struct{}{})
	case agentproto.OpQuiesce:
		s.closeConnsBut(c)
		return fw.json(agentproto.FrameResult, struct{}{}) // serveConn then closes c
	case agentproto.OpExec:
		_, err := s.handleExec(c, fw, req.Exec, false)
		return err
	case agentproto.OpPTY:
		return s.handlePTY(c, fw, req.Exec)
	case agentproto.OpSessionStart:
		return s.handleSessionStart(c, fw, req.Session)
	case agentproto.OpSessionSend:
		return s.handleSessionSend(c, fw, req)
	case agentproto.OpSessionClose:
		return s.handleSessionClose(fw, req.SessionID)
	case agentproto.OpSessionList:
		return fw.json(agentproto.FrameResult, s.listSessions())
	case agentproto.OpSessionLogs:
		return s.handleSessionLogs(c, fw, req)
	case agentproto.OpSetLifetime:
		var end time.Time
		if req.Deadline > 0 {
			end = time.Unix(req.Deadline, 0)
		}
		s.opts.Lifetime.Set(end)
		return fw.json(agentproto.FrameResult, struct{}{})
	case agentproto.OpFileUpload:
		return s.handleUpload(c, fw, req)
	case agentproto.OpFileDownload, agentproto.OpFileRead:
		return s.handleDownload(fw, req)
	case agentproto.OpFileList:
		return s.handleList(fw, req)
	case agentproto.OpFileStat:
		return s.handleStat(fw, req)
	case agentproto.OpFileMkdir:
		return s.handleMkdir(fw, req)
	case agentproto.OpFileRemove:
		return s.handleRemove(fw, req)
	case agentproto.OpPortDial:
		return s.handlePortDial(c, fw, req.Port)
	case agentproto.OpProcStart:
		return s.handleProcStart(c, fw, req.Proc)
	case agentproto.OpProcAttach:
		return s.handleProcAttach(c, fw, req)
	case agentproto.OpProcList:
		return s.handleProcList(fw)
	case agentproto.OpProcInput:
		return s.handleProcInput(c, fw, req)
	case agentproto.OpProcCloseStdin:
		return s.handleProcCloseStdin(fw, req)
	case agentproto.OpProcSignal:
		return s.handleProcSignal(fw, req)
	case agentproto.OpProcResize:
		return s.handleProcResize(fw, req)
	case agentproto.OpFileRename:
		return s.handleRename(fw, req)
	case agentproto.OpFileUntar:
		return s.handleUntar(c, fw, req)
	case agentproto.OpFileTar:
		return s.handleTar(fw, req)
	case agentproto.OpFileWatch:
		return s.handleFileWatch(c, fw, req)
	case agentproto.OpUserLookup:
		return s.handleUserLookup(fw, req.User)
	}
	return errdefs.Invalid("unknown op %q", req.Op)
}

// frameWriter serialises frames from several goroutines onto one connection.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (fw *frameWriter) frame(t agentproto.FrameType, p []byte) error {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return agentproto.WriteFrame(fw.w, t, p)
}

func (fw *frameWriter) json(t agentproto.FrameType, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return fw.frame(t, b)
}

// error sends err as an Error frame; the call ends with it.
func (fw *frameWriter) error(err error) {
	_ = fw.json(agentproto.FrameError, toRemote(err))
}

func toRemote(err error) *agentproto.RemoteError {
	var re *agentproto.RemoteError
	switch {
	case errors.As(err, &re):
		return re
	case errors.Is(err, agentproto.ErrChecksum):
		return &agentproto.RemoteError{Code: agentproto.CodeChecksum, Message: err.Error()}
	}
	code := errdefs.Code(err)
	return &agentproto.RemoteError{Code: code, Message: err.Error()}
}

func errUnavailable(msg string) error { return errdefs.Unavailable("%s", msg) }

// control watches a call's connection for client frames while the call runs. cancel
// closes on a Cancel frame, on EOF and on a read error; damaged records a checksum error.
type control struct {
	cancel  chan struct{}
	done    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	damaged error
	// idle says the watch ended on a read deadline having read nothing from the
	// connection at all (see detach); read only after done.
	idle bool
}

// countReader counts the bytes read through it.
type countReader struct {
	r net.Conn
	n int64
}

func (cr *countReader) Read(b []byte) (int, error) {
	n, err := cr.r.Read(b)
	cr.n += int64(n)
	return n, err
}

// detach stops the watch without closing c, once the call's process has ended: it
// reports whether the client sent nothing after its request, so that c can carry the
// next call. c reads without a deadline again afterwards.
func (ctl *control) detach(c net.Conn) bool {
	_ = c.SetReadDeadline(time.Unix(1, 0))
	<-ctl.done
	_ = c.SetReadDeadline(time.Time{})
	return ctl.idle
}

// watch reads frames from c until it fails, handing every frame other than Cancel to
// onFrame; an onFrame error cancels the call.
func watch(c net.Conn, onFrame func(agentproto.FrameType, []byte) error) *control {
	ctl := &control{cancel: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(ctl.done)
		cr := &countReader{r: c}
		for {
			t, p, err := agentproto.ReadFrame(cr)
			if err != nil {
				ctl.idle = cr.n == 0 && errors.Is(err, os.ErrDeadlineExceeded)
				if errors.Is(err, agentproto.ErrChecksum) {
					ctl.mu.Lock()
					ctl.damaged = err
					ctl.mu.Unlock()
				}
				ctl.stop()
				return
			}
			if t == agentproto.FrameCancel {
				ctl.stop()
				continue
			}
			if err := onFrame(t, p); err != nil {
				ctl.stop()
			}
		}
	}()
	return ctl
}

func (ctl *control) stop() { ctl.once.Do(func() { close(ctl.cancel) }) }

func (ctl *control) damage() error {
	ctl.mu.Lock()
	defer ctl.mu.Unlock()
	return ctl.damaged
}
