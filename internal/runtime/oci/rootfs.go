package oci

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
)

// idRange is the size of every sandbox's uid and gid range.
const idRange = 65536

// newUserns starts the holder (argv: the binary's hidden holder subcommand, which waits
// for its standard input to close) in a new user namespace with
// the mapping container id 0..65535 ↔ host id base..base+65535, opens that namespace and
// lets the holder go: the returned descriptor alone keeps the namespace, which has no
// process in it then, and serves only as the mapping of idmapped mounts. The holder is
// reaped in the background: its exit (a whole runtime's start and end) is no part of
// what the caller waits for.
func newUserns(argv []string, base uint32) (int, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: idRange}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: idRange}},
		Pdeathsig:   syscall.SIGKILL,
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return -1, err
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start user-namespace holder: %w", err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	in.Close()
	go cmd.Wait()
	if err != nil {
		return -1, fmt.Errorf("open user namespace: %w", err)
	}
	return fd, nil
}

// usernsCache keeps the user namespace of each uid base it was asked for, so that a
// sandbox given a base that an earlier one had (the lowest free base is handed out
// first) starts no holder process. The base is the whole key: the mapping is all there
// is to such a namespace, and nothing can enter it (no process is in it, and only the
// daemon holds it). At most max are kept, the least recently used going first. Callers
// asking for a base at once (a sandbox's root filesystem and its volumes) share one
// holder.
//
// A base asked for the first time is a sandbox beyond the most the node has run since
// its start; bases are handed out lowest first, so the next such sandbox will most
// likely ask for the base after it. That one's namespace is made at once in the
// background (while the cache has room), so the next create finds it ready rather than
// wait for a holder process. What is made ahead is a mapping like any other kept here:
// it holds no process, and only the daemon's descriptor keeps it.
type usernsCache struct {
	holder []string // newUserns's argv
	max    int

	mu      sync.Mutex
	fds     map[uint32]int
	order   []uint32                 // least recently used first
	pending map[uint32]chan struct{} // bases whose holder runs; closed when it is done
	closed  bool
	ahead   sync.WaitGroup // namespaces being made ahead
}

func newUsernsCache(holder []string, max int) *usernsCache {
	return &usernsCache{holder: holder, max: max, fds: map[uint32]int{}, pending: map[uint32]chan struct{}{}}
}

// get returns a descriptor of the namespace of base, which the caller closes.
func (c *usernsCache) get(base uint32) (int, error) {
	c.mu.Lock()
	for {
		if fd, ok := c.fds[base]; ok {
			c.touch(base)
			dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			c.mu.Unlock()
			return dup, err
		}
		wait, ok := c.pending[base]
		if !ok {
			break
		}
		// Another caller's holder makes it; if that fails, this caller tries its own.
		c.mu.Unlock()
		<-wait
		c.mu.Lock()
	}
	done := make(chan struct{})
	c.pending[base] = done
	c.mu.Unlock()
	fd, err := newUserns(c.holder, base)
	dup := -1
	if err == nil {
		if dup, err = unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0); err != nil {
			unix.Close(fd)
		}
	}
	c.mu.Lock()
	c.finish(base, done, fd, err)
	c.mu.Unlock()
	if err != nil {
		return -1, err
	}
	if next := base + idRange; next > base {
		c.makeAhead(next)
	}
	return dup, nil
}

// finish records the outcome of base's holder and wakes whoever waits for it; the
// caller holds mu. A namespace made after close is not kept.
func (c *usernsCache) finish(base uint32, done chan struct{}, fd int, err error) {
	delete(c.pending, base)
	close(done)
	if err != nil {
		return
	}
	if c.closed {
		unix.Close(fd)
		return
	}
	c.fds[base] = fd
	c.order = append(c.order, base)
	for len(c.order) > c.max {
		unix.Close(c.fds[c.order[0]])
		delete(c.fds, c.order[0])
		c.order = c.order[1:]
	}
}

// makeAhead makes base's namespace in the background unless it is kept, being made, or
// the cache is full or closed (a namespace made ahead must never push out one in use).
// A failure is forgotten: the create that asks for base makes its own.
func (c *usernsCache) makeAhead(base uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.fds[base]; ok || c.closed || len(c.fds)+len(c.pending) >= c.max {
		return
	}
	if _, ok := c.pending[base]; ok {
		return
	}
	done := make(chan struct{})
	c.pending[base] = done
	c.ahead.Go(func() {
		fd, err := newUserns(c.holder, base)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.finish(base, done, fd, err)
	})
}

// touch moves base to the end of the order; the caller holds mu.
func (c *usernsCache) touch(base uint32) {
	if i := slices.Index(c.order, base); i >= 0 {
		c.order = append(append(c.order[:i:i], c.order[i+1:]...), base)
	}
}

// close lets go of every namespace kept, waiting for those being made ahead.
func (c *usernsCache) close() {
	c.mu.Lock()
	c.closed = true
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	c.fds, c.order = map[uint32]int{}, nil
	c.mu.Unlock()
	c.ahead.Wait()
}

// idmapMount binds src at dst as an idmapped mount through the user namespace usFD.
func idmapMount(usFD int, src, dst string, readOnly bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(usFD)}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// rootfs is the on-host layout of one sandbox's root filesystem.
//
//	<dir>/fs/upper, fs/work   the writable layer, in host ids of the sandbox's range
//	<dir>/m/0..n              each image layer idmapped, unmounted once the overlay holds it
//	<dir>/rootfs              the overlay the container runs on
type rootfs struct{ dir string }

func (r rootfs) merged() string { return filepath.Join(r.dir, "rootfs") }
func (r rootfs) upper() string  { return filepath.Join(r.dir, "fs", "upper") }

// mount builds the overlay. On failure it unmounts whatever it mounted.
func (r rootfs) mount(usFD int, base uint32, layers []string) (retErr error) {
	defer func() {
		if retErr != nil {
			r.unmount()
		}
	}()
	for _, d := range []string{r.upper(), filepath.Join(r.dir, "fs", "work"), r.merged()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The upper layer is not idmapped (overlayfs copies up with the mounter's
	// credentials, which an idmapped upper could not represent), so it holds host ids
	// of the sandbox's range; its root belongs to the sandbox's root.
	if err := os.Chown(r.upper(), int(base), int(base)); err != nil {
		return err
	}
	mdir := filepath.Join(r.dir, "m")
	lowers := make([]string, len(layers))
	for i, l := range layers {
		dst := filepath.Join(mdir, strconv.Itoa(i))
		if err := idmapMount(usFD, l, dst, true); err != nil {
			return err
		}
		lowers[len(layers)-1-i] = filepath.Join("m", strconv.Itoa(i)) // overlay lists the top layer first
	}
	if len(lowers) == 0 {
		// overlayfs needs a lower layer; an empty one stands in.
		empty := filepath.Join(r.dir, "fs", "empty")
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return err
		}
		lowers = []string{filepath.Join("fs", "empty")}
	}
	// Paths relative to the sandbox's directory: the kernel shows the options in the
	// sandbox's own mount table, and the host's layout is none of its business.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off",
		strings.Join(lowers, ":"), filepath.Join("fs", "upper"), filepath.Join("fs", "work"))
	if err := bindsource.MountIn(r.dir, "overlay", r.merged(), "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	return r.dropLayerMounts()
}

// dropLayerMounts unmounts the idmapped layers once the overlay is mounted: overlayfs
// holds private copies of its layers' mounts (idmapping included), so the overlay keeps
// working, and the host's mount table, which every container start reads and copies
// whole, keeps one mount a sandbox fewer.
func (r rootfs) dropLayerMounts() error {
	var errs []error
	mdir := filepath.Join(r.dir, "m")
	entries, _ := os.ReadDir(mdir)
	for _, e := range entries {
		p := filepath.Join(mdir, e.Name())
		if err := bindsource.Unmount(p); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(p)
	}
	return errors.Join(errs...)
}

// unmount removes the overlay and the idmapped mounts; it is safe to call on a partly
// mounted or unmounted rootfs.
func (r rootfs) unmount() error {
	var errs []error
	if err := bindsource.Unmount(r.merged()); err != nil {
		errs = append(errs, err)
	}
	// Layers are unmounted right after the overlay; some may be left by a failed mount
	// or by a daemon that stopped in between.
	if err := r.dropLayerMounts(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
