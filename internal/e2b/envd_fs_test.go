package e2b

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"google.golang.org/protobuf/proto"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/filesystempb"
	"github.com/airlockhq/airlock/internal/e2b/envdpb/filesystempb/filesystempbconnect"
	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/manager"
)

func TestResolveIn(t *testing.T) {
	const home = "/home/user"
	tests := []struct {
		in, want string
		err      error // a class, nil for success
	}{
		{"/etc/passwd", "/etc/passwd", nil},
		{"/tmp//a/./b/../c", "/tmp/a/c", nil},
		{"/../../etc", "/etc", nil},
		{"", home, nil},
		{".", home, nil},
		{"notes.txt", home + "/notes.txt", nil},
		{"a/b/../c", home + "/a/c", nil},
		{"../other", "/home/other", nil},
		{"~", home, nil},
		{"~/", home, nil},
		{"~/x/y", home + "/x/y", nil},
		{"~root/x", "", errdefs.ErrInvalidArgument},
		{"a\x00b", "", errdefs.ErrInvalidArgument},
		{"/" + strings.Repeat("a", maxPathLen), "", errdefs.ErrInvalidArgument},
	}
	for _, tt := range tests {
		got, err := resolveIn(tt.in, home)
		if tt.err != nil {
			if !errors.Is(err, tt.err) {
				t.Errorf("resolveIn(%.40q): got %q, %v; want an error of class %v", tt.in, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("resolveIn(%q): got %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}

func TestPermissions(t *testing.T) {
	tests := []struct {
		fi   agentproto.FileInfo
		want string
	}{
		{agentproto.FileInfo{Mode: 0o644}, "-rw-r--r--"},
		{agentproto.FileInfo{Mode: 0o755, IsDir: true}, "drwxr-xr-x"},
		{agentproto.FileInfo{Mode: 0o777, IsSymlink: true}, "Lrwxrwxrwx"},
		{agentproto.FileInfo{Mode: 0o4755}, "urwxr-xr-x"},
		{agentproto.FileInfo{Mode: 0o2750}, "grwxr-x---"},
		{agentproto.FileInfo{Mode: 0o1777, IsDir: true}, "dtrwxrwxrwx"},
		{agentproto.FileInfo{Mode: 0}, "----------"},
	}
	for _, tt := range tests {
		if got := permissions(&tt.fi); got != tt.want {
			t.Errorf("permissions(mode %#o, dir %v, symlink %v): got %q, want %q", tt.fi.Mode, tt.fi.IsDir, tt.fi.IsSymlink, got, tt.want)
		}
	}
}

func TestEntryInfo(t *testing.T) {
	e := entryInfo("/w/link", &agentproto.FileInfo{Name: "link", Size: 3, Mode: 0o4755, UID: 1000, GID: 1000,
		Owner: "1000", Group: "staff", IsSymlink: true, Target: "../t", MTime: 1700000000})
	if e.GetName() != "link" || e.GetPath() != "/w/link" || e.GetType() != filesystempb.FileType_FILE_TYPE_SYMLINK ||
		e.GetMode() != 0o755 || e.GetOwner() != "1000" || e.GetGroup() != "staff" || e.GetSymlinkTarget() != "/t" ||
		e.GetModifiedTime().AsTime().Unix() != 1700000000 || e.GetSize() != 3 {
		t.Errorf("entryInfo: got %v; want link, /w/link, a symlink to /t, mode 0755, owner 1000, group staff", e)
	}
	if e := entryInfo("/", &agentproto.FileInfo{Name: "/", Mode: 0o755, IsDir: true, Owner: "root"}); e.GetName() != "/" ||
		e.GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY || e.GetSymlinkTarget() != "" || e.SymlinkTarget != nil {
		t.Errorf("entryInfo of /: got %v; want the directory /, no symlink target", e)
	}
}

func TestFsEvent(t *testing.T) {
	ctx := context.Background()
	tg := &target{}
	for op, want := range map[string]filesystempb.EventType{
		agentproto.WatchCreate: filesystempb.EventType_EVENT_TYPE_CREATE,
		agentproto.WatchWrite:  filesystempb.EventType_EVENT_TYPE_WRITE,
		agentproto.WatchRemove: filesystempb.EventType_EVENT_TYPE_REMOVE,
		agentproto.WatchRename: filesystempb.EventType_EVENT_TYPE_RENAME,
		agentproto.WatchChmod:  filesystempb.EventType_EVENT_TYPE_CHMOD,
	} {
		fe := tg.fsEvent(ctx, "/d", agentproto.WatchEvent{Name: "sub/f", Op: op}, false)
		if fe.GetType() != want || fe.GetName() != "sub/f" || fe.Entry != nil {
			t.Errorf("op %q: got %v; want %v named sub/f without an entry", op, fe, want)
		}
	}
	if fe := tg.fsEvent(ctx, "/d", agentproto.WatchEvent{Name: "f", Op: "truncate"}, false); fe != nil {
		t.Errorf("an unknown op: got %v; want it dropped", fe)
	}
}

func TestWatcherBuffer(t *testing.T) {
	w := &watcher{reg: &watcherRegistry{}, ring: make([]*filesystempb.FilesystemEvent, maxWatcherEvents)}
	const extra = 10
	for i := range maxWatcherEvents + extra {
		w.push(&filesystempb.FilesystemEvent{Name: fmt.Sprint(i), Type: filesystempb.EventType_EVENT_TYPE_CREATE})
	}
	events, lost, _, _ := w.drain()
	if len(events) != maxWatcherEvents || lost != extra || events[0].GetName() != fmt.Sprint(extra) ||
		events[len(events)-1].GetName() != fmt.Sprint(maxWatcherEvents+extra-1) {
		t.Fatalf("after %d events: got %d kept (first %s), %d lost; want the last %d, %d lost",
			maxWatcherEvents+extra, len(events), events[0].GetName(), lost, maxWatcherEvents, extra)
	}
	if len(w.ring) != maxWatcherEvents {
		t.Errorf("the buffer grew to %d places, want %d", len(w.ring), maxWatcherEvents)
	}
	if events, lost, _, _ := w.drain(); len(events) != 0 || lost != 0 {
		t.Errorf("a second drain: got %d events, %d lost; want none", len(events), lost)
	}

	// Large events are bounded by their size before their count.
	big := strings.Repeat("n", maxPathLen)
	for range maxWatcherEvents {
		w.push(&filesystempb.FilesystemEvent{Name: big})
	}
	if w.bytes > maxWatcherBytes {
		t.Errorf("kept %d bytes of events, want at most %d", w.bytes, maxWatcherBytes)
	}
	events, lost, _, _ = w.drain()
	if len(events) == 0 || len(events)+lost != maxWatcherEvents || lost == 0 {
		t.Errorf("after %d large events: got %d kept, %d lost; want some of each adding up", maxWatcherEvents, len(events), lost)
	}
}

// TestWatcherBudgets: the watchers of one sandbox, and of the node, keep no more than
// their budgets together, dropping (and counting) the rest; drained and removed
// watchers give their bytes back.
func TestWatcherBudgets(t *testing.T) {
	r := &watcherRegistry{nodeLimit: 6000, sboxLimit: 4000}
	defer r.close()
	ev := &filesystempb.FilesystemEvent{Name: strings.Repeat("n", 90)}
	size := proto.Size(ev)
	newW := func(sandbox string) *watcher {
		return &watcher{sandbox: sandbox, reg: r, src: newFakeWatch(), cancel: func() {}, idle: time.NewTimer(time.Hour),
			ring: make([]*filesystempb.FilesystemEvent, maxWatcherEvents)}
	}
	a1, a2, b := newW("a"), newW("a"), newW("b")
	for range 100 {
		a1.push(ev)
		a2.push(ev)
	}
	if got := int64(a1.bytes + a2.bytes); got > r.sboxLimit || got != r.sboxBytes["a"] {
		t.Fatalf("sandbox a's watchers keep %d bytes (budget counts %d), want at most %d", got, r.sboxBytes["a"], r.sboxLimit)
	}
	for range 100 {
		b.push(ev)
	}
	if r.nodeBytes > r.nodeLimit || int64(b.bytes) > r.nodeLimit-r.sboxBytes["a"] {
		t.Fatalf("the node keeps %d bytes, b %d; want at most %d in all", r.nodeBytes, b.bytes, r.nodeLimit)
	}
	if b.n == 0 {
		t.Fatal("sandbox b kept nothing though the node had room")
	}
	events, lost, _, _ := a1.drain()
	if len(events) == 0 || lost == 0 || len(events)+lost != 100 {
		t.Errorf("a1 drained %d events and %d lost, want some of each adding up to 100", len(events), lost)
	}
	if r.sboxBytes["a"] != int64(a2.bytes) {
		t.Errorf("after a drain the budget counts %d bytes for a, want a2's %d", r.sboxBytes["a"], a2.bytes)
	}
	// Bytes given back make room again.
	a1.push(ev)
	if a1.n != 1 || a1.bytes != size {
		t.Errorf("after a drain a1 kept %d events", a1.n)
	}
	a1.id = "x"
	r.byID, r.perSandbox = map[string]*watcher{"x": a1}, map[string]int{"a": 1}
	r.remove(a1)
	a1.push(ev) // the feeding goroutine may still push: it keeps nothing
	a2.drain()
	b.drain()
	if r.nodeBytes != 0 || len(r.sboxBytes) != 0 {
		t.Errorf("with every watcher drained or removed the budgets count %d bytes (%v)", r.nodeBytes, r.sboxBytes)
	}
}

// fakeWatch is a watch fed by the test: what it sends on events Next returns, and
// closing events ends the watch normally.
type fakeWatch struct {
	events    chan watchRecv
	closed    chan struct{}
	closeOnce sync.Once
}

func newFakeWatch() *fakeWatch {
	return &fakeWatch{events: make(chan watchRecv), closed: make(chan struct{})}
}

func (f *fakeWatch) send(name, op string) {
	f.events <- watchRecv{v: agentproto.WatchEvent{Name: name, Op: op}}
}

func (f *fakeWatch) Next() (agentproto.WatchEvent, error) {
	select {
	case r, ok := <-f.events:
		if !ok {
			return r.v, io.EOF
		}
		return r.v, r.err
	case <-f.closed:
		return agentproto.WatchEvent{}, errors.New("watch closed")
	}
}

func (f *fakeWatch) Close() error {
	f.closeOnce.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeWatch) isClosed() bool {
	select {
	case <-f.closed:
		return true
	default:
		return false
	}
}

func asEvent(ev agentproto.WatchEvent) *filesystempb.FilesystemEvent {
	return (&target{}).fsEvent(context.Background(), "/d", ev, false)
}

// addFake reserves a place and adds a watcher over a fake watch.
func addFake(r *watcherRegistry, sandbox, owner string) (string, *fakeWatch, error) {
	if err := r.reserve(sandbox); err != nil {
		return "", nil, err
	}
	f := newFakeWatch()
	return r.add(sandbox, owner, f, func() {}, asEvent), f, nil
}

// pollToEnd polls watcher id until a poll fails (a watcher whose watch has ended goes
// once it has told everything), for at most five seconds, and returns what it got.
func pollToEnd(t *testing.T, r *watcherRegistry, sandbox, owner, id string) ([]*filesystempb.FilesystemEvent, error) {
	t.Helper()
	var got []*filesystempb.FilesystemEvent
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		events, _, err := r.poll(sandbox, owner, id)
		if err != nil {
			return got, err
		}
		got = append(got, events...)
	}
	t.Fatalf("watcher %s still answers polls after its watch ended", id)
	return nil, nil
}

func TestWatcherRegistry(t *testing.T) {
	r := &watcherRegistry{}
	defer r.close()

	// A sandbox has at most maxWatchersPerSandbox; another sandbox has its own.
	var ids []string
	var watches []*fakeWatch
	for range maxWatchersPerSandbox {
		id, f, err := addFake(r, "sb1", "alice")
		if err != nil {
			t.Fatalf("watcher %d: %v", len(ids)+1, err)
		}
		ids, watches = append(ids, id), append(watches, f)
	}
	if _, _, err := addFake(r, "sb1", "alice"); !errors.Is(err, errdefs.ErrQuotaExceeded) {
		t.Fatalf("watcher %d of one sandbox: got %v, want quota exceeded", maxWatchersPerSandbox+1, err)
	}
	if _, _, err := addFake(r, "sb2", "alice"); err != nil {
		t.Fatalf("a watcher of another sandbox: %v", err)
	}

	// Events reach the poller in order. Once the agent's third event is taken, the
	// first two are kept.
	for _, op := range []string{agentproto.WatchCreate, agentproto.WatchWrite, agentproto.WatchChmod} {
		watches[0].send("a", op)
	}
	got, _, err := r.poll("sb1", "alice", ids[0])
	if err != nil || len(got) < 2 || got[0].GetType() != filesystempb.EventType_EVENT_TYPE_CREATE || got[1].GetType() != filesystempb.EventType_EVENT_TYPE_WRITE {
		t.Errorf("polled %v, %v; want create then write of a", got, err)
	}

	// Another sandbox, or another owner, does not see the watcher.
	for _, who := range []struct{ sandbox, owner string }{{"sb2", "alice"}, {"sb1", "bob"}} {
		if _, _, err := r.poll(who.sandbox, who.owner, ids[0]); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("poll from %s/%s: got %v, want not found", who.sandbox, who.owner, err)
		}
		if err := r.removeID(who.sandbox, who.owner, ids[0]); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("remove from %s/%s: got %v, want not found", who.sandbox, who.owner, err)
		}
	}
	if watches[0].isClosed() {
		t.Fatal("a refused remove closed the watch")
	}

	// Removing closes the watch and frees a place.
	if err := r.removeID("sb1", "alice", ids[0]); err != nil {
		t.Fatal(err)
	}
	if !watches[0].isClosed() {
		t.Error("RemoveWatcher left the agent's watch open")
	}
	if _, _, err := r.poll("sb1", "alice", ids[0]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("poll after remove: got %v, want not found", err)
	}
	if _, _, err := addFake(r, "sb1", "alice"); err != nil {
		t.Errorf("a watcher in the freed place: %v", err)
	}

	// A watch that ends normally hands over its last events, then is gone.
	watches[1].send("last", agentproto.WatchRemove)
	close(watches[1].events)
	got, err = pollToEnd(t, r, "sb1", "alice", ids[1])
	if len(got) != 1 || got[0].GetName() != "last" || !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("polled %v, then %v; want the remove of last, then not found", got, err)
	}

	// A watch that fails hands over its events, then tells the poller why, once.
	watches[2].send("f", agentproto.WatchCreate)
	watches[2].events <- watchRecv{err: fmt.Errorf("%w: a watch event for \"/etc\"", agentproto.ErrBadReply)}
	got, err = pollToEnd(t, r, "sb1", "alice", ids[2])
	if len(got) != 1 || !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("polled %v, then %v, after the watch failed; want the create of f, then unavailable", got, err)
	}
	if _, _, err := r.poll("sb1", "alice", ids[2]); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("the poll after that: got %v, want not found", err)
	}

	r.close()
	for i, f := range watches {
		if !f.isClosed() {
			t.Errorf("watch %d still open after close", i)
		}
	}
	if err := r.reserve("sb3"); !errors.Is(err, errdefs.ErrUnavailable) {
		t.Errorf("reserve after close: got %v, want unavailable", err)
	}
}

func TestWatcherIdle(t *testing.T) {
	defer func(d time.Duration) { watcherIdle = d }(watcherIdle)
	// Long enough beside the poll interval that a loaded machine's scheduling delay does
	// not expire a watcher polled every 100 ms; the polls span more than one idle period.
	watcherIdle = 500 * time.Millisecond
	r := &watcherRegistry{}
	defer r.close()
	id, f, err := addFake(r, "sb1", "alice")
	if err != nil {
		t.Fatal(err)
	}
	// Polled, it stays.
	for range 8 {
		time.Sleep(watcherIdle / 5)
		if _, _, err := r.poll("sb1", "alice", id); err != nil {
			t.Fatalf("poll of a polled watcher: %v", err)
		}
	}
	// Left alone, it goes.
	for deadline := time.Now().Add(5 * time.Second); !f.isClosed() && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if !f.isClosed() {
		t.Fatal("an unpolled watcher's watch is still open")
	}
	if _, _, err := r.poll("sb1", "alice", id); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("poll of an expired watcher: got %v, want not found", err)
	}
}

// fakeSandbox makes a sandbox on a fake node (whose sandboxes run a real agent) whose
// manager's configuration config adjusts, and returns the manager, the sandbox's id and
// its root on the host. The package's external tests set it (node_test.go): the node
// comes from testenv, which assembles the E2B plane too and so cannot be imported here.
var fakeSandbox func(t *testing.T, config func(*manager.Config)) (m *manager.Manager, id, root string)

// agentTarget makes a sandbox on a fake node (fakeSandbox) with an /etc/passwd of root
// and user (1000:1000, home /home/user), and returns a target of it acting as name, its
// root on the host and the node's manager.
func agentTarget(t *testing.T, name string, config ...func(*manager.Config)) (tg *target, root string, m *manager.Manager) {
	t.Helper()
	m, id, root := fakeSandbox(t, func(c *manager.Config) {
		for _, f := range config {
			f(c)
		}
	})
	ctx := context.Background()
	for _, f := range []struct{ name, text string }{
		{"etc/passwd", "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"},
		{"etc/group", "root:x:0:\nuser:x:1000:\n"},
		{"home/user/.profile", ""},
	} {
		p := filepath.Join(root, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	sb, err := m.ByID(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	tg = &target{id: id, owner: sb.Owner, sb: sb, user: name}
	if tg.wk, err = m.WorkOn(ctx, sb); err != nil {
		t.Fatal(err)
	}
	return tg, root, m
}

// envdServer serves the filesystem service and the /files routes for tg, as the envd
// plane does once it has authorized a request.
func envdServer(t *testing.T, tg *target, m *manager.Manager) (filesystempbconnect.FilesystemClient, string) {
	t.Helper()
	c := &Control{m: m, log: slog.New(slog.DiscardHandler)}
	c.fs = &filesystemService{c: c}
	t.Cleanup(c.Close)
	mux := c.envdMux()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), targetKey{}, tg)))
	}))
	t.Cleanup(srv.Close)
	return filesystempbconnect.NewFilesystemClient(srv.Client(), srv.URL), srv.URL
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func wantCode(t *testing.T, what string, err error, code connect.Code) {
	t.Helper()
	if connect.CodeOf(err) != code {
		t.Errorf("%s: got %v, want %v", what, err, code)
	}
}

// TestFilesystemService drives every unary RPC over a real agent, as the user "user".
func TestFilesystemService(t *testing.T) {
	tg, root, m := agentTarget(t, "user")
	fs, _ := envdServer(t, tg, m)
	ctx := ctxT(t)

	md, err := fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "proj/src"}))
	if err != nil || md.Msg.GetEntry().GetPath() != "/home/user/proj/src" || md.Msg.GetEntry().GetType() != filesystempb.FileType_FILE_TYPE_DIRECTORY {
		t.Fatalf("MakeDir proj/src: got %v, %v; want the directory /home/user/proj/src", md, err)
	}
	_, err = fs.MakeDir(ctx, connect.NewRequest(&filesystempb.MakeDirRequest{Path: "~/proj/src"}))
	wantCode(t, "MakeDir of an existing directory", err, connect.CodeAlreadyExists)

	if err := os.WriteFile(filepath.Join(root, "home/user/proj/src/main.go"), []byte("package main\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src", filepath.Join(root, "home/user/proj/link")); err != nil {
		t.Fatal(err)
	}
	st, err := fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "/home/user/proj/src/main.go"}))
	if e := st.Msg.GetEntry(); err != nil || e.GetName() != "main.go" || e.GetType() != filesystempb.FileType_FILE_TYPE_FILE ||
		e.GetSize() != 13 || e.GetMode() != 0o640 || e.GetPermissions() != "-rw-r-----" || e.GetOwner() == "" {
		t.Errorf("Stat main.go: got %v, %v; want a file of 13 bytes, mode 0640", st, err)
	}
	_, err = fs.Stat(ctx, connect.NewRequest(&filesystempb.StatRequest{Path: "nothing"}))
	wantCode(t, "Stat of nothing", err, connect.CodeNotFound)

	// A listing goes as deep as asked and does not follow symlinks.
	for _, tt := range []struct {
		depth uint32
		want  []string
	}{
		{0, []string{"/home/user/proj/link", "/home/user/proj/src"}},
		{2, []string{"/home/user/proj/link", "/home/user/proj/src", "/home/user/proj/src/main.go"}},
	} {
		ls, err := fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "proj", Depth: tt.depth}))
		if err != nil {
			t.Fatalf("ListDir depth %d: %v", tt.depth, err)
		}
		var got []string
		for _, e := range ls.Msg.GetEntries() {
			got = append(got, e.GetPath())
			if e.GetName() == "link" && (e.GetType() != filesystempb.FileType_FILE_TYPE_SYMLINK || e.GetSymlinkTarget() != "/home/user/proj/src") {
				t.Errorf("ListDir: the link is %v, want a symlink to /home/user/proj/src", e)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("ListDir depth %d: got %q, want %q", tt.depth, got, tt.want)
		}
	}
	_, err = fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "proj/src/main.go"}))
	wantCode(t, "ListDir of a file", err, connect.CodeInvalidArgument)
	_, err = fs.ListDir(ctx, connect.NewRequest(&filesystempb.ListDirRequest{Path: "proj", Depth: maxListDepth + 1}))
	wantCode(t, "ListDir too deep", err, connect.CodeInvalidArgument)

	// Move makes the destination's parents.
	mv, err := fs.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "proj/src/main.go", Destination: "/tmp/a/b/m.go"}))
	if err != nil || mv.Msg.GetEntry().GetPath() != "/tmp/a/b/m.go" || mv.Msg.GetEntry().GetSize() != 13 {
		t.Fatalf("Move: got %v, %v; want /tmp/a/b/m.go of 13 bytes", mv, err)
	}
	if _, err := os.Stat(filepath.Join(root, "home/user/proj/src/main.go")); !os.IsNotExist(err) {
		t.Errorf("the moved file is still at its source: %v", err)
	}
	_, err = fs.Move(ctx, connect.NewRequest(&filesystempb.MoveRequest{Source: "proj/nothing", Destination: "/tmp/x"}))
	wantCode(t, "Move of nothing", err, connect.CodeNotFound)

	if _, err := fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "proj"})); err != nil {
		t.Fatalf("Remove proj: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "home/user/proj")); !os.IsNotExist(err) {
		t.Errorf("proj is still there after Remove: %v", err)
	}
	// As envd's, a Remove of what is not there succeeds.
	if _, err = fs.Remove(ctx, connect.NewRequest(&filesystempb.RemoveRequest{Path: "proj"})); err != nil {
		t.Errorf("Remove of nothing: %v, want success", err)
	}
}

// TestListDirBound: a listing larger than maxListEntries is refused, not cut short.
func TestListDirBound(t *testing.T) {
	tg, root, m := agentTarget(t, "")
	fs, _ := envdServer(t, tg, m)
	for d := range 101 {
		dir := filepath.Join(root, "big", fmt.Sprint(d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprint(f)), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	ls, err := fs.ListDir(ctxT(t), connect.NewRequest(&filesystempb.ListDirRequest{Path: "/big"}))
	if err != nil || len(ls.Msg.GetEntries()) != 101 {
		t.Errorf("ListDir /big, depth 1: got %d entries, %v; want 101", len(ls.Msg.GetEntries()), err)
	}
	_, err = fs.ListDir(ctxT(t), connect.NewRequest(&filesystempb.ListDirRequest{Path: "/big", Depth: 2}))
	wantCode(t, "ListDir of 10201 entries", err, connect.CodeInvalidArgument)
}

// TestWatchDir: a stream starts, then carries the changes (with their entries when
// asked) and keep-alives while quiet.
func TestWatchDir(t *testing.T) {
	defer func(d time.Duration) { keepAliveEvery = d }(keepAliveEvery)
	keepAliveEvery = 100 * time.Millisecond
	tg, root, m := agentTarget(t, "")
	fs, _ := envdServer(t, tg, m)
	if err := os.MkdirAll(filepath.Join(root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := fs.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/w", IncludeEntry: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("the first message: got %v, %v; want the start", stream.Msg(), stream.Err())
	}
	if err := os.WriteFile(filepath.Join(root, "w/f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	var created *filesystempb.FilesystemEvent
	keepAlive := false
	for (created == nil || !keepAlive) && stream.Receive() {
		if ev := stream.Msg().GetFilesystem(); ev != nil && ev.GetType() == filesystempb.EventType_EVENT_TYPE_CREATE {
			created = ev
		}
		keepAlive = keepAlive || stream.Msg().GetKeepalive() != nil
	}
	if created == nil || created.GetName() != "f" || created.GetEntry().GetPath() != "/w/f" {
		t.Errorf("got the create event %v (stream: %v); want f with its entry /w/f", created, stream.Err())
	}

	bad, err := fs.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/w/f"}))
	if err == nil {
		for bad.Receive() {
		}
		err = bad.Err()
		bad.Close()
	}
	wantCode(t, "WatchDir of a file", err, connect.CodeInvalidArgument)
}

// TestPolledWatcher: CreateWatcher, GetWatcherEvents and RemoveWatcher over a real agent.
func TestPolledWatcher(t *testing.T) {
	tg, root, m := agentTarget(t, "")
	fs, _ := envdServer(t, tg, m)
	ctx := ctxT(t)
	if err := os.MkdirAll(filepath.Join(root, "w/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	cw, err := fs.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: "/w", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	id := cw.Msg.GetWatcherId()
	if err := os.WriteFile(filepath.Join(root, "w/sub/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for deadline := time.Now().Add(5 * time.Second); !slices.Contains(got, "sub/f") && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		res, err := fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range res.Msg.GetEvents() {
			got = append(got, ev.GetName())
		}
	}
	if !slices.Contains(got, "sub/f") {
		t.Errorf("polled events of %q, want one of sub/f", got)
	}
	if _, err := fs.RemoveWatcher(ctx, connect.NewRequest(&filesystempb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = fs.GetWatcherEvents(ctx, connect.NewRequest(&filesystempb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, "GetWatcherEvents after RemoveWatcher", err, connect.CodeNotFound)
	_, err = fs.CreateWatcher(ctx, connect.NewRequest(&filesystempb.CreateWatcherRequest{Path: "/nothing"}))
	wantCode(t, "CreateWatcher of nothing", err, connect.CodeNotFound)
}

// filesCall returns a function that makes one call of the /files routes at url and
// returns its response and body.
func filesCall(t *testing.T, url string) func(method, query, contentType, encoding string, body io.Reader) (*http.Response, string) {
	return func(method, query, contentType, encoding string, body io.Reader) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, url+"/files?"+query, body)
		if err != nil {
			t.Fatal(err)
		}
		if contentType != "" {
			req.Header.Set("Content-Type", contentType)
		}
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
}

// TestFilesRoutes: GET and POST /files over a real agent, as the user "user".
func TestFilesRoutes(t *testing.T) {
	tg, root, m := agentTarget(t, "user")
	_, url := envdServer(t, tg, m)
	do := filesCall(t, url)
	const octets = "application/octet-stream"

	resp, body := do("POST", "path=notes/a.txt", octets, "", strings.NewReader("hello\n"))
	var entries []map[string]any
	json.Unmarshal([]byte(body), &entries)
	if resp.StatusCode != 200 || len(entries) != 1 {
		t.Fatalf("upload: got %d %s, want 200 and one entry", resp.StatusCode, body)
	}
	mt, _ := time.Parse(time.RFC3339, fmt.Sprint(entries[0]["modifiedTime"]))
	if e := entries[0]; e["name"] != "a.txt" || e["type"] != "file" || e["path"] != "/home/user/notes/a.txt" || e["size"] != 6.0 ||
		e["mode"] != 420.0 || e["permissions"] != "-rw-r--r--" || e["owner"] != "user" || e["group"] != "user" ||
		time.Since(mt) > time.Hour {
		t.Errorf("upload answered the entry %v; want a.txt's name, type, path, size 6, mode 0644 (420), owner and group user and its time", e)
	}
	fi, err := os.Stat(filepath.Join(root, "home/user/notes/a.txt"))
	if err != nil || fi.Mode().Perm() != 0o644 {
		t.Fatalf("the uploaded file: %v, %v; want mode 0644", fi, err)
	}
	if st := fi.Sys().(*syscall.Stat_t); os.Geteuid() == 0 && (st.Uid != 1000 || st.Gid != 1000) {
		t.Errorf("the uploaded file is %d:%d, want the user's 1000:1000", st.Uid, st.Gid)
	}

	resp, body = do("GET", "path=~/notes/a.txt", "", "", nil)
	if resp.StatusCode != 200 || body != "hello\n" || resp.Header.Get("Content-Type") != octets ||
		resp.Header.Get("Content-Disposition") != "attachment; filename=a.txt" || resp.ContentLength != 6 {
		t.Errorf("download: got %d %q, headers %v; want 200 hello, an attachment a.txt of 6 bytes", resp.StatusCode, body, resp.Header)
	}
	for query, want := range map[string]int{"path=/nothing": 404, "path=notes": 400} {
		if resp, body := do("GET", query, "", "", nil); resp.StatusCode != want || !strings.Contains(body, `"code":`) {
			t.Errorf("download %s: got %d %s, want %d in E2B's error shape", query, resp.StatusCode, body, want)
		}
	}

	// gzip, and multipart with a part's file name as its destination.
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("zipped"))
	zw.Close()
	if resp, body := do("POST", "path=/z.txt", octets, "gzip", &gz); resp.StatusCode != 200 {
		t.Errorf("gzip upload: got %d %s", resp.StatusCode, body)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "z.txt")); string(b) != "zipped" {
		t.Errorf("the gzip upload wrote %q, want zipped", b)
	}
	multi := func(names ...string) (string, io.Reader) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		mw.WriteField("other", "ignored")
		for _, n := range names {
			w, _ := mw.CreateFormFile("file", n)
			w.Write([]byte("content of " + n))
		}
		mw.Close()
		return mw.FormDataContentType(), &b
	}
	ct, mb := multi("/tmp/m/one.txt", "two.txt")
	resp, body = do("POST", "", ct, "", mb)
	if !strings.Contains(body, `"path":"/tmp/m/one.txt"`) || !strings.Contains(body, `"path":"/home/user/two.txt"`) || resp.StatusCode != 200 {
		t.Errorf("multipart upload: got %d %s, want /tmp/m/one.txt and /home/user/two.txt", resp.StatusCode, body)
	}
	if b, _ := os.ReadFile(filepath.Join(root, "tmp/m/one.txt")); string(b) != "content of /tmp/m/one.txt" {
		t.Errorf("multipart wrote %q to one.txt", b)
	}

	// Refused: two parts to one path, a body that is neither kind, one file without a
	// path.
	ct, mb = multi("a", "b")
	for name, tt := range map[string]struct {
		query, ct string
		body      io.Reader
	}{
		"two parts to one path": {"path=/same", ct, mb},
		"text/plain":            {"path=/t", "text/plain", strings.NewReader("x")},
		"no path":               {"", octets, strings.NewReader("x")},
	} {
		if resp, body := do("POST", tt.query, tt.ct, "", tt.body); resp.StatusCode != 400 {
			t.Errorf("%s: got %d %s, want 400", name, resp.StatusCode, body)
		}
	}

}

// TestFilesUploadBound: a file past the node's bound on an uploaded file (the one the
// native API has too) is refused with 413, plain or gzip, and the file is as it was,
// with nothing left beside it.
func TestFilesUploadBound(t *testing.T) {
	tg, root, m := agentTarget(t, "user", func(c *manager.Config) { c.MaxFileUpload = 6 })
	_, url := envdServer(t, tg, m)
	const octets = "application/octet-stream"
	call := filesCall(t, url)
	do := func(encoding string, body io.Reader) (int, string) {
		resp, b := call("POST", "path=notes/a.txt", octets, encoding, body)
		return resp.StatusCode, b
	}
	if st, body := do("", strings.NewReader("hello\n")); st != 200 {
		t.Fatalf("an upload of the bound's size: %d %s, want 200", st, body)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write([]byte("too long"))
	zw.Close()
	for name, tt := range map[string]struct {
		encoding string
		body     io.Reader
	}{
		"plain": {"", strings.NewReader("too long")},
		"gzip":  {"gzip", &gz},
	} {
		if st, body := do(tt.encoding, tt.body); st != 413 {
			t.Errorf("%s upload past the bound: got %d %s, want 413", name, st, body)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "home/user/notes/a.txt")); string(b) != "hello\n" {
		t.Errorf("after refused uploads the file holds %q, want hello", b)
	}
	if ents, _ := os.ReadDir(filepath.Join(root, "home/user/notes")); len(ents) != 1 {
		t.Errorf("after refused uploads the directory holds %v, want a.txt alone", ents)
	}
}

// TestFilesUploadInPlace: an upload is written under the file's own name, as envd
// writes it: a watcher of its directory sees the file created and written, and no
// other name, whether the file was new or replaced. A symlink at the path is not
// followed, and one in its parents resolves inside the sandbox's root.
func TestFilesUploadInPlace(t *testing.T) {
	tg, root, m := agentTarget(t, "")
	fs, url := envdServer(t, tg, m)
	do := filesCall(t, url)
	if err := os.MkdirAll(filepath.Join(root, "w"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	stream, err := fs.WatchDir(ctx, connect.NewRequest(&filesystempb.WatchDirRequest{Path: "/w"}))
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("the first message: got %v, %v; want the start", stream.Msg(), stream.Err())
	}
	for _, content := range []string{"first", "second, longer"} {
		if resp, body := do("POST", "path=/w/f", "application/octet-stream", "", strings.NewReader(content)); resp.StatusCode != 200 {
			t.Fatalf("upload: got %d %s", resp.StatusCode, body)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "w/f")); string(b) != "second, longer" {
		t.Errorf("the file holds %q after two uploads", b)
	}
	// The upload's last event is the write of the second; a marker file ends the wait.
	os.WriteFile(filepath.Join(root, "w/end"), nil, 0o644)
	var got []string
	for stream.Receive() {
		ev := stream.Msg().GetFilesystem()
		if ev == nil {
			continue
		}
		if ev.GetName() == "end" {
			break
		}
		got = append(got, ev.GetName()+" "+strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_"))
	}
	if !slices.Contains(got, "f CREATE") || !slices.Contains(got, "f WRITE") {
		t.Errorf("a watcher saw %q; want f created and written", got)
	}
	for _, ev := range got {
		if !strings.HasPrefix(ev, "f ") {
			t.Errorf("a watcher saw %q during uploads of f; want events of f alone", ev)
		}
	}

	// A symlink at the path, to a file outside the sandbox: refused, the file untouched.
	outside := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, []byte("host"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "w/link")); err != nil {
		t.Fatal(err)
	}
	if resp, body := do("POST", "path=/w/link", "application/octet-stream", "", strings.NewReader("pwned")); resp.StatusCode != 400 ||
		!strings.Contains(body, "/w/link is a symlink") {
		t.Errorf("upload over a symlink: got %d %s; want 400 saying it is a symlink", resp.StatusCode, body)
	}
	// A symlinked parent, absolute: it resolves inside the root, not on the host.
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(root, "w/dir")); err != nil {
		t.Fatal(err)
	}
	do("POST", "path=/w/dir/host-file", "application/octet-stream", "", strings.NewReader("pwned"))
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Errorf("the host file outside the sandbox holds %q after uploads through symlinks; want it untouched", b)
	}
}
