package testenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockhq/airlock/internal/sweep"
	"golang.org/x/sys/unix"
)

// ownerName marks a directory a test process made for a node, a driver or a daemon:
// the pid and start time of that process. A test process that is killed (go test's
// -timeout panics without running cleanups) leaves its directories, and whatever their
// nodes put on the host, to the next test process's Sweep.
const ownerName = ".airlock-test-owner"

// TempDir makes a directory /tmp/PREFIX… (short: unix socket paths are limited to 108
// bytes) with mode 0711, as nodes want their state's parents, and marks it as this
// process's for Sweep. The caller removes it.
func TempDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := markedDir(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return dir
}

func markedDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("/tmp", prefix)
	if err != nil {
		return "", err
	}
	os.Chmod(dir, 0o711)
	if err := os.WriteFile(filepath.Join(dir, ownerName), []byte(processID(os.Getpid())+"\n"), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// processID is "PID STARTTIME" for a live process, "" for one that is gone: the start
// time tells a reused pid from the process that had it.
func processID(pid int) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ""
	}
	i := strings.LastIndex(string(b), ") ") // comm may hold spaces and parentheses
	if i < 0 {
		return ""
	}
	f := strings.Fields(string(b)[i+2:])
	if len(f) < 20 {
		return ""
	}
	return strconv.Itoa(pid) + " " + f[19] // field 22 of stat, the start time
}

// ownerGone reports whether the process that marked dir is gone; a directory without
// a mark (or with one not of this package's form) is never taken for a dead one's.
func ownerGone(dir string) bool {
	id := owner(dir)
	pidText, _, ok := strings.Cut(id, " ")
	pid, err := strconv.Atoi(pidText)
	if !ok || err != nil || pid <= 0 {
		return false
	}
	return processID(pid) != id
}

// Sweep removes what test processes that are gone left on the host: for each marked
// directory in /tmp whose process is dead, it kills the daemons still serving a state
// directory in it, removes what every node recorded in it had put on the host (see
// package sweep) and their host locks, then the directory. It says what it removed on
// w. Main calls it before a package's tests run; it never touches a directory whose
// process lives, nor anything outside /tmp that no dead test recorded.
func Sweep(w io.Writer) {
	if os.Geteuid() != 0 {
		return // no node here could have run
	}
	sweepMarked(w, "that a killed test process left", ownerGone)
}

// sweepMarked runs sweepDir on the marked directories in /tmp that take chooses.
func sweepMarked(w io.Writer, note string, take func(dir string) bool) {
	entries, _ := os.ReadDir("/tmp")
	for _, e := range entries {
		dir := filepath.Join("/tmp", e.Name())
		if e.IsDir() && take(dir) {
			n := sweepDir(dir)
			fmt.Fprintf(w, "testenv: removed %s and %d things on the host %s\n", dir, n, note)
		}
	}
}

// owner returns the mark of dir, "" if it has none.
func owner(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, ownerName))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// sweepDir cleans up after the nodes of a dead test's directory dir and removes it.
func sweepDir(dir string) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	stateDirs := []string{dir}
	subs, _ := filepath.Glob(filepath.Join(dir, "*", sweep.RecordName))
	for _, s := range subs {
		stateDirs = append(stateDirs, filepath.Dir(s))
	}
	for _, s := range stateDirs {
		killDaemon(filepath.Join(s, sweep.LockName))
	}
	count := 0
	var outside []string
	for _, s := range stateDirs {
		rec, err := sweep.ReadRecord(s)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			continue
		}
		count += len(sweep.Run(ctx, dir, rec, false, nil))
		RemoveHostLocks(sweep.HostLockNames(rec)...)
		if rec.SecretsDir == dir+"-secrets" {
			outside = append(outside, rec.SecretsDir) // a node's dir+"-secrets"
		}
	}
	for _, d := range append(outside, dir) {
		if len(sweep.Mounts(d)) == 0 { // never remove files through a mount still there
			os.RemoveAll(d)
		}
	}
	return count
}

// killDaemon kills the daemon that holds the lock file lock, if one does: the process
// whose pid the file holds, only if it has that file open.
func killDaemon(lock string) {
	b, err := os.ReadFile(lock)
	if err != nil {
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return
	}
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return
	}
	defer unix.Close(fd)
	fds, _ := os.ReadDir("/proc/" + strconv.Itoa(pid) + "/fd")
	for _, f := range fds {
		if target, _ := os.Readlink(filepath.Join("/proc", strconv.Itoa(pid), "fd", f.Name())); target == lock {
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
			unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 10_000) // readable once it exited
			return
		}
	}
}
