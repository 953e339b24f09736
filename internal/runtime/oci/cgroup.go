package oci

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/airlockhq/airlock/internal/runtime"
	"golang.org/x/sys/unix"
)

// cgroupRoot is where the host mounts its cgroup hierarchies (a variable for the tests
// that read a made-up tree).
var cgroupRoot = "/sys/fs/cgroup"

// cgroups reads and removes sandbox cgroups on a v1 (or hybrid) or a v2 host.
type cgroups struct{ v2 bool }

func detectCgroups() cgroups {
	_, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers"))
	return cgroups{v2: err == nil}
}

func (c cgroups) swapAccounting() bool {
	if c.v2 {
		return true
	}
	_, err := os.Stat(filepath.Join(cgroupRoot, "memory", "memory.memsw.limit_in_bytes"))
	return err == nil
}

// dirs returns every directory a cgroup path has on the host.
func (c cgroups) dirs(path string) []string {
	if c.v2 {
		return []string{filepath.Join(cgroupRoot, path)}
	}
	entries, _ := os.ReadDir(cgroupRoot)
	var out []string
	for _, e := range entries {
		fi, err := os.Stat(filepath.Join(cgroupRoot, e.Name()))
		if err != nil || !fi.IsDir() {
			continue
		}
		out = append(out, filepath.Join(cgroupRoot, e.Name(), path))
	}
	return out
}

// remove deletes a cgroup's directories that are left (runc usually removes them).
func (c cgroups) remove(path string) error {
	var errs []error
	for _, d := range c.dirs(path) {
		if err := os.Remove(d); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// join moves pid into the cgroup path in every hierarchy where it exists.
func (c cgroups) join(path string, pid int) error {
	var errs []error
	for _, d := range c.dirs(path) {
		if _, err := os.Stat(d); err != nil {
			continue
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// list returns the names of the cgroups below parent in any hierarchy.
func (c cgroups) list(parent string) []string {
	seen := map[string]bool{}
	for _, d := range c.dirs(parent) {
		entries, _ := os.ReadDir(d)
		for _, e := range entries {
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
	}
	out := make([]string, 0, len(seen))
	for n := range seen {
		out = append(out, n)
	}
	return out
}

// stats reads every reading of a cgroup the kernel keeps: usage, limits and the limit
// counters. A missing memory usage is an error (the cgroup is gone); the rest reads as 0
// when a file is missing (a controller the host lacks).
func (c cgroups) stats(path string) (runtime.Stats, error) {
	s, err := c.usage(path)
	if err != nil {
		return s, err
	}
	c.limits(path, &s)
	n, _ := c.counters(path)
	s.OOMKills, s.PIDsLimited = n.OOMKills, n.PIDsLimited
	return s, nil
}

// usage reads what changes as a cgroup runs: memory in use (usage less the inactive
// file cache, as docker stats counts it) and its peak, CPU time and pids. A missing
// memory usage is an error (the cgroup is gone).
func (c cgroups) usage(path string) (runtime.Stats, error) {
	var s runtime.Stats
	var err error
	if c.v2 {
		dir := filepath.Join(cgroupRoot, path)
		if s.MemoryBytes, err = readInt(filepath.Join(dir, "memory.current")); err != nil {
			return s, err
		}
		s.MemoryBytes = max(0, s.MemoryBytes-readKey(filepath.Join(dir, "memory.stat"), "inactive_file"))
		s.MemoryPeak, _ = readInt(filepath.Join(dir, "memory.peak"))
		s.CPUNanos = readKey(filepath.Join(dir, "cpu.stat"), "usage_usec") * 1000
		s.PIDs, _ = readInt(filepath.Join(dir, "pids.current"))
		return s, nil
	}
	mem := filepath.Join(cgroupRoot, "memory", path)
	if s.MemoryBytes, err = readInt(filepath.Join(mem, "memory.usage_in_bytes")); err != nil {
		return s, err
	}
	s.MemoryBytes = max(0, s.MemoryBytes-readKey(filepath.Join(mem, "memory.stat"), "total_inactive_file"))
	s.MemoryPeak, _ = readInt(filepath.Join(mem, "memory.max_usage_in_bytes"))
	s.CPUNanos, _ = readInt(filepath.Join(cgroupRoot, "cpuacct", path, "cpuacct.usage"))
	s.PIDs, _ = readInt(filepath.Join(cgroupRoot, "pids", path, "pids.current"))
	return s, nil
}

// limits reads a cgroup's memory, CPU and pids limits into s (0: none).
func (c cgroups) limits(path string, s *runtime.Stats) {
	if c.v2 {
		dir := filepath.Join(cgroupRoot, path)
		s.MemoryLimit = readLimit(filepath.Join(dir, "memory.max"))
		s.CPULimit = readCPUMax(filepath.Join(dir, "cpu.max"))
		s.PIDsLimit = readLimit(filepath.Join(dir, "pids.max"))
		return
	}
	s.MemoryLimit = readLimit(filepath.Join(cgroupRoot, "memory", path, "memory.limit_in_bytes"))
	cpu := filepath.Join(cgroupRoot, "cpu", path)
	if quota, err := readInt(filepath.Join(cpu, "cpu.cfs_quota_us")); err == nil && quota > 0 {
		if period, err := readInt(filepath.Join(cpu, "cpu.cfs_period_us")); err == nil && period > 0 {
			s.CPULimit = float64(quota) / float64(period)
		}
	}
	s.PIDsLimit = readLimit(filepath.Join(cgroupRoot, "pids", path, "pids.max"))
}

// unlimited is where a cgroup v1 limit file's "no limit" starts (the page-rounded
// maximum int64).
const unlimited = 1 << 62

// readLimit reads a limit file: "max" (v2), a huge number (v1) or a missing file is 0.
func readLimit(p string) int64 {
	n, err := readInt(p)
	if err != nil || n >= unlimited {
		return 0
	}
	return n
}

// readCPUMax reads cgroup v2's "quota period" as cores ("max period" is 0).
func readCPUMax(p string) float64 {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0
	}
	q, per, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	quota, err1 := strconv.ParseInt(q, 10, 64)
	period, err2 := strconv.ParseInt(per, 10, 64)
	if err1 != nil || err2 != nil || quota <= 0 || period <= 0 {
		return 0
	}
	return float64(quota) / float64(period)
}

// counters reads the limit counters of stats alone: two small files where stats reads
// four. A missing memory counter is an error (the cgroup is gone), so that a caller
// comparing two reads never compares against a zero it did not read.
func (c cgroups) counters(path string) (runtime.Stats, error) {
	var s runtime.Stats
	var err error
	if c.v2 {
		dir := filepath.Join(cgroupRoot, path)
		if s.OOMKills, err = readKeyErr(filepath.Join(dir, "memory.events"), "oom_kill"); err != nil {
			return s, err
		}
		s.PIDsLimited = readKey(filepath.Join(dir, "pids.events"), "max")
		return s, nil
	}
	if s.OOMKills, err = readKeyErr(filepath.Join(cgroupRoot, "memory", path, "memory.oom_control"), "oom_kill"); err != nil {
		return s, err
	}
	s.PIDsLimited = readKey(filepath.Join(cgroupRoot, "pids", path, "pids.events"), "max")
	return s, nil
}

func readInt(p string) (int64, error) {
	var buf [64]byte
	b, err := readSmall(p, buf[:])
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// readSmall reads a kernel file of at most len(buf) bytes (the rest is left unread)
// with plain system calls: an os.File would also register the descriptor with the
// runtime's poller and remove it again, which doubles the cost of reading the many
// small cgroup and proc files a usage sample takes.
func readSmall(p string, buf []byte) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: p, Err: err}
	}
	defer unix.Close(fd)
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "read", Path: p, Err: err}
		}
		if m == 0 {
			break
		}
		n += m
	}
	return buf[:n], nil
}

// readKey reads "key value" from a flat-keyed cgroup file (0: no such file or key).
func readKey(p, key string) int64 {
	n, _ := readKeyErr(p, key)
	return n
}

// readKeyErr is readKey that says when the file could not be read; a file without the
// key reads as 0.
func readKeyErr(p, key string) (int64, error) {
	var buf [8 << 10]byte // memory.stat, the longest read, is about 1.5 KiB
	b, err := readSmall(p, buf[:])
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSuffix(line, "\n"), " ")
		if ok && k == key {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, nil
		}
	}
	return 0, nil
}
