// Package oci is the runtime driver that runs each sandbox as an OCI container under the
// runc binary, detached so a daemon restart does not end it, on an overlayfs root made of
// shared read-only image layers and the sandbox's own upper layer, all idmapped into the
// sandbox's private uid range. Every host resource it makes carries the sandbox id: the
// runc container (in Airlock's own runc root), the cgroup (under "airlock/"), the mounts
// and the directory under the driver's root. It must not touch the store or know about
// the sandbox state machine.
//
// Hostile surfaces it guards: the agent's socket is bound by the driver in a directory
// the sandbox never sees (ctl/, 0700) and every connection's peer is checked against the
// container's init pid and uid (agentconn.go); each sandbox's directory is 0710, group
// the sandbox's gid, so no other host user reaches its files; the overlay is mounted
// with relative paths, and the agent binary bound from a view of its directory
// (bindsource), so the sandbox's mount table names no host path; tmpfs mounts are
// sized under the memory limit and the agent's log is rate-limited inside and capped
// and rotated outside (logs.go), so nothing the sandbox writes outlives its disk cap.
package oci

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/loopdev"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/runtime/oci/sidecar"
)

var (
	_ runtime.Driver     = (*Driver)(nil)
	_ runtime.Freezer    = (*Driver)(nil)
	_ runtime.Storage    = (*Driver)(nil)
	_ runtime.PortDialer = (*Driver)(nil)
)

// Options configure the driver.
type Options struct {
	// Root holds one directory per sandbox (upper layer, mounts, bundle, agent socket).
	Root string
	// RuncRoot is runc's state directory; Airlock keeps its containers apart from others.
	RuncRoot string
	// Runc is the runc binary (default: found on PATH), used when Engine is unset.
	Runc string
	// Engine is the OCI runtime to run containers with (default: runc).
	Engine *Engine
	// AgentBinary is the static agent binary (airlock-agent) bound into every sandbox as
	// its PID 1; the driver also starts its sidecars (package sidecar) from it.
	AgentBinary string
	// Images resolves a spec's image digest to its layer directories and binds.
	Images runtime.ImageSource
	// TmpfsBytes caps /tmp inside each sandbox (default 1 GiB).
	TmpfsBytes int64
	// CgroupParent is the cgroup every sandbox's cgroup sits under (default "airlock").
	CgroupParent string
	// DiskPoolBytes is the upper-layer cap of which a few formatted images are kept
	// ready (0: no pool).
	DiskPoolBytes int64
	// DiskPoolDir holds the ready images (default: "disk-pool" beside Root).
	DiskPoolDir string
	// ReadyTimeout bounds the wait for a new sandbox's agent (default 30 s).
	ReadyTimeout time.Duration
	// Log gets what the driver repaired on its own (default: discarded).
	Log *slog.Logger
}

// Driver runs sandboxes with runc.
type Driver struct {
	opts           Options
	agent          string // the agent binary, as sandboxes bind it (agentView)
	cg             cgroups
	swapAccounting bool
	maxFiles       uint64
	pool           *diskPool
	disks          *diskTemplates
	userns         *usernsCache
	peers          sync.Map // sandbox id → agentPeer
	kept           sync.Map // sandbox id → *keptConns (agentconn.go)
	usageCache     sync.Map // sandbox id → *usageFacts (usage.go)
	stopLogs       func()
	log            *slog.Logger
}

// MountsWorkspace implements runtime.WorkspaceMounter: a container in the host's kernel
// binds the node's id-mapped workspace mount as the host shows it; an engine with its
// own kernel (Sentry) serves files its own way, and gets none.
func (d *Driver) MountsWorkspace() bool { return !d.opts.Engine.Sentry }

// Close stops the driver's background work. Sandboxes keep running.
func (d *Driver) Close() error {
	d.userns.close()
	if d.pool != nil {
		d.pool.close()
	}
	d.stopLogs()
	// Running sandboxes keep their binds of the agent; only the node's view goes.
	return bindsource.Unview(d.agentViewDir())
}

// UserNamespace implements runtime.UserNamespacer with the namespaces the root
// filesystems are id-mapped through (one holder process per base, the first time).
func (d *Driver) UserNamespace(base uint32) (*os.File, error) {
	fd, err := d.userns.get(base)
	if err != nil {
		return nil, fmt.Errorf("oci: user namespace of uid base %d: %w", base, err)
	}
	return os.NewFile(uintptr(fd), "userns"), nil
}

// MaxOpenFiles is the highest open-files limit a sandbox can be given on this host.
func (d *Driver) MaxOpenFiles() int64 { return int64(d.maxFiles) }

// usernsCacheSize bounds the user namespaces the driver keeps, one per uid base.
const usernsCacheSize = 1024

// New checks the host and returns a driver.
func New(opts Options) (*Driver, error) {
	if opts.Root == "" || opts.RuncRoot == "" || opts.AgentBinary == "" || opts.Images == nil {
		return nil, errors.New("oci: Root, RuncRoot, AgentBinary and Images are required")
	}
	if opts.Engine == nil {
		e, err := Runc(opts.Runc)
		if err != nil {
			return nil, fmt.Errorf("oci: runc not found on PATH (install it: apt-get install -y runc): %w", err)
		}
		opts.Engine = &e
	}
	if opts.TmpfsBytes == 0 {
		opts.TmpfsBytes = 1 << 30
	}
	if opts.CgroupParent == "" {
		opts.CgroupParent = "airlock"
	}
	if opts.ReadyTimeout == 0 {
		opts.ReadyTimeout = 30 * time.Second
	}
	for _, d := range []string{opts.Root, opts.RuncRoot} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return nil, err
		}
	}
	// A sandbox cannot raise its open-files limit above what runc inherits.
	var rl unix.Rlimit
	maxFiles := uint64(1 << 20)
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		if rl.Max < maxFiles {
			rl.Max = maxFiles
			if unix.Setrlimit(unix.RLIMIT_NOFILE, &rl) != nil {
				unix.Getrlimit(unix.RLIMIT_NOFILE, &rl)
			}
		}
		maxFiles = rl.Max
	}
	cg := detectCgroups()
	d := &Driver{opts: opts, cg: cg, swapAccounting: cg.swapAccounting(), maxFiles: maxFiles, log: opts.Log}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	view, err := bindsource.View(d.agentViewDir(), filepath.Dir(opts.AgentBinary))
	if err != nil {
		return nil, fmt.Errorf("oci: agent binary: %w", err)
	}
	d.agent = filepath.Join(view, filepath.Base(opts.AgentBinary))
	d.userns = newUsernsCache([]string{opts.AgentBinary, sidecar.HolderCommand}, usernsCacheSize)
	if opts.DiskPoolDir == "" {
		opts.DiskPoolDir = filepath.Join(filepath.Dir(filepath.Clean(opts.Root)), "disk-pool")
	}
	d.disks = newDiskTemplates(filepath.Join(opts.DiskPoolDir, "templates"))
	if opts.DiskPoolBytes > 0 {
		var err error
		if d.pool, err = newDiskPool(opts.DiskPoolDir, opts.DiskPoolBytes, 4, d.disks, d.log); err != nil {
			bindsource.Unview(d.agentViewDir())
			return nil, err
		}
	}
	stop := make(chan struct{})
	var once sync.Once
	d.stopLogs = func() { once.Do(func() { close(stop) }) }
	go d.sweepLogs(stop)
	return d, nil
}

func (d *Driver) dir(id string) string { return filepath.Join(d.opts.Root, id) }

// agentViewDir, beside Root, holds the view sandboxes bind the agent binary from, so that
// their mount table shows it as /NAME, not the directory it was installed in
// (bindsource).
func (d *Driver) agentViewDir() string { return filepath.Clean(d.opts.Root) + "-agent" }

// sandboxDir makes dir the sandbox's own: root's, group the host gid of the sandbox's
// root, mode 0710. The container's processes (root of their namespace, that gid on the
// host) may pass through it to the root filesystem; no other host user may enter it.
// Until a sandbox starts, its directory is root's alone (0700).
func sandboxDir(dir string, gid uint32) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.Chown(dir, 0, int(gid)); err != nil {
		return err
	}
	return os.Chmod(dir, 0o710)
}
func (d *Driver) containerID(id string) string { return "airlock-" + id }
func (d *Driver) cgroupPath(id string) string  { return "/" + d.opts.CgroupParent + "/" + id }

// UpperDir is the host directory of a sandbox's upper layer (container-native ids).
func (d *Driver) UpperDir(id string) string { return rootfs{d.dir(id)}.upper() }

// Start implements runtime.Driver.
func (d *Driver) Start(ctx context.Context, s runtime.Spec) error { return d.start(ctx, s, "") }

// start builds the container for s and starts its agent afresh, or, with a memory
// image (the directory Checkpoint wrote), restores its processes from it.
func (d *Driver) start(ctx context.Context, s runtime.Spec, memory string) (retErr error) {
	if s.ID == "" || strings.ContainsAny(s.ID, "/.") {
		return fmt.Errorf("oci: bad sandbox id %q", s.ID)
	}
	files, err := d.opts.Images.ImageFiles(s.Image)
	if err != nil {
		return fmt.Errorf("oci: image %s: %w", s.Image, err)
	}
	dir := d.dir(s.ID)
	rfs := rootfs{dir}
	defer func() {
		if retErr != nil {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			d.Stop(cctx, s.ID)
		}
	}()
	if err := sandboxDir(dir, s.UIDBase); err != nil {
		return err
	}
	// The disk and the user namespace do not depend on each other: make both at once.
	usFD, usErr := -1, error(nil)
	made := make(chan struct{})
	go func() {
		defer close(made)
		usFD, usErr = d.userns.get(s.UIDBase)
	}()
	storageErr := d.attachStorage(ctx, s.ID, s.Limits.Disk)
	<-made
	if err := errors.Join(storageErr, usErr); err != nil {
		if usFD >= 0 {
			unix.Close(usFD)
		}
		return err
	}
	err = rfs.mount(usFD, s.UIDBase, files.Layers)
	unix.Close(usFD)
	if err != nil {
		return err
	}
	var joined func()
	if s.Network != nil {
		j, err := s.Network()
		if err != nil {
			return err
		}
		joined = j.Joined
		s.NetnsPath = j.NetnsPath
		s.Env = append(slices.Clip(s.Env), j.Env...)
		files.Mounts = append(slices.Clip(files.Mounts), j.Mounts...)
	}
	sp, err := d.bundleSpec(s, rfs.merged(), files.Mounts)
	if err != nil {
		return err
	}
	bundle := filepath.Join(dir, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return err
	}
	data, err := json.Marshal(sp)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), data, 0o600); err != nil {
		return err
	}
	// The agent's peer is recorded once runc has returned (its pid is known), while the
	// agent's runtime starts, rather than after its ready line.
	peer := func() error {
		if d.opts.Engine.Sentry {
			if err := d.adoptBroker(s.ID); err != nil {
				return fmt.Errorf("agent broker: %w", err)
			}
		}
		return d.recordPeer(s.ID, s.UIDBase)
	}
	if err := d.run(ctx, s.ID, bundle, memory, peer); err != nil {
		return err
	}
	if joined != nil && s.NetnsPath != "" {
		joined() // the container's processes hold the namespace from here on
	}
	d.primeAgent(s.ID)
	return nil
}

// run starts the container detached, calls started once the engine has returned, and
// waits for its agent to say it is ready; with a memory image it restores the container
// from it instead, and the agent, restored as it was, takes connections on the new
// channel at once.
func (d *Driver) run(ctx context.Context, id, bundle, memory string, started func() error) error {
	sock, err := d.bindAgentSocket(id)
	if err != nil {
		return err
	}
	defer sock.Close()
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	logf, err := os.OpenFile(filepath.Join(d.dir(id), agentLogName), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		readyW.Close()
		return err
	}
	defer logf.Close()
	// The container inherits runc's stdio, so both go to the log file: a pipe would stay
	// open for the container's whole life.
	channel := sock // the agent listens on the socket itself
	if d.opts.Engine.Sentry {
		if channel, err = d.startBroker(id, sock, logf); err != nil {
			readyW.Close()
			return err
		}
		defer channel.Close()
	}
	logArgs, err := d.engineLogArgs(d.dir(id))
	if err != nil {
		readyW.Close()
		return err
	}
	cmd := exec.CommandContext(ctx, d.opts.Engine.Path, append(d.globalArgs(), logArgs...)...)
	passed := 2
	if d.opts.Engine.Sentry {
		// The channel is the agent's stdin: an engine restores a container with new
		// standard descriptors, but not with other descriptors passed in (see
		// checkpoint.go).
		cmd.Stdin = channel
		cmd.ExtraFiles = []*os.File{readyW} // fd 3
		passed = 1
	} else {
		cmd.ExtraFiles = []*os.File{readyW, channel} // fds 3 and 4 (agentFD)
	}
	sub := "run"
	args := append([]string{sub, "--detach", "--bundle", bundle}, d.opts.Engine.passFDs(passed)...)
	if memory != "" {
		// The spec is the daemon's own, never the sandbox's; a clone's differs from its
		// source's in its identity (ids, mounts, network), which runsc's default check
		// refuses, so a difference is only logged. Not --background (pages loading on
		// after the restore returns): it gained nothing measurable for a resume's first
		// answer (bench/RESULTS.md), and a page that failed to load would then end a
		// sandbox already reported running.
		sub = "restore"
		args = []string{"--restore-spec-validation=warning", sub, "--detach", "--bundle", bundle, "--image-path", memory}
	}
	args = append(args, "--pid-file", filepath.Join(d.ctlDir(id), "init.pid"), d.containerID(id))
	cmd.Args = append(cmd.Args, args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	err = cmd.Start()
	readyW.Close()
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s%s", d.opts.Engine.Name, sub, err, d.tail(id), engineTail(d.dir(id), d.opts.Engine.Name))
	}
	if err := started(); err != nil {
		return err
	}
	if memory != "" {
		return nil // a restored agent said it was ready before it was saved
	}
	ctx, cancel := context.WithTimeout(ctx, d.opts.ReadyTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(readyR).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("unexpected %q", line)
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("sandbox agent did not start (%v); agent log: %s%s", err, d.tail(id), engineTail(d.dir(id), d.opts.Engine.Name))
		}
		return nil
	case <-ctx.Done():
		readyR.Close()
		return fmt.Errorf("sandbox agent not ready: %w%s", ctx.Err(), engineTail(d.dir(id), d.opts.Engine.Name))
	}
}

// tail returns the end of the agent's log, for error messages.
func (d *Driver) tail(id string) string {
	return strings.TrimSpace(string(logTail(d.dir(id), 2048)))
}

func (d *Driver) globalArgs() []string {
	return append([]string{"--root", d.opts.RuncRoot}, d.opts.Engine.Args...)
}

// runc runs the engine (runc or its stand-in) with the driver's global flags.
func (d *Driver) runc(ctx context.Context, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, d.opts.Engine.Path, append(d.globalArgs(), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%s %s: %w: %s", d.opts.Engine.Name, args[0], err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

// Stop implements runtime.Driver.
func (d *Driver) Stop(ctx context.Context, id string) error {
	var errs []error
	if err := d.kill(ctx, id); err != nil {
		errs = append(errs, err)
	}
	d.stopBroker(id)
	if err := d.cg.remove(d.cgroupPath(id)); err != nil {
		errs = append(errs, err)
	}
	dir := d.dir(id)
	if err := (rootfs{dir}).unmount(); err != nil {
		errs = append(errs, err)
	} else if err := bindsource.Unmount(filepath.Join(dir, "fs")); err != nil {
		errs = append(errs, err)
	} else if err := loopdev.WaitReleased(filepath.Join(dir, diskImage)); err != nil {
		errs = append(errs, err) // not stopped until its writes are in the image
	}
	d.peers.Delete(id)
	d.dropKept(id)
	d.usageCache.Delete(id)
	for _, p := range []string{"bundle", "ctl", "run", "rootfs"} {
		os.RemoveAll(filepath.Join(dir, p))
	}
	return errors.Join(errs...)
}

// Delete implements runtime.Driver.
func (d *Driver) Delete(ctx context.Context, id string) error {
	if err := d.Stop(ctx, id); err != nil {
		return err
	}
	dir := d.dir(id)
	// Never remove through a mount: a leftover mount could be a shared image layer.
	if m := mountsUnder(dir); len(m) > 0 {
		return fmt.Errorf("oci: %s still has mounts %v; not removing it", dir, m)
	}
	return os.RemoveAll(dir)
}

func isNotExist(err error) bool {
	s := err.Error()
	return strings.Contains(s, "does not exist") || strings.Contains(s, "not exist")
}

type runcState struct {
	Status string `json:"status"`
	Pid    int    `json:"pid"`
}

// Status implements runtime.Driver.
func (d *Driver) Status(ctx context.Context, id string) (runtime.Status, error) {
	out, err := d.runc(ctx, "state", d.containerID(id))
	if err != nil {
		if isNotExist(err) {
			return runtime.StatusAbsent, nil
		}
		return "", err
	}
	var st runcState
	if err := json.Unmarshal(out, &st); err != nil {
		return "", fmt.Errorf("runc state: %w", err)
	}
	switch st.Status {
	case "running", "created":
		return runtime.StatusRunning, nil
	case "paused":
		return runtime.StatusPaused, nil
	default:
		return runtime.StatusStopped, nil
	}
}

// Stats implements runtime.Driver: the cgroup's readings, the disk's file system and
// the TCP sockets of the network namespace its processes are in.
func (d *Driver) Stats(ctx context.Context, id string) (runtime.Stats, error) {
	path := d.cgroupPath(id)
	s, err := d.cg.stats(path)
	if err != nil {
		return s, err
	}
	s.DiskUsed, s.DiskLimit = d.diskUsage(id)
	s.Connections = tcpSockets(d.initPID(id))
	return s, nil
}

var _ runtime.LimitCounter = (*Driver)(nil)

// LimitCounts implements runtime.LimitCounter.
func (d *Driver) LimitCounts(ctx context.Context, id string) (runtime.Stats, error) {
	return d.cg.counters(d.cgroupPath(id))
}

// Freeze implements runtime.Freezer.
func (d *Driver) Freeze(ctx context.Context, id string) error {
	_, err := d.runc(ctx, "pause", d.containerID(id))
	return err
}

// Thaw implements runtime.Freezer.
func (d *Driver) Thaw(ctx context.Context, id string) error {
	_, err := d.runc(ctx, "resume", d.containerID(id))
	return err
}

// List implements runtime.Driver: sandbox directories, runc containers and cgroups that
// carry Airlock's names.
func (d *Driver) List(ctx context.Context) ([]string, error) {
	seen := map[string]bool{}
	entries, err := os.ReadDir(d.opts.Root)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") { // not Probe's
			seen[e.Name()] = true
		}
	}
	// The engine reads its root's entries, then each one's state: a container deleted
	// in between (a cleanup running, or a delete the last daemon left running when it
	// was killed) fails the whole list. It is read again; the race does not last.
	var out []byte
	for try := 0; ; try++ {
		out, err = d.runc(ctx, "list", "--format", "json")
		if err == nil {
			break
		}
		if try == 4 || ctx.Err() != nil {
			return nil, err
		}
		time.Sleep(time.Duration(try+1) * 50 * time.Millisecond)
	}
	var list []struct {
		ID string `json:"id"`
	}
	if len(bytes.TrimSpace(out)) > 0 && !bytes.Equal(bytes.TrimSpace(out), []byte("null")) {
		if err := json.Unmarshal(out, &list); err != nil {
			return nil, fmt.Errorf("runc list: %w", err)
		}
	}
	for _, c := range list {
		if id, ok := strings.CutPrefix(c.ID, "airlock-"); ok {
			seen[id] = true
		}
	}
	for _, id := range d.cg.list("/" + d.opts.CgroupParent) {
		if !strings.HasPrefix(id, ".") { // not Probe's
			seen[id] = true
		}
	}
	ids := make([]string, 0, len(seen))
	for id := range seen {
		ids = append(ids, id)
	}
	return ids, nil
}

// mountsUnder lists mount points at or below dir.
func mountsUnder(dir string) []string {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		mp := bindsource.UnescapeMount(f[4])
		if mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	return out
}

// attachStorage makes sure the sandbox's upper-layer filesystem exists and is mounted
// at <dir>/fs when it has a disk cap.
func (d *Driver) attachStorage(ctx context.Context, id string, disk int64) error {
	if disk <= 0 {
		return nil
	}
	dir := d.dir(id)
	fsDir := filepath.Join(dir, "fs")
	if mounted, err := bindsource.MountRoot(fsDir); err != nil || mounted {
		return err
	}
	img := filepath.Join(dir, diskImage)
	fresh := false
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		if d.pool != nil && disk == d.pool.size {
			if taken, err := d.pool.take(img, fsDir); taken || err != nil {
				return err // mounted already
			}
		}
		if err := d.disks.make(ctx, img, disk); err != nil {
			return err
		}
		fresh = true
	} else if err != nil {
		return err
	}
	if fresh {
		// Never mounted: no loop device can hold it, and its file system is new.
		if err := os.MkdirAll(fsDir, 0o711); err != nil {
			return err
		}
		return loopdev.Mount(img, fsDir, "")
	}
	return mountDisk(ctx, d.log, img, fsDir, "")
}

// ReadLayer implements runtime.Storage.
func (d *Driver) ReadLayer(ctx context.Context, id string, disk int64, read func(upper string) error) error {
	return d.withStorage(ctx, id, disk, true, func(dir string) error { return read(filepath.Join(dir, "upper")) })
}

// ReplaceLayer implements runtime.Storage: the old layer is set aside while the new one
// is filled, and removed once the new one is in place, with overlayfs's work directory
// (which belongs to the old one).
func (d *Driver) ReplaceLayer(ctx context.Context, id string, disk int64, fill func(upper string) error) error {
	return d.withStorage(ctx, id, disk, false, func(dir string) error {
		if err := durable.ReplaceDir(filepath.Join(dir, "upper"), fill); err != nil {
			return err
		}
		return os.RemoveAll(filepath.Join(dir, "work"))
	})
}

// withStorage makes the sandbox's storage available (creating it with a cap of disk
// bytes if it does not exist yet) and calls fn with the directory that holds (or will
// hold) its upper layer as "upper". The container must not be running unless readOnly.
func (d *Driver) withStorage(ctx context.Context, id string, disk int64, readOnly bool, fn func(dir string) error) error {
	dir := d.dir(id)
	fsDir := filepath.Join(dir, "fs")
	st, err := d.Status(ctx, id)
	if err != nil {
		return err
	}
	if st != runtime.StatusAbsent && !readOnly {
		return fmt.Errorf("oci: sandbox %s has a container; stop it before changing its storage", id)
	}
	if st != runtime.StatusAbsent {
		return fn(fsDir) // running or paused: its storage is mounted
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	mounted, err := bindsource.MountRoot(fsDir)
	if err != nil {
		return err
	}
	if err := d.attachStorage(ctx, id, disk); err != nil {
		return err
	}
	if !mounted && disk > 0 {
		defer bindsource.Unmount(fsDir)
	}
	if err := os.MkdirAll(fsDir, 0o711); err != nil {
		return err
	}
	return fn(fsDir)
}

// waitExit waits, up to 10 s, for the process a pidfd names to end.
func waitExit(pidfd int) {
	fds := []unix.PollFd{{Fd: int32(pidfd), Events: unix.POLLIN}}
	for {
		if _, err := unix.Poll(fds, 10_000); !errors.Is(err, unix.EINTR) {
			return
		}
	}
}

// kill ends a container and deletes runc's record of it. runc's own "delete --force"
// sleeps a fixed 100 ms after its SIGKILL; waiting on the init's pidfd instead ends as
// soon as the process is gone.
func (d *Driver) kill(ctx context.Context, id string) error {
	cid := d.containerID(id)
	out, err := d.runc(ctx, "state", cid)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return err
	}
	var st runcState
	json.Unmarshal(out, &st)
	if st.Status != "stopped" && st.Pid > 0 {
		pidfd, perr := unix.PidfdOpen(st.Pid, 0)
		if st.Status == "paused" {
			d.runc(ctx, "resume", cid) // a frozen init cannot die
		}
		if _, err := d.runc(ctx, "kill", cid, "KILL"); err != nil && !isNotExist(err) && !strings.Contains(err.Error(), "not running") {
			if perr == nil {
				unix.Close(pidfd)
			}
			// The engine's own record may outlive its processes (runsc's sandbox,
			// ended while the daemon was killed mid-stop, cannot take a signal any
			// more); its forced delete ends whatever is left and removes the record.
			if _, ferr := d.runc(ctx, "delete", "--force", cid); ferr != nil && !isNotExist(ferr) {
				return errors.Join(err, ferr)
			}
			return nil
		}
		if perr == nil {
			waitExit(pidfd)
			unix.Close(pidfd)
		}
	}
	if _, err := d.runc(ctx, "delete", cid); err != nil && !isNotExist(err) {
		// Fall back to runc's own way (it also removes processes left in the cgroup).
		if _, err := d.runc(ctx, "delete", "--force", cid); err != nil && !isNotExist(err) {
			return err
		}
	}
	return nil
}
