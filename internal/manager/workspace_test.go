package manager

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
	"github.com/airlockhq/airlock/internal/runtime"
	"github.com/airlockhq/airlock/internal/store"
)

// TestWorkspaceRefusals: a workspace is refused, and nothing made, unless a local
// caller asks for an existing directory of its own with ro or rw access.
func TestWorkspaceRefusals(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WorkspaceDir = filepath.Join(t.TempDir(), "workspaces")
	m, st := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)
	link := filepath.Join(t.TempDir(), "link")
	os.Symlink("/", link)
	owner := os.Getuid()
	other := owner + 1
	for _, tc := range []struct {
		name string
		ws   WorkspaceRequest
		want error
	}{
		{"not a local caller", WorkspaceRequest{Path: dir, Access: "rw", PeerUID: -1}, errdefs.ErrPermissionDenied},
		{"another user's directory", WorkspaceRequest{Path: dir, Access: "rw", PeerUID: other}, errdefs.ErrPermissionDenied},
		{"bad access", WorkspaceRequest{Path: dir, Access: "rwx", PeerUID: owner}, errdefs.ErrInvalidArgument},
		{"relative path", WorkspaceRequest{Path: "proj", Access: "rw", PeerUID: owner}, errdefs.ErrInvalidArgument},
		{"missing", WorkspaceRequest{Path: filepath.Join(dir, "nope"), Access: "rw", PeerUID: owner}, errdefs.ErrInvalidArgument},
		{"a file", WorkspaceRequest{Path: file, Access: "ro", PeerUID: owner}, errdefs.ErrInvalidArgument},
		{"the root, through a link", WorkspaceRequest{Path: link, Access: "ro", PeerUID: owner}, errdefs.ErrInvalidArgument},
		// The daemon's own working directory: a /proc magic link is never followed.
		{"a /proc magic link", WorkspaceRequest{Path: "/proc/self/cwd", Access: "ro", PeerUID: owner}, errdefs.ErrInvalidArgument},
		{"through a /proc magic link", WorkspaceRequest{Path: "/proc/self/root" + dir, Access: "ro", PeerUID: owner}, errdefs.ErrInvalidArgument},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := tc.ws
			_, sb, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &ws})
			if err == nil {
				m.Terminate(ctx, local, sb.ID) // unmounts what should not have been mounted
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Create: %v, want %v", err, tc.want)
			}
			if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "local"}); len(list) != 0 {
				t.Errorf("a refused create left %d sandboxes", len(list))
			}
		})
	}
	t.Run("a directory the caller cannot reach", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to take another uid's view")
		}
		base := t.TempDir()
		os.Chmod(base, 0o711) // the test's directories are 0700: let 1000 pass
		os.Chmod(filepath.Dir(base), 0o711)
		closed := filepath.Join(base, "closed")
		inner := filepath.Join(closed, "proj")
		os.MkdirAll(inner, 0o755)
		os.Chown(inner, 1000, 1000)
		os.Chmod(closed, 0o700)
		_, _, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &WorkspaceRequest{Path: inner, Access: "rw", PeerUID: 1000}})
		if !errors.Is(err, errdefs.ErrPermissionDenied) || !strings.Contains(err.Error(), "may not reach") {
			t.Errorf("a directory of 1000's behind a closed one: %v, want permission_denied saying it cannot be reached", err)
		}
		os.Chmod(closed, 0o711)
		_, sb, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &WorkspaceRequest{Path: inner, Access: "rw", PeerUID: 1000}})
		if err != nil {
			t.Fatalf("1000's directory behind a searchable one: %v", err)
		}
		m.Terminate(ctx, local, sb.ID)
	})
	t.Run("root's directory read-write", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to own a directory as root")
		}
		// The sandbox's root would make files there as root, set-user-ID ones too.
		before, _ := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "local"})
		for _, ids := range [][2]int{{0, 0}, {1000, 0}, {0, 1000}} {
			d := t.TempDir()
			os.Chown(d, ids[0], ids[1])
			_, sb, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &WorkspaceRequest{Path: d, Access: "rw", PeerUID: 0}})
			if err == nil {
				m.Terminate(ctx, local, sb.ID)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("a directory of uid %d gid %d, rw: %v, want invalid_argument", ids[0], ids[1], err)
			}
		}
		if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "local"}); len(list) != len(before) {
			t.Errorf("a refused create left %d sandboxes", len(list)-len(before))
		}
	})
	t.Run("another runtime", func(t *testing.T) {
		_, _, err := m.Create(ctx, local, CreateRequest{Name: "ws", Runtime: "runsc",
			Workspace: &WorkspaceRequest{Path: dir, Access: "rw", PeerUID: owner}})
		if err == nil {
			t.Fatal("a workspace on runsc was not refused")
		}
	})
	noDir, _ := newManagerWith(t, DefaultConfig(), newFake(t))
	if _, _, err := noDir.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &WorkspaceRequest{Path: dir, Access: "rw", PeerUID: owner}}); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("a node without a workspace directory: %v, want failed_precondition", err)
	}
}

// TestWorkspaceMountedAndUnmounted: the container of a sandbox with a workspace gets
// the id-mapped mount at /workspace; suspend unmounts it, resume mounts it again, and a
// changed owner stops the resume.
func TestWorkspaceMountedAndUnmounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("id-mapped mounts need root")
	}
	cfg := DefaultConfig()
	cfg.WorkspaceDir = filepath.Join(t.TempDir(), "workspaces")
	fd := newFake(t)
	m, _ := newManagerWith(t, cfg, fd)
	ctx := context.Background()
	dir := t.TempDir()
	if err := os.Chown(dir, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &WorkspaceRequest{Path: dir, Access: "ro", PeerUID: 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Terminate(ctx, local, sb.ID)
	if sb.Workspace == nil || sb.Workspace.Path != dir || !sb.Workspace.ReadOnly || sb.Workspace.UID != 1000 {
		t.Fatalf("the record's workspace: %+v", sb.Workspace)
	}
	target := m.workspaceMount(sb.ID)
	var st unix.Stat_t
	if err := unix.Stat(target, &st); err != nil || st.Uid != sb.UIDBase {
		t.Fatalf("through the mount the workspace is owned by %d (%v), want the sandbox's root %d", st.Uid, err, sb.UIDBase)
	}
	if _, _, err := m.Suspend(ctx, local, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(target, &st); err == nil {
		t.Errorf("the mount point is still there while suspended")
	}
	os.Chown(dir, 1001, 1001)
	if _, _, err := m.Resume(ctx, local, sb.ID); err == nil {
		t.Errorf("a resume after the workspace changed owner mounted it")
	}
	os.Chown(dir, 1000, 1000)
	if _, _, err := m.Resume(ctx, local, sb.ID); err != nil {
		t.Fatalf("resume: %v", err)
	}
	if err := unix.Stat(target, &st); err != nil || st.Uid != sb.UIDBase {
		t.Errorf("after resume the workspace is owned by %d (%v), want %d", st.Uid, err, sb.UIDBase)
	}
	if _, _, err := m.Terminate(ctx, local, sb.ID); err != nil {
		t.Fatal(err)
	}
	m.WaitCleanups(ctx)
	if _, err := os.Lstat(filepath.Dir(target)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mount point's directory outlived the sandbox: %v", err)
	}
}

// TestWorkspaceMountHiddenFromOtherUsers: the mount shows the workspace as it is; a host
// user who cannot reach the workspace by its own path (a home directory of 0700) cannot
// reach it through the mount either.
func TestWorkspaceMountHiddenFromOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("id-mapped mounts need root")
	}
	state := t.TempDir()
	os.Chmod(state, 0o711) // as a daemon's state directory is
	os.Chmod(filepath.Dir(state), 0o711)
	cfg := DefaultConfig()
	cfg.WorkspaceDir = filepath.Join(state, "workspaces")
	m, _ := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	home := t.TempDir() // 0700: others cannot pass
	dir := filepath.Join(home, "proj")
	os.Mkdir(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "notes"), []byte("private"), 0o644)
	os.Chown(dir, 1000, 1000)
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &WorkspaceRequest{Path: dir, Access: "ro", PeerUID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Terminate(ctx, local, sb.ID) })
	notes := filepath.Join(m.workspaceMount(sb.ID), "notes")
	if b, err := os.ReadFile(notes); err != nil || string(b) != "private" {
		t.Fatalf("root reads %s: %q, %v", notes, b, err)
	}
	cat := exec.Command("/bin/cat", notes)
	cat.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1001, Gid: 1001}}
	if out, err := cat.CombinedOutput(); err == nil {
		t.Errorf("uid 1001 read the workspace through its mount: %q", out)
	}
}

// TestWorkspaceLeftoverUnmounted: recovery unmounts a workspace mount that no running
// sandbox uses (a crash between a stop and its unmount).
func TestWorkspaceLeftoverUnmounted(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounts need root")
	}
	cfg := DefaultConfig()
	cfg.WorkspaceDir = filepath.Join(t.TempDir(), "workspaces")
	m, _ := newManagerWith(t, cfg, newFake(t))
	left := m.workspaceMount("sb_gone")
	if err := os.MkdirAll(left, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", left, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(left, unix.MNT_DETACH) })
	// Where a workspace was mounted before: WorkspaceDir/id itself. Its own mnt is the
	// workspace's, never removed.
	ws := t.TempDir()
	os.Mkdir(filepath.Join(ws, "mnt"), 0o755)
	old := filepath.Join(cfg.WorkspaceDir, "sb_old")
	os.Mkdir(old, 0o755)
	if err := unix.Mount(ws, old, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(old, unix.MNT_DETACH) })
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{left, filepath.Dir(left), old} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the leftover %s is still there after recovery: %v", p, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(ws, "mnt")); err != nil {
		t.Errorf("recovery removed the workspace's own mnt: %v", err)
	}
}

// TestWorkspaceSwappedForALink: the path recorded at create names the directory without
// a symbolic link; a link put on it later (by its owner, or by a sandbox that writes the
// directory above) stops the next start instead of being followed as root to a
// directory of the owner's that the owner could not reach.
func TestWorkspaceSwappedForALink(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("id-mapped mounts need root")
	}
	cfg := DefaultConfig()
	cfg.WorkspaceDir = filepath.Join(t.TempDir(), "workspaces")
	m, _ := newManagerWith(t, cfg, newFake(t))
	ctx := context.Background()
	base := t.TempDir()
	os.Chmod(base, 0o711)
	os.Chmod(filepath.Dir(base), 0o711)
	// base/a/proj is 1000's project; base/closed/proj is a directory of 1000's behind
	// one 1000 cannot pass.
	a, closed := filepath.Join(base, "a"), filepath.Join(base, "closed")
	for _, d := range []string{filepath.Join(a, "proj"), filepath.Join(closed, "proj")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		os.Chown(d, 1000, 1000)
	}
	os.Chown(a, 1000, 1000)
	os.Chmod(closed, 0o700)
	os.WriteFile(filepath.Join(closed, "proj", "secret"), []byte("not 1000's to see"), 0o644)

	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &WorkspaceRequest{Path: filepath.Join(a, "proj"), Access: "rw", PeerUID: 1000}})
	if err != nil {
		t.Fatal(err)
	}
	target := m.workspaceMount(sb.ID)
	t.Cleanup(func() {
		m.Terminate(ctx, local, sb.ID)
		unix.Unmount(target, unix.MNT_DETACH)
	})
	if _, _, err := m.Suspend(ctx, local, sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(a, a+".old"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(closed, a); err != nil {
		t.Fatal(err)
	}
	if _, _, err := m.Resume(ctx, local, sb.ID); err == nil {
		t.Errorf("resume after the workspace's parent became a link to %s: mounted", closed)
	}
	if _, err := os.Stat(filepath.Join(target, "secret")); err == nil {
		t.Errorf("the directory behind the link is mounted at %s", target)
	}
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused mount left its mount point: %v", err)
	}
}

// noWorkspace is a driver whose containers cannot bind a host workspace: embedding the
// contract hides the fake's MountsWorkspace.
type noWorkspace struct{ runtime.Driver }

// TestWorkspaceNeedsADriverThatMountsIt: whether a workspace is mounted is the driver's
// to say, whatever its runtime is called: a default runtime named runc whose driver does
// not mount one refuses the workspace, and the route decision says to copy it in; one
// that does mounts it under any name.
func TestWorkspaceNeedsADriverThatMountsIt(t *testing.T) {
	cfg := DefaultConfig()
	cfg.WorkspaceDir = filepath.Join(t.TempDir(), "workspaces")
	m, st := newManagerWith(t, cfg, noWorkspace{newFake(t)})
	ctx := context.Background()
	req := &WorkspaceRequest{Path: t.TempDir(), Access: "rw", PeerUID: os.Getuid()}
	_, sb, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: req})
	if err == nil {
		m.Terminate(ctx, local, sb.ID)
	}
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "cannot mount a host workspace") {
		t.Errorf("a workspace on a driver that cannot mount it: %v, want invalid_argument saying so", err)
	}
	if list, _ := st.ListSandboxes(ctx, store.SandboxFilter{Owner: "local"}); len(list) != 0 {
		t.Errorf("a refused create left %d sandboxes", len(list))
	}
	if d, err := m.Route(ctx, local, RouteRequest{Command: "ls"}); err != nil || d.WorkspaceMount {
		t.Errorf("route on a driver that cannot mount a workspace: WorkspaceMount %v, %v; want false", d.WorkspaceMount, err)
	}
	m.AddRuntime("other", newFake(t))
	if d, err := m.Route(ctx, local, RouteRequest{Command: "ls"}); err != nil || d.WorkspaceMount || !slices.Equal(d.WorkspaceRuntimes, []string{"other"}) {
		t.Errorf("route with another runtime that mounts a workspace: WorkspaceMount %v, runtimes %v, %v; want false, [other]",
			d.WorkspaceMount, d.WorkspaceRuntimes, err)
	}
}
