package oci

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/runtime"
)

var _ runtime.StorageCloner = (*Driver)(nil)

// CloneStorage implements runtime.StorageCloner: it copies the source's disk image
// (sparse, extent by extent) and shifts the copy's ids into the destination's range.
// The source must be stopped or frozen by the caller; its filesystem is synced first.
func (d *Driver) CloneStorage(ctx context.Context, src, dst string, srcBase, dstBase uint32) (retErr error) {
	srcImg := filepath.Join(d.dir(src), diskImage)
	if _, err := os.Stat(srcImg); err != nil {
		return fmt.Errorf("%w: sandbox %s has no disk image", errors.ErrUnsupported, src)
	}
	if m := mountsUnder(filepath.Join(d.dir(src), "fs")); len(m) > 0 {
		f, err := os.Open(filepath.Join(d.dir(src), "fs"))
		if err != nil {
			return err
		}
		err = unix.Syncfs(int(f.Fd()))
		f.Close()
		if err != nil {
			return fmt.Errorf("sync %s: %w", src, err)
		}
	}
	dstDir := d.dir(dst)
	if err := os.MkdirAll(dstDir, 0o711); err != nil {
		return err
	}
	dstImg := filepath.Join(dstDir, diskImage)
	defer func() {
		if retErr != nil {
			os.Remove(dstImg)
		}
	}()
	if err := copySparse(srcImg, dstImg); err != nil {
		return err
	}
	fsDir := filepath.Join(dstDir, "fs")
	if err := mountDisk(dstImg, fsDir); err != nil {
		return err
	}
	defer unmountAll(fsDir)
	os.RemoveAll(filepath.Join(fsDir, "work"))
	return shiftIDs(filepath.Join(fsDir, "upper"), srcBase, dstBase)
}

// copySparse copies a file's data extents only, so holes stay holes.
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
			n, err := unix.CopyFileRange(fdIn, &inOff, fdOut, &outOff, int(hole-pos), 0)
			if err != nil {
				return fmt.Errorf("copy %s: %w", src, err)
			}
			if n == 0 {
				return fmt.Errorf("copy %s: %w", src, io.ErrUnexpectedEOF)
			}
			pos += int64(n)
		}
		off = hole
	}
	return out.Sync()
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
