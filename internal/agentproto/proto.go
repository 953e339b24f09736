// Package agentproto is the wire protocol between Airlock's daemon (and its SDK's
// terminal streams) and the agent inside each sandbox: checksummed frames, the requests
// and the results they carry. It is plain Go with no operating-system calls, so the
// public SDK that speaks it builds on every OS. It must not import anything of Airlock
// but errdefs.
//
// Hostile surface: everything an agent sends may come from sandbox code that replaced
// it. ReadFrame never allocates more than MaxPayload and checks every frame's checksum;
// FileInfo.Check refuses file entries no real agent sends.
package agentproto

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"strings"
	"sync"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// FrameType is the first byte of a frame.
type FrameType byte

// The frame types. The request frame opens every call; the rest depend on the op.
const (
	FrameRequest    FrameType = 'Q' // client→agent: JSON Request
	FrameStdin      FrameType = 'I' // client→agent: bytes for the process's stdin or PTY
	FrameStdinClose FrameType = 'C' // client→agent: close stdin
	FrameStdout     FrameType = 'O' // agent→client: stdout (or PTY output) bytes
	FrameStderr     FrameType = 'E' // agent→client: stderr bytes
	FrameResize     FrameType = 'Z' // client→agent: JSON Resize
	FrameCancel     FrameType = 'X' // client→agent: stop the call
	FrameResult     FrameType = 'R' // agent→client: JSON result; ends the call
	FrameError      FrameType = 'F' // agent→client: JSON RemoteError; ends the call
	FrameData       FrameType = 'D' // both ways: file bytes
	FrameEnd        FrameType = 'N' // client→agent: end of file bytes
)

// MaxPayload is the largest payload a frame may carry.
const MaxPayload = 1 << 20

// ErrChecksum reports a frame whose CRC-32C does not match its contents.
var ErrChecksum = errors.New("agent: frame checksum mismatch")

// ErrFrameTooLarge reports a frame whose declared length exceeds MaxPayload.
var ErrFrameTooLarge = errors.New("agent: frame too large")

// castagnoli is made on first use: building it costs a process that never frames
// (every CLI call links this package) a tenth of a millisecond.
var castagnoli = sync.OnceValue(func() *crc32.Table { return crc32.MakeTable(crc32.Castagnoli) })

// WriteFrame writes one frame: type, big-endian length, payload, CRC-32C of all three.
func WriteFrame(w io.Writer, t FrameType, payload []byte) error {
	if len(payload) > MaxPayload {
		return fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, len(payload))
	}
	var hdr [5]byte
	hdr[0] = byte(t)
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(payload)))
	sum := crc32.Update(crc32.Checksum(hdr[:], castagnoli()), castagnoli(), payload)
	var tail [4]byte
	binary.BigEndian.PutUint32(tail[:], sum)
	bufs := net.Buffers{hdr[:], payload, tail[:]}
	_, err := bufs.WriteTo(w)
	return err
}

// ReadFrame reads one frame and verifies its checksum. A mismatch is an error wrapping
// ErrChecksum; a declared length above MaxPayload is refused before anything is allocated.
func ReadFrame(r io.Reader) (FrameType, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrFrameTooLarge, n)
	}
	buf := make([]byte, int(n)+4)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, unexpected(err)
	}
	payload, tail := buf[:n], buf[n:]
	sum := crc32.Update(crc32.Checksum(hdr[:], castagnoli()), castagnoli(), payload)
	if binary.BigEndian.Uint32(tail) != sum {
		return 0, nil, fmt.Errorf("%w (type %q, %d bytes)", ErrChecksum, hdr[0], n)
	}
	return FrameType(hdr[0]), payload, nil
}

func unexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Ops a Request can name.
const (
	OpPing         = "ping"
	OpExec         = "exec"
	OpPTY          = "pty"
	OpSessionStart = "session.start"
	OpSessionSend  = "session.send"
	OpSessionClose = "session.close"
	OpSessionList  = "session.list"
	OpSessionLogs  = "session.logs"
	OpSetLifetime  = "lifetime.set"
	OpFileUpload   = "file.upload"
	OpFileDownload = "file.download"
	// OpFileRead is file.download of a part of a file: Offset and Length. An agent
	// that predates it answers "unknown op".
	OpFileRead   = "file.read"
	OpFileList   = "file.list"
	OpFileStat   = "file.stat"
	OpFileMkdir  = "file.mkdir"
	OpFileRemove = "file.remove"
	// OpPortDial connects the agent to a TCP port on the sandbox's loopback; after its
	// Result frame the call's connection carries that connection's bytes both ways.
	OpPortDial = "port.dial"
	// OpQuiesce closes every connection the agent holds (file watches, session
	// watches, attached processes, port connections) but the call's own, which it
	// closes after its Result: a runtime that saves the sandbox's memory cannot save a
	// connection to the host. Processes and sessions run on.
	OpQuiesce = "quiesce"
)

// Request is the payload of the frame that opens every call.
type Request struct {
	Op        string       `json:"op"`
	Exec      *ExecSpec    `json:"exec,omitempty"`
	Session   *SessionSpec `json:"session,omitempty"`
	SessionID string       `json:"session_id,omitempty"`
	Input     string       `json:"input,omitempty"`
	Path      string       `json:"path,omitempty"`
	// Offset and Length (file.read) are the part of the file to send: Length bytes from
	// Offset (0: to the end).
	Offset    int64  `json:"offset,omitempty"`
	Length    int64  `json:"length,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	UID       int    `json:"uid,omitempty"`
	GID       int    `json:"gid,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Parents   bool   `json:"parents,omitempty"`
	// InPlace (file.upload) writes the file under its own name, as E2B's envd does, so
	// a watcher sees it created and written and never a temporary name: the bytes are
	// staged in an unnamed file of the directory, then copied into the file. Without
	// it the file is written aside and renamed into place. An agent that does not know
	// it writes aside.
	InPlace bool `json:"in_place,omitempty"`
	Port    int  `json:"port,omitempty"`
	// Tail (session.logs) is how many of the last lines to send first (0: all kept);
	// Follow keeps the call open for new output until the process ends.
	Tail   int  `json:"tail,omitempty"`
	Follow bool `json:"follow,omitempty"`
	// Chunked (file.list) asks for the entries in Data frames, each a JSON array, before
	// an empty Result, so that a directory of any size fits in frames of MaxPayload.
	// An agent that does not know it sends them all in the Result.
	Chunked bool `json:"chunked,omitempty"`
	// Deadline (lifetime.set) is the Unix time in seconds the agent stops at; 0: never.
	Deadline int64 `json:"deadline,omitempty"`
	// Proc (proc.start) is the process to start. PID names a process of the table, or
	// Tag does when PID is 0; Signal (proc.signal) is a signal number; Rows and Cols
	// (proc.resize) a terminal's new size.
	Proc   *ProcSpec `json:"proc,omitempty"`
	PID    int       `json:"pid,omitempty"`
	Tag    string    `json:"tag,omitempty"`
	Signal int       `json:"signal,omitempty"`
	Rows   uint16    `json:"rows,omitempty"`
	Cols   uint16    `json:"cols,omitempty"`
	// Dest (file.rename) is where Path moves to; User (user.lookup) a user name.
	Dest string `json:"dest,omitempty"`
	User string `json:"user,omitempty"`
	// Tar (file.untar) bounds the archive.
	Tar *TarLimits `json:"tar,omitempty"`
	// Keep asks the agent to keep the connection once the call has ended cleanly and
	// read the next call's request from it. The agent honours it for ping and for an
	// exec without stdin, and keeps the connection only when the client sent nothing
	// after the request; otherwise it closes the connection as it does without Keep. An
	// agent that predates it refuses the request as having an unknown field, having run
	// nothing.
	Keep bool `json:"keep,omitempty"`
}

// ExecSpec describes one process to run.
type ExecSpec struct {
	Argv      []string `json:"argv,omitempty"`
	Shell     string   `json:"shell,omitempty"` // run with /bin/sh -c when Argv is empty
	Env       []string `json:"env,omitempty"`   // K=V on top of the agent's base environment
	Cwd       string   `json:"cwd,omitempty"`
	UID       *uint32  `json:"uid,omitempty"`
	GID       *uint32  `json:"gid,omitempty"`
	TimeoutMS int64    `json:"timeout_ms,omitempty"`
	Stdin     bool     `json:"stdin,omitempty"` // client sends Stdin frames, then StdinClose
	Rows      uint16   `json:"rows,omitempty"`  // PTY only
	Cols      uint16   `json:"cols,omitempty"`  // PTY only
}

// SessionSpec describes a long-lived session process.
type SessionSpec struct {
	Kind string   `json:"kind"`           // SessionPython, SessionShell or SessionRaw
	Argv []string `json:"argv,omitempty"` // raw: the command; others: an override
	// Log makes a background session: its output is kept in a bounded log that
	// session.logs reads (and follows), not handed to sends; the session's log stays
	// readable for a while after the process ends.
	Log bool     `json:"log,omitempty"`
	Env []string `json:"env,omitempty"`
	Cwd string   `json:"cwd,omitempty"`
	UID *uint32  `json:"uid,omitempty"`
	GID *uint32  `json:"gid,omitempty"`
	// Watch keeps the start call open: the agent sends the session's SessionInfo in a
	// Data frame, then, once the session's process has ended, a SessionEnd as the
	// Result. An agent that predates it answers the SessionInfo as the Result.
	Watch bool `json:"watch,omitempty"`
}

// SessionEnd is how a watched session ended: its process exited on its own (State
// exited, with its exit code, or 128 + the signal that killed it), or session.close
// ended it (State closed).
type SessionEnd struct {
	State    string `json:"state"`
	ExitCode int    `json:"exit_code"`
}

// StateClosed is a session's end when session.close ended it.
const StateClosed = "closed"

// Exec and send states.
const (
	StateSucceeded = "succeeded"
	StateFailed    = "failed"
	StateTimeout   = "timeout"
	StateCancelled = "cancelled"
	StateKilled    = "killed"
	StateExited    = "exited" // session.send: the session process ended
)

// ExitResult is how an exec or PTY ended.
type ExitResult struct {
	State      string `json:"state"`
	ExitCode   int    `json:"exit_code"`
	Signal     string `json:"signal,omitempty"`
	DurationMS int64  `json:"duration_ms"`
	Error      string `json:"error,omitempty"`
}

// Resize is the payload of a Resize frame.
type Resize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Session kinds.
const (
	SessionPython = "python"
	SessionShell  = "shell"
	SessionRaw    = "raw"
)

// SessionInfo describes a running session.
type SessionInfo struct {
	ID   string `json:"id"`
	Kind string `json:"kind"`
	PID  int    `json:"pid"`
	// Log marks a background session; Exited and ExitCode say how its process ended,
	// once it has (a background session is listed for a while after).
	Log      bool `json:"log,omitempty"`
	Exited   bool `json:"exited,omitempty"`
	ExitCode int  `json:"exit_code,omitempty"`
	// StartedMS is when the session started, in Unix milliseconds.
	StartedMS int64 `json:"started_ms,omitempty"`
}

// LogsResult ends a session.logs call: the process's state then (running or exited,
// with its exit code) and how many bytes the log had dropped before what was sent.
type LogsResult struct {
	State    string `json:"state"` // running or exited
	ExitCode int    `json:"exit_code"`
	Dropped  int64  `json:"dropped,omitempty"`
}

// SendResult is how one session.send ended.
type SendResult struct {
	State    string `json:"state"` // succeeded, failed, exited or cancelled
	ExitCode int    `json:"exit_code"`
	Error    string `json:"error,omitempty"`
}

// FileInfo describes one file. Mode holds the permission bits (with setuid, setgid, sticky).
type FileInfo struct {
	Name      string `json:"name"`
	Size      int64  `json:"size"`
	Mode      uint32 `json:"mode"`
	IsDir     bool   `json:"is_dir"`
	IsSymlink bool   `json:"is_symlink,omitempty"`
	MTime     int64  `json:"mtime"` // Unix seconds
	// UID and GID own the file; Owner and Group are their names in the sandbox's
	// /etc/passwd and /etc/group, or the numbers as text.
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// Target is what a symlink points to, as readlink gives it. A stat follows a
	// symlink to describe its target, and still says here what the link points to.
	Target string `json:"target,omitempty"`
}

// SizeResult is the result of an upload or download.
type SizeResult struct {
	Size int64 `json:"size"`
}

// Error codes beyond errdefs' API codes.
const (
	CodeChecksum = "checksum" // a frame was damaged in transit
	CodeBusy     = "busy"     // the session is serving another send
)

// RemoteError is an Error frame from the agent.
type RemoteError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *RemoteError) Error() string { return "agent: " + e.Code + ": " + e.Message }

// Is lets errors.Is match ErrChecksum for "checksum", errdefs.ErrFailedPrecondition for
// "busy" and the errdefs class of any API code.
func (e *RemoteError) Is(target error) bool {
	switch e.Code {
	case CodeChecksum:
		return target == ErrChecksum
	case CodeBusy:
		return target == errdefs.ErrFailedPrecondition
	}
	return target == errdefs.FromCode(e.Code)
}

// DecodeRequest decodes a request payload strictly: unknown fields and trailing data are
// errors.
func DecodeRequest(b []byte) (*Request, error) {
	var req Request
	if err := decodeStrict(b, &req); err != nil {
		return nil, fmt.Errorf("decode request: %w", err)
	}
	return &req, nil
}

func decodeStrict(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after JSON value")
	}
	return nil
}

// ErrBadReply reports a reply no real agent sends: a frame out of place, or a result
// that describes the impossible.
var ErrBadReply = errors.New("agent: invalid reply")

// maxFileName is Linux's NAME_MAX: the bytes of one name in a directory.
const maxFileName = 255

// Check refuses a file entry no real agent sends: the daemon builds paths from names
// and shows sizes to the sandbox's owner, and the agent is the sandbox's to replace.
// A stat may name the root ("/"); a listing's entries are plain names.
func (fi *FileInfo) Check(stat bool) error {
	why := ""
	switch {
	case fi.Size < 0:
		why = fmt.Sprintf("a negative size (%d)", fi.Size)
	case fi.Mode > 0o7777:
		why = fmt.Sprintf("mode bits beyond 07777 (%#o)", fi.Mode)
	case fi.Name == "/" && stat:
	case len(fi.Name) > maxFileName:
		why = fmt.Sprintf("a name of %d bytes, more than a file's name has", len(fi.Name))
	case fi.Name == "" || fi.Name == "." || fi.Name == ".." || strings.ContainsAny(fi.Name, "/\x00"):
		why = fmt.Sprintf("the name %q, which is no file name", fi.Name)
	}
	if why != "" {
		return fmt.Errorf("%w: the sandbox's agent described a file with %s", ErrBadReply, why)
	}
	return nil
}

// FrameStarted is the first frame of a proc.start or proc.attach reply (agent→client):
// JSON ProcStarted.
const FrameStarted FrameType = 'S'

// Ops of the agent's process table, file renames and watches, and user lookups.
//
// proc.start and proc.attach answer FrameStarted, then Stdout and Stderr frames as the
// process writes, then a Result (ExitResult) once it has exited and all its output was
// sent; the process outlives the call. proc.input carries its bytes in one Data frame
// after the request. file.watch answers Data frames of one JSON WatchEvent each, the
// first of them empty (the watch is in place), until the client hangs up or the
// directory is removed (then a Result).
const (
	OpProcStart      = "proc.start"
	OpProcAttach     = "proc.attach"
	OpProcList       = "proc.list"
	OpProcInput      = "proc.input"
	OpProcCloseStdin = "proc.stdin_close"
	OpProcSignal     = "proc.signal"
	OpProcResize     = "proc.resize"
	OpFileRename     = "file.rename"
	OpFileWatch      = "file.watch"
	OpUserLookup     = "user.lookup"
)

// Tree copies. file.untar unpacks the tar stream the client sends in Data frames
// (then End) into the directory Path, making it and its missing parents, within the
// limits of Tar; its Result is a TreeResult. file.tar sends the tree under the
// directory Path as a tar stream in Data frames, then a SizeResult of the stream's
// bytes. An agent that predates them answers "unknown op".
const (
	OpFileUntar = "file.untar"
	OpFileTar   = "file.tar"
)

// TarLimits bound one file.untar (0: the agent's defaults).
type TarLimits struct {
	MaxEntries int64 `json:"max_entries,omitempty"`
	MaxBytes   int64 `json:"max_bytes,omitempty"`
}

// TreeResult counts what a file.untar wrote.
type TreeResult struct {
	Files int64 `json:"files"`
	Dirs  int64 `json:"dirs"`
	Links int64 `json:"links"`
	Bytes int64 `json:"bytes"`
}

// ProcSpec describes a process for the agent's process table.
type ProcSpec struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env,omitempty"` // K=V on top of the base environment and the user's
	Cwd  string   `json:"cwd,omitempty"` // "": the user's home if it exists, else "/"
	// User is a user name in the sandbox's /etc/passwd; "" runs the process as exec
	// runs one without a uid (the agent's user, environment and working directory).
	User string `json:"user,omitempty"`
	PTY  bool   `json:"pty,omitempty"`
	Rows uint16 `json:"rows,omitempty"` // PTY only; 0: 24
	Cols uint16 `json:"cols,omitempty"` // PTY only; 0: 80
	// Tag names the process for attach, input and signals, unique among live processes.
	Tag string `json:"tag,omitempty"`
	// Stdin gives the process a pipe that proc.input writes to; without it stdin is
	// /dev/null. A PTY process always reads its terminal.
	Stdin bool `json:"stdin,omitempty"`
	// TimeoutMS, if set, kills the process's group that long after it started, on the
	// agent's own clock; it then ends with state timeout.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// ProcStarted is the payload of a Started frame.
type ProcStarted struct {
	PID int  `json:"pid"`
	PTY bool `json:"pty,omitempty"` // its output is a terminal's
}

// ProcInfo describes a live process of the table. Env is what its ProcSpec asked for,
// Cwd where it started. A listing too large for one frame leaves Argv, Env and Cwd out
// of its last entries.
type ProcInfo struct {
	PID  int      `json:"pid"`
	Tag  string   `json:"tag,omitempty"`
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Cwd  string   `json:"cwd,omitempty"`
	PTY  bool     `json:"pty,omitempty"`
}

// Watch event operations.
const (
	WatchCreate = "create"
	WatchWrite  = "write"
	WatchRemove = "remove"
	WatchRename = "rename" // the entry moved away from Name
	WatchChmod  = "chmod"
)

// WatchEvent is one change under a watched directory. Name is the path relative to
// the watched directory.
type WatchEvent struct {
	Name string `json:"name,omitempty"`
	Op   string `json:"op,omitempty"`
}

// UserInfo describes a user of the sandbox.
type UserInfo struct {
	Name string `json:"name"`
	UID  uint32 `json:"uid"`
	GID  uint32 `json:"gid"`
	Home string `json:"home"`
}
