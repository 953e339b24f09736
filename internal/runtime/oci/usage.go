package oci

import (
	"context"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/airlockhq/airlock/internal/runtime"
	"golang.org/x/sys/unix"
)

// diskUsage reads the sandbox's disk from its file system's own counters (statfs of the
// mounted image): bytes used and its size. A sandbox without a disk of its own (no cap,
// or not mounted) reads 0, 0: its upper layer shares the node's file system, and walking
// it would cost what the sandbox chooses to write.
func (d *Driver) diskUsage(id string) (used, size int64) {
	dir := d.dir(id)
	fsDir := filepath.Join(dir, "fs")
	var top, fs unix.Stat_t
	if unix.Stat(dir, &top) != nil || unix.Stat(fsDir, &fs) != nil || top.Dev == fs.Dev {
		return 0, 0 // not a mount of its own
	}
	var st unix.Statfs_t
	if unix.Statfs(fsDir, &st) != nil {
		return 0, 0
	}
	bs := int64(st.Bsize)
	return int64(st.Blocks-st.Bfree) * bs, int64(st.Blocks) * bs
}

// tcpSockets counts the TCP sockets (IPv4 and IPv6) in use in the network namespace of
// pid, from the kernel's per-namespace counters in /proc/PID/net/sockstat{,6}: two
// short files, whatever the sandbox opens.
func tcpSockets(pid int) int64 {
	if pid <= 0 {
		return 0
	}
	base := filepath.Join("/proc", strconv.Itoa(pid), "net")
	return sockstatInuse(filepath.Join(base, "sockstat"), "TCP:") + sockstatInuse(filepath.Join(base, "sockstat6"), "TCP6:")
}

// sockstatInuse reads the "inuse" count of a protocol's line ("TCP: inuse 3 orphan 0 …").
func sockstatInuse(path, proto string) int64 {
	var buf [1024]byte // a few short lines
	b, err := readSmall(path, buf[:])
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		fields := strings.Fields(line)
		if len(fields) >= 3 && fields[0] == proto && fields[1] == "inuse" {
			n, _ := strconv.ParseInt(fields[2], 10, 64)
			return n
		}
	}
	return 0
}

// initPID returns the container's init pid as the engine wrote it, if that process is
// still in the sandbox's cgroup (0 otherwise: a pid reused since is another process's).
func (d *Driver) initPID(id string) int {
	pid, err := readPid(filepath.Join(d.ctlDir(id), "init.pid"))
	if err != nil || !d.inCgroup(id, pid) {
		return 0
	}
	return pid
}

// inCgroup says whether process pid is in sandbox id's cgroup.
func (d *Driver) inCgroup(id string, pid int) bool {
	if pid <= 0 {
		return false
	}
	var buf [4096]byte // one line per hierarchy
	cg, _ := readSmall("/proc/"+strconv.Itoa(pid)+"/cgroup", buf[:])
	return strings.Contains(string(cg), d.cgroupPath(id)+"\n")
}

// usageFacts are what Usage keeps of a sandbox between reads: what changes only when
// the container is resized or replaced.
type usageFacts struct {
	limits runtime.Stats // MemoryLimit, CPULimit, PIDsLimit
	pid    int           // the container's init, as the engine wrote it
	read   time.Time
}

// usageFactsTTL is how long Usage keeps a sandbox's limits and init pid before reading
// them again (a resize shows within it).
const usageFactsTTL = time.Minute

var _ runtime.UsageReader = (*Driver)(nil)

// Usage implements runtime.UsageReader: the cgroup's usage files, the disk's statfs
// and the network namespace's socket counts; limits and the init pid are read once a
// minute (the pid is checked against the cgroup at every read all the same).
func (d *Driver) Usage(ctx context.Context, id string) (runtime.Stats, error) {
	path := d.cgroupPath(id)
	s, err := d.cg.usage(path)
	if err != nil {
		d.usageCache.Delete(id)
		return s, err
	}
	var f *usageFacts
	if v, ok := d.usageCache.Load(id); ok && time.Since(v.(*usageFacts).read) < usageFactsTTL {
		f = v.(*usageFacts)
	} else {
		f = &usageFacts{read: time.Now()}
		d.cg.limits(path, &f.limits)
		f.pid, _ = readPid(filepath.Join(d.ctlDir(id), "init.pid"))
		d.usageCache.Store(id, f)
	}
	s.MemoryLimit, s.CPULimit, s.PIDsLimit = f.limits.MemoryLimit, f.limits.CPULimit, f.limits.PIDsLimit
	s.DiskUsed, s.DiskLimit = d.diskUsage(id)
	if d.inCgroup(id, f.pid) {
		s.Connections = tcpSockets(f.pid)
	}
	return s, nil
}
