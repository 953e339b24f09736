// Package api is Airlock's public HTTP contract: the OpenAPI document (openapi.yaml,
// embedded and served at /v1/openapi.yaml) and the Go types of every request and
// response body. The server, the Go SDK and the CLI share these types; the package holds
// no behaviour and must not import any other Airlock package.
package api

import (
	_ "embed"
	"encoding/json"
	"time"
)

// OpenAPI is the contract document.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Sandbox states.
const (
	StateCreating    = "creating"
	StateRunning     = "running"
	StateSuspending  = "suspending"
	StateSuspended   = "suspended"
	StateResuming    = "resuming"
	StateTerminating = "terminating"
	StateTerminated  = "terminated"
	StateFailed      = "failed"
	// StateLost is a sandbox whose node's lease lapsed: resume it (on another node,
	// from its files in the object store) or terminate it.
	StateLost = "lost"
)

// Exec end states.
const (
	ExecSucceeded = "succeeded"
	ExecFailed    = "failed"
	ExecTimeout   = "timeout"
	ExecCancelled = "cancelled"
	ExecOOMKilled = "oom_killed"
	ExecKilled    = "killed"
)

// Limits of one sandbox. Memory and Disk are bytes.
type Limits struct {
	CPU       float64 `json:"cpu,omitempty"`
	Memory    int64   `json:"memory,omitempty"`
	PIDs      int64   `json:"pids,omitempty"`
	OpenFiles int64   `json:"open_files,omitempty"`
	Disk      int64   `json:"disk,omitempty"` // upper-layer bytes (default 10 GiB)
}

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Name  string `json:"name"`
	Image string `json:"image,omitempty"` // default "host"
	// Pull says when the daemon fetches Image from its registry before it creates:
	// PullMissing (the default), PullAlways or PullNever. The host image and digests are
	// never pulled.
	Pull   string            `json:"pull,omitempty"`
	Limits Limits            `json:"limits,omitempty"`
	Env    map[string]string `json:"env,omitempty"`
	Labels map[string]string `json:"labels,omitempty"`
	// NodeSelector are labels the sandbox's node must carry (config node.labels), each
	// with this value; a create no node matches is refused, naming what each lacks.
	NodeSelector map[string]string `json:"node_selector,omitempty"`
	// MaxLifetime ends the sandbox this long after it starts (Go duration, default 8h).
	MaxLifetime string `json:"max_lifetime,omitempty"`
	// IdleSuspend suspends the sandbox after this long without inbound traffic
	// (default 10m, at least 1m).
	IdleSuspend string `json:"idle_suspend,omitempty"`
	// TTL terminates the sandbox after this long suspended (default 168h).
	TTL string `json:"ttl,omitempty"`
	// Network is the egress policy (default mode baseline).
	Network *NetworkPolicy `json:"network,omitempty"`
	// Runtime names the runtime to run the sandbox (default: the node's default).
	Runtime string `json:"runtime,omitempty"`
	// Role is the one role the sandbox acts with, one the caller holds (default: the
	// caller's roles).
	Role string `json:"role,omitempty"`
	// Workspace mounts a directory of the node at /workspace as it is, no copy. Only
	// for a caller on the node's unix socket, and only a directory it owns (any, for
	// root); runc runtime only.
	Workspace *Workspace `json:"workspace,omitempty"`
	// Volumes are the caller's volumes to attach (see VolumeMount).
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// Workspace is a directory of the node a sandbox sees at /workspace: its owner shows
// as the sandbox's root, so what the sandbox writes there is the owner's.
type Workspace struct {
	Path   string `json:"path"`   // absolute
	Access string `json:"access"` // "ro" or "rw"
}

// NetworkPolicy is a sandbox's egress policy: a mode (none, deny_all, baseline,
// allowlist, unrestricted), allow rules "HOST[:PORT][/METHODS]" (HOST may be "*.domain",
// an IP address or a CIDR prefix such as "10.1.0.0/16:5432", which also allows plain TCP;
// rules imply allowlist), and private prefixes authorised explicitly.
type NetworkPolicy struct {
	Mode         string   `json:"mode"`
	Allow        []string `json:"allow,omitempty"`
	AllowPrivate []string `json:"allow_private,omitempty"`
}

// EgressRecord is one egress decision of a sandbox.
type EgressRecord struct {
	Seq        int64  `json:"seq"`
	Generation int64  `json:"generation"`
	Host       string `json:"host"`
	Addr       string `json:"addr,omitempty"`
	Port       int    `json:"port"`
	Method     string `json:"method"`
	BytesUp    int64  `json:"bytes_up"`
	BytesDown  int64  `json:"bytes_down"`
	Allowed    bool   `json:"allowed"`
	// Decision is allow, deny (the policy or a protected address refused it) or error
	// (allowed, but it failed: the name did not resolve, the server did not answer).
	Decision string    `json:"decision"`
	Rule     string    `json:"rule,omitempty"`
	Reason   string    `json:"reason,omitempty"`
	Time     time.Time `json:"time"`
	// Repeats is how many more identical refusals this record stands for, counted in
	// the window that began at the first one; Time is the last of them.
	Repeats int64  `json:"repeats,omitempty"`
	Summary string `json:"summary,omitempty"`
}

// EgressLog is the body of GET /v1/sandboxes/{ref}/egress.
type EgressLog struct {
	Records []EgressRecord `json:"records"`
	// Dropped is how many egress records of the sandbox were not stored (over its audit
	// rate or queue) in the range listed; records_dropped events say when and why.
	Dropped int64 `json:"dropped,omitempty"`
}

// PortRequest is the body of POST /v1/sandboxes/{ref}/ports.
type PortRequest struct {
	Port   int  `json:"port"`
	Public bool `json:"public,omitempty"`
}

// Port is an exposed port of a sandbox. Unless Public, requests to URL need the token
// (header X-Airlock-Port-Token, or ?airlock_token=).
type Port struct {
	Port   int    `json:"port"`
	Public bool   `json:"public"`
	URL    string `json:"url"`
	Token  string `json:"token,omitempty"`
}

// PortList is the body of GET /v1/sandboxes/{ref}/ports.
type PortList struct {
	Ports []Port `json:"ports"`
}

// Sandbox is a sandbox as the API shows it.
type Sandbox struct {
	ID           string            `json:"id"`
	Name         string            `json:"name"`
	Owner        string            `json:"owner"` // the identity that holds it
	State        string            `json:"state"`
	Image        string            `json:"image"`
	ImageDigest  string            `json:"image_digest"`
	Node         string            `json:"node,omitempty"` // the node it lives on
	Runtime      string            `json:"runtime,omitempty"`
	Role         string            `json:"role,omitempty"`
	Limits       Limits            `json:"limits"`
	Env          map[string]string `json:"env,omitempty"`
	Labels       map[string]string `json:"labels,omitempty"`
	Generation   int64             `json:"generation"`
	Version      int64             `json:"version"`
	CreatedAt    time.Time         `json:"created_at"`
	LastActivity time.Time         `json:"last_activity"`
	ExpiresAt    time.Time         `json:"expires_at"`
	IdleSuspend  string            `json:"idle_suspend"`
	TTL          string            `json:"ttl"`
	SuspendedAt  *time.Time        `json:"suspended_at,omitempty"`
	// LostAt is when the sandbox was marked lost (state lost); Node names the node.
	LostAt *time.Time `json:"lost_at,omitempty"`
	// FilesAt is when its files were last put in the cluster's object store.
	FilesAt *time.Time    `json:"files_at,omitempty"`
	Failure string        `json:"failure,omitempty"`
	Network NetworkPolicy `json:"network"`
	// Workspace is the node's directory the sandbox sees at /workspace, if any.
	Workspace *Workspace `json:"workspace,omitempty"`
	// Volumes are the volumes attached to the sandbox.
	Volumes    []VolumeMount `json:"volumes,omitempty"`
	Parent     string        `json:"parent,omitempty"`      // snapshot it was restored or forked from
	ForkedFrom string        `json:"forked_from,omitempty"` // sandbox it was forked from
	// Persistence says what a suspend of the sandbox keeps under its runtime, and
	// whether a suspended one's memory is kept.
	Persistence *Persistence `json:"persistence,omitempty"`
}

// Persistence is what a sandbox's suspend keeps: its files always; its processes and
// memory under a runtime that can save them (runsc), never under runc.
type Persistence struct {
	// Memory is what a suspend does with processes and memory under the sandbox's
	// runtime: "kept" (saved, and restored as they were by the resume) or "lost".
	Memory string `json:"memory"`
	// MemoryKept says the suspended sandbox's memory was saved: its resume restores its
	// processes. A save that failed (the event memory_not_kept says why) leaves it false.
	MemoryKept bool `json:"memory_kept"`
	// MemoryBytes is the size on disk of the saved memory image.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// SandboxList is the body of GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	// Next, when set, is the after= of the next page: more sandboxes may follow.
	Next string `json:"next,omitempty"`
}

// Operation is the durable record of a mutating request.
type Operation struct {
	ID        string    `json:"id"`
	Kind      string    `json:"kind"`
	State     string    `json:"state"` // pending, running, succeeded, failed
	SandboxID string    `json:"sandbox_id,omitempty"`
	Error     *Error    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

// OperationResponse answers every mutating sandbox call.
type OperationResponse struct {
	Operation Operation `json:"operation"`
	Sandbox   *Sandbox  `json:"sandbox,omitempty"`
	// Snapshot is the snapshot the call took: a snapshot create's, or a restore's
	// safety snapshot of the state it replaced.
	Snapshot *Snapshot `json:"snapshot,omitempty"`
	// Moved says that a resume moved the sandbox to the node that took the call.
	Moved *Move `json:"moved,omitempty"`
}

// Move is a resume that moved a sandbox from a lost, stopped or drained node. For a
// lost sandbox, Notice says since when its changes are lost.
type Move struct {
	From       string     `json:"from_node"`
	Files      string     `json:"files"`
	Generation int64      `json:"generation"`
	LostSince  *time.Time `json:"lost_since,omitempty"`
	Notice     string     `json:"notice,omitempty"`
}

// Snapshot is an immutable copy of a sandbox's writable layer.
type Snapshot struct {
	ID          string            `json:"id"`
	SandboxID   string            `json:"sandbox_id"`
	ImageDigest string            `json:"image_digest"`
	Parent      string            `json:"parent,omitempty"`
	Consistency string            `json:"consistency"` // crash-consistent or stopped
	State       string            `json:"state"`       // creating, ready, failed
	LogicalSize int64             `json:"logical_size"`
	StoredSize  int64             `json:"stored_size"`
	Files       int               `json:"files"`
	Chunks      []string          `json:"chunks,omitempty"` // chunk checksums, on GET of one snapshot
	Created     time.Time         `json:"created"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Memory is the memory part of a snapshot taken with --memory (runsc): its image's
	// size on disk and files with their checksums. Absent: files only.
	Memory *SnapshotMemory `json:"memory,omitempty"`
}

// SnapshotMemory is a snapshot's memory image.
type SnapshotMemory struct {
	Bytes int64                `json:"bytes"`
	Files []SnapshotMemoryFile `json:"files,omitempty"`
}

// SnapshotMemoryFile is one file of a snapshot's memory image.
type SnapshotMemoryFile struct {
	Name   string `json:"name"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SnapshotList is the body of GET /v1/snapshots.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// SnapshotRequest is the body of POST /v1/sandboxes/{ref}/snapshots.
type SnapshotRequest struct {
	Labels map[string]string `json:"labels,omitempty"`
	// Memory keeps the sandbox's memory and processes too (a running runsc sandbox
	// whose secrets are delivered by proxy only); a fork of the snapshot runs on from
	// that point. Refused, with the reason, where it cannot be kept.
	Memory bool `json:"memory,omitempty"`
}

// RestoreRequest is the body of POST /v1/sandboxes/{ref}/restore.
type RestoreRequest struct {
	Snapshot string `json:"snapshot"`
	// NoSafetySnapshot skips the snapshot of the current state taken before restoring.
	NoSafetySnapshot bool `json:"no_safety_snapshot,omitempty"`
}

// ForkRequest is the body of POST /v1/sandboxes/{ref}/fork and /v1/snapshots/{id}/fork.
type ForkRequest struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	// Volumes are volumes to attach to the fork; it gets none of its source's.
	Volumes []VolumeMount `json:"volumes,omitempty"`
}

// ExecRequest is the body of POST /v1/sandboxes/{ref}/exec.
type ExecRequest struct {
	Argv    []string          `json:"argv,omitempty"`
	Shell   string            `json:"shell,omitempty"` // run with /bin/sh -c when argv is empty
	Env     map[string]string `json:"env,omitempty"`
	Cwd     string            `json:"cwd,omitempty"`
	UID     *uint32           `json:"uid,omitempty"`
	GID     *uint32           `json:"gid,omitempty"`
	Timeout string            `json:"timeout,omitempty"` // Go duration
	Stdin   string            `json:"stdin,omitempty"`
	// Stream asks for NDJSON ExecEvents, one per output line as produced.
	Stream bool `json:"stream,omitempty"`
}

// ExecResult is how an exec ended.
type ExecResult struct {
	State      string `json:"state"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Stdout     string `json:"stdout,omitempty"`
	Stderr     string `json:"stderr,omitempty"`
	// StdoutBytes and StderrBytes replace Stdout and Stderr when the output is not
	// valid UTF-8 (base64 in JSON), so binary output survives intact.
	StdoutBytes []byte `json:"stdout_bytes,omitempty"`
	StderrBytes []byte `json:"stderr_bytes,omitempty"`
	// Truncated says a non-streamed call returned only the head of its output: the
	// daemon keeps output while its encoded size stays within its per-call limit and
	// memory budget, and StdoutDropped and StderrDropped count the bytes dropped after it.
	Truncated     bool   `json:"truncated,omitempty"`
	StdoutDropped int64  `json:"stdout_dropped,omitempty"`
	StderrDropped int64  `json:"stderr_dropped,omitempty"`
	Error         string `json:"error,omitempty"`
}

// ExecEvent is one line of a streamed exec or send: type "stdout" or "stderr" with Data,
// or "exit" with Result (always last), or "error" with Error.
type ExecEvent struct {
	Type string `json:"type"`
	Data string `json:"data,omitempty"`
	// Bytes replaces Data when the chunk is not valid UTF-8 (base64 in JSON).
	Bytes  []byte      `json:"bytes,omitempty"`
	Result *ExecResult `json:"result,omitempty"`
	Error  *Error      `json:"error,omitempty"`
}

// SessionRequest starts a session: kind "python", "shell" or "raw" (with argv).
type SessionRequest struct {
	Kind string            `json:"kind"`
	Argv []string          `json:"argv,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	Cwd  string            `json:"cwd,omitempty"`
	// Background (raw sessions) keeps the process's output in a bounded log (the last
	// MiB) that GET …/sessions/{id}/logs reads and follows, instead of handing it to
	// sends; such a session takes no input.
	Background bool `json:"background,omitempty"`
}

// Session is a session: a live one, or a background one whose process has ended and
// whose log can still be read (Exited, with its ExitCode).
type Session struct {
	ID         string `json:"id"`
	Kind       string `json:"kind"`
	PID        int    `json:"pid"`
	Background bool   `json:"background,omitempty"`
	Exited     bool   `json:"exited,omitempty"`
	ExitCode   int    `json:"exit_code,omitempty"`
	// Started is when the session started (sessions of older agents have none).
	Started *time.Time `json:"started,omitempty"`
}

// SessionList is the body of GET /v1/sandboxes/{ref}/sessions.
type SessionList struct {
	Sessions []Session `json:"sessions"`
}

// SendRequest is the body of POST /v1/sandboxes/{ref}/sessions/{id}/send.
type SendRequest struct {
	Input  string `json:"input"`
	Stream bool   `json:"stream,omitempty"`
}

// FileInfo describes one file in a sandbox.
type FileInfo struct {
	Name  string    `json:"name"`
	Path  string    `json:"path,omitempty"`
	Size  int64     `json:"size"`
	Mode  uint32    `json:"mode"`
	IsDir bool      `json:"is_dir"`
	MTime time.Time `json:"mtime"`
}

// TreeSummary is the answer of PUT /v1/sandboxes/{ref}/files/tar: what the tar
// stream held, now under Path.
type TreeSummary struct {
	Path  string `json:"path"`
	Files int64  `json:"files"`
	Dirs  int64  `json:"dirs"`
	Links int64  `json:"links"`
	Bytes int64  `json:"bytes"`
}

// FileList is the body of GET /v1/sandboxes/{ref}/files/list.
type FileList struct {
	Files []FileInfo `json:"files"`
}

// MkdirRequest is the body of POST /v1/sandboxes/{ref}/files/mkdir.
type MkdirRequest struct {
	Path    string `json:"path"`
	Parents bool   `json:"parents,omitempty"`
}

// Image is an image on the node, as the caller sees it: its own private images and the
// public ones. Name is empty for an image the caller keeps by digest only.
type Image struct {
	Name    string    `json:"name"`
	Digest  string    `json:"digest"`
	Layers  int       `json:"layers"`
	Size    int64     `json:"size"`
	Created time.Time `json:"created"`
	Builtin bool      `json:"builtin"`
	// Owner is the owner of a private image, or the administrator who published a
	// public one; empty for the built-in image.
	Owner string `json:"owner,omitempty"`
	// Visibility is VisibilityPrivate (only Owner sees and uses it) or VisibilityPublic
	// (every owner does; only administrators change it).
	Visibility string `json:"visibility"`
	// Reference is the registry reference a pulled image came from; empty for others.
	Reference string `json:"reference,omitempty"`
	// Shared is how many of Size's bytes are layers another image of the list has too.
	Shared int64 `json:"shared,omitempty"`
	// Sandboxes are the caller's sandboxes (not terminated) that run on the image.
	Sandboxes []string `json:"sandboxes,omitempty"`
	// Config and LayerIDs are set by GET /v1/images/{ref} only.
	Config   *ImageConfig `json:"config,omitempty"`
	LayerIDs []string     `json:"layer_ids,omitempty"`
}

// ImageConfig is what of an image's configuration its sandboxes use.
type ImageConfig struct {
	Env        []string `json:"env,omitempty"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	User       string   `json:"user,omitempty"`
}

// RegistryLoginRequest is the body of POST /v1/registries/login.
type RegistryLoginRequest struct {
	Registry string `json:"registry"` // "ghcr.io", "registry.local:5000"; "docker.io" is Docker Hub
	Username string `json:"username"`
	Password string `json:"password"`
}

// RegistryLogin is the answer to a login: the registry as pulls name it, and the
// secret that keeps the credentials.
type RegistryLogin struct {
	Registry string `json:"registry"`
	Secret   string `json:"secret"`
}

// PruneResult is the answer to POST /v1/images/prune.
type PruneResult struct {
	Removed []string `json:"removed"`
	Freed   int64    `json:"freed"` // unpacked bytes given back: the layers no image or sandbox uses any more, each once
}

// Pull policies: when create, run and image pull fetch an image from its registry.
const (
	PullAlways  = "always"  // every time, so a moved tag is followed
	PullMissing = "missing" // only when no image of the name is here
	PullNever   = "never"   // never: the image must be here
)

// PullRequest is the body of POST /v1/images/pull.
type PullRequest struct {
	Ref        string `json:"ref"`                  // "python:3.12-slim", "ghcr.io/o/r:tag", "host:5000/x@sha256:..."
	Name       string `json:"name,omitempty"`       // the local name (default: ref as given)
	Visibility string `json:"visibility,omitempty"` // private (default) or public (administrators)
	Policy     string `json:"policy,omitempty"`     // always (default) or missing
	Username   string `json:"username,omitempty"`   // per-pull credentials (default: the node's docker config.json)
	Password   string `json:"password,omitempty"`
}

// PullEvent is one line of the NDJSON stream that answers POST /v1/images/pull: a
// layer's progress, then the image, or an error.
type PullEvent struct {
	Status string `json:"status,omitempty"` // resolving, present, downloading, cached, verifying, done, complete
	Ref    string `json:"ref,omitempty"`
	Digest string `json:"digest,omitempty"` // the layer's blob digest
	Layer  int    `json:"layer,omitempty"`  // 1-based
	Layers int    `json:"layers,omitempty"`
	Done   int64  `json:"done,omitempty"`
	Total  int64  `json:"total,omitempty"`
	Image  *Image `json:"image,omitempty"`
	Error  *Error `json:"error,omitempty"`
}

// CreateEvent is one line of the NDJSON stream that answers POST /v1/sandboxes when
// the request accepts application/x-ndjson and the image is pulled: the pull's
// progress, then the create's answer or its error. A create that pulls nothing answers
// as usual (201 with an OperationResponse).
type CreateEvent struct {
	Pull   *PullEvent         `json:"pull,omitempty"`
	Result *OperationResponse `json:"result,omitempty"`
	Error  *Error             `json:"error,omitempty"`
}

// Image visibilities.
const (
	VisibilityPrivate = "private"
	VisibilityPublic  = "public"
)

// ImageList is the body of GET /v1/images.
type ImageList struct {
	Images []Image `json:"images"`
}

// ImportEvent is one NDJSON line of POST /v1/images: progress, then the image or an error.
type ImportEvent struct {
	Phase string `json:"phase,omitempty"`
	Done  int64  `json:"done,omitempty"`
	Total int64  `json:"total,omitempty"`
	Image *Image `json:"image,omitempty"`
	Error *Error `json:"error,omitempty"`
}

// Check is one line of the daemon's health report.
type Check struct {
	Name     string `json:"name"`
	OK       bool   `json:"ok"`
	Detail   string `json:"detail"`             // empty but for the node's administrators
	Degrades string `json:"degrades,omitempty"` // what a failure means for users
	// Optional marks a check of something the node does not need (a runtime it could
	// add); its failure does not make the node unhealthy.
	Optional bool `json:"optional,omitempty"`
}

// Status is the body of GET /v1/status.
type Status struct {
	Version   string  `json:"version"`
	StateDir  string  `json:"state_dir,omitempty"` // for the node's administrators only
	Sandboxes int     `json:"sandboxes"`
	Checks    []Check `json:"checks"`
	// Runtimes name the node's runtimes, its default first.
	Runtimes []string `json:"runtimes,omitempty"`
	// Router is the command router's state under the node's profile.
	Router *RouterStatus `json:"router,omitempty"`
	// Pools are the node's warm pools (for its administrators only).
	Pools []Pool `json:"pools,omitempty"`
}

// RouterStatus says whether the router can contain what its profile contains: live (a
// runtime works), degraded (the profile contains work but no runtime can run sandboxes:
// such work runs on the host in the fence, or is refused with fail_closed) or off (no
// profile, or off: work runs on the host by design).
type RouterStatus struct {
	State      string `json:"state"`
	Profile    string `json:"profile"`
	FailClosed bool   `json:"fail_closed"`
	Reason     string `json:"reason"`
	// Matrix says which mechanism governs each kind of caller under the profile.
	Matrix []RouterMatrixRow `json:"matrix"`
}

// RouterMatrixRow is one kind of caller (run_code, shell command, workflow step,
// verification check, MCP server) and the mechanism that governs it: sandbox, fence,
// host, or router (each command decided by its risk).
type RouterMatrixRow struct {
	Caller    string `json:"caller"`
	Mechanism string `json:"mechanism"`
	Behaviour string `json:"behaviour"`
}

// Error is the one error shape: {"error": {...}}.
type Error struct {
	Code    string         `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details,omitempty"`
}

// ErrorBody wraps Error on the wire.
type ErrorBody struct {
	Error Error `json:"error"`
}

// Event is one state change or limit hit of a sandbox.
type Event struct {
	Seq        int64          `json:"seq"`
	SandboxID  string         `json:"sandbox_id"`
	Generation int64          `json:"generation"`
	Type       string         `json:"type"`
	Cause      string         `json:"cause,omitempty"`
	Data       map[string]any `json:"data,omitempty"`
	Time       time.Time      `json:"time"`
}

// EventList is the body of GET /v1/events without follow.
type EventList struct {
	Events []Event `json:"events"`
}

// Leftover is a host resource with Airlock's name and no live record.
type Leftover struct {
	SandboxID string `json:"sandbox_id"`
	Reason    string `json:"reason"`
}

// GCResult is the body of POST /v1/gc.
type GCResult struct {
	DryRun    bool       `json:"dry_run"`
	Leftovers []Leftover `json:"leftovers"`
}

// DefaultSocket is the daemon's unix socket unless its configuration or a client says
// otherwise.
const DefaultSocket = "/run/airlock/airlock.sock"

// SocketHost is the host of URLs served through the daemon's unix socket: an exposed
// port's URL has it when the daemon has no TCP listener (curl --unix-socket reaches it).
const SocketHost = "airlock"

// User is an identity: a user or a service account, with its roles.
type User struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind"` // user or service
	Roles     []string  `json:"roles"`
	UIDs      []int     `json:"uids,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// UserList is the body of GET /v1/users.
type UserList struct {
	Users []User `json:"users"`
}

// CreateUserRequest is the body of POST /v1/users.
type CreateUserRequest struct {
	Name  string   `json:"name"`
	Kind  string   `json:"kind,omitempty"` // user (default) or service
	Roles []string `json:"roles"`
	UIDs  []int    `json:"uids,omitempty"` // local users who are this identity over the unix socket
}

// RolesRequest is the body of PUT /v1/users/{name}/roles.
type RolesRequest struct {
	Roles []string `json:"roles"`
}

// Role is a named set of permissions.
type Role struct {
	Name        string   `json:"name"`
	Permissions []string `json:"permissions"`
	Builtin     bool     `json:"builtin,omitempty"`
}

// RoleList is the body of GET /v1/roles.
type RoleList struct {
	Roles []Role `json:"roles"`
}

// RoleRequest is the body of PUT /v1/roles/{name}.
type RoleRequest struct {
	Permissions []string `json:"permissions"`
}

// Token is an API token's record; its secret is shown once, when it is made.
type Token struct {
	ID        string     `json:"id"`
	User      string     `json:"user"`
	Name      string     `json:"name,omitempty"`
	Prefix    string     `json:"prefix"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// Secret is set only in the answer to the token's creation.
	Secret string `json:"secret,omitempty"`
}

// TokenList is the body of GET /v1/tokens.
type TokenList struct {
	Tokens []Token `json:"tokens"`
}

// CreateTokenRequest is the body of POST /v1/tokens.
type CreateTokenRequest struct {
	User    string `json:"user"`
	Name    string `json:"name,omitempty"`
	Expires string `json:"expires,omitempty"` // a lifetime such as 720h; empty: until revoked
	// Format is the secret's shape: "airlock" (al_…, the default) or "e2b" (e2b_ and 40
	// hex digits, for E2B's SDKs); either works wherever a token does.
	Format string `json:"format,omitempty"`
}

// WhoAmI is the body of GET /v1/whoami: the caller and what it may do.
type WhoAmI struct {
	User        string   `json:"user"`
	Roles       []string `json:"roles"`
	Permissions []string `json:"permissions"`
	// Sandbox is set when the caller is code inside a sandbox, using its session credential.
	Sandbox string `json:"sandbox,omitempty"`
}

// AuditRecord is one record of the hash-chained audit log: its body as stored (JSON:
// time, identity, action, resource, sandbox, result, source, detail) and its hash.
type AuditRecord struct {
	Seq    int64           `json:"seq"`
	Record json.RawMessage `json:"record"`
	Hash   string          `json:"hash"`
}

// AuditList is the body of GET /v1/audit.
type AuditList struct {
	Records []AuditRecord `json:"records"`
}

// AuditVerify is the body of POST /v1/audit/verify.
type AuditVerify struct {
	Records int64  `json:"records"`
	OK      bool   `json:"ok"`
	Seq     int64  `json:"seq,omitempty"`
	Problem string `json:"problem,omitempty"`
}

// Secret is a secret's metadata; its value is never in an answer.
type Secret struct {
	Name         string          `json:"name"`
	Type         string          `json:"type"`
	Description  string          `json:"description,omitempty"`
	AllowedHosts []string        `json:"allowed_hosts"`
	CreatedAt    time.Time       `json:"created_at"`
	ExpiresAt    *time.Time      `json:"expires_at,omitempty"`
	RevokedAt    *time.Time      `json:"revoked_at,omitempty"`
	Versions     []SecretVersion `json:"versions"`
	Bindings     []SecretBinding `json:"bindings"`
}

// SecretBinding hands a secret to one of its owner's sandboxes.
type SecretBinding struct {
	ID       string    `json:"id"`
	Sandbox  string    `json:"sandbox"`  // the sandbox's id
	Scope    string    `json:"scope"`    // sandbox or execution
	Target   string    `json:"target"`   // a variable name or an absolute file path
	Delivery string    `json:"delivery"` // proxy, file or env
	Hosts    []string  `json:"hosts"`
	Query    bool      `json:"query,omitempty"`
	Headers  []string  `json:"headers,omitempty"` // proxy delivery: where it is substituted; none means Authorization
	Created  time.Time `json:"created_at"`
	// Risk is set for the deliveries that put the value itself where sandbox code can
	// read it (env: any process can print its environment).
	Risk string `json:"risk,omitempty"`
}

// BindSecretRequest is the body of POST /v1/secrets/{name}/bindings.
type BindSecretRequest struct {
	Sandbox  string   `json:"sandbox"` // name or id
	Scope    string   `json:"scope,omitempty"`
	Target   string   `json:"target"`
	Delivery string   `json:"delivery,omitempty"`
	Hosts    []string `json:"hosts,omitempty"`
	Query    bool     `json:"query,omitempty"`
	Headers  []string `json:"headers,omitempty"`
}

// BindSecretResult is the answer to a binding: it and when the sandbox sees it.
type BindSecretResult struct {
	Binding SecretBinding `json:"binding"`
	Applies string        `json:"applies"` // "now", or "at the next start"
}

// UnbindSecretResult is the answer to DELETE /v1/secrets/{name}/bindings.
type UnbindSecretResult struct {
	Removed int `json:"removed"`
}

// SecretVersion is one value's metadata: a safe preview and a keyed fingerprint.
type SecretVersion struct {
	Version     int       `json:"version"`
	CreatedAt   time.Time `json:"created_at"`
	Preview     string    `json:"preview"`
	Fingerprint string    `json:"fingerprint"`
	Size        int       `json:"size"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Secrets []Secret `json:"secrets"`
}

// CreateSecretRequest is the body of POST /v1/secrets.
type CreateSecretRequest struct {
	Name         string   `json:"name"`
	Type         string   `json:"type"` // token, password or certificate
	Description  string   `json:"description,omitempty"`
	AllowedHosts []string `json:"allowed_hosts,omitempty"` // none: file and env delivery only
	Expires      string   `json:"expires,omitempty"`       // RFC 3339 time or a duration from now
	Value        string   `json:"value"`
}

// RotateSecretRequest is the body of POST /v1/secrets/{name}/rotate.
type RotateSecretRequest struct {
	Value string `json:"value"`
}

// RekeyResult is the body of POST /v1/secrets/rekey.
type RekeyResult struct {
	Secrets int `json:"secrets"`
}

// RouteRequest is the body of POST /v1/route: one shell command or code snippet whose
// place the daemon's router decides. Nothing runs.
type RouteRequest struct {
	// Command is a shell command line, scored as it is; Argv is one command's words,
	// scored as their shell-quoted join. A command request sets exactly one of them.
	Command string   `json:"command,omitempty"`
	Argv    []string `json:"argv,omitempty"`
	// Kind is "command" (the default) or "code": a snippet, which is never scored.
	Kind string `json:"kind,omitempty"`
	// Language is the snippet's language (python, node or bash); code only.
	Language string `json:"language,omitempty"`
	// Profile is off, safe or strict; empty means the daemon's router.profile.
	Profile string `json:"profile,omitempty"`
	// WorkspaceAccess (none, ro or rw) and Network, when set, replace the profile's.
	WorkspaceAccess string `json:"workspace_access,omitempty"`
	Network         *bool  `json:"network,omitempty"`
}

// RouteReason is one thing the risk scorer found in a command.
type RouteReason struct {
	Code string `json:"code"`
	Text string `json:"text"`
}

// RouteDecision is the answer of POST /v1/route.
type RouteDecision struct {
	// Place is host (unfenced), fence (the host inside the fence) or sandbox; empty when
	// no profile applies (Profile empty): the caller runs the work as it would without
	// the router.
	Place  string `json:"place"`
	Reason string `json:"reason"`
	// Score and Reasons are the command's risk (0 and none for code).
	Score   float64       `json:"score"`
	Reasons []RouteReason `json:"reasons"`
	// Profile is the profile the decision was made under (custom when WorkspaceAccess or
	// Network changed one of its fields), or empty.
	Profile   string  `json:"profile"`
	Threshold float64 `json:"threshold"`
	// WorkspaceAccess and Network are what the fence or sandbox gives the work.
	WorkspaceAccess string `json:"workspace_access"`
	Network         bool   `json:"network"`
	// WorkspaceMount says the node can mount a workspace of a caller on its unix socket
	// into a sandbox of its default runtime (CreateSandboxRequest.Workspace); else the
	// caller copies the workspace in.
	WorkspaceMount bool `json:"workspace_mount,omitempty"`
	// WorkspaceRuntimes names the node's runtimes whose sandboxes can have such a
	// workspace mounted (for a request that names its runtime).
	WorkspaceRuntimes []string `json:"workspace_runtimes,omitempty"`
	// Degraded says the work would run in a sandbox but no runtime can run one: Place
	// is fence instead, and the audit log has a sandbox.degraded record.
	Degraded bool `json:"degraded,omitempty"`
}

// VolumeMount is a volume attached to a sandbox at an absolute path, read-only or not
// (one writer at a time: a volume's writer lease).
type VolumeMount struct {
	Name     string `json:"name"`
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Volume is a volume, or a volume snapshot (kind snapshot: its name is its id).
type Volume struct {
	ID    string `json:"id"`
	Kind  string `json:"kind"` // volume or snapshot
	Name  string `json:"name"`
	Owner string `json:"owner"`
	Node  string `json:"node"`
	// Size is the capacity in bytes; GrowTo, when set, is a grow that takes effect at
	// the volume's next mount that no running sandbox holds.
	Size        int64              `json:"size"`
	GrowTo      int64              `json:"grow_to,omitempty"`
	Source      string             `json:"source,omitempty"`   // the snapshot it was made from, or the volume a snapshot copies
	Checksum    string             `json:"checksum,omitempty"` // a snapshot's
	Attachments []VolumeAttachment `json:"attachments"`
	CreatedAt   time.Time          `json:"created_at"`
	UpdatedAt   time.Time          `json:"updated_at"`
}

// VolumeAttachment is a sandbox a volume is attached to.
type VolumeAttachment struct {
	Sandbox  string `json:"sandbox"` // its id
	Path     string `json:"path"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// VolumeList is the body of GET /v1/volumes.
type VolumeList struct {
	Volumes []Volume `json:"volumes"`
}

// CreateVolumeRequest is the body of POST /v1/volumes.
type CreateVolumeRequest struct {
	Name string `json:"name"`
	// Size is the capacity in bytes (at least 16 MiB); from a snapshot, at least its size
	// (0: the snapshot's).
	Size int64 `json:"size"`
	// From is a volume snapshot ("vsnap_…") whose contents the volume starts with.
	From string `json:"from,omitempty"`
}

// ResizeVolumeRequest is the body of POST /v1/volumes/{name}/resize.
type ResizeVolumeRequest struct {
	Size int64 `json:"size"` // bytes; above the current size: a volume only grows
}

// AttachVolumeRequest is the body of POST /v1/volumes/{name}/attach and /detach.
type AttachVolumeRequest struct {
	Sandbox  string `json:"sandbox"` // name or id; it must be suspended
	Path     string `json:"path,omitempty"`
	ReadOnly bool   `json:"read_only,omitempty"`
}
