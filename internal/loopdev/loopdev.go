// Package loopdev attaches image files to loop devices and mounts their ext4: the
// sandboxes' own disks and volumes are such images. It must not know what an image
// holds or whose it is.
package loopdev

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
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
		// Named before it is attached: whatever device backs img is the one the record
		// names, whenever this process dies (a device attached and not mounted goes
		// with its last close).
		if err := writeRecord(img, "loop"+strconv.Itoa(n)); err != nil {
			lf.Close()
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

// backedBy says whether dev's backing file is the file want describes.
func backedBy(dev string, want *unix.Stat_t) bool {
	b, err := os.ReadFile("/sys/block/" + dev + "/loop/backing_file")
	if err != nil {
		return false // not attached, or detached meanwhile
	}
	var st unix.Stat_t
	return unix.Stat(strings.TrimSpace(string(b)), &st) == nil && st.Dev == want.Dev && st.Ino == want.Ino
}

// Of names a loop device backed by img ("loop3"), or "" if none is. It looks at the
// one device img's record names (see Record); every device of the node is looked at
// only for an image without a record, made or last mounted by an earlier version.
func Of(img string) (string, error) {
	var want unix.Stat_t
	if err := unix.Stat(img, &want); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return "", nil
		}
		return "", err
	}
	dev, ok, err := readRecord(img)
	if err != nil {
		return "", err
	}
	if !ok {
		return scan(&want), nil
	}
	if dev == "" || !backedBy(dev, &want) {
		return "", nil // never mounted, or its device let go (and maybe reused since)
	}
	return dev, nil
}

// scans counts the looks at every loop device, for tests.
var scans atomic.Int64

// scan names a loop device backed by the file want describes, or "", looking at each.
func scan(want *unix.Stat_t) string {
	scans.Add(1)
	// Only attached devices have a backing_file: read it directly instead of globbing
	// sysfs, which walks every device's directory.
	devs, _ := os.ReadDir("/sys/block")
	for _, e := range devs {
		if strings.HasPrefix(e.Name(), "loop") && backedBy(e.Name(), want) {
			return e.Name()
		}
	}
	return ""
}

// Record is the file beside an image (IMG.loop) naming the loop device its last mount
// took: a node may have thousands of loop devices, and finding the one of an image by
// looking at each costs milliseconds. Mount writes it before each attempt to attach,
// so a device backing the image is always the one it names; an empty record says the
// image was never mounted. A device it names that backs another file (reused since)
// says nothing about this image. An image renamed or removed should take its record
// along (Forget), or leave none behind.
func Record(img string) string { return img + ".loop" }

// Unmounted records that img, just made and never mounted (or known released), is
// backed by no loop device, so that Of need not look at every one.
func Unmounted(img string) error { return writeRecord(img, "") }

// Forget removes img's record, for an image removed or renamed once released (see
// WaitReleased).
func Forget(img string) error {
	if err := os.Remove(Record(img)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Rename renames the image src to dst (which must not exist) with its record, attached
// or not: a loop device follows its file, not its name. The record of dst is written
// first, so that whatever backs the file is named by the record beside it at every
// step; if src is gone (another took it), dst's record goes too and the error is
// fs.ErrNotExist.
func Rename(src, dst string) error {
	b, err := os.ReadFile(Record(src))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		err = Forget(dst) // no record: dst gets none either
	case err == nil:
		err = writeRecord(dst, string(b))
	}
	if err != nil {
		return err
	}
	if err := os.Rename(src, dst); err != nil {
		Forget(dst)
		return err
	}
	return Forget(src)
}

func writeRecord(img, dev string) error {
	if err := os.WriteFile(Record(img), []byte(dev), 0o600); err != nil {
		return fmt.Errorf("record the loop device of %s: %w", img, err)
	}
	return nil
}

// readRecord reads img's record: ok is false without one, or with one that names no
// loop device (not written here), so that the caller looks at every device.
func readRecord(img string) (dev string, ok bool, err error) {
	b, err := os.ReadFile(Record(img))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	dev = string(b)
	if dev == "" {
		return "", true, nil
	}
	n, ok := strings.CutPrefix(dev, "loop")
	if _, err := strconv.ParseUint(n, 10, 31); !ok || err != nil {
		return "", false, nil
	}
	return dev, true, nil
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
