package oci

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
)

// idRange is the size of every sandbox's uid and gid range.
const idRange = 65536

// userns is a user namespace held open by a helper process, used only as the mapping of
// idmapped mounts: container id 0..65535 ↔ host id base..base+65535.
type userns struct {
	fd  int
	cmd *exec.Cmd
	in  io.WriteCloser
}

// newUserns starts the binary's hidden holder subcommand in a new user namespace with
// the sandbox's mapping and opens that namespace.
func newUserns(binary string, base uint32) (*userns, error) {
	cmd := exec.Command(binary, HolderCommand)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: idRange}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(base), Size: idRange}},
		Pdeathsig:   syscall.SIGKILL,
	}
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start user-namespace holder: %w", err)
	}
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		in.Close()
		cmd.Wait()
		return nil, fmt.Errorf("open user namespace: %w", err)
	}
	return &userns{fd: fd, cmd: cmd, in: in}, nil
}

func (u *userns) close() {
	unix.Close(u.fd)
	u.in.Close()
	u.cmd.Wait()
}

// HolderCommand is the hidden subcommand that holds a user namespace open: it waits
// for its standard input to close. cmd/airlock dispatches it to HoldUserns.
const HolderCommand = "_userns-hold"

// HoldUserns blocks until standard input closes.
func HoldUserns() error {
	_, err := io.Copy(io.Discard, os.Stdin)
	return err
}

// idmapMount binds src at dst as an idmapped mount through the namespace us.
func idmapMount(us *userns, src, dst string, readOnly bool) error {
	fd, err := unix.OpenTree(unix.AT_FDCWD, src, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("open_tree %s: %w", src, err)
	}
	defer unix.Close(fd)
	attr := &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(us.fd)}
	if readOnly {
		attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
	}
	if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, attr); err != nil {
		return fmt.Errorf("idmap %s: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o700); err != nil {
		return err
	}
	if err := unix.MoveMount(fd, "", unix.AT_FDCWD, dst, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount %s: %w", dst, err)
	}
	return nil
}

// rootfs is the on-host layout of one sandbox's root filesystem.
//
//	<dir>/fs/upper, fs/work   the writable layer, in host ids of the sandbox's range
//	<dir>/m/0..n              each image layer idmapped
//	<dir>/rootfs              the overlay the container runs on
type rootfs struct{ dir string }

func (r rootfs) merged() string { return filepath.Join(r.dir, "rootfs") }
func (r rootfs) upper() string  { return filepath.Join(r.dir, "fs", "upper") }

// mount builds the overlay. On failure it unmounts whatever it mounted.
func (r rootfs) mount(us *userns, base uint32, layers []string) (retErr error) {
	defer func() {
		if retErr != nil {
			r.unmount()
		}
	}()
	for _, d := range []string{r.upper(), filepath.Join(r.dir, "fs", "work"), r.merged()} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	// The upper layer is not idmapped (overlayfs copies up with the mounter's
	// credentials, which an idmapped upper could not represent), so it holds host ids
	// of the sandbox's range; its root belongs to the sandbox's root.
	if err := os.Chown(r.upper(), int(base), int(base)); err != nil {
		return err
	}
	mdir := filepath.Join(r.dir, "m")
	lowers := make([]string, len(layers))
	for i, l := range layers {
		dst := filepath.Join(mdir, strconv.Itoa(i))
		if err := idmapMount(us, l, dst, true); err != nil {
			return err
		}
		lowers[len(layers)-1-i] = filepath.Join("m", strconv.Itoa(i)) // overlay lists the top layer first
	}
	if len(lowers) == 0 {
		// overlayfs needs a lower layer; an empty one stands in.
		empty := filepath.Join(r.dir, "fs", "empty")
		if err := os.MkdirAll(empty, 0o755); err != nil {
			return err
		}
		lowers = []string{filepath.Join("fs", "empty")}
	}
	// Paths relative to the sandbox's directory: the kernel shows the options in the
	// sandbox's own mount table, and the host's layout is none of its business.
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,index=off,metacopy=off",
		strings.Join(lowers, ":"), filepath.Join("fs", "upper"), filepath.Join("fs", "work"))
	if err := bindsource.MountIn(r.dir, "overlay", r.merged(), "overlay", 0, opts); err != nil {
		return fmt.Errorf("mount overlay: %w", err)
	}
	return nil
}

// unmount removes the overlay and the idmapped mounts; it is safe to call on a partly
// mounted or unmounted rootfs.
func (r rootfs) unmount() error {
	var errs []error
	if err := bindsource.Unmount(r.merged()); err != nil {
		errs = append(errs, err)
	}
	mdir := filepath.Join(r.dir, "m")
	entries, _ := os.ReadDir(mdir)
	for _, e := range entries {
		p := filepath.Join(mdir, e.Name())
		if err := bindsource.Unmount(p); err != nil {
			errs = append(errs, err)
			continue
		}
		os.Remove(p)
	}
	return errors.Join(errs...)
}
