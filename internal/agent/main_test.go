package agent

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"go.uber.org/goleak"
)

// helperEnv makes the test binary run as the agent (see TestAgentProcess).
const helperEnv = "AIRLOCK_AGENT_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		if err := Main(context.Background(), os.Args[1:]); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreAnyFunction("os/signal.loop"))
}

// require skips the test with why unless cond holds; in CI (CI=true) it fails instead.
func require(t *testing.T, cond bool, why string) {
	t.Helper()
	if cond {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("required in CI: %s", why)
	}
	t.Skip(why)
}

// shortDir is a temporary directory with a path short enough for a unix socket.
func shortDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "ag")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startAgent serves opts in-process on a fresh socket until the test ends. An empty
// Root becomes a fresh temporary directory, returned as root.
func startAgent(t testing.TB, opts Options) (c *Client, root string) {
	t.Helper()
	sock, root := serveAgent(t, opts)
	return SocketClient(sock), root
}

// serveAgent serves opts in-process on a fresh socket until the test ends, and returns
// the socket's path and the root (see startAgent).
func serveAgent(t testing.TB, opts Options) (sock, root string) {
	t.Helper()
	if opts.Root == "" {
		opts.Root = t.TempDir()
	}
	if opts.Env == nil {
		opts.Env = os.Environ()
	}
	sock = filepath.Join(shortDir(t), "a.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, ln, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve returned %v, want nil", err)
		}
	})
	return sock, opts.Root
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// wantCode checks that err is a RemoteError with the given code.
func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	var re *agentproto.RemoteError
	if !errors.As(err, &re) {
		t.Errorf("%s: got error %v, want a RemoteError with code %q", what, err, code)
		return
	}
	if re.Code != code {
		t.Errorf("%s: got code %q (%s), want %q", what, re.Code, re.Message, code)
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a concurrent reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// children lists the pids whose parent is this process, with their states.
func children(t *testing.T) map[int]string {
	t.Helper()
	out := map[int]string{}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	me := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so parse after the last ')'.
		s := string(b)
		fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(fields) < 2 {
			continue
		}
		if ppid, _ := strconv.Atoi(fields[1]); ppid == me {
			out[pid] = fields[0]
		}
	}
	return out
}

// waitNoChildren waits until this process has no children at all (so no zombies either).
func waitNoChildren(t *testing.T) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(10 * time.Second)
	for {
		kids := children(t)
		if len(kids) == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("children still present after 10s (pid: state): %v", kids)
		}
	}
}

func TestRemoteErrorIs(t *testing.T) {
	tests := []struct {
		code string
		want error
	}{
		{"not_found", errdefs.ErrNotFound},
		{"invalid_argument", errdefs.ErrInvalidArgument},
		{"permission_denied", errdefs.ErrPermissionDenied},
		{agentproto.CodeChecksum, agentproto.ErrChecksum},
		{agentproto.CodeBusy, errdefs.ErrFailedPrecondition},
	}
	for _, tt := range tests {
		err := error(&agentproto.RemoteError{Code: tt.code, Message: "m"})
		if !errors.Is(err, tt.want) {
			t.Errorf("errors.Is(RemoteError{%q}, %v) = false, want true", tt.code, tt.want)
		}
	}
}

// SocketClient is a client of an agent listening on a unix socket path.
func SocketClient(path string) *Client {
	return &Client{Dial: func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
}
