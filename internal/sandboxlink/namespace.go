package sandboxlink

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"runtime"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// newNamed makes a network namespace with lo up and IPv6 off, bind-mounted on a new file
// at path (as `ip netns add` does). The file is made first, so a crash leaves a record
// that removeNamed clears. On failure nothing is left.
func newNamed(path string) (retErr error) {
	f, err := os.OpenFile(path, os.O_RDONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if errors.Is(err, fs.ErrExist) {
		return errdefs.Exists("network namespace: namespace file %s already exists", path)
	}
	if err != nil {
		return fmt.Errorf("network namespace: %w", err)
	}
	f.Close()
	defer func() {
		if retErr != nil {
			retErr = errors.Join(retErr, removeNamed(path))
		}
	}()
	return onThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("network namespace: unshare: %w", err)
		}
		if err := setupNew(); err != nil {
			return err
		}
		self := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(self, path, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("network namespace: bind-mount %s: %w", path, err)
		}
		return nil
	})
}

// setupNew runs on a thread inside a fresh namespace: it turns IPv6 off (for every
// interface, present and future) and brings lo up.
func setupNew() error {
	for _, name := range []string{"all", "default"} {
		p := "/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6"
		err := os.WriteFile(p, []byte("1"), 0)
		if err != nil && !errors.Is(err, fs.ErrNotExist) { // no IPv6 in this kernel at all
			return fmt.Errorf("network namespace: disable IPv6: %w", err)
		}
	}
	// Package-level netlink calls open their socket on the calling thread, i.e. inside.
	lo, err := netlink.LinkByName("lo")
	if err == nil {
		err = netlink.LinkSetUp(lo)
	}
	if err != nil {
		return fmt.Errorf("network namespace: lo up: %w", err)
	}
	return nil
}

// removeNamed unmounts and removes a namespace file; a missing file or mount is fine.
// The namespace itself goes when its last process and open handle are gone.
func removeNamed(path string) error {
	if err := unmountNamed(path); err != nil {
		return err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("network namespace: %w", err)
	}
	return nil
}

// onThread runs fn on a goroutine locked to its OS thread and never unlocked, so the Go
// runtime ends that thread with the goroutine: a thread whose namespace fn changed never
// runs anything else.
func onThread(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// Come back to the thread's own namespace afterwards: the runtime never ends the
		// main thread, so a thread left in another namespace could serve other work.
		home, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			errc <- fmt.Errorf("network namespace: open own namespace: %w", err)
			return // the thread stays locked and ends with the goroutine
		}
		defer home.Close()
		err = fn()
		if unix.Setns(int(home.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}

// DialIn dials addr over TCP from inside the network namespace that nsfd names (a
// namespace file or a pidfd of a process in it). The dial runs on a thread switched
// into the namespace; a socket stays in the namespace it was made in, so the
// connection works from any thread afterwards.
func DialIn(ctx context.Context, nsfd int, addr string) (net.Conn, error) {
	var c net.Conn
	err := onThread(func() error {
		if err := unix.Setns(nsfd, unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("network namespace: enter: %w", err)
		}
		var d net.Dialer
		var err error
		c, err = d.DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// Joined lets go of sandbox id's namespace mount once its container runs in the
// namespace and so keeps it alive: the mount would otherwise stay in the host's table
// for the sandbox's whole life, and every container start reads and copies that table
// whole. The file stays as the namespace's record (Get, List and Delete go by it, and a
// restarted daemon finds the sandbox's leftovers by it); the namespace, with the
// sandbox's end of its link, goes when the container does. A namespace never mounted,
// or unmounted already, is fine; so is an id with no namespace file.
func (m *Manager) Joined(id string) error {
	if err := validID(id); err != nil {
		return err
	}
	return unmountNamed(m.cfg.netnsPath(id))
}

// unmountNamed unmounts a namespace file's bind; a missing file or mount is fine.
func unmountNamed(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("network namespace: unmount %s: %w", path, err)
	}
	return nil
}
