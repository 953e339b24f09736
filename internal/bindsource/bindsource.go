// Package bindsource makes the host files that sandboxes see through read-only binds
// show nothing of the host in a sandbox's mount table. The kernel lists each mount by
// the path of its root within its filesystem (the fourth field of /proc/self/mountinfo):
// a bind of a file on the host's disk shows the file's whole path, with the node's state
// directory and any directory named for the sandbox; the same file bound from a
// filesystem mounted at its own directory shows its name alone. A bind made from a
// descriptor does not help: it still shows the path of the file the descriptor names.
//
// View mounts a read-only overlay of a directory, for files that are replaced whole (by
// a rename) and never written in place, since overlayfs leaves changes to a layer under
// a mounted overlay undefined; Tmpfs mounts a small tmpfs, for files written in place.
// The package only mounts and unmounts what its callers name; it keeps no state.
package bindsource

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/durable"
)

// View names inside a view's directory: the link to the directory shown, the empty
// second layer overlayfs needs to mount without an upper layer, and the mount.
const (
	viewLower = "src"
	viewEmpty = "empty"
	viewMount = "view"
)

// View mounts at dir/view a read-only overlay of the directory lower, so that a file of
// lower bound from the view shows as /NAME, and the overlay's own options (which a
// sandbox's mount table shows too) name only "src" and "empty". A view already mounted
// there (left by an earlier run) is replaced. It returns dir/view.
func View(dir, lower string) (string, error) {
	for _, d := range []string{filepath.Join(dir, viewEmpty), filepath.Join(dir, viewMount)} {
		if err := os.MkdirAll(d, 0o711); err != nil {
			return "", err
		}
	}
	target := filepath.Join(dir, viewMount)
	if err := Unmount(target); err != nil {
		return "", err
	}
	link := filepath.Join(dir, viewLower)
	if err := os.Remove(link); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	abs, err := filepath.Abs(lower)
	if err != nil {
		return "", err
	}
	if err := os.Symlink(abs, link); err != nil {
		return "", err
	}
	if err := MountIn(dir, "overlay", target, "overlay", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV,
		"lowerdir="+viewLower+":"+viewEmpty); err != nil {
		return "", fmt.Errorf("mount a view of %s: %w", lower, err)
	}
	return target, nil
}

// Unview removes the view View mounted in dir.
func Unview(dir string) error { return Unmount(filepath.Join(dir, viewMount)) }

// Tmpfs makes sure a tmpfs of its own is mounted at dir (made if missing, mode 0700
// until the caller says otherwise), with options opts (such as "mode=0711,size=1m"),
// nosuid and nodev; a tmpfs already mounted there is kept with its files.
func Tmpfs(dir, opts string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	mounted, err := IsTmpfs(dir)
	if err != nil || mounted {
		return err
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mount a tmpfs on %s: %w", dir, err)
	}
	return nil
}

// IsTmpfs says whether a tmpfs is mounted at dir itself (the topmost mount there): a
// directory that is merely on a tmpfs, such as one under /run, is not. It asks the
// kernel about dir alone, never reading the mount table, whose length grows with every
// sandbox's mounts.
func IsTmpfs(dir string) (bool, error) {
	root, err := MountRoot(dir)
	if err != nil || !root {
		return false, err
	}
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false, &os.PathError{Op: "statfs", Path: dir, Err: err}
	}
	return st.Type == unix.TMPFS_MAGIC, nil
}

// MountRoot says whether path (its links followed) is the root of a mount, the topmost
// one there: a mount point, or the root directory. A missing path is not.
func MountRoot(path string) (bool, error) {
	var stx unix.Statx_t
	if err := unix.Statx(unix.AT_FDCWD, path, 0, unix.STATX_TYPE, &stx); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, &os.PathError{Op: "statx", Path: path, Err: err}
	}
	if stx.Attributes_mask&unix.STATX_ATTR_MOUNT_ROOT == 0 {
		return false, fmt.Errorf("statx %s: the kernel does not tell mount roots (Linux 5.8 or later does)", path)
	}
	return stx.Attributes&unix.STATX_ATTR_MOUNT_ROOT != 0, nil
}

// UnescapeMount undoes the octal escapes (\040 for a space) of a mountinfo path.
func UnescapeMount(s string) string {
	if !strings.Contains(s, "\\") {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// Unmount detaches every mount stacked on p; a p that is no mount point (or does not
// exist) is left alone.
func Unmount(p string) error {
	for i := 0; i < 16; i++ {
		err := unix.Unmount(p, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil // not a mount point (any more)
		}
		if err != nil {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return fmt.Errorf("unmount %s: still mounted", p)
}

// MountIn mounts with dir as the working directory, so that relative paths in data
// resolve under it (and the kernel, which shows data in the mount table, shows them as
// given). The change of directory happens on a thread of its own that no longer shares
// the process's working directory, and that thread is retired after.
func MountIn(dir, source, target, fstype string, flags uintptr, data string) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		if err := unix.Unshare(unix.CLONE_FS); err != nil {
			errc <- err
			return
		}
		if err := unix.Chdir(dir); err != nil {
			errc <- err
			return
		}
		errc <- unix.Mount(source, target, fstype, flags, data)
	}()
	return <-errc
}

// Names names sandboxes' directories on a tmpfs by a keyed hash of their ids. A sandbox
// sees its directory's name in its mount table and can tell nothing from it; the
// daemon finds the directory again from the id for as long as the files live, since the
// key is kept on the same tmpfs (root's, 0600, at its root, which no sandbox sees).
type Names struct{ key []byte }

// namesKey is the key's file at the root of the tmpfs.
const namesKey = ".names-key"

// OpenNames reads the key kept in dir, making one if there is none.
func OpenNames(dir string) (*Names, error) {
	p := filepath.Join(dir, namesKey)
	key, err := os.ReadFile(p)
	if err == nil && len(key) == 32 {
		return &Names{key: key}, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	key = make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	if err := durable.WriteFile(p, key, 0o600); err != nil {
		return nil, err
	}
	return &Names{key: key}, nil
}

// Name is the name of id's directory.
func (n *Names) Name(id string) string {
	m := hmac.New(sha256.New, n.key)
	m.Write([]byte(id))
	return hex.EncodeToString(m.Sum(nil)[:16])
}
