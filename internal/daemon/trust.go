package daemon

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/config"
	"github.com/airlockhq/airlock/internal/sweep"
	"golang.org/x/sys/unix"
)

// The paths the daemon is configured with (its state directory, socket, secrets
// directory, configuration and roles files, extra CAs, runc) are where a root process
// reads and writes. Another host user who can change what such a path names (make a
// directory on the way, swap a symbolic link, edit the file) could have the daemon
// trust their file, mount over a directory they choose, or chmod a file of theirs
// choosing. So each path must be root's all the way down.

// TrustedPath checks that only root can change what path names: every component from
// / down to path (following symbolic links, which must be root's too) is owned by root
// and writable by no one else — except that a directory above the last may be sticky
// (as /tmp is), where others may add names but cannot move or replace root's. A
// component that does not exist yet ends the walk: root makes it in a directory only
// root, or a sticky directory, lets make names in (the caller checks again once it has
// made it). It returns whether path exists.
func TrustedPath(path string) (bool, error) {
	if !filepath.IsAbs(path) {
		return false, fmt.Errorf("%s: not an absolute path", path)
	}
	if err := trustedEntry("/", "/", true); err != nil {
		return false, err
	}
	cur := "/"
	rest := splitPath(path)
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		switch name {
		case ".":
			continue
		case "..":
			cur = filepath.Dir(cur) // cur has no links in it: lexical is right
			continue
		}
		next := filepath.Join(cur, name)
		var st unix.Stat_t
		if err := unix.Lstat(next, &st); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return false, nil
			}
			return false, &fs.PathError{Op: "lstat", Path: next, Err: err}
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			if st.Uid != 0 {
				return false, fmt.Errorf("%s (on the way to %s) is a symbolic link owned by uid %d; only root's are followed", next, path, st.Uid)
			}
			if hops++; hops > 40 {
				return false, &fs.PathError{Op: "resolve", Path: path, Err: unix.ELOOP}
			}
			target, err := os.Readlink(next)
			if err != nil {
				return false, err
			}
			if filepath.IsAbs(target) {
				cur = "/"
			}
			rest = append(splitPath(target), rest...)
			continue
		}
		last := len(rest) == 0
		if err := trustedEntry(next, path, last); err != nil {
			return false, err
		}
		if !last && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			return false, &fs.PathError{Op: "resolve", Path: path, Err: unix.ENOTDIR}
		}
		cur = next
	}
	return true, nil
}

// trustedEntry checks one component: root's, and writable by no one else (group root
// is root's own) — or, not the last, a sticky directory.
func trustedEntry(p, path string, last bool) error {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	what := p
	if p != path {
		what = p + " (on the way to " + path + ")"
	}
	if st.Uid != 0 {
		return fmt.Errorf("%s is owned by uid %d; it must be root's, or that user could change what the daemon uses (chown root %s)", what, st.Uid, p)
	}
	othersWrite := st.Mode&0o002 != 0 || st.Mode&0o020 != 0 && st.Gid != 0
	sticky := st.Mode&unix.S_IFMT == unix.S_IFDIR && st.Mode&unix.S_ISVTX != 0
	if othersWrite && (last || !sticky) {
		return fmt.Errorf("%s has mode %s: users other than root may write to it (chmod go-w %s)", what, strconv.FormatUint(uint64(st.Mode&0o7777), 8), p)
	}
	return nil
}

func splitPath(p string) []string {
	var out []string
	for _, s := range strings.Split(p, "/") {
		if s != "" {
			out = append(out, s)
		}
	}
	return out
}

// TrustedFile is TrustedPath for a file that must exist (a configuration file, a CA).
func TrustedFile(path, what string) error {
	ok, err := TrustedPath(path)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !ok {
		return fmt.Errorf("%s %s: %w", what, path, fs.ErrNotExist)
	}
	return nil
}

// trustedDir makes dir (and what is missing above it) if it is not there and checks
// that it is a directory only root can change: checked before it is made, so no
// directory is made through another user's link, and after, so one another user made
// in a sticky directory in between is refused.
func trustedDir(dir string, mode os.FileMode, what string) error {
	if _, err := TrustedPath(dir); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if err := os.MkdirAll(dir, mode); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if _, err := TrustedPath(dir); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s %s is not a directory", what, dir)
	}
	return nil
}

// lockFile takes an exclusive lock on path (made 0600 if missing, never through a
// link), held until the returned file is closed: the lock ends with the process, so a
// crashed daemon leaves none behind. It records the holder's pid, for the message of the
// next one to find it held.
func lockFile(path, what string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("lock %s: %s is not a regular file", what, path)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder := ""
		if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 && len(b) < 32 {
			holder = " (pid " + strings.TrimSpace(string(b)) + ")"
		}
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("another daemon%s is using %s: %s is locked", holder, what, path)
		}
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// hostLockDir holds the locks of the names a daemon takes on the host itself. It is
// fixed, not configured, so that daemons with different configurations find each
// other's locks, and it is in /run, where only root makes directories.
const hostLockDir = sweep.HostLockDir

// lockHostNames locks the names on the host that two daemons must never share, whatever
// their state directories: the cgroup parent (a second daemon would reap the first's
// cgroups as its own leftovers) and, with networking, the nftables table and the veth
// prefix (it would rewrite the first's rules, which its table guard would then keep
// rewriting back). Only a root daemon has them to lock.
func lockHostNames(cfg config.Config, log *slog.Logger) ([]*os.File, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	if err := trustedDir(hostLockDir, 0o700, "host lock directory"); err != nil {
		if errors.Is(err, unix.EROFS) {
			// A read-only /run (some containers): nothing to lock with, and nothing
			// another daemon could lock either.
			log.Warn("the cgroup parent, nftables table and veth prefix are not locked against a second daemon", "err", err)
			return nil, nil
		}
		return nil, err
	}
	type name struct{ file, what string }
	names := []name{{"cgroup-" + cfg.CgroupParent, "cgroup parent " + cfg.CgroupParent}}
	if cfg.Network.Enabled {
		names = append(names, name{"nftables-" + cfg.Network.Table, "nftables table inet " + cfg.Network.Table},
			name{"veth-" + cfg.Network.HostPrefix, "veth prefix " + cfg.Network.HostPrefix})
	}
	var locks []*os.File
	for _, n := range names {
		f, err := lockFile(filepath.Join(hostLockDir, n.file+".lock"), n.what)
		if err != nil {
			for _, l := range locks {
				l.Close()
			}
			return nil, err
		}
		locks = append(locks, f)
	}
	return locks, nil
}
