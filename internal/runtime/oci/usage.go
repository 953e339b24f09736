package oci

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
	f, err := os.Open(path)
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
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
	if err != nil {
		return 0
	}
	cg, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if !strings.Contains(string(cg), d.cgroupPath(id)+"\n") {
		return 0
	}
	return pid
}
