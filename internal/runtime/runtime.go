// Package runtime owns the contract between the sandbox manager and whatever runs a
// sandbox's container: the Driver interface, the Spec a driver is given, and what it
// reports back. Implementations live beside it (runtime/oci runs runc). It must not know
// about HTTP, the store or the sandbox state machine.
//
// Hostile surfaces of the contract: DialAgent must return a connection to the sandbox's
// own agent and nothing the sandbox can redirect, checked on every connection; what
// the agent then sends is the caller's to bound (internal/agent). A driver keeps every
// host path it uses out of the sandbox's reach; drivertest's hostile suite checks both.
package runtime

import (
	"context"
	"net"
	"os"
	"time"
)

// Mount is a host directory bound into the sandbox.
type Mount struct {
	Source, Destination string
	ReadOnly            bool
}

// Limits are enforced by the driver through cgroups and rlimits. Zero means unlimited.
type Limits struct {
	CPU       float64 // fractional cores
	Memory    int64   // bytes; swap is never allowed
	PIDs      int64
	OpenFiles int64
	Disk      int64 // bytes of the upper layer; writes past it get ENOSPC
}

// Spec says what container to build behind a sandbox.
type Spec struct {
	// ID names the sandbox; the driver derives every host resource name from it.
	ID string
	// Image is the digest of the image the sandbox runs; the driver resolves it to what
	// it runs from (on this node, through its ImageSource).
	Image string
	// UIDBase is the first host uid (and gid) of the sandbox's 65536-id range.
	UIDBase uint32
	// Limits include the storage request: Disk caps the sandbox's writable layer.
	Limits Limits
	// Env is the full environment of the agent, and so the base environment of every exec.
	Env        []string
	WorkingDir string
	Hostname   string
	// NetnsPath is a network namespace made for the sandbox to join; empty gives it a
	// new one with loopback only.
	NetnsPath string
	// Network, if set, is called once the sandbox's filesystem is ready and before its
	// container starts, and what it returns is added to the above: the caller makes the
	// network meanwhile, so the two are built at once. An error fails the start.
	Network func() (NetworkJoin, error)
	// Deadline is the maximum-lifetime end the agent enforces on its own clock (zero: none).
	Deadline time.Time
}

// ImageFiles are what a node keeps of an image for a driver that builds the root from
// host directories: read-only layer directories, lowest first, and host binds the image
// needs (the host image's /usr).
type ImageFiles struct {
	Layers []string
	Mounts []Mount
}

// ImageSource resolves an image digest to its files on this node.
type ImageSource interface {
	ImageFiles(digest string) (ImageFiles, error)
}

// NetworkJoin is what a sandbox's network adds to its container: a namespace to join,
// environment and mounts.
type NetworkJoin struct {
	NetnsPath string
	Env       []string
	Mounts    []Mount
	// Joined, if set, is called once the container runs in the namespace at NetnsPath
	// and so keeps it alive: the network may then let go of its own hold on it (the
	// namespace's host mount, which every later container start reads and copies).
	Joined func()
}

// Status is what the host says about a sandbox's container.
type Status string

const (
	StatusRunning Status = "running"
	StatusPaused  Status = "paused"
	StatusStopped Status = "stopped" // the container exists but its init has ended
	StatusAbsent  Status = "absent"  // no container
)

// Stats are a running container's resource readings, all from the host kernel's own
// accounting (the sandbox's cgroup, its disk's file system, its network namespace's
// counters), never from anything inside the sandbox. Zero is "not known" for every
// limit.
type Stats struct {
	MemoryBytes int64
	PIDs        int64
	OOMKills    int64 // OOM kills counted by the sandbox's own cgroup
	PIDsLimited int64 // forks refused because the PIDs limit was reached

	CPUNanos    int64   // CPU time used by the cgroup since it was made
	CPULimit    float64 // cores (the CFS quota over its period)
	MemoryLimit int64
	MemoryPeak  int64 // the most memory the cgroup has used
	PIDsLimit   int64
	DiskUsed    int64 // bytes used on the sandbox's disk (its upper layer's file system)
	DiskLimit   int64
	// Connections counts the TCP sockets open in the sandbox's network namespace,
	// from the kernel's per-namespace counters (an engine with a network stack of its
	// own, such as gVisor's, has none there).
	Connections int64
}

// LimitCounter is a Driver that reads a sandbox's limit counters (Stats' OOMKills and
// PIDsLimited) for less than all of Stats costs: every exec reads them before and after
// its command, to tell an out-of-memory kill and refused forks apart.
type LimitCounter interface {
	LimitCounts(ctx context.Context, id string) (Stats, error)
}

// UsageReader is a Driver that reads what a usage collector needs (Stats without the
// limit counters) for less than Stats costs, keeping what seldom changes (limits, the
// container's init) for a while.
type UsageReader interface {
	Usage(ctx context.Context, id string) (Stats, error)
}

// Driver runs sandbox containers on one node. Every method is safe for concurrent use on
// different ids; calls for one id are serialised by the caller.
type Driver interface {
	// Start builds and starts the container for spec and returns once its agent is
	// ready. The upper layer under the sandbox's directory is kept if it already exists
	// (resume). A Start that fails removes everything it made except that upper layer.
	Start(ctx context.Context, spec Spec) error
	// Stop ends the container and releases its mounts and cgroup, keeping the upper layer.
	Stop(ctx context.Context, id string) error
	// Delete does Stop and removes every resource of the sandbox, the upper layer included.
	Delete(ctx context.Context, id string) error
	// Status reports the container's state.
	Status(ctx context.Context, id string) (Status, error)
	// Stats reads the container's cgroup.
	Stats(ctx context.Context, id string) (Stats, error)
	// DialAgent connects to the sandbox's agent over a channel the sandbox cannot
	// redirect, and checks that the peer is that sandbox's agent.
	DialAgent(ctx context.Context, id string) (net.Conn, error)
	// List returns the ids of every sandbox this driver has resources for on the host.
	List(ctx context.Context) ([]string, error)
}

// Killer is implemented by drivers that can end a container's processes ahead of
// Delete, so that a terminate is acknowledged once nothing of the sandbox runs and the
// slow part (mounts, storage, cgroups) is removed afterwards. Kill sends SIGKILL to every
// process of the container and returns once none of them runs (a frozen container is
// thawed so that it can die); it removes nothing, and Delete still works after it. A
// container that is not there is not an error.
type Killer interface {
	Kill(ctx context.Context, id string) error
}

// Freezer is implemented by drivers that can pause a container in place.
type Freezer interface {
	Freeze(ctx context.Context, id string) error
	Thaw(ctx context.Context, id string) error
}

// PortDialer is implemented by drivers that reach a sandbox's TCP ports themselves
// (whose network stack the host cannot enter); without it the node's network dials in.
type PortDialer interface {
	DialPort(ctx context.Context, id string, port int) (net.Conn, error)
}

// FileMounter is implemented by drivers that can bind a host file, read-only, into a
// running container (a secret bound while the sandbox runs); without it, such a file
// appears at the sandbox's next start.
type FileMounter interface {
	MountFile(ctx context.Context, id, src, dst string) error
}

// Hostnamer is implemented by drivers that can rename a running container's host name
// (a pooled sandbox takes its claimer's name); without it, a pool of the runtime is
// never claimed.
type Hostnamer interface {
	// RenamesHost says whether this driver's containers can take a new host name while
	// they run (an engine with a kernel of its own cannot).
	RenamesHost() bool
	SetHostname(ctx context.Context, id, name string) error
}

// WorkspaceMounter is implemented by drivers whose containers can bind a host
// workspace: a directory the node mounts through an id mapping, which the container
// must see as the host kernel shows it. MountsWorkspace says whether this driver's
// containers can; a driver without the method cannot, and a caller copies its files in.
type WorkspaceMounter interface {
	MountsWorkspace() bool
}

// UserNamespacer is implemented by drivers that keep, for each uid base, a user
// namespace of a sandbox's mapping (ids 0..65535 in it are base..base+65535 on the
// host) with no process in it: what their root filesystems are id-mapped through, and
// so what a host directory bound into that sandbox can be id-mapped through too.
type UserNamespacer interface {
	// UserNamespace returns a descriptor of base's namespace, which the caller closes.
	UserNamespace(base uint32) (*os.File, error)
}

// Check is one line of a driver's host health report.
type Check struct {
	Name     string
	OK       bool
	Detail   string
	Degrades string // what a failure means for users
	Optional bool   // the node does not need it; a failure is only news
}

// HealthChecker is implemented by drivers that can say what the host lacks.
type HealthChecker interface {
	Health(ctx context.Context) []Check
}

// Storage is implemented by drivers that let the node's snapshot store read and write a
// sandbox's writable layer (snapshot, restore, fork). The layer reaches the snapshot
// code as a directory on this host, the form the snapshot format is made from; where it
// lives, how it is mounted and how one layer replaces another are the driver's.
type Storage interface {
	// ReadLayer calls read with the directory of the sandbox's writable layer. The
	// container is stopped or frozen, so the layer does not change meanwhile.
	ReadLayer(ctx context.Context, id string, disk int64, read func(upper string) error) error
	// ReplaceLayer calls fill with an empty directory that becomes the sandbox's
	// writable layer once fill succeeds; if fill fails, the old layer stays. The
	// container must be stopped; storage made new is capped at disk bytes.
	ReplaceLayer(ctx context.Context, id string, disk int64, fill func(upper string) error) error
}

// StorageCloner is implemented by drivers that can copy a sandbox's writable layer to a
// new sandbox directly (faster than a snapshot and a restore), shifting its ids from the
// source's range to the destination's. It calls copied once it no longer reads the
// source (which the caller may then let run again). CloneStorage returns once the copy
// can be used; durable then waits until the copy is on stable storage (it may be called
// more than once), and the caller waits for it before it reports the clone done, so the
// write-back overlaps whatever comes next, such as starting the new sandbox.
type StorageCloner interface {
	CloneStorage(ctx context.Context, src, dst string, srcBase, dstBase uint32, copied func()) (durable func() error, err error)
}

// Checkpointer is implemented by drivers whose containers can be saved with their memory
// and processes and brought back as they were (suspend that keeps memory, fork into
// running clones). Checkpoints says whether this driver's containers can; an error from
// Checkpoint leaves the container running as it was, so the caller can fall back to a
// stop that keeps only files.
type Checkpointer interface {
	Checkpoints() bool
	// Checkpoint saves the container's memory and processes into dir (a new directory,
	// the driver's format) and then stops the container as Stop does.
	Checkpoint(ctx context.Context, id, dir string) error
	// Restore builds the container for spec as Start does, over the same upper layer,
	// and restores its processes from dir instead of starting its agent afresh. The
	// image is only read; a Restore that fails leaves no container, as Start.
	Restore(ctx context.Context, spec Spec, dir string) error
	// CheckpointFrozen saves the container's memory and processes into dir as
	// Checkpoint does, but leaves the container in place, frozen as Freeze leaves it,
	// so its files can be copied at the very point its memory was saved; the caller
	// Thaws it then. The image may be restored into another sandbox's container (a
	// clone: its own bundle, identity and network). On error the container is left
	// running, not frozen.
	CheckpointFrozen(ctx context.Context, id, dir string) error
}
