// Package fake is a runtime driver without containers, for the tests of the layers above
// the runtime (manager, HTTP server, CLI, SDK) that must run without root: each sandbox
// is a directory and the real agent, served in-process, whose processes run on the host
// as the test's own user with the sandbox's directory as their working directory and
// the root of every file call. It passes drivertest's contract suite, not its hostile
// one: it isolates nothing, and no sandbox code it runs is untrusted.
//
// Tests steer it: FailNextStart makes the next Start fail half-way, PlantLeftover
// leaves resources without a container, SetAgent serves a sandbox's agent channel with
// a handler of the test's own, and the number in a sandbox's ".oom-kills" file (in its
// working directory) is what Stats reports as out-of-memory kills, so a command can
// play the kernel's OOM killer.
//
// The agent reaps every child of the process it runs in (wait4(-1)) while a sandbox
// runs: a test on the fake must not also wait for processes of its own with exec.Cmd.
//
// It must not import the store, the manager or anything above the runtime contract.
package fake

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/runtime"
)

var (
	_ runtime.Driver        = (*Driver)(nil)
	_ runtime.Freezer       = (*Driver)(nil)
	_ runtime.Storage       = (*Driver)(nil)
	_ runtime.HealthChecker = (*Driver)(nil)
	_ runtime.PortDialer    = (*Driver)(nil)
	_ runtime.Hostnamer     = (*Driver)(nil)
	_ runtime.Killer        = (*Driver)(nil)
)

// Driver runs fake sandboxes under one directory.
type Driver struct {
	dir    string
	images runtime.ImageSource

	mu       sync.Mutex
	boxes    map[string]*box
	leftover map[string]bool
	failNext error
	handlers map[string]func(net.Conn)
	stats    map[string]runtime.Stats // readings set by SetStats
}

// box is one running sandbox: its agent and what stops it.
type box struct {
	conns  chan net.Conn
	stop   context.CancelFunc
	done   chan struct{}
	paused bool
	host   string // the host name the container would have
}

// New returns a driver keeping its sandboxes under dir; images, if not nil, must know
// every image a Spec names.
func New(dir string, images runtime.ImageSource) (*Driver, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	return &Driver{dir: dir, images: images, boxes: map[string]*box{}, leftover: map[string]bool{},
		handlers: map[string]func(net.Conn){}}, nil
}

// FailNextStart makes the next Start fail with err after making some of its resources.
func (d *Driver) FailNextStart(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.failNext = err
}

// PlantLeftover records resources of id that have no container (a crash's leftovers).
func (d *Driver) PlantLeftover(id string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.leftover[id] = true
}

// SetAgent serves id's agent channel (every sandbox's, for id "") with h instead of the
// real agent (nil: the agent).
func (d *Driver) SetAgent(id string, h func(net.Conn)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if h == nil {
		delete(d.handlers, id)
		return
	}
	d.handlers[id] = h
}

// Path is the host path of the file at p in sandbox id (p absolute, as the agent's file
// calls name it; a command runs in the directory that is "/" to those calls).
func (d *Driver) Path(id, p string) string { return filepath.Join(d.upper(id), filepath.Clean("/"+p)) }

// Running says whether id has a container.
func (d *Driver) Running(id string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.boxes[id] != nil
}

func (d *Driver) sandboxDir(id string) string { return filepath.Join(d.dir, id) }

// upper is the sandbox's writable layer: its files, kept across Stop and Start.
func (d *Driver) upper(id string) string { return filepath.Join(d.sandboxDir(id), "fs", "upper") }

// Start implements runtime.Driver.
func (d *Driver) Start(ctx context.Context, s runtime.Spec) error {
	if s.ID == "" || strings.ContainsAny(s.ID, "/.") {
		return fmt.Errorf("fake: bad sandbox id %q", s.ID)
	}
	d.mu.Lock()
	if d.boxes[s.ID] != nil {
		d.mu.Unlock()
		return fmt.Errorf("fake: sandbox %s is running", s.ID)
	}
	if err := d.failNext; err != nil {
		d.failNext = nil
		d.leftover[s.ID] = true // a half-made start the caller must clean up
		d.mu.Unlock()
		return err
	}
	d.mu.Unlock()
	if d.images != nil {
		if _, err := d.images.ImageFiles(s.Image); err != nil {
			return fmt.Errorf("fake: image %s: %w", s.Image, err)
		}
	}
	upper := d.upper(s.ID)
	// /tmp is the sandbox's memory: it does not outlive a stop.
	if err := os.RemoveAll(filepath.Join(upper, "tmp")); err != nil {
		return err
	}
	for _, dir := range []string{upper, filepath.Join(upper, "tmp"), filepath.Join(upper, "root")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	env := slices.Clone(s.Env)
	if s.Network != nil {
		j, err := s.Network()
		if err != nil {
			d.stopFiles(s.ID)
			return err
		}
		env = append(env, j.Env...)
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	b := &box{conns: make(chan net.Conn), stop: cancel, done: make(chan struct{}), host: s.Hostname}
	go func() {
		defer close(b.done)
		agent.Serve(actx, &listener{conns: b.conns, ctx: actx}, agent.Options{Root: upper, Workdir: upper, Env: env, KeepOwner: os.Geteuid() != 0,
			SharedProcess: true})
	}()
	d.mu.Lock()
	d.boxes[s.ID] = b
	d.mu.Unlock()
	return nil
}

// RenamesHost implements runtime.Hostnamer.
func (d *Driver) RenamesHost() bool { return true }

// SetHostname implements runtime.Hostnamer: the fake keeps the name, which Hostname
// reads.
func (d *Driver) SetHostname(ctx context.Context, id, name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.boxes[id]
	if b == nil {
		return fmt.Errorf("fake: sandbox %s is not running", id)
	}
	b.host = name
	return nil
}

// Hostname is the host name of a running sandbox ("" if it is not running).
func (d *Driver) Hostname(id string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if b := d.boxes[id]; b != nil {
		return b.host
	}
	return ""
}

// stopFiles removes what a failed start made, keeping the upper layer.
func (d *Driver) stopFiles(id string) { os.RemoveAll(filepath.Join(d.upper(id), "tmp")) }

// Stop implements runtime.Driver.
func (d *Driver) Stop(ctx context.Context, id string) error {
	d.mu.Lock()
	delete(d.leftover, id)
	d.mu.Unlock()
	return d.Kill(ctx, id)
}

// Kill implements runtime.Killer: the sandbox's agent and its processes end; its
// directory stays for Delete.
func (d *Driver) Kill(ctx context.Context, id string) error {
	d.mu.Lock()
	b := d.boxes[id]
	delete(d.boxes, id)
	d.mu.Unlock()
	if b != nil {
		b.stop()
		<-b.done
	}
	return nil
}

// Delete implements runtime.Driver.
func (d *Driver) Delete(ctx context.Context, id string) error {
	d.Stop(ctx, id)
	d.mu.Lock()
	delete(d.handlers, id)
	d.mu.Unlock()
	return removeTree(d.sandboxDir(id))
}

// removeTree removes dir even where the sandbox's commands (which run as the test's
// user here, not as root in a user namespace) took away the write bit of a directory.
func removeTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err == nil && e.IsDir() && e.Type()&fs.ModeSymlink == 0 {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// Status implements runtime.Driver.
func (d *Driver) Status(ctx context.Context, id string) (runtime.Status, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch b := d.boxes[id]; {
	case b == nil:
		return runtime.StatusAbsent, nil
	case b.paused:
		return runtime.StatusPaused, nil
	}
	return runtime.StatusRunning, nil
}

// SetStats makes Stats read st for sandbox id while it runs (tests of usage).
func (d *Driver) SetStats(id string, st runtime.Stats) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stats == nil {
		d.stats = map[string]runtime.Stats{}
	}
	d.stats[id] = st
}

// Stats implements runtime.Driver: a small constant footprint (or what SetStats set),
// and the kills written in the sandbox's .oom-kills file.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	if !d.Running(id) {
		return runtime.Stats{}, fmt.Errorf("fake: sandbox %s is not running", id)
	}
	d.mu.Lock()
	st, ok := d.stats[id]
	d.mu.Unlock()
	if !ok {
		st = runtime.Stats{MemoryBytes: 1 << 20, PIDs: 1}
	}
	if b, err := os.ReadFile(filepath.Join(d.upper(id), ".oom-kills")); err == nil {
		st.OOMKills, _ = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	}
	return st, nil
}

// DialAgent implements runtime.Driver over a socket pair.
func (d *Driver) DialAgent(ctx context.Context, id string) (net.Conn, error) {
	d.mu.Lock()
	b, h := d.boxes[id], d.handlers[id]
	if h == nil {
		h = d.handlers[""]
	}
	d.mu.Unlock()
	if b == nil {
		return nil, fmt.Errorf("fake: sandbox %s is not running", id)
	}
	mine, theirs, err := socketPair()
	if err != nil {
		return nil, err
	}
	if h != nil {
		go func() {
			defer theirs.Close()
			h(theirs)
		}()
		return mine, nil
	}
	select {
	case b.conns <- theirs:
		return mine, nil
	case <-ctx.Done():
		mine.Close()
		theirs.Close()
		return nil, ctx.Err()
	case <-b.done:
		mine.Close()
		theirs.Close()
		return nil, errors.New("fake: the sandbox's agent has ended")
	}
}

// List implements runtime.Driver: every sandbox with a directory, a container or planted
// leftovers.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		seen[e.Name()] = true
	}
	d.mu.Lock()
	for id := range d.boxes {
		seen[id] = true
	}
	for id := range d.leftover {
		seen[id] = true
	}
	d.mu.Unlock()
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids, nil
}

// Freeze implements runtime.Freezer: the agent keeps running; Status says paused.
func (d *Driver) Freeze(ctx context.Context, id string) error { return d.setPaused(id, true) }

// Thaw implements runtime.Freezer.
func (d *Driver) Thaw(ctx context.Context, id string) error { return d.setPaused(id, false) }

func (d *Driver) setPaused(id string, paused bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	b := d.boxes[id]
	if b == nil {
		return fmt.Errorf("fake: sandbox %s is not running", id)
	}
	b.paused = paused
	return nil
}

// ReadLayer implements runtime.Storage.
func (d *Driver) ReadLayer(ctx context.Context, id string, disk int64, read func(upper string) error) error {
	if err := os.MkdirAll(d.upper(id), 0o755); err != nil {
		return err
	}
	return read(d.upper(id))
}

// ReplaceLayer implements runtime.Storage.
func (d *Driver) ReplaceLayer(ctx context.Context, id string, disk int64, fill func(upper string) error) error {
	if d.Running(id) {
		return fmt.Errorf("fake: sandbox %s is running; stop it before changing its storage", id)
	}
	if err := os.MkdirAll(filepath.Dir(d.upper(id)), 0o755); err != nil {
		return err
	}
	return durable.ReplaceDir(d.upper(id), fill)
}

// DialPort implements runtime.PortDialer through the agent, as the OCI driver does; a
// fake sandbox's loopback is the host's.
func (d *Driver) DialPort(ctx context.Context, id string, port int) (net.Conn, error) {
	cl := agent.Client{Dial: func(ctx context.Context) (net.Conn, error) { return d.DialAgent(ctx, id) }}
	return cl.DialPort(ctx, port)
}

// MountsWorkspace implements runtime.WorkspaceMounter: the fake stands for the runc
// driver, whose containers bind a host workspace.
func (d *Driver) MountsWorkspace() bool { return true }

// Health implements runtime.HealthChecker.
func (d *Driver) Health(ctx context.Context) []runtime.Check {
	return []runtime.Check{{Name: "fake runtime", OK: true, Detail: "sandboxes are directories under " + d.dir}}
}

// socketPair returns both ends of a connected unix stream socket pair.
func socketPair() (net.Conn, net.Conn, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var conns [2]net.Conn
	for i, fd := range fds {
		f := os.NewFile(uintptr(fd), "fake-agent")
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			if i == 0 {
				unix.Close(fds[1])
			} else {
				conns[0].Close()
			}
			return nil, nil, err
		}
		conns[i] = c
	}
	return conns[0], conns[1], nil
}

// listener hands the agent the connections DialAgent makes.
type listener struct {
	conns chan net.Conn
	ctx   context.Context
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	}
}

func (l *listener) Close() error   { return nil }
func (l *listener) Addr() net.Addr { return &net.UnixAddr{Name: "fake-agent", Net: "unix"} }
