package manager

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/idmap"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// A workspace is a host directory a sandbox sees at /workspace, read-only or
// read-write, as it is: no copy. It is mounted through an id mapping that shows the
// directory's owner as the sandbox's root, so files the sandbox makes there belong to
// that owner on the host, and files of anyone else show as nobody's. Only the owner of
// a directory (or root) may ask for it, which the server knows from the unix socket's
// peer: a host path means nothing to a caller elsewhere, and is never taken from one.
// Each start of the container mounts it again, after checking that its owner has not
// changed; each stop unmounts it.

// WorkspaceMountPoint is where a sandbox sees its workspace.
const WorkspaceMountPoint = "/workspace"

// WorkspaceRequest asks for a host directory at /workspace.
type WorkspaceRequest struct {
	Path   string `json:"path"`
	Access string `json:"access"` // "ro" or "rw"
	// PeerUID is the uid of the process asking, from the unix socket (the server sets
	// it; -1: not a local caller, refused).
	PeerUID int `json:"peer_uid"`
}

// checkWorkspace checks a workspace request against the host and returns what to keep.
func (m *Manager) checkWorkspace(req *WorkspaceRequest, runtimeName string) (*store.Workspace, error) {
	if m.cfg.WorkspaceDir == "" {
		return nil, errdefs.Precondition("this node mounts no host workspaces")
	}
	if req.PeerUID < 0 {
		return nil, denied("a host workspace is mounted only for a caller on the node's unix socket, whose uid says who it is")
	}
	if err := m.checkRuntime(runtimeName); err != nil {
		return nil, err
	}
	if !m.mountsWorkspace(runtimeName) {
		return nil, errdefs.Invalid("the runtime %q cannot mount a host workspace; of this node's runtimes, these can: %v", cmp.Or(runtimeName, m.defaultRuntime), m.workspaceRuntimes())
	}
	var ro bool
	switch req.Access {
	case "ro":
		ro = true
	case "rw":
	default:
		return nil, errdefs.Invalid("workspace access %q must be ro or rw", req.Access)
	}
	if !filepath.IsAbs(req.Path) {
		return nil, errdefs.Invalid("workspace path %q must be absolute", req.Path)
	}
	// The path is resolved and opened as the caller would: a directory it cannot reach
	// is refused as the kernel refuses the caller, and says nothing more about it.
	real, st, err := resolveAs(filepath.Clean(req.Path), req.PeerUID)
	if err != nil {
		return nil, err
	}
	if real == "/" {
		return nil, errdefs.Invalid("the workspace cannot be / (give a project directory)")
	}
	if req.PeerUID != 0 && int(st.Uid) != req.PeerUID {
		return nil, denied("workspace %s belongs to uid %d, not to you (uid %d): only a directory you own can be a workspace", real, st.Uid, req.PeerUID)
	}
	if !ro && (st.Uid == 0 || st.Gid == 0) {
		// The sandbox's root would write it as root: a set-user-ID (or set-group-ID)
		// file it makes there would be root's on this host.
		return nil, errdefs.Invalid("workspace %s belongs to root (uid %d gid %d): it can be mounted read-only only", real, st.Uid, st.Gid)
	}
	return &store.Workspace{Path: real, ReadOnly: ro, UID: st.Uid, GID: st.Gid}, nil
}

// resolveAs opens the directory at path as uid would, and returns the path that names
// it without a symbolic link and its owner. The kernel resolves the path (never through
// a /proc magic link, which would reach the daemon's own files and mounts) with the file
// system identity of uid (its own gid, no supplementary groups), on a thread of its own
// that is discarded afterwards; root (0) resolves as the daemon, and so does everyone
// under a daemon that is not root (it cannot take another's ids, nor reach more).
func resolveAs(path string, uid int) (string, *unix.Stat_t, error) {
	type result struct {
		real string
		st   *unix.Stat_t
		err  error
	}
	work := func() result {
		real, st, err := resolveWorkspace(path)
		return result{real, st, err}
	}
	if uid == 0 || os.Geteuid() != 0 {
		r := work()
		return r.real, r.st, r.err
	}
	gid := uid
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		if g, err := strconv.Atoi(u.Gid); err == nil {
			gid = g
		}
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the thread, whose ids are changed, ends with the goroutine.
		goruntime.LockOSThread()
		if err := unix.Setgroups(nil); err != nil {
			done <- result{err: fmt.Errorf("workspace: drop groups: %w", err)}
			return
		}
		unix.Setfsgid(gid)
		unix.Setfsuid(uid)
		gotGID, _ := unix.SetfsgidRetGid(-1)
		if got, _ := unix.SetfsuidRetUid(-1); got != uid || gotGID != gid {
			done <- result{err: fmt.Errorf("workspace: file system ids %d/%d, not %d/%d", got, gotGID, uid, gid)}
			return
		}
		done <- work()
	}()
	r := <-done
	return r.real, r.st, r.err
}

// resolveWorkspace opens the directory at path, following symbolic links but not /proc
// magic ones, and returns the path the kernel knows it by, checked to name the same
// directory without a symbolic link on the way (what mountWorkspace will open again).
func resolveWorkspace(path string) (string, *unix.Stat_t, error) {
	f, st, err := openWorkspace(path, 0)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		return "", nil, fmt.Errorf("workspace %s: %w", path, err)
	}
	g, again, err := openWorkspace(real, unix.RESOLVE_NO_SYMLINKS)
	if err != nil || again.Dev != st.Dev || again.Ino != st.Ino {
		return "", nil, errdefs.Invalid("workspace %s changed while it was checked", path)
	}
	g.Close()
	return real, st, nil
}

// openWorkspace opens the directory at path and says who owns it; resolve adds
// openat2(2) RESOLVE_ flags to RESOLVE_NO_MAGICLINKS. The mount is made from the open
// directory, so what was checked is what is mounted.
func openWorkspace(path string, resolve uint64) (*os.File, *unix.Stat_t, error) {
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS | resolve}
	fd, err := unix.Openat2(unix.AT_FDCWD, path, &how)
	if err != nil {
		switch {
		case errors.Is(err, unix.ENOTDIR):
			return nil, nil, errdefs.Invalid("workspace %s is not a directory", path)
		case errors.Is(err, unix.ELOOP):
			return nil, nil, errdefs.Invalid("workspace %s: its path goes through a symbolic link that is not followed here", path)
		case errors.Is(err, unix.ENOENT):
			return nil, nil, errdefs.Invalid("workspace %s does not exist", path)
		case errors.Is(err, unix.EACCES):
			return nil, nil, denied("workspace %s: you may not reach it", path)
		}
		return nil, nil, errdefs.Invalid("workspace %s: %v", path, err)
	}
	f := os.NewFile(uintptr(fd), path)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("workspace %s: %w", path, err)
	}
	return f, &st, nil
}

// The mount of sandbox id's workspace is made at WorkspaceDir/id/mnt. WorkspaceDir is
// searchable by others, and the mount shows the directory as it is, whatever guards it
// on its own path (a home directory of 0700): id is root's and 0700, as the directories
// of delivered secrets are (runc opens a bind's source as root).
const workspaceMountName = "mnt"

// workspaceMount is where the mount of sandbox id's workspace is made.
func (m *Manager) workspaceMount(id string) string {
	return filepath.Join(m.cfg.WorkspaceDir, id, workspaceMountName)
}

// mountWorkspace mounts sb's workspace for its container to bind at /workspace.
//
// The recorded path was resolved when the sandbox was made and names the directory
// without a symbolic link; it is opened again here as root, so a symbolic link on it now
// (its owner's, or a sandbox's that writes a directory above it) is refused, never
// followed.
func (m *Manager) mountWorkspace(sb *store.Sandbox) (_ runtime.Mount, retErr error) {
	ws := sb.Workspace
	if err := os.MkdirAll(m.cfg.WorkspaceDir, 0o711); err != nil {
		return runtime.Mount{}, err
	}
	m.unmountWorkspace(sb.ID) // what a crash left
	dir, target := filepath.Join(m.cfg.WorkspaceDir, sb.ID), m.workspaceMount(sb.ID)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return runtime.Mount{}, err // still there: unmountWorkspace said why
	}
	defer func() {
		if retErr != nil {
			// Empty: nothing was mounted.
			os.Remove(target)
			os.Remove(dir)
		}
	}()
	if err := os.Mkdir(target, 0o755); err != nil {
		return runtime.Mount{}, err
	}
	f, st, err := openWorkspace(ws.Path, unix.RESOLVE_NO_SYMLINKS)
	if err != nil {
		return runtime.Mount{}, errdefs.Precondition("the workspace of sandbox %q cannot be mounted", sb.Name).WithCause(err)
	}
	defer f.Close()
	if st.Uid != ws.UID || st.Gid != ws.GID {
		return runtime.Mount{}, errdefs.Precondition("the workspace %s of sandbox %q changed owner (now uid %d gid %d, was %d %d); it is not mounted",
			ws.Path, sb.Name, st.Uid, st.Gid, ws.UID, ws.GID)
	}
	mp := idmap.Mapping{FromUID: ws.UID, FromGID: ws.GID, ToUID: sb.UIDBase, ToGID: sb.UIDBase}
	if err := idmap.Mount(f, target, mp, ws.ReadOnly); err != nil {
		return runtime.Mount{}, errdefs.Precondition("the workspace %s of sandbox %q cannot be mounted", ws.Path, sb.Name).WithCause(err)
	}
	return runtime.Mount{Source: target, Destination: WorkspaceMountPoint, ReadOnly: ws.ReadOnly}, nil
}

// unmountWorkspace removes the mount of sandbox id's workspace and its directory, if
// there are any; also a mount made at WorkspaceDir/id itself (where it was made before
// workspaceMountName).
func (m *Manager) unmountWorkspace(id string) {
	if m.cfg.WorkspaceDir == "" {
		return
	}
	// The old place first: below a mount there, mnt would be the workspace's own.
	dir, target := filepath.Join(m.cfg.WorkspaceDir, id), m.workspaceMount(id)
	for _, p := range []string{dir, target} {
		if err := idmap.Unmount(p); err != nil {
			m.log.Warn("unmount a workspace", "sandbox", id, "err", err)
			return
		}
	}
	for _, p := range []string{target, dir} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			m.log.Warn("remove a workspace mount point", "sandbox", id, "err", err)
			return
		}
	}
}

func denied(format string, args ...any) error {
	return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: fmt.Sprintf(format, args...)}
}

// workspaceLeftovers are the sandboxes with a workspace mount but no running container
// to use it (a crash between a stop and its unmount, or an end while the daemon was
// down).
func (m *Manager) workspaceLeftovers(ctx context.Context) []string {
	if m.cfg.WorkspaceDir == "" {
		return nil
	}
	entries, err := os.ReadDir(m.cfg.WorkspaceDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range entries {
		sb, err := m.store.GetSandbox(ctx, e.Name())
		if err != nil || !slices.Contains([]State{Running, Creating, Resuming}, sb.State) {
			out = append(out, e.Name())
		}
	}
	return out
}
