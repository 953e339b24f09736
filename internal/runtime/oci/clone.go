package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/bindsource"
	"github.com/airlockhq/airlock/internal/durable"
	"github.com/airlockhq/airlock/internal/loopdev"
	"github.com/airlockhq/airlock/internal/runtime"
)

var _ runtime.StorageCloner = (*Driver)(nil)

// CloneStorage implements runtime.StorageCloner: it copies the source's disk image
// (sparse, extent by extent, starting the write-back of each piece as it goes; a
// reflink where the state file system shares extents, as xfs and btrfs do), calls
// copied, and shifts the copy's ids into the destination's range on a mount without
// barriers. That mount stays for the destination's container (barriers back on), so
// its start mounts nothing more. The source must be stopped or frozen by the caller
// until copied; its file system is synced first. The copy is flushed to stable storage
// in the background; durable waits for that.
func (d *Driver) CloneStorage(ctx context.Context, src, dst string, srcBase, dstBase uint32, copied func()) (durable func() error, retErr error) {
	srcImg := filepath.Join(d.dir(src), diskImage)
	if _, err := os.Stat(srcImg); err != nil {
		return nil, fmt.Errorf("%w: sandbox %s has no disk image", errors.ErrUnsupported, src)
	}
	if mounted, err := bindsource.MountRoot(filepath.Join(d.dir(src), "fs")); err != nil {
		return nil, err
	} else if !mounted {
		if err := loopdev.WaitReleased(srcImg); err != nil {
			return nil, err
		}
	} else if err := syncfsAt(filepath.Join(d.dir(src), "fs")); err != nil {
		return nil, fmt.Errorf("sync %s: %w", src, err)
	}
	dstDir := d.dir(dst)
	if err := os.MkdirAll(dstDir, 0o700); err != nil {
		return nil, err
	}
	dstImg := filepath.Join(dstDir, diskImage)
	fsDir := filepath.Join(dstDir, "fs")
	mounted := false
	defer func() {
		if retErr != nil {
			if mounted {
				bindsource.Unmount(fsDir)
			}
			os.Remove(dstImg)
			loopdev.Forget(dstImg)
		}
	}()
	err := copySparse(srcImg, dstImg)
	copied()
	if err == nil {
		// A new file (copySparse makes it): no loop device holds it, and its mount
		// need not look at every one to know.
		err = loopdev.Unmounted(dstImg)
	}
	if err != nil {
		return nil, err
	}
	// No flushes while the ids are shifted: each would write the whole image back
	// to the disk, which the background flush below does once instead.
	if err := mountDisk(ctx, d.log, dstImg, fsDir, "nobarrier"); err != nil {
		return nil, err
	}
	mounted = true
	if err := os.RemoveAll(filepath.Join(fsDir, "work")); err != nil {
		return nil, err
	}
	if err := shiftIDs(filepath.Join(fsDir, "upper"), srcBase, dstBase); err != nil {
		return nil, err
	}
	// The shifted inodes go into the image before it is flushed; from here on the
	// sandbox's own syncs reach the disk again.
	if err := syncfsAt(fsDir); err != nil {
		return nil, fmt.Errorf("sync %s: %w", dst, err)
	}
	if err := unix.Mount("", fsDir, "", unix.MS_REMOUNT|unix.MS_NOSUID|unix.MS_NODEV, "barrier"); err != nil {
		return nil, fmt.Errorf("remount %s with barriers: %w", dst, err)
	}
	flushed := make(chan error, 1)
	go func() { flushed <- syncFileAndDir(dstImg) }()
	return sync.OnceValue(func() error { return <-flushed }), nil
}

// syncfsAt syncs the file system mounted at dir.
func syncfsAt(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	return unix.Syncfs(int(f.Fd()))
}

// syncFileAndDir puts a file's data and its directory entry on stable storage.
func syncFileAndDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	err = f.Sync()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return durable.SyncDir(filepath.Dir(path))
}

// writeBackChunk is how much copySparse copies before it starts that piece's write-back.
const writeBackChunk = 8 << 20

// copySparse copies a file's data extents only, so holes stay holes. It starts the
// write-back of each piece it copies (without waiting for it), so that a later fsync
// finds most of the work done; it does not sync.
func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	if err := out.Truncate(st.Size()); err != nil {
		return err
	}
	fdIn, fdOut := int(in.Fd()), int(out.Fd())
	var off int64
	for off < st.Size() {
		data, err := unix.Seek(fdIn, off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break // only a hole is left
		}
		if err != nil {
			return err
		}
		hole, err := unix.Seek(fdIn, data, unix.SEEK_HOLE)
		if err != nil {
			return err
		}
		for pos := data; pos < hole; {
			inOff, outOff := pos, pos
			n, err := unix.CopyFileRange(fdIn, &inOff, fdOut, &outOff, int(min(hole-pos, writeBackChunk)), 0)
			if err != nil {
				return fmt.Errorf("copy %s: %w", src, err)
			}
			if n == 0 {
				return fmt.Errorf("copy %s: %w", src, io.ErrUnexpectedEOF)
			}
			unix.SyncFileRange(fdOut, pos, int64(n), unix.SYNC_FILE_RANGE_WRITE) // a hint: errors surface at the fsync
			pos += int64(n)
		}
		off = hole
	}
	return out.Close()
}

// shiftIDs moves every owner in the source range to the same place in the destination
// range; ids outside it (overlayfs whiteouts belong to host root) stay as they are.
func shiftIDs(root string, srcBase, dstBase uint32) error {
	shift := func(id uint32) int {
		if id >= srcBase && id < srcBase+idRange {
			return int(id - srcBase + dstBase)
		}
		return int(id)
	}
	return filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		uid, gid := shift(st.Uid), shift(st.Gid)
		if uid == int(st.Uid) && gid == int(st.Gid) {
			return nil
		}
		if err := unix.Lchown(p, uid, gid); err != nil {
			return err
		}
		// chown clears setuid and setgid bits; put them back.
		if mode := st.Mode & (unix.S_ISUID | unix.S_ISGID); mode != 0 && st.Mode&unix.S_IFMT != unix.S_IFLNK {
			return unix.Chmod(p, st.Mode&0o7777)
		}
		return nil
	})
}
