package oci

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlockhq/airlock/internal/runtime"
)

// Paths inside every sandbox.
const (
	agentPath = "/.airlock/agent"     // the agent binary, bound read-only
	labelKey  = "dev.airlock.sandbox" // annotation naming the sandbox
)

// capabilities is the container default set minus NET_RAW and MKNOD.
var capabilities = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_SETGID", "CAP_SETUID",
	"CAP_SETFCAP", "CAP_SETPCAP", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL",
	"CAP_AUDIT_WRITE",
}

// maskedPaths and readonlyPaths are the ones OCI runtimes hide by default.
var (
	maskedPaths = []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware", "/sys/devices/virtual/powercap", "/proc/interrupts",
	}
	readonlyPaths = []string{
		"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
	}
)

// agentProcs is how many threads of Go code the agent runs at once in a sandbox
// limited to cpu cores (0: no limit, the Go runtime's default): the limit rounded up.
// The runtime's own default never goes below two, and an agent's second thread only
// spins for work that the first would do as soon.
func agentProcs(cpu float64) int {
	if cpu <= 0 {
		return 0
	}
	return int(math.Ceil(cpu))
}

// bundleSpec builds the OCI runtime spec of a sandbox container; binds are the image's
// and the network's host binds.
func (d *Driver) bundleSpec(s runtime.Spec, rootfsPath string, binds []runtime.Mount) (*specs.Spec, error) {
	channel, fd := "--listen-fd", agentFD
	if d.opts.Engine.Sentry {
		channel, fd = "--accept-fd", 0 // connections come from the broker (broker.go)
	}
	args := []string{agentPath, "agent", channel, strconv.Itoa(fd), "--ready-fd", "3"}
	if s.WorkingDir != "" {
		args = append(args, "--workdir", s.WorkingDir)
	}
	if !s.Deadline.IsZero() {
		// Whole seconds, rounded up: the agent must never end a sandbox early.
		args = append(args, "--deadline", strconv.FormatInt(s.Deadline.Add(time.Second-1).Unix(), 10))
	}
	if n := agentProcs(s.Limits.CPU); n > 0 {
		args = append(args, "--procs", strconv.Itoa(n))
	}
	nofile := uint64(s.Limits.OpenFiles)
	if nofile == 0 {
		nofile = 65536
	}
	nofile = min(nofile, d.maxFiles)
	hostname := s.Hostname
	if hostname == "" {
		hostname = "sandbox"
	}
	tmpfs := tmpfsSizes(d.opts.TmpfsBytes, s.Limits.Memory)
	caps := &specs.LinuxCapabilities{
		Bounding: capabilities, Effective: capabilities, Permitted: capabilities,
	}
	idmap := []specs.LinuxIDMapping{{ContainerID: 0, HostID: s.UIDBase, Size: idRange}}
	sp := &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			User:            specs.User{UID: 0, GID: 0},
			Args:            args,
			Env:             s.Env,
			Cwd:             "/",
			Capabilities:    caps,
			Rlimits:         []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile, Soft: nofile}},
			NoNewPrivileges: true,
		},
		Root:        &specs.Root{Path: rootfsPath},
		Hostname:    hostname,
		Annotations: map[string]string{labelKey: s.ID},
		Mounts: []specs.Mount{
			{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=" + strconv.FormatInt(tmpfs.dev, 10)}},
			{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
			{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=" + strconv.FormatInt(tmpfs.shm, 10)}},
			{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
			{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
			{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
			{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=" + strconv.FormatInt(tmpfs.tmp, 10)}},
			{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=" + strconv.FormatInt(tmpfs.run, 10)}},
			{Destination: agentPath, Type: "bind", Source: d.agent, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		},
		Linux: &specs.Linux{
			UIDMappings: idmap,
			GIDMappings: idmap,
			CgroupsPath: d.cgroupPath(s.ID),
			Resources:   resources(s.Limits, d.swapAccounting),
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.PIDNamespace}, {Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace},
				{Type: specs.UTSNamespace}, {Type: specs.MountNamespace}, {Type: specs.UserNamespace},
				{Type: specs.CgroupNamespace},
			},
			MaskedPaths:   maskedPaths,
			ReadonlyPaths: readonlyPaths,
		},
	}
	if d.opts.Engine.Sentry {
		// The engine's kernel mounts a cgroupfs of its own, named after the container,
		// which would tell sandbox code its id; its readings are the engine's, not the
		// host's.
		sp.Mounts = slices.DeleteFunc(sp.Mounts, func(m specs.Mount) bool { return m.Type == "cgroup" })
	}
	for _, m := range binds {
		opts := []string{"rbind", "nosuid", "nodev"}
		if m.ReadOnly {
			opts = append(opts, "ro")
		}
		sp.Mounts = append(sp.Mounts, specs.Mount{Destination: m.Destination, Type: "bind", Source: m.Source, Options: opts})
	}
	if s.NetnsPath != "" {
		for i, ns := range sp.Linux.Namespaces {
			if ns.Type == specs.NetworkNamespace {
				sp.Linux.Namespaces[i].Path = s.NetnsPath
			}
		}
		// sysfs can only be mounted from a network namespace the sandbox's user
		// namespace owns; a namespace made by the node is not. Rather than bind the
		// host's /sys, the sandbox gets an empty read-only one (plus its cgroup).
		for i, m := range sp.Mounts {
			if m.Destination == "/sys" {
				sp.Mounts[i] = specs.Mount{Destination: "/sys", Type: "tmpfs", Source: "sysfs",
					Options: []string{"nosuid", "noexec", "nodev", "ro", "size=64k", "mode=755"}}
			}
		}
	}
	prof, err := seccomp.GetDefaultProfile(sp)
	if err != nil {
		return nil, fmt.Errorf("seccomp profile: %w", err)
	}
	prof.Architectures = nativeArch(prof.Architectures)
	sp.Linux.Seccomp = prof
	return sp, nil
}

// tmpfsLimits are the sizes of a sandbox's memory-backed filesystems.
type tmpfsLimits struct{ dev, shm, run, tmp int64 }

// agentReserve is the memory kept free of tmpfs for the agent and for the command that
// fills the filesystems, so that filling them ends in "no space left", not in the OOM
// killer with nothing left to end.
const agentReserve = 64 << 20

// tmpfsSizes sizes /dev, /dev/shm, /run and /tmp. tmpfs is memory charged to the
// sandbox: together they stay within its memory limit less agentReserve (for limits
// under 72 MiB, within 8 MiB, each at least 1 MiB). /tmp gets what the others leave, up
// to tmpBytes.
func tmpfsSizes(tmpBytes, memory int64) tmpfsLimits {
	t := tmpfsLimits{dev: 64 << 20, shm: 64 << 20, run: 64 << 20, tmp: tmpBytes}
	if memory <= 0 {
		return t
	}
	budget := max(memory-agentReserve, 8<<20)
	t.dev = min(t.dev, max(budget/16, 1<<20))
	t.shm = min(t.shm, max(budget/8, 1<<20))
	t.run = min(t.run, max(budget/8, 1<<20))
	t.tmp = min(t.tmp, max(budget-t.dev-t.shm-t.run, 1<<20))
	return t
}

// resources turns limits into cgroup settings.
func resources(l runtime.Limits, swapAccounting bool) *specs.LinuxResources {
	r := &specs.LinuxResources{
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if l.CPU > 0 {
		period := uint64(100000)
		quota := int64(l.CPU * float64(period))
		r.CPU = &specs.LinuxCPU{Period: &period, Quota: &quota}
	}
	if l.Memory > 0 {
		limit := l.Memory
		r.Memory = &specs.LinuxMemory{Limit: &limit}
		if swapAccounting {
			swap := limit // memory+swap equal to memory: no swap
			r.Memory.Swap = &swap
		}
	}
	if l.PIDs > 0 {
		pids := l.PIDs
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return r
}

// nativeArch keeps only the first (native) architecture of a seccomp profile's list.
// The default profile also admits the 32-bit ABIs (x86 and x32 on amd64) for old
// binaries; sandboxes run 64-bit code, a syscall through another ABI is refused as a
// bad architecture, and runc compiles a third of the filter at every start.
func nativeArch(arches []specs.Arch) []specs.Arch {
	if len(arches) == 0 {
		return nil
	}
	return arches[:1]
}
