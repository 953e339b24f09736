package agent

import (
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// listenFD turns an inherited, bound unix socket into the agent's listener. The socket
// was made and bound by the daemon outside the sandbox, so its path is one sandbox code
// cannot reach, replace or redirect; the agent only calls listen(2) on it, which makes
// the agent the peer the daemon's SO_PEERCRED check expects.
func listenFD(fd int) (net.Listener, error) {
	if err := unix.Listen(fd, 128); err != nil {
		return nil, fmt.Errorf("listen on fd %d: %w", fd, err)
	}
	f := os.NewFile(uintptr(fd), "agent.sock")
	ln, err := net.FileListener(f) // dups with close-on-exec
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("listener from fd %d: %w", fd, err)
	}
	return ln, nil
}

// handoff is a listener whose connections arrive as descriptors over a unix socket, one
// per one-byte message: the agent's channel where the sandbox's kernel cannot listen
// on a host socket (the runtime's broker accepts for it). Accept fails once the sender
// is gone.
type handoff struct{ c *net.UnixConn }

func handoffListener(fd int) (net.Listener, error) {
	f := os.NewFile(uintptr(fd), "handoff")
	c, err := net.FileConn(f) // dups with close-on-exec
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("agent: hand-off socket fd %d: %w", fd, err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("agent: fd %d is not a unix socket", fd)
	}
	return handoff{uc}, nil
}

func (h handoff) Accept() (net.Conn, error) {
	var b [1]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	for {
		n, oobn, _, _, err := h.c.ReadMsgUnix(b[:], oob)
		if err != nil {
			return nil, err
		}
		if n == 0 && oobn == 0 {
			return nil, io.EOF
		}
		var fds []int
		msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
		for _, m := range msgs {
			got, _ := unix.ParseUnixRights(&m)
			fds = append(fds, got...)
		}
		if len(fds) == 0 {
			continue
		}
		for _, extra := range fds[1:] {
			unix.Close(extra)
		}
		f := os.NewFile(uintptr(fds[0]), "conn")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			continue // not a socket: nothing to serve
		}
		return c, nil
	}
}

func (h handoff) Close() error   { return h.c.Close() }
func (h handoff) Addr() net.Addr { return h.c.LocalAddr() }

// protectSelf makes the agent's process undumpable: sandbox code, root in its own
// namespace but without CAP_SYS_PTRACE, can then neither ptrace the agent nor read its
// descriptors, memory or environment through /proc/1.
func protectSelf() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}

// markOOMFirst gives a process the agent started the highest OOM score, so that when
// sandbox code exhausts the sandbox's memory the kernel ends that code and never the
// agent (which the host may also have given the lowest score; its children would
// inherit that). Raising a score needs no privilege. Plain system calls: an os.File
// would also try the runtime's poller, one more call on every exec.
func markOOMFirst(pid int) {
	fd, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return // gone already, or no /proc: nothing to protect against
	}
	unix.Write(fd, []byte("1000"))
	unix.Close(fd)
}

// rateLimitedWriter passes at most burst bytes at once and rate bytes a second after
// that to w, whole writes only; what it drops it counts and reports on the next write
// that passes. The agent's log is read on the host, and sandbox code can make the agent
// log (damaged frames, floods of calls): this bounds what it can make the agent write.
type rateLimitedWriter struct {
	w     io.Writer
	rate  float64 // bytes a second
	burst float64

	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int64 // writes dropped since the last one that passed
	now     func() time.Time
}

func newRateLimitedWriter(w io.Writer, rate, burst int) *rateLimitedWriter {
	return &rateLimitedWriter{w: w, rate: float64(rate), burst: float64(burst), tokens: float64(burst), now: time.Now}
}

// maxLogLine caps one write (one log record).
const maxLogLine = 1024

func (l *rateLimitedWriter) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > maxLogLine {
		p = append(p[:maxLogLine-len("…\n"):maxLogLine-len("…\n")], "…\n"...)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if !l.last.IsZero() {
		l.tokens = min(l.burst, l.tokens+now.Sub(l.last).Seconds()*l.rate)
	}
	l.last = now
	if l.tokens < float64(len(p)) {
		l.dropped++
		return n, nil
	}
	l.tokens -= float64(len(p))
	if l.dropped > 0 {
		fmt.Fprintf(l.w, "agent: %d log records dropped (rate limit)\n", l.dropped)
		l.dropped = 0
	}
	_, err := l.w.Write(p)
	return n, err
}
