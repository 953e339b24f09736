package fence

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"
)

// fenceHiddenDirs are covered with an empty read-only tmpfs in the fence's mount
// namespace: where UNIX sockets of the host's daemons and of the user's agents live (the
// Airlock daemon's, a container engine's, D-Bus, ssh-agent, tmux), which Landlock before
// ABI 9 does not wall, the homes, and private keys. The workspace, the scratch directory
// and the extra paths are bound back at their own paths when they lie inside one.
var fenceHiddenDirs = []string{"/run", "/var/run", "/tmp", "/var/tmp", "/home", "/root", "/etc/ssl/private"}

// fenceSecretFiles are covered with /dev/null: files a fenced root could otherwise read
// through the read-only /etc.
var fenceSecretFiles = []string{"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/ssh/ssh_host_*key"}

// fenceShmSize caps the private /dev/shm, which is memory.
const fenceShmSize = "64m"

// fenceMounts hides the host in the child's own mount namespace. Nothing here reaches the
// host's mount table. It reports whether the private /dev/shm was made. open opens each
// path that stays visible (O_PATH) before anything is hidden; nil opens it as this thread.
func fenceMounts(spec fenceSpec, open func(path string) (int, error)) (shm bool, err error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return false, fmt.Errorf("make mounts private: %w", err)
	}
	// Open what stays visible before anything is hidden.
	if open == nil {
		open = fenceOpenPath
	}
	keep := fenceKeepPaths(spec)
	fds := make([]int, len(keep))
	for i, p := range keep {
		fd, err := open(p)
		if err != nil {
			return false, fmt.Errorf("open %s: %w", p, err)
		}
		defer unix.Close(fd)
		fds[i] = fd
	}
	var hide []string
	for _, d := range append(slices.Clone(fenceHiddenDirs), spec.Homes...) {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() {
			hide = append(hide, d) // not when absent, or a link to a directory hidden in its own right
		}
	}
	var made []string
	for _, d := range fenceSortedOutermost(hide) {
		if err := unix.Mount("tmpfs", d, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=1024"); err != nil {
			return false, fmt.Errorf("hide %s: %w", d, err)
		}
		made = append(made, d)
	}
	for i, p := range keep {
		if !slices.ContainsFunc(made, func(h string) bool { return fenceWithin(p, h) }) {
			continue // never hidden
		}
		var st unix.Stat_t
		if err := unix.Fstat(fds[i], &st); err != nil {
			return false, fmt.Errorf("stat %s: %w", p, err)
		}
		if err := fenceMountPoint(p, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return false, fmt.Errorf("bind %s back: %w", p, err)
		}
		src := "/proc/self/fd/" + strconv.Itoa(fds[i])
		if err := unix.Mount(src, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return false, fmt.Errorf("bind %s back: %w", p, err)
		}
	}
	for _, d := range made {
		if err := unix.Mount("", d, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
			return false, fmt.Errorf("make %s read-only: %w", d, err)
		}
	}
	for _, pattern := range fenceSecretFiles {
		matches, _ := filepath.Glob(pattern)
		for _, f := range matches {
			if fi, err := os.Lstat(f); err != nil || !fi.Mode().IsRegular() {
				continue
			}
			if err := unix.Mount("/dev/null", f, "", unix.MS_BIND, ""); err != nil {
				return false, fmt.Errorf("hide %s: %w", f, err)
			}
		}
	}
	if fi, err := os.Lstat("/dev/shm"); err == nil && fi.IsDir() {
		if err := unix.Mount("tmpfs", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+fenceShmSize); err != nil {
			return false, fmt.Errorf("private /dev/shm: %w", err)
		}
		shm = true
	}
	if err := fenceReadOnly(spec, shm); err != nil {
		return false, err
	}
	return shm, nil
}

// fenceOpenPath opens p as a handle (O_PATH) for a bind mount.
func fenceOpenPath(p string) (int, error) { return unix.Open(p, unix.O_PATH|unix.O_CLOEXEC, 0) }

// fenceReadOnly makes every mount read-only but where the command may write. Landlock
// walls writes, but not chmod, chown, utimes nor extended attributes: without this a
// fenced root could make a host binary setuid or give /etc/passwd to a user, and anyone
// could loosen the modes of their own files outside the workspace.
func fenceReadOnly(spec fenceSpec, shm bool) error {
	var write []string
	if spec.Access == "rw" && spec.Workspace != "" {
		write = append(write, spec.Workspace)
	}
	if spec.Scratch != "" {
		write = append(write, spec.Scratch)
	}
	write = append(write, spec.ExtraWrite...)
	if shm {
		write = append(write, "/dev/shm")
	}
	write = fenceSortedOutermost(write)
	hostRO := make([]bool, len(write))
	for i, p := range write {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			return fmt.Errorf("statfs %s: %w", p, err)
		}
		hostRO[i] = st.Flags&unix.ST_RDONLY != 0
	}
	ro := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}
	if err := unix.MountSetattr(unix.AT_FDCWD, "/", unix.AT_RECURSIVE, &ro); err != nil {
		return fmt.Errorf("make the host read-only: %w", err)
	}
	rw := unix.MountAttr{Attr_clr: unix.MOUNT_ATTR_RDONLY}
	for i, p := range write {
		if hostRO[i] {
			continue // read-only outside the fence too
		}
		if err := unix.Mount(p, p, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind %s to make it writable: %w", p, err)
		}
		if err := unix.MountSetattr(unix.AT_FDCWD, p, unix.AT_RECURSIVE, &rw); err != nil {
			return fmt.Errorf("make %s writable: %w", p, err)
		}
	}
	return nil
}

// fenceKeepPaths lists the paths the command may reach, leaving out any that lies inside
// another (binding the outer one brings it back too).
func fenceKeepPaths(spec fenceSpec) []string {
	var all []string
	if spec.Access != "none" && spec.Workspace != "" {
		all = append(all, spec.Workspace)
	}
	if spec.Scratch != "" {
		all = append(all, spec.Scratch)
	}
	all = append(all, spec.ExtraRead...)
	all = append(all, spec.ExtraWrite...)
	if spec.Resolv != "" {
		all = append(all, spec.Resolv)
	}
	return fenceSortedOutermost(all)
}

// fenceSortedOutermost returns paths shortest first, without those that lie inside another.
func fenceSortedOutermost(paths []string) []string {
	paths = slices.Clone(paths)
	slices.SortFunc(paths, func(a, b string) int { return len(a) - len(b) })
	var out []string
	for _, p := range paths {
		if !slices.ContainsFunc(out, func(o string) bool { return fenceWithin(p, o) }) {
			out = append(out, p)
		}
	}
	return out
}

// fenceMountPoint makes p, a directory or a file as on the host, in the tmpfs that hides
// it, to bind the host's p onto.
func fenceMountPoint(p string, dir bool) error {
	if dir {
		return os.MkdirAll(p, 0o755)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	return f.Close()
}
