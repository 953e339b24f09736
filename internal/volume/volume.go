// Package volume keeps a node's volumes on the host: each is a sparse image file
// holding an ext4 filesystem of its own (a hard capacity: a full volume is ENOSPC
// inside, and nothing else fills), encrypted at rest with the kernel's filesystem
// encryption (fscrypt, policy v2, AES-256-XTS for contents and AES-256-CTS for names)
// under a data key the caller holds sealed. The key is handed to the kernel by ioctl
// while the volume is mounted and is never written to a file.
//
// On disk, under the directory it is given:
//
//	<dir>/<id>/volume.img        the image (volume.img.tmp while it is made or copied)
//	<dir>/<id>/volume.img.loop   the loop device of its last mount (loopdev.Record)
//	<dir>/<id>/mnt               where the image's ext4 is mounted while a sandbox uses it
//	<dir>/<id>/mnt/data          the encrypted directory sandboxes see
//	<dir>/binds/<sandbox>/<id>   a sandbox's id-mapped mount of mnt/data, bound into it
//
// It owns no records and must not import the store or the manager: the caller says
// which volumes exist, how big they are, and whose sandboxes use them.
//
// Hostile surfaces: everything under mnt/data is written by sandboxes. The daemon never
// resolves a path inside it; it opens only mnt/data itself, which no sandbox can reach
// the parent of, and reads the image only as bytes (copy, checksum, superblock).
package volume

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/loopdev"
)

// KeySize is the size of a volume's data key: AES-256-XTS takes two 256-bit keys.
const KeySize = 64

// IDRange is how many ids of a sandbox's range its volumes map: files on disk owned by
// 0..IDRange-1 are the sandbox's own ids 0..IDRange-1.
const IDRange = 65536

const (
	imageName = "volume.img"
	// oldLoopName held the loop device of the volume's last mount in older versions.
	oldLoopName = "loop"
	mntName     = "mnt"
	dataName    = "data"
	bindsName   = "binds"
)

// Host keeps the volumes under one directory. Its methods are safe for concurrent use;
// work on one volume is serialised.
type Host struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// New returns the volumes kept under dir.
func New(dir string, log *slog.Logger) (*Host, error) {
	if err := os.MkdirAll(filepath.Join(dir, bindsName), 0o700); err != nil {
		return nil, err
	}
	return &Host{dir: dir, log: log, locks: map[string]*sync.Mutex{}}, nil
}

func (h *Host) lock(id string) func() {
	h.mu.Lock()
	l := h.locks[id]
	if l == nil {
		l = &sync.Mutex{}
		h.locks[id] = l
	}
	h.mu.Unlock()
	l.Lock()
	return l.Unlock
}

func (h *Host) image(id string) string { return filepath.Join(h.dir, id, imageName) }

func (h *Host) mnt(id string) string { return filepath.Join(h.dir, id, mntName) }

// checkID refuses an id that is not one path element of the caller's making.
func checkID(id string) error {
	if id == "" || id == "." || id == ".." || id == bindsName || strings.ContainsAny(id, "/\x00") {
		return fmt.Errorf("volume: bad id %q", id)
	}
	return nil
}

// Make creates volume id: an image of size bytes, formatted, with its data directory
// encrypted under key. The image appears under its name only once it is whole.
func (h *Host) Make(ctx context.Context, id string, size int64, key []byte) (retErr error) {
	if err := checkID(id); err != nil {
		return err
	}
	defer h.lock(id)()
	dir := filepath.Join(h.dir, id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := h.image(id) + ".tmp"
	os.Remove(tmp)
	defer func() {
		if retErr != nil {
			os.Remove(tmp)
		}
	}()
	// The encrypt feature, and no lost+found to keep (setupData).
	if err := loopdev.MakeImage(ctx, tmp, size, "-O", "encrypt"); err != nil {
		return err
	}
	mnt := h.mnt(id)
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return err
	}
	if err := loopdev.Mount(tmp, mnt, ""); err != nil {
		return err
	}
	err := setupData(mnt, key)
	if uerr := unix.Unmount(mnt, 0); err == nil && uerr != nil {
		err = fmt.Errorf("unmount the new volume: %w", uerr)
	}
	if err != nil {
		unix.Unmount(mnt, unix.MNT_DETACH)
		return err
	}
	if err := loopdev.WaitReleased(tmp); err != nil {
		return err
	}
	if err := loopdev.Forget(tmp); err != nil {
		return err
	}
	if err := loopdev.Unmounted(h.image(id)); err != nil { // no device holds it
		return err
	}
	return os.Rename(tmp, h.image(id))
}

// setupData makes the encrypted data directory of a freshly formatted volume mounted
// at mnt, owned by id 0 and open to it alone, and takes the key back out.
func setupData(mnt string, key []byte) error {
	os.RemoveAll(filepath.Join(mnt, "lost+found")) // an empty directory mkfs makes
	data := filepath.Join(mnt, dataName)
	if err := os.Mkdir(data, 0o755); err != nil {
		return err
	}
	kid, err := addKey(mnt, key)
	if err != nil {
		return err
	}
	err = setPolicy(data, kid)
	if rerr := removeKey(mnt, kid); err == nil {
		err = rerr
	}
	return err
}

// Open makes volume id ready for sandboxes and returns nothing new if it already was:
// mounted, its key given to the kernel, and its filesystem grown to size bytes if it is
// smaller (a grow that was recorded but not finished, or the one Grow asks for; ext4
// grows while mounted).
func (h *Host) Open(ctx context.Context, id string, size int64, key []byte) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer h.lock(id)()
	_, err := h.open(ctx, id, size, key)
	if errors.Is(err, ErrGrowsOffline) {
		return nil // usable at its old size meanwhile
	}
	return err
}

// open is Open with the volume's lock held; it says whether the volume was mounted
// before.
func (h *Host) open(ctx context.Context, id string, size int64, key []byte) (wasOpen bool, err error) {
	img, mnt := h.image(id), h.mnt(id)
	st, err := os.Stat(img)
	if err != nil {
		return false, fmt.Errorf("volume %s: %w", id, err)
	}
	if st.Size() < size {
		// The image first (a sparse extension), the loop device and ext4 next.
		if err := os.Truncate(img, size); err != nil {
			return false, fmt.Errorf("grow volume %s: %w", id, err)
		}
	}
	dev, err := loopdev.Of(img)
	if err == nil && dev == "" && mounted(mnt) {
		// Mounted, and not through the recorded device (by an older version): look at
		// every device rather than mount it twice.
		if err = loopdev.Forget(img); err == nil {
			dev, err = loopdev.Of(img)
		}
	}
	if err != nil {
		return false, err
	}
	wasOpen = dev != "" && mounted(mnt)
	if !wasOpen {
		if dev != "" { // a mount that was let go lazily: wait until it is gone for good
			if err := loopdev.WaitReleased(img); err != nil {
				return false, err
			}
		}
		if err := growOffline(ctx, img, size); err != nil {
			return false, fmt.Errorf("grow volume %s: %w", id, err)
		}
		if err := os.MkdirAll(mnt, 0o700); err != nil {
			return false, err
		}
		if dev, err = loopdev.MountDev(img, mnt, ""); err != nil {
			return false, fmt.Errorf("mount volume %s: %w", id, err)
		}
		// Its device is recorded beside the image now (loopdev.Record).
		os.Remove(filepath.Join(h.dir, id, oldLoopName))
	}
	// Given again after every mount (and harmless when the kernel has it already).
	if _, err := addKey(mnt, key); err != nil {
		if !wasOpen {
			err = errors.Join(err, h.unmount(mnt))
		}
		return false, err
	}
	if err := growOnline(ctx, img, dev, mnt, size); err != nil {
		return wasOpen, fmt.Errorf("grow volume %s: %w", id, err)
	}
	return wasOpen, nil
}

// Grow makes volume id size bytes: in place while sandboxes use it (ErrGrowsOffline
// where the node cannot), otherwise mounted for the time of the grow.
func (h *Host) Grow(ctx context.Context, id string, size int64, key []byte) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer h.lock(id)()
	wasOpen, err := h.open(ctx, id, size, key)
	if errors.Is(err, ErrGrowsOffline) && !h.inUse(id) {
		// Mounted for nobody (a crash left it): unmounted, it grows offline.
		if err = h.close(id); err == nil {
			err = loopdev.WaitReleased(h.image(id))
		}
		if err == nil {
			wasOpen, err = h.open(ctx, id, size, key)
		}
	}
	if err == nil && !wasOpen && !h.inUse(id) {
		err = h.close(id)
	}
	return err
}

// ErrGrowsOffline says a mounted volume could not grow in place: the node may not
// resize a mounted filesystem (it lacks CAP_SYS_RESOURCE). It grows when it is next
// mounted, once no sandbox uses it.
var ErrGrowsOffline = errors.New("this node cannot grow a mounted volume; it grows when it is next mounted")

// growOffline grows the ext4 in img, which nothing mounts, to fill the image.
func growOffline(ctx context.Context, img string, size int64) error {
	have, err := fsSize(img)
	if err != nil || have >= size {
		return err
	}
	// resize2fs wants a filesystem checked since it was last mounted.
	if out, err := exec.CommandContext(ctx, "e2fsck", "-f", "-p", img).CombinedOutput(); err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() > 1 { // 1: errors corrected
			return fmt.Errorf("e2fsck: %w: %s", err, strings.TrimSpace(string(out)))
		}
	}
	out, err := exec.CommandContext(ctx, "resize2fs", img).CombinedOutput()
	if err != nil {
		return fmt.Errorf("resize2fs: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

// growOnline grows the loop device dev over img and the ext4 on it (mounted at mnt) to
// size bytes, if the filesystem is smaller, and writes its superblock back to img (where
// Size reads it).
func growOnline(ctx context.Context, img, dev, mnt string, size int64) error {
	have, err := fsSize(img)
	if err != nil || have >= size {
		return err
	}
	lf, err := os.OpenFile("/dev/"+dev, os.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	err = unix.IoctlSetInt(int(lf.Fd()), unix.LOOP_SET_CAPACITY, 0)
	lf.Close()
	if err != nil {
		return fmt.Errorf("loop capacity: %w", err)
	}
	out, err := exec.CommandContext(ctx, "resize2fs", "/dev/"+dev).CombinedOutput()
	if err != nil && strings.Contains(string(out), "Permission denied to resize") {
		return ErrGrowsOffline
	}
	if err != nil {
		return fmt.Errorf("resize2fs: %w: %s", err, strings.TrimSpace(string(out)))
	}
	fd, err := unix.Open(mnt, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Syncfs(fd)
}

// fsSize reads the size of the ext4 in img from its superblock.
func fsSize(img string) (int64, error) {
	f, err := os.Open(img)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return 0, fmt.Errorf("read the superblock of %s: %w", img, err)
	}
	if binary.LittleEndian.Uint16(sb[0x38:]) != 0xEF53 {
		return 0, fmt.Errorf("%s holds no ext4", img)
	}
	blocks := int64(binary.LittleEndian.Uint32(sb[0x4:])) | int64(binary.LittleEndian.Uint32(sb[0x150:]))<<32
	return blocks << (10 + binary.LittleEndian.Uint32(sb[0x18:])), nil
}

// Size is the capacity of volume id's filesystem as its superblock says.
func (h *Host) Size(id string) (int64, error) {
	if err := checkID(id); err != nil {
		return 0, err
	}
	return fsSize(h.image(id))
}

// Close lets go of volume id when no sandbox's mount uses it any more: its key leaves
// the kernel and its filesystem is unmounted.
func (h *Host) Close(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer h.lock(id)()
	if h.inUse(id) {
		return nil
	}
	return h.close(id)
}

func (h *Host) close(id string) error {
	mnt := h.mnt(id)
	if !mounted(mnt) {
		return nil
	}
	return h.unmount(mnt)
}

// unmount takes the volume's key out of the kernel (the files still open keep theirs
// until they close) and unmounts it lazily.
func (h *Host) unmount(mnt string) error {
	if err := removeAllKeys(mnt); err != nil {
		h.log.Warn("remove a volume key", "mnt", mnt, "err", err)
	}
	if err := unix.Unmount(mnt, unix.MNT_DETACH|unix.UMOUNT_NOFOLLOW); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("unmount %s: %w", mnt, err)
	}
	return nil
}

// Remove deletes volume id and its image; its sandboxes' mounts must be gone.
func (h *Host) Remove(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	defer h.lock(id)()
	if err := h.close(id); err != nil {
		return err
	}
	if err := loopdev.WaitReleased(h.image(id)); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(h.dir, id))
}

// IDs are the volumes with a directory here.
func (h *Host) IDs() []string {
	entries, _ := os.ReadDir(h.dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() && e.Name() != bindsName {
			out = append(out, e.Name())
		}
	}
	return out
}

func mounted(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Lstat(dir, &st) != nil || unix.Lstat(filepath.Dir(dir), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}
