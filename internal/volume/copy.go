package volume

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/loopdev"
)

// Copy copies volume src to a new volume dst, byte for byte (the copy opens with src's
// key), and returns the copy's checksum; with want (not ""), a copy of another checksum
// (src is damaged) is refused and leaves nothing. A volume in use is frozen meanwhile,
// so the copy is of a consistent filesystem.
func (h *Host) Copy(ctx context.Context, src, dst, want string) (sum string, retErr error) {
	if err := errors.Join(checkID(src), checkID(dst)); err != nil {
		return "", err
	}
	defer h.lock(src)() // released after the thaw: a close meanwhile would unmount it frozen
	if mnt := h.mnt(src); mounted(mnt) {
		thaw, err := freeze(mnt)
		if err != nil {
			return "", err
		}
		defer thaw()
	}
	defer h.lock(dst)()
	if err := os.MkdirAll(filepath.Join(h.dir, dst), 0o700); err != nil {
		return "", err
	}
	tmp := h.image(dst) + ".tmp"
	os.Remove(tmp)
	defer func() {
		if retErr != nil {
			os.Remove(tmp)
		}
	}()
	sum, err := copyExtents(ctx, h.image(src), tmp)
	if err == nil && want != "" && sum != want {
		err = fmt.Errorf("%w: %s's checksum is %s, recorded %s", ErrDamaged, src, sum, want)
	}
	if err == nil {
		err = loopdev.Unmounted(h.image(dst)) // no device holds it
	}
	if err != nil {
		return "", err
	}
	return sum, os.Rename(tmp, h.image(dst))
}

// ErrDamaged says a copy's source is not what its recorded checksum says.
var ErrDamaged = errors.New("the volume snapshot is damaged")

// copyExtents hashes the data extents of src (each as its offset, length and bytes)
// and writes them to a new sparse file dst of src's size.
func copyExtents(ctx context.Context, src, dst string) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return "", err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return "", err
	}
	defer out.Close()
	if err := out.Truncate(st.Size()); err != nil {
		return "", err
	}
	hash := sha256.New()
	var hdr [16]byte
	buf := make([]byte, 1<<20)
	for off := int64(0); off < st.Size(); {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		data, err := unix.Seek(int(in.Fd()), off, unix.SEEK_DATA)
		if errors.Is(err, unix.ENXIO) {
			break
		}
		if err != nil {
			return "", err
		}
		hole, err := unix.Seek(int(in.Fd()), data, unix.SEEK_HOLE)
		if err != nil {
			return "", err
		}
		binary.LittleEndian.PutUint64(hdr[:8], uint64(data))
		binary.LittleEndian.PutUint64(hdr[8:], uint64(hole-data))
		hash.Write(hdr[:])
		for pos := data; pos < hole; {
			n, err := in.ReadAt(buf[:min(int64(len(buf)), hole-pos)], pos)
			if n > 0 {
				hash.Write(buf[:n])
				if _, werr := out.WriteAt(buf[:n], pos); werr != nil {
					return "", werr
				}
				pos += int64(n)
			}
			if err != nil && !(errors.Is(err, io.EOF) && pos >= hole) {
				return "", err
			}
		}
		off = hole
	}
	if err := out.Sync(); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(hash.Sum(nil)), nil
}

// FIFREEZE and FITHAW (linux/fs.h: _IOWR('X', 119, int), _IOWR('X', 120, int)).
const (
	fifreeze = 0xC0045877
	fithaw   = 0xC0045878
)

// freeze stops writes to the filesystem mounted at mnt until thaw.
func freeze(mnt string) (thaw func(), err error) {
	if err := ioctlDir(mnt, fifreeze, nil); err != nil {
		return nil, fmt.Errorf("freeze %s: %w", mnt, err)
	}
	return func() { ioctlDir(mnt, fithaw, nil) }, nil
}
