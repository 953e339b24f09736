package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
)

// openWatch watches path until the test ends (at most 20 s).
func openWatch(t *testing.T, c *Client, path string, recursive bool) *Watch {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	w, err := c.Watch(ctx, path, recursive)
	if err != nil {
		t.Fatalf("Watch(%s): %v", path, err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

// expectEvents reads events until it has seen want in order, failing at the first
// other event (a repeat of the event just seen is let pass: the kernel may or may not
// merge repeats).
func expectEvents(t *testing.T, w *Watch, want ...agentproto.WatchEvent) {
	t.Helper()
	var last agentproto.WatchEvent
	for _, ev := range want {
		got, err := w.Next()
		for err == nil && got == last && got != ev {
			got, err = w.Next()
		}
		if err != nil {
			t.Fatalf("Next: %v; want %+v", err, ev)
		}
		if got != ev {
			t.Fatalf("got event %+v, want %+v", got, ev)
		}
		last = got
	}
}

func ev(op, name string) agentproto.WatchEvent { return agentproto.WatchEvent{Name: name, Op: op} }

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWatch(t *testing.T) {
	c, root := startAgent(t, Options{})
	dir := filepath.Join(root, "w")
	mustDo(t, os.Mkdir(dir, 0o755))
	w := openWatch(t, c, "/w", false)

	mustDo(t, os.WriteFile(filepath.Join(dir, "f"), []byte("x"), 0o644))
	expectEvents(t, w, ev("create", "f"), ev("write", "f"))
	mustDo(t, os.Chmod(filepath.Join(dir, "f"), 0o600))
	expectEvents(t, w, ev("chmod", "f"))
	mustDo(t, os.Rename(filepath.Join(dir, "f"), filepath.Join(dir, "g")))
	expectEvents(t, w, ev("rename", "f"), ev("create", "g"))
	mustDo(t, os.Remove(filepath.Join(dir, "g")))
	expectEvents(t, w, ev("remove", "g"))
	// Not recursive: what happens in a subdirectory is not reported.
	mustDo(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	expectEvents(t, w, ev("create", "sub"))
	mustDo(t, os.WriteFile(filepath.Join(dir, "sub", "x"), nil, 0o644))
	mustDo(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644))
	expectEvents(t, w, ev("create", "marker"))
	// Removing the watched directory ends the watch.
	mustDo(t, os.RemoveAll(dir))
	for {
		_, err := w.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Next after removing the directory: %v; want events, then io.EOF", err)
		}
	}
}

func TestWatchRecursive(t *testing.T) {
	c, root := startAgent(t, Options{})
	dir := filepath.Join(root, "r")
	mustDo(t, os.MkdirAll(filepath.Join(dir, "a", "b"), 0o755))
	w := openWatch(t, c, "/r", true)

	mustDo(t, os.WriteFile(filepath.Join(dir, "a", "b", "f"), nil, 0o644))
	expectEvents(t, w, ev("create", "a/b/f"))
	// A new directory is watched before its creation is reported.
	mustDo(t, os.Mkdir(filepath.Join(dir, "n"), 0o755))
	expectEvents(t, w, ev("create", "n"))
	mustDo(t, os.WriteFile(filepath.Join(dir, "n", "m"), []byte("y"), 0o644))
	expectEvents(t, w, ev("create", "n/m"), ev("write", "n/m"))
	// A directory moved is watched under its new name.
	mustDo(t, os.Rename(filepath.Join(dir, "a"), filepath.Join(dir, "z")))
	expectEvents(t, w, ev("rename", "a"), ev("create", "z"))
	mustDo(t, os.Remove(filepath.Join(dir, "z", "b", "f")))
	expectEvents(t, w, ev("remove", "z/b/f"))
	// A directory moved out of the tree is no longer watched.
	outside := filepath.Join(root, "away")
	mustDo(t, os.Rename(filepath.Join(dir, "n"), outside))
	expectEvents(t, w, ev("rename", "n"))
	mustDo(t, os.WriteFile(filepath.Join(outside, "late"), nil, 0o644))
	mustDo(t, os.WriteFile(filepath.Join(dir, "marker"), nil, 0o644))
	expectEvents(t, w, ev("create", "marker"))
}

func TestWatchBound(t *testing.T) {
	defer func(n int) { maxWatches = n }(maxWatches)
	maxWatches = 4
	c, root := startAgent(t, Options{})
	for i := range 4 {
		mustDo(t, os.MkdirAll(filepath.Join(root, "big", fmt.Sprint(i)), 0o755))
	}
	_, err := c.Watch(ctxT(t), "/big", true)
	if !errors.Is(err, errdefs.ErrQuotaExceeded) || !strings.Contains(fmtErr(err), "4 directories") {
		t.Errorf("Watch of 5 directories with a bound of 4: got %v, want quota exceeded naming the bound", err)
	}
	w := openWatch(t, c, "/big/0", true)
	// A new directory past the bound ends the watch with the same error.
	for i := range 4 {
		mustDo(t, os.Mkdir(filepath.Join(root, "big", "0", fmt.Sprint(i)), 0o755))
	}
	for {
		_, err := w.Next()
		if err == nil {
			continue
		}
		if !errors.Is(err, errdefs.ErrQuotaExceeded) {
			t.Errorf("watch growing past the bound: got %v, want quota exceeded", err)
		}
		break
	}
}

func TestWatchErrors(t *testing.T) {
	c, root := startAgent(t, Options{})
	mustDo(t, os.WriteFile(filepath.Join(root, "file"), nil, 0o644))
	for _, tt := range []struct {
		path  string
		class error
	}{
		{"/file", errdefs.ErrInvalidArgument},
		{"/missing", errdefs.ErrNotFound},
		{"relative", errdefs.ErrInvalidArgument},
	} {
		w, err := c.Watch(ctxT(t), tt.path, false)
		if err == nil {
			w.Close()
		}
		if !errors.Is(err, tt.class) {
			t.Errorf("Watch(%s): got %v, want %v", tt.path, err, tt.class)
		}
	}
}

// TestWatchClientRefusesBadEvents: events no real agent sends end the watch.
func TestWatchClientRefusesBadEvents(t *testing.T) {
	for _, bad := range []string{`{"name":"../x","op":"create"}`, `{"name":"/etc","op":"create"}`, `{"name":"a","op":"explode"}`, `{"name":"","op":"write"}`} {
		c := fakeAgent(t, func(conn net.Conn) {
			agentproto.WriteFrame(conn, agentproto.FrameData, []byte("{}"))
			agentproto.WriteFrame(conn, agentproto.FrameData, []byte(bad))
		})
		w, err := c.Watch(ctxT(t), "/", false)
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		if _, err := w.Next(); !errors.Is(err, agentproto.ErrBadReply) {
			t.Errorf("event %s: got %v, want ErrBadReply", bad, err)
		}
		w.Close()
	}
	c := fakeAgent(t, func(conn net.Conn) {
		agentproto.WriteFrame(conn, agentproto.FrameStdout, []byte("x"))
	})
	if w, err := c.Watch(ctxT(t), "/", false); !errors.Is(err, agentproto.ErrBadReply) {
		if w != nil {
			w.Close()
		}
		t.Errorf("watch begun by an output frame: got %v, want ErrBadReply", err)
	}
}
