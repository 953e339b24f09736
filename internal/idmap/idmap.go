// Package idmap makes id-mapped bind mounts: a directory of the host seen through a
// mapping of one host uid and gid to others (the idea of mount_setattr(2)'s
// MOUNT_ATTR_IDMAP).
//
// It owns only the mount itself and the short-lived process whose user namespace
// carries the mapping. It must not decide which directory may be mounted or who owns
// it (the caller checked that), nor record the mount: a caller whose mounts can outlive
// it records them first and finds them again.
package idmap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

// Mapping says which on-disk owner appears as which: files of FromUID/FromGID on disk
// appear as ToUID/ToGID through the mount, and files created through it as ToUID/ToGID
// land on disk as FromUID/FromGID. Size ids from each are mapped so, one to one (0 is
// one). Every other id appears as the overflow id (nobody).
type Mapping struct{ FromUID, FromGID, ToUID, ToGID, Size uint32 }

func (m Mapping) size() int { return int(max(m.Size, 1)) }

// Mount makes an id-mapped bind mount of the directory open at dir (an *os.File opened
// with O_PATH|O_DIRECTORY is fine; the caller checked who owns it) at target, an
// existing empty directory, nosuid and nodev, read-only if ro. Not recursive: mounts
// below dir are not carried. A file system that cannot be id-mapped gives an error
// saying so.
//
// It needs CAP_SYS_ADMIN. A trailing symlink at target is not followed. Nothing is
// left behind on failure: the clone of dir is only attached by the last step.
func Mount(dir *os.File, target string, m Mapping, ro bool) error {
	return MountNS(dir, target, m, nil, ro)
}

// MountNS is Mount through ns, an open user namespace that maps as m does (such as a
// container runtime keeps for a sandbox's id range), instead of one of its own making,
// which costs starting a process; nil is one of its own. What a namespace maps cannot
// be read from its descriptor, so ns is checked where it shows: through it, dir must
// appear owned by m's mapping of its on-disk owner, or nothing is mounted.
func MountNS(dir *os.File, target string, m Mapping, ns *os.File, ro bool) error {
	defer runtime.KeepAlive(dir) // fd is used after the last mention of dir
	defer runtime.KeepAlive(ns)
	fd := int(dir.Fd())
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("idmap: stat %s: %w", dir.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("idmap: %s is not a directory: %w", dir.Name(), errdefs.ErrInvalidArgument)
	}
	// A detached copy of dir's mount alone (no AT_RECURSIVE); closing tree before
	// move_mount has attached it unmounts it.
	tree, err := unix.OpenTree(fd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("idmap: open_tree %s: %w", dir.Name(), err)
	}
	defer unix.Close(tree)
	check := ns != nil
	if !check {
		if ns, err = Namespace(m); err != nil {
			return err
		}
		defer ns.Close()
	}
	nsFD := int(ns.Fd())
	// nosuid and nodev: through the mapping a set-user-ID file of the owner's is one of
	// ToUID's, and the mount is reachable on the host as well as in the sandbox.
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV, Userns_fd: uint64(nsFD)}
	if ro {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		if errors.Is(err, unix.EINVAL) {
			// The kernel's answer for a file system without FS_ALLOW_IDMAP (nfs,
			// ramfs, proc, ...); the other causes of EINVAL cannot happen here.
			var fs unix.Statfs_t
			unix.Fstatfs(fd, &fs)
			return &errdefs.Error{Class: errdefs.ErrFailedPrecondition,
				Msg:   "the directory's file system cannot be id-mapped",
				Cause: fmt.Errorf("mount_setattr %s (file system type %#x): %w", dir.Name(), fs.Type, err)}
		}
		return fmt.Errorf("idmap: mount_setattr %s: %w", dir.Name(), err)
	}
	if check {
		if err := m.check(tree, &st); err != nil {
			return fmt.Errorf("idmap: %s: %w", dir.Name(), err)
		}
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("idmap: move_mount to %s: %w", target, err)
	}
	return nil
}

// check says whether the id-mapped clone tree shows the owner m gives dir's on-disk
// owner st; an owner outside m's ids cannot tell, and fails too.
func (m Mapping) check(tree int, st *unix.Stat_t) error {
	var got unix.Stat_t
	if err := unix.Fstat(tree, &got); err != nil {
		return err
	}
	uid, uok := mapID(st.Uid, m.FromUID, m.ToUID, m.size())
	gid, gok := mapID(st.Gid, m.FromGID, m.ToGID, m.size())
	if !uok || !gok {
		return fmt.Errorf("owner %d:%d on disk is outside the mapping's ids, so the user namespace cannot be checked", st.Uid, st.Gid)
	}
	if got.Uid != uid || got.Gid != gid {
		return fmt.Errorf("the user namespace does not map as asked: owner %d:%d on disk shows as %d:%d through it, want %d:%d", st.Uid, st.Gid, got.Uid, got.Gid, uid, gid)
	}
	return nil
}

// mapID maps id of from..from+size-1 to the same place from to, and says whether it
// was there.
func mapID(id, from, to uint32, size int) (uint32, bool) {
	if id < from || uint64(id-from) >= uint64(size) {
		return 0, false
	}
	return to + (id - from), true
}

// maxStacked bounds the mounts Unmount takes off one target.
const maxStacked = 64

// Unmount detaches whatever is mounted at target (MNT_DETACH), if anything; nothing
// mounted is not an error.
//
// A missing target has nothing mounted either. Every mount stacked at target goes (a
// Mount over one that a crash left would otherwise stay hidden beneath it, and the
// directory could never be removed); a trailing symlink at target is not followed.
func Unmount(target string) error {
	for range maxStacked {
		err := unix.Unmount(target, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("idmap: unmount %s: %w", target, err)
		}
	}
	return fmt.Errorf("idmap: unmount %s: still mounted after %d unmounts", target, maxStacked)
}

// Namespace opens a new user namespace of m, for MountNS (Mount makes one for itself
// so): its uid_map is "FromUID ToUID Size" and its gid_map "FromGID ToGID Size", since
// an id-mapped mount maps an on-disk id as an id inside the namespace to the id outside
// it, so that a file of FromUID appears as ToUID. The caller closes it.
func Namespace(m Mapping) (*os.File, error) {
	fd, err := userns(m)
	if err != nil {
		return nil, fmt.Errorf("idmap: %w", err)
	}
	return os.NewFile(uintptr(fd), "userns"), nil
}

// userns opens a new user namespace of m (Namespace). Only a process can make a
// namespace; ours is killed and reaped before userns returns, and the returned fd alone
// keeps the namespace alive.
func userns(m Mapping) (int, error) {
	// Any program that just waits will do, and sleep surely exists. Not /proc/self/exe:
	// in a test that is the test binary, which would run the tests again.
	sleep := "/bin/sleep"
	if _, err := os.Stat(sleep); err != nil {
		if sleep, err = exec.LookPath("sleep"); err != nil {
			return -1, fmt.Errorf("a program to hold a user namespace: %w", err)
		}
	}
	// The minute only bounds a child left by a parent killed before it could kill it
	// (Pdeathsig covers most of those); it is killed as soon as its namespace is open.
	cmd := exec.Command(sleep, "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: int(m.FromUID), HostID: int(m.ToUID), Size: m.size()}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: int(m.FromGID), HostID: int(m.ToGID), Size: m.size()}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("start %s in a user namespace: %w", sleep, err)
	}
	defer func() {
		cmd.Process.Kill()
		cmd.Wait()
	}()
	// The child is ours and not yet reaped, so its pid cannot name another process.
	ns, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open user namespace: %w", err)
	}
	return ns, nil
}
