// Package loopdev attaches image files to loop devices and mounts their ext4: the
// sandboxes' own disks and volumes are such images. It must not know what an image
// holds or whose it is.
package loopdev

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Mount attaches img to a free loop device (detached automatically when the mount goes)
// and mounts its ext4 at dir with the mount options opts.
func Mount(img, dir, opts string) error {
	_, err := MountDev(img, dir, opts)
	return err
}

// MountDev is Mount, and names the loop device ("loop3") the mount holds.
func MountDev(img, dir, opts string) (string, error) {
	f, err := os.OpenFile(img, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	ctl, err := os.OpenFile("/dev/loop-control", os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("loop devices unavailable: %w", err)
	}
	defer ctl.Close()
	for attempt := 0; attempt < 32; attempt++ {
		n, err := unix.IoctlRetInt(int(ctl.Fd()), unix.LOOP_CTL_GET_FREE)
		if err != nil {
			return "", fmt.Errorf("find a free loop device: %w", err)
		}
		dev := "/dev/loop" + strconv.Itoa(n)
		lf, err := os.OpenFile(dev, os.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		cfg := &unix.LoopConfig{Fd: uint32(f.Fd())}
		cfg.Info.Flags = unix.LO_FLAGS_AUTOCLEAR
		err = unix.IoctlLoopConfigure(int(lf.Fd()), cfg)
		if errors.Is(err, unix.EBUSY) {
			lf.Close()
			continue // another create took it first
		}
		if err != nil {
			lf.Close()
			return "", fmt.Errorf("attach %s to %s: %w", img, dev, err)
		}
		err = unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, opts)
		lf.Close() // the mount holds the device; autoclear detaches it on unmount
		if err != nil {
			return "", fmt.Errorf("mount %s: %w", dev, err)
		}
		return "loop" + strconv.Itoa(n), nil
	}
	return "", errors.New("no free loop device after 32 attempts")
}

// Backs says whether the loop device dev ("loop3") is backed by img: a look at one
// device, where Of looks at every one.
func Backs(dev, img string) (bool, error) {
	var want unix.Stat_t
	if err := unix.Stat(img, &want); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		return false, err
	}
	return backedBy(dev, &want), nil
}

// backedBy says whether dev's backing file is the file want describes.
func backedBy(dev string, want *unix.Stat_t) bool {
	b, err := os.ReadFile("/sys/block/" + dev + "/loop/backing_file")
	if err != nil {
		return false // not attached, or detached meanwhile
	}
	var st unix.Stat_t
	return unix.Stat(strings.TrimSpace(string(b)), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
}

// Of names a loop device backed by img ("loop3"), or "" if none is.
func Of(img string) (string, error) {
	var want unix.Stat_t
	if err := unix.Stat(img, &want); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", err
	}
	// Only attached devices have a backing_file: read it directly instead of globbing
	// sysfs, which walks every device's directory.
	devs, _ := os.ReadDir("/sys/block")
	for _, e := range devs {
		if strings.HasPrefix(e.Name(), "loop") && backedBy(e.Name(), &want) {
			return e.Name(), nil
		}
	}
	return "", nil
}

// ReleaseWait bounds WaitReleased.
const ReleaseWait = 30 * time.Second

// WaitReleased waits until no loop device is backed by img any more, and fails if one
// still is after ReleaseWait. The kernel tells of no detach, so it polls.
func WaitReleased(img string) error {
	deadline := time.Now().Add(ReleaseWait)
	for {
		dev, err := Of(img)
		if err != nil || dev == "" {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the disk image %s is still in use (by %s) after %s", img, dev, ReleaseWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// MakeImage writes a new sparse image of size bytes at path (which must not exist) and
// formats it ext4 with mkfs.ext4's further options mkfs; a failure removes it. No
// blocks are reserved (the whole size is the user's), and lazy init keeps it fast
// (mke2fs discards the file's blocks, so the inode tables read as zeroed). A full
// host disk is ENOSPC.
func MakeImage(ctx context.Context, path string, size int64, mkfs ...string) (retErr error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer func() {
		if retErr != nil {
			os.Remove(path)
		}
	}()
	err = f.Truncate(size)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	args := append([]string{"-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1"}, mkfs...)
	out, err := exec.CommandContext(ctx, "mkfs.ext4", append(args, path)...).CombinedOutput()
	if err != nil {
		if strings.Contains(string(out), "No space left on device") {
			err = unix.ENOSPC
		}
		return fmt.Errorf("mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}
