package sweep

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// LockName is the file in a state directory that its daemon holds locked (flock) while
// it runs, with its pid inside.
const LockName = "airlock.lock"

// HostLockDir holds the lock files of the names daemons take on the host itself
// ("cgroup-PARENT", "nftables-TABLE", "veth-PREFIX"), each locked while a daemon uses
// the name.
const HostLockDir = "/run/airlock.names"

// HostLockNames are the names of the host lock files (in HostLockDir, without
// ".lock") of what r names.
func HostLockNames(r Record) []string {
	var out []string
	for _, p := range r.CgroupParents {
		out = append(out, "cgroup-"+p)
	}
	if r.Table != "" {
		out = append(out, "nftables-"+r.Table)
	}
	if r.VethPrefix != "" {
		out = append(out, "veth-"+r.VethPrefix)
	}
	return out
}

// StateDir is `airlock gc --state-dir`: it cleans up after the daemon of the state
// directory dir, which must be gone. It refuses while a daemon holds dir's lock, or
// while a running daemon holds the lock of any host name dir's record names (another
// daemon uses it now), and holds those locks itself while it works, so that no daemon
// starts on dir or those names meanwhile. It then runs Run with dir's record.
func StateDir(ctx context.Context, dir string, dryRun bool, each func(Item)) ([]Item, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("gc --state-dir must run as root (it stops containers and removes mounts and cgroups)")
	}
	if !filepath.IsAbs(dir) {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return nil, err
		}
		dir = abs
	}
	dir = filepath.Clean(dir)
	if err := ownedByUs(dir, true); err != nil {
		return nil, err
	}
	lock, err := tryLock(filepath.Join(dir, LockName), "state directory "+dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	if err := ownedByUs(filepath.Join(dir, RecordName), false); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%s has no %s: it is not an Airlock state directory, or its daemon predates the record (start `airlock serve` on it once and stop it, then run gc --state-dir again)", dir, RecordName)
		}
		return nil, err
	}
	rec, err := ReadRecord(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range HostLockNames(rec) {
		l, err := tryLock(filepath.Join(HostLockDir, name+".lock"), strings.Replace(name, "-", " ", 1))
		if err != nil {
			return nil, err
		}
		defer l.Close()
	}
	return Run(ctx, dir, rec, dryRun, each), nil
}

// ownedByUs checks that path is this user's and that no one else may write to it (a
// directory when dir is set, else a regular file), without following a link.
func ownedByUs(path string, dir bool) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	switch {
	case dir && !fi.IsDir():
		return fmt.Errorf("%s is not a directory", path)
	case !dir && !fi.Mode().IsRegular():
		return fmt.Errorf("%s is not a regular file", path)
	case st == nil || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is not owned by this user (uid %d)", path, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%s may be written by others (mode %v)", path, fi.Mode().Perm())
	}
	return nil
}

// tryLock takes the lock of an existing lock file at path, or refuses, naming the
// holder's pid, when a running process holds it. A missing file is no one's lock: it
// returns nil then.
func tryLock(path, what string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			holder := ""
			if b, rerr := os.ReadFile(path); rerr == nil && len(b) > 0 && len(b) < 32 {
				holder = " (pid " + strings.TrimSpace(string(b)) + ")"
			}
			return nil, fmt.Errorf("a running daemon%s uses %s (%s is locked): stop it first, or run `airlock gc` against it", holder, what, path)
		}
		return nil, fmt.Errorf("lock %s: %w", what, err)
	}
	return f, nil
}
