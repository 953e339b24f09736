package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockhq/airlock/internal/errdefs"
)

const (
	whiteoutPrefix = ".wh."
	whiteoutOpaque = ".wh..wh..opq"
	opaqueXattr    = "trusted.overlay.opaque"
)

// resolveFlags confine every lookup to the layer root and refuse any symlink on the way:
// a layer cannot steer its own later entries through a link it created.
const resolveFlags = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS |
	unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// cleanName turns a tar entry name into a clean path relative to the layer root ("." is
// the root itself). Absolute names, names that climb out with "..", and NUL bytes are
// refused.
func cleanName(name string) (string, error) {
	if name == "" {
		return "", errdefs.Invalid("layer entry has an empty name")
	}
	if strings.IndexByte(name, 0) >= 0 {
		return "", errdefs.Invalid("layer entry %q contains a NUL byte", name)
	}
	if strings.HasPrefix(name, "/") {
		return "", errdefs.Invalid("layer entry %q is an absolute path", name)
	}
	c := path.Clean(name)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", errdefs.Invalid("layer entry %q escapes the layer root", name)
	}
	return c, nil
}

type dirTime struct {
	name         string
	atime, mtime time.Time
}

// unpacker applies one layer tar to an empty directory it owns. Every file system call is
// relative to a directory descriptor reached from the root without following symlinks.
type unpacker struct {
	root   *os.File
	dirs   []dirTime
	budget *budget // nil: unbounded (the host image, made by the daemon itself)

	cacheName string // the parent directory last opened, kept open for the next entry
	cacheDir  *os.File
}

// unpackLayer reads the tar stream r into dir (which must exist and be empty), converting
// OCI whiteouts to their overlayfs form. Each entry is charged to bud (its header, and a
// regular file's full claimed size, holes included) before anything of it is written. It
// stops at the end-of-archive marker; the caller drains whatever follows.
func unpackLayer(ctx context.Context, r io.Reader, dir string, bud *budget) error {
	root, err := os.Open(dir)
	if err != nil {
		return err
	}
	u := &unpacker{root: root, budget: bud}
	defer u.close()
	if err := root.Chmod(0o755); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return errdefs.Invalid("layer is not a valid tar archive: %v", err)
		}
		if err := u.entry(hdr, tr); err != nil {
			return err
		}
	}
	return u.finishDirs()
}

func (u *unpacker) close() {
	u.dropCache()
	u.root.Close()
}

func (u *unpacker) dropCache() {
	if u.cacheDir != nil {
		u.cacheDir.Close()
	}
	u.cacheDir, u.cacheName = nil, ""
}

func (u *unpacker) rootfd() int { return int(u.root.Fd()) }

// openDir opens the directory rel (clean, relative) below the root. With create, missing
// components are made (0755, root-owned) one at a time.
func (u *unpacker) openDir(rel string, create bool) (*os.File, error) {
	how := unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: resolveFlags}
	fd, err := unix.Openat2(u.rootfd(), rel, &how)
	if errors.Is(err, unix.ENOENT) && create {
		fd, err = u.mkdirAll(rel, &how)
	}
	switch {
	case err == nil:
		return os.NewFile(uintptr(fd), rel), nil
	case errors.Is(err, unix.ELOOP):
		return nil, errdefs.Invalid("layer path %q is or goes through a symlink", rel)
	case errors.Is(err, unix.ENOTDIR):
		return nil, errdefs.Invalid("layer path %q is not a directory", rel)
	case errors.Is(err, unix.EXDEV):
		return nil, errdefs.Invalid("layer path %q escapes the layer root", rel)
	}
	return nil, fmt.Errorf("open %q in layer: %w", rel, err)
}

// mkdirAll walks rel one component at a time from the root, making what is missing.
func (u *unpacker) mkdirAll(rel string, how *unix.OpenHow) (int, error) {
	fd := -1
	for _, comp := range strings.Split(rel, "/") {
		cur := u.rootfd()
		if fd >= 0 {
			cur = fd
		}
		merr := unix.Mkdirat(cur, comp, 0o755)
		if merr != nil && !errors.Is(merr, unix.EEXIST) {
			if fd >= 0 {
				unix.Close(fd)
			}
			return -1, merr
		}
		next, err := unix.Openat2(cur, comp, how)
		if fd >= 0 {
			unix.Close(fd)
		}
		if err == nil && merr == nil {
			err = unix.Fchmod(next, 0o755) // whatever the process umask
		}
		if err != nil {
			if next >= 0 {
				unix.Close(next)
			}
			return -1, err
		}
		fd = next
	}
	return fd, nil
}

// parent returns the (cached, not to be closed) directory holding name and name's base.
func (u *unpacker) parent(name string) (*os.File, string, error) {
	dir, base := path.Split(name)
	dir = path.Clean(dir)
	if u.cacheDir != nil && u.cacheName == dir {
		return u.cacheDir, base, nil
	}
	u.dropCache()
	f, err := u.openDir(dir, true)
	if err != nil {
		return nil, "", err
	}
	u.cacheDir, u.cacheName = f, dir
	return f, base, nil
}

// clear removes whatever is at base in dir, except an existing directory when keepDir.
// It reports whether a directory was kept.
func (u *unpacker) clear(dir *os.File, base string, keepDir bool) (bool, error) {
	var st unix.Stat_t
	err := unix.Fstatat(int(dir.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if keepDir {
			return true, nil
		}
		// The cached parent is dir itself, never below base, so it stays valid.
		return false, removeAllAt(int(dir.Fd()), base)
	}
	return false, unix.Unlinkat(int(dir.Fd()), base, 0)
}

// removeAllAt deletes name below dirfd, recursing into directories without following links.
func removeAllAt(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	fd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAllAt(fd, n); err != nil {
				break
			}
		}
	}
	f.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR)
}

func (u *unpacker) entry(hdr *tar.Header, r io.Reader) error {
	name, err := cleanName(hdr.Name)
	if err != nil {
		return err
	}
	cost := int64(tarEntryCost)
	if hdr.Typeflag == tar.TypeReg {
		if hdr.Size < 0 {
			return errdefs.Invalid("layer entry %q has a negative size", hdr.Name)
		}
		cost += hdr.Size
	}
	if hdr.Mode&0o6000 != 0 && u.budget != nil {
		switch u.budget.setuid {
		case SetuidRefuse:
			return errdefs.Invalid("layer entry %q is setuid or setgid, which this node refuses (images.setuid)", hdr.Name)
		case SetuidStrip:
			hdr.Mode &^= 0o6000
		}
	}
	if err := u.budget.charge(cost); err != nil {
		return err
	}
	if hdr.Uid < 0 || hdr.Gid < 0 || int64(hdr.Uid) > 1<<32-2 || int64(hdr.Gid) > 1<<32-2 {
		return errdefs.Invalid("layer entry %q has an invalid owner %d:%d", hdr.Name, hdr.Uid, hdr.Gid)
	}
	if name == "." {
		if hdr.Typeflag != tar.TypeDir {
			return errdefs.Invalid("layer entry %q: the root must be a directory", hdr.Name)
		}
		if err := setMeta(u.root, hdr); err != nil {
			return err
		}
		u.dirs = append(u.dirs, dirTime{".", hdr.AccessTime, hdr.ModTime})
		return nil
	}
	dir, base, err := u.parent(name)
	if err != nil {
		return err
	}
	if strings.HasPrefix(base, whiteoutPrefix) {
		return u.whiteout(dir, base, hdr.Name)
	}
	dfd := int(dir.Fd())
	switch hdr.Typeflag {
	case tar.TypeDir:
		kept, err := u.clear(dir, base, true)
		if err != nil {
			return err
		}
		if !kept {
			if err := unix.Mkdirat(dfd, base, 0o700); err != nil {
				return err
			}
		}
		fd, err := unix.Openat(dfd, base, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		err = setMeta(f, hdr)
		f.Close()
		u.dirs = append(u.dirs, dirTime{name, hdr.AccessTime, hdr.ModTime})
		return err
	case tar.TypeReg:
		if _, err := u.clear(dir, base, false); err != nil {
			return err
		}
		fd, err := unix.Openat(dfd, base, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		_, err = writeFileData(f, r)
		if err == nil {
			err = setMeta(f, hdr)
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
	case tar.TypeSymlink:
		if _, err := u.clear(dir, base, false); err != nil {
			return err
		}
		if err := unix.Symlinkat(hdr.Linkname, dfd, base); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		if err := lchownAt(dfd, base, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	case tar.TypeLink:
		return u.hardlink(dir, base, hdr)
	case tar.TypeChar, tar.TypeBlock, tar.TypeFifo:
		mode := uint32(unix.S_IFIFO)
		if hdr.Typeflag != tar.TypeFifo {
			if hdr.Typeflag != tar.TypeChar || hdr.Devmajor != 0 || hdr.Devminor != 0 {
				if u.budget != nil && u.budget.devices == DevicesRefuse {
					return errdefs.Invalid("layer entry %q is a device node, which this node refuses (images.devices)", hdr.Name)
				}
				return nil // device nodes come from the runtime, never from an image
			}
			mode = unix.S_IFCHR // already an overlayfs whiteout
		}
		if _, err := u.clear(dir, base, false); err != nil {
			return err
		}
		if err := unix.Mknodat(dfd, base, mode, 0); err != nil {
			return fmt.Errorf("layer entry %q: %w", hdr.Name, err)
		}
		if err := lchownAt(dfd, base, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
		if err := unix.Fchmodat(dfd, base, uint32(hdr.Mode&0o7777), 0); err != nil {
			return err
		}
	case tar.TypeXGlobalHeader:
		return nil
	default:
		return errdefs.Invalid("layer entry %q has unsupported type %q", hdr.Name, hdr.Typeflag)
	}
	return setTimes(dfd, base, hdr.AccessTime, hdr.ModTime)
}

// whiteout converts an OCI whiteout entry: ".wh..wh..opq" marks dir opaque, ".wh.NAME"
// becomes a 0:0 character device NAME.
func (u *unpacker) whiteout(dir *os.File, base, orig string) error {
	if base == whiteoutOpaque {
		return unix.Fsetxattr(int(dir.Fd()), opaqueXattr, []byte("y"), 0)
	}
	target := strings.TrimPrefix(base, whiteoutPrefix)
	if strings.HasPrefix(target, whiteoutPrefix) {
		return nil // other AUFS metadata (".wh..wh.plnk" and such) has no overlayfs meaning
	}
	if target == "" || target == "." || target == ".." {
		return errdefs.Invalid("layer entry %q is not a valid whiteout", orig)
	}
	if _, err := u.clear(dir, target, false); err != nil {
		return err
	}
	return unix.Mknodat(int(dir.Fd()), target, unix.S_IFCHR, 0)
}

// hardlink links base in dir to an earlier entry of the same layer. The target is
// resolved like any entry name, so it cannot reach outside the layer.
func (u *unpacker) hardlink(dir *os.File, base string, hdr *tar.Header) error {
	target, err := cleanName(hdr.Linkname)
	if err != nil {
		return errdefs.Invalid("layer entry %q: hard link target %q is outside the layer", hdr.Name, hdr.Linkname)
	}
	if target == "." {
		return errdefs.Invalid("layer entry %q: hard link to a directory", hdr.Name)
	}
	tdir, tbase := path.Split(target)
	tf, err := u.openDir(path.Clean(tdir), false)
	if err != nil {
		return fmt.Errorf("layer entry %q: hard link target: %w", hdr.Name, err)
	}
	defer tf.Close()
	var st unix.Stat_t
	if err := unix.Fstatat(int(tf.Fd()), tbase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return errdefs.Invalid("layer entry %q: hard link target %q is not in the layer", hdr.Name, hdr.Linkname)
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return errdefs.Invalid("layer entry %q: hard link to a directory", hdr.Name)
	}
	var cur unix.Stat_t
	if unix.Fstatat(int(dir.Fd()), base, &cur, unix.AT_SYMLINK_NOFOLLOW) == nil && cur.Ino == st.Ino && cur.Dev == st.Dev {
		return nil // already the same file
	}
	if _, err := u.clear(dir, base, false); err != nil {
		return err
	}
	// flags 0: a symlink target is linked itself, never followed.
	return unix.Linkat(int(tf.Fd()), tbase, int(dir.Fd()), base, 0)
}

// keepOwners says whether unpacked files get their archive owners. Only root may give
// files away: a store opened by another user (the tests of the layers above the runtime,
// on the fake runtime) keeps every file as that user's.
var keepOwners = os.Geteuid() == 0

// lchownAt gives the entry base of dfd (never a link's target) its archive owner.
func lchownAt(dfd int, base string, uid, gid int) error {
	if !keepOwners {
		return nil
	}
	return unix.Fchownat(dfd, base, uid, gid, unix.AT_SYMLINK_NOFOLLOW)
}

// setMeta applies owner, mode (after chown, which clears set-id bits) and user xattrs.
func setMeta(f *os.File, hdr *tar.Header) error {
	fd := int(f.Fd())
	if keepOwners {
		if err := unix.Fchown(fd, hdr.Uid, hdr.Gid); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(fd, uint32(hdr.Mode&0o7777)); err != nil {
		return err
	}
	for k, v := range hdr.PAXRecords {
		name, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		// Only user xattrs: trusted.* would steer overlayfs, security.* grants privileges.
		if !ok || !strings.HasPrefix(name, "user.") {
			continue
		}
		if err := unix.Fsetxattr(fd, name, []byte(v), 0); err != nil && !errors.Is(err, unix.ENOTSUP) {
			return fmt.Errorf("set xattr %s: %w", name, err)
		}
	}
	return nil
}

func setTimes(dirfd int, base string, atime, mtime time.Time) error {
	if atime.IsZero() {
		atime = mtime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(atime.UnixNano()), unix.NsecToTimespec(mtime.UnixNano())}
	return unix.UtimesNanoAt(dirfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// finishDirs sets directory times last, since creating entries changes them. A directory
// that a later entry replaced is skipped.
func (u *unpacker) finishDirs() error {
	u.dropCache()
	for _, d := range u.dirs {
		if d.name == "." {
			if err := setTimes(u.rootfd(), ".", d.atime, d.mtime); err != nil {
				return err
			}
			continue
		}
		dir, base := path.Split(d.name)
		f, err := u.openDir(path.Clean(dir), false)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstatat(int(f.Fd()), base, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = setTimes(int(f.Fd()), base, d.atime, d.mtime)
		}
		f.Close()
		if err != nil {
			return err
		}
	}
	return nil
}
