package manager

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			ws := tc.ws
			_, _, err := m.Create(ctx, local, CreateRequest{Name: "ws", Workspace: &ws})
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
	if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the mount point outlived the sandbox: %v", err)
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
	if err := m.Recover(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(left); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the leftover mount point is still there after recovery: %v", err)
	}
}
