package manager

import (
	"context"
	"errors"
	"io"
	"net"
	"syscall"

	"github.com/airlockhq/airlock/internal/agent"
	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/store"
)

// Work is how a plane (the native API, the E2B plane) reaches one sandbox's processes
// and files: reaching it counts as inbound traffic and resumes a suspended sandbox, and
// every failed call comes back as an API error, a container found dead recorded, here
// and not in each plane. No plane holds the sandbox's agent client itself.
type Work struct {
	m  *Manager
	sb *store.Sandbox
	cl *agent.Client
}

// Work reaches a sandbox of owner's.
func (m *Manager) Work(ctx context.Context, owner, ref string) (*Work, error) {
	sb, err := m.Resolve(ctx, owner, ref)
	if err != nil {
		return nil, err
	}
	return m.WorkOn(ctx, sb)
}

// WorkOn reaches sb, a sandbox ByID found whose owner the caller has checked.
func (m *Manager) WorkOn(ctx context.Context, sb *store.Sandbox) (*Work, error) {
	cl, sb, err := m.agentFor(ctx, sb)
	if err != nil {
		return nil, err
	}
	return &Work{m: m, sb: sb, cl: cl}, nil
}

// Sandbox is the record of the sandbox reached, as it was when it was.
func (w *Work) Sandbox() *store.Sandbox { return w.sb }

// fail turns a failed call's error into an API error.
func (w *Work) fail(err error) error {
	if err == nil {
		return nil
	}
	return w.m.agentFailed(w.sb, err)
}

// Stat describes the file at path.
func (w *Work) Stat(ctx context.Context, path string) (*agentproto.FileInfo, error) {
	fi, err := w.cl.Stat(ctx, path)
	return fi, w.fail(err)
}

// List lists the directory at path.
func (w *Work) List(ctx context.Context, path string) ([]agentproto.FileInfo, error) {
	fis, err := w.cl.List(ctx, path)
	return fis, w.fail(err)
}

// Download copies the file at path into out and returns its size.
func (w *Work) Download(ctx context.Context, path string, out io.Writer) (int64, error) {
	n, err := w.cl.Download(ctx, path, out)
	return n, w.fail(err)
}

// DownloadRange writes length bytes (0: all) of the file at path, from offset, to out.
// A sandbox whose agent cannot send part of a file answers ErrNoRangedRead, having
// sent nothing.
func (w *Work) DownloadRange(ctx context.Context, path string, offset, length int64, out io.Writer) (int64, error) {
	n, err := w.cl.DownloadRange(ctx, path, offset, length, out)
	if errors.Is(err, ErrNoRangedRead) {
		return n, err
	}
	return n, w.fail(err)
}

// Upload is the manager's Upload into this sandbox.
func (w *Work) Upload(ctx context.Context, path string, mode uint32, uid, gid int, r io.Reader) (int64, error) {
	return w.m.upload(ctx, w.sb, w.cl, path, mode, uid, gid, false, r)
}

// UploadInPlace is Upload writing the file under its own name, as E2B's envd does: a
// watcher sees the file itself created and written, never a temporary name.
func (w *Work) UploadInPlace(ctx context.Context, path string, mode uint32, uid, gid int, r io.Reader) (int64, error) {
	return w.m.upload(ctx, w.sb, w.cl, path, mode, uid, gid, true, r)
}

// Mkdir makes the directory path (and its missing parents, with parents), owned by uid
// and gid (-1: the agent's own).
func (w *Work) Mkdir(ctx context.Context, path string, parents bool, uid, gid int) error {
	if uid < 0 {
		return w.fail(w.cl.Mkdir(ctx, path, parents))
	}
	return w.fail(w.cl.MkdirAs(ctx, path, parents, uid, gid))
}

// Remove removes path (recursive: with everything under it).
func (w *Work) Remove(ctx context.Context, path string, recursive bool) error {
	return w.fail(w.cl.Remove(ctx, path, recursive))
}

// Rename moves from to to inside the sandbox.
func (w *Work) Rename(ctx context.Context, from, to string) error {
	return w.fail(w.cl.Rename(ctx, from, to))
}

// LookupUser describes the sandbox's user name ("": the agent's default user).
func (w *Work) LookupUser(ctx context.Context, name string) (*agentproto.UserInfo, error) {
	u, err := w.cl.LookupUser(ctx, name)
	return u, w.fail(err)
}

// DialPort connects to port on the sandbox's loopback.
func (w *Work) DialPort(ctx context.Context, port int) (net.Conn, error) {
	conn, err := w.cl.DialPort(ctx, port)
	return conn, w.fail(err)
}

// ProcInput writes data to the stdin (or terminal) of a process of the sandbox's table,
// named by pid or, when pid is 0, by tag.
func (w *Work) ProcInput(ctx context.Context, pid int, tag string, data []byte) error {
	return w.fail(w.cl.ProcInput(ctx, pid, tag, data))
}

// ProcCloseStdin closes the stdin of a process of the table.
func (w *Work) ProcCloseStdin(ctx context.Context, pid int, tag string) error {
	return w.fail(w.cl.ProcCloseStdin(ctx, pid, tag))
}

// ProcSignal sends sig to the process group of a process of the table.
func (w *Work) ProcSignal(ctx context.Context, pid int, tag string, sig syscall.Signal) error {
	return w.fail(w.cl.ProcSignal(ctx, pid, tag, sig))
}

// ProcResize resizes the terminal of a process of the table.
func (w *Work) ProcResize(ctx context.Context, pid int, tag string, rows, cols uint16) error {
	return w.fail(w.cl.ProcResize(ctx, pid, tag, rows, cols))
}

// Send sends input to session id and streams its reply; maxRead bounds the output read
// (0: none), past which the reply is abandoned.
func (w *Work) Send(ctx context.Context, id, input string, maxRead int64, stdout, stderr io.Writer) (*agentproto.SendResult, error) {
	cl := *w.cl
	cl.MaxRead = maxRead
	res, err := cl.Send(ctx, id, input, stdout, stderr)
	return res, w.fail(err)
}

// SessionLogs streams a background session's log: its last tail lines (0: all it
// keeps) and, with follow, what comes after until the process ends.
func (w *Work) SessionLogs(ctx context.Context, id string, tail int, follow bool, stdout, stderr io.Writer) (*agentproto.LogsResult, error) {
	res, err := w.cl.SessionLogs(ctx, id, tail, follow, stdout, stderr)
	return res, w.fail(err)
}

// ListSessions lists the sandbox's sessions.
func (w *Work) ListSessions(ctx context.Context) ([]agentproto.SessionInfo, error) {
	list, err := w.cl.ListSessions(ctx)
	return list, w.fail(err)
}

// CloseSession ends session id.
func (w *Work) CloseSession(ctx context.Context, id string) error {
	return w.fail(w.cl.CloseSession(ctx, id))
}
