package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	airlockrt "github.com/airlockhq/airlock/internal/runtime"
)

var _ airlockrt.FileMounter = (*Driver)(nil)

// initPidfd opens a pidfd of the sandbox's container init, checked to be in the
// sandbox's cgroup (a pid reused since is refused).
func (d *Driver) initPidfd(id string) (int, agentPeer, error) {
	p, err := d.peer(id)
	if err != nil {
		return -1, p, err
	}
	pidfd, err := unix.PidfdOpen(p.PID, 0)
	if err != nil {
		return -1, p, fmt.Errorf("sandbox %s: its container's init is gone: %w", id, err)
	}
	cg, _ := os.ReadFile("/proc/" + strconv.Itoa(p.PID) + "/cgroup")
	if !strings.Contains(string(cg), d.cgroupPath(id)+"\n") {
		unix.Close(pidfd)
		return -1, p, fmt.Errorf("sandbox %s: its container's init is gone", id)
	}
	return pidfd, p, nil
}

// MountFile implements runtime.FileMounter: src, a file of the host, is bound read-only
// at dst in the running container, as a start binds it. The mount is made from the
// container's own mount namespace; dst is resolved there, inside the container's root,
// and refused if any part of it is a symbolic link; a missing dst (and its missing
// directories) is made as the sandbox's root. An engine with a kernel of its own has
// no mount namespace on the host to enter: it returns an error.
func (d *Driver) MountFile(ctx context.Context, id, src, dst string) error {
	if d.opts.Engine.Sentry {
		return errors.New("this runtime's sandboxes take new mounts only as they start")
	}
	if !strings.HasPrefix(dst, "/") || dst == "/" {
		return fmt.Errorf("mount target %q is not an absolute path of a file", dst)
	}
	pidfd, p, err := d.initPidfd(id)
	if err != nil {
		return err
	}
	defer unix.Close(pidfd)
	tree, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(tree)
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &unix.MountAttr{
		Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}); err != nil {
		return fmt.Errorf("make %s read-only: %w", src, err)
	}
	errc := make(chan error, 1)
	go func() {
		// This thread enters the container's mount namespace and takes the sandbox
		// root's file ids; it is never unlocked, so it ends with the goroutine.
		runtime.LockOSThread()
		errc <- mountInside(pidfd, tree, dst, p.UID)
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// mountInside runs on a thread of its own: it joins the mount namespace of the process
// pidfd names, makes dst as uid if it is missing, and moves the mount tree onto it.
func mountInside(pidfd, tree int, dst string, uid uint32) error {
	if err := unix.Unshare(unix.CLONE_FS); err != nil { // a mount namespace is joined by a thread with its own root and cwd
		return err
	}
	if err := unix.Setns(pidfd, unix.CLONE_NEWNS); err != nil {
		return fmt.Errorf("enter the sandbox's mount namespace: %w", err)
	}
	if err := errors.Join(unix.Setfsgid(int(uid)), unix.Setfsuid(int(uid))); err != nil {
		return err
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	dir, err := unix.Openat2(unix.AT_FDCWD, "/", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC})
	if err != nil {
		return err
	}
	parts := strings.Split(strings.Trim(dst, "/"), "/")
	for _, name := range parts[:len(parts)-1] {
		if name == "." || name == ".." || name == "" {
			return fmt.Errorf("mount target %q is not a clean path", dst)
		}
		if err := unix.Mkdirat(dir, name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(dir)
			return fmt.Errorf("make %s in the sandbox: %w", dst, err)
		}
		dirHow := *how
		dirHow.Flags |= unix.O_DIRECTORY
		next, err := unix.Openat2(dir, name, &dirHow)
		unix.Close(dir)
		if err != nil {
			return fmt.Errorf("open %s in the sandbox: %w", dst, err)
		}
		dir = next
	}
	defer unix.Close(dir)
	name := parts[len(parts)-1]
	if fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o444); err == nil {
		unix.Close(fd)
	} else if !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("make %s in the sandbox: %w", dst, err)
	}
	target, err := unix.Openat2(dir, name, how)
	if err != nil {
		return fmt.Errorf("open %s in the sandbox: %w", dst, err)
	}
	defer unix.Close(target)
	var st unix.Stat_t
	if err := unix.Fstat(target, &st); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return fmt.Errorf("%s in the sandbox is not a regular file", dst)
	}
	if err := unix.MoveMount(tree, "", target, "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("mount at %s in the sandbox: %w", dst, err)
	}
	return nil
}
