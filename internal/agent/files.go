package agent

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/airlockhq/airlock/internal/agentproto"
	"github.com/airlockhq/airlock/internal/errdefs"
	"golang.org/x/sys/unix"
)

// Every path is resolved inside the root by the kernel: ".." and absolute symlinks stop
// at the root, and /proc magic links are refused, so nothing outside it can be reached.
const resolveInRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS

// checkPath enforces the path rule and returns p relative to the root ("." for "/").
func checkPath(p string) (string, error) {
	if p == "" || p[0] != '/' || path.Clean(p) != p || strings.IndexByte(p, 0) >= 0 {
		return "", errdefs.Invalid("path %q must be absolute and clean, without \"..\" or \".\" elements", p)
	}
	if p == "/" {
		return ".", nil
	}
	return p[1:], nil
}

// splitRel returns the parent of a relative path and its last element.
func splitRel(rel string) (dir, base string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

func (s *server) openat(rel string, flags uint64, mode uint64) (int, error) {
	how := &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Mode: mode, Resolve: resolveInRoot}
	for {
		fd, err := unix.Openat2(s.rootFD, rel, how)
		if err == unix.EINTR || err == unix.EAGAIN { // EAGAIN: a concurrent rename; retry
			continue
		}
		return fd, err
	}
}

// fsError turns an errno into an error of the matching class, naming the path.
func fsError(p string, err error) error {
	var errno unix.Errno
	if !errors.As(err, &errno) {
		return err
	}
	msg := p + ": " + errno.Error()
	switch errno {
	case unix.ENOENT:
		return errdefs.NotFound("%s", msg)
	case unix.EACCES, unix.EPERM, unix.EROFS:
		return &errdefs.Error{Class: errdefs.ErrPermissionDenied, Msg: msg}
	case unix.EEXIST:
		return errdefs.Exists("%s", msg)
	case unix.ENOTEMPTY:
		return errdefs.Precondition("%s", msg)
	case unix.ENOSPC, unix.EDQUOT:
		return errdefs.Quota("%s", msg)
	case unix.ENOTDIR, unix.EISDIR, unix.ELOOP, unix.EXDEV, unix.EINVAL, unix.ENAMETOOLONG:
		return errdefs.Invalid("%s", msg)
	}
	return &errdefs.Error{Class: errdefs.ErrInternal, Msg: msg}
}

func fileInfo(name string, st *unix.Stat_t) agentproto.FileInfo {
	typ := st.Mode & unix.S_IFMT
	return agentproto.FileInfo{
		Name:      name,
		Size:      st.Size,
		Mode:      st.Mode & 0o7777,
		IsDir:     typ == unix.S_IFDIR,
		IsSymlink: typ == unix.S_IFLNK,
		MTime:     st.Mtim.Sec,
		UID:       st.Uid,
		GID:       st.Gid,
	}
}

// readlink returns the target of the symlink name in dirfd ("" with an O_PATH fd of
// the link itself), or "" if it is none.
func readlink(dirfd int, name string) string {
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(dirfd, name, buf)
	if err != nil || n >= len(buf) {
		return ""
	}
	return string(buf[:n])
}

func (s *server) handleUpload(c net.Conn, fw *frameWriter, req *agentproto.Request) error {
	rel, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	if rel == "." {
		return errdefs.Invalid("cannot upload to /")
	}
	dirRel, base := splitRel(rel)
	dirfd, err := s.openat(dirRel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err == unix.ENOENT {
		if err = s.mkdirAll(dirRel, 0o755, req.UID, req.GID); err == nil {
			dirfd, err = s.openat(dirRel, unix.O_PATH|unix.O_DIRECTORY, 0)
		}
	}
	if err != nil {
		return fsError(path.Dir(req.Path), err)
	}
	defer unix.Close(dirfd)

	u := &upload{s: s, req: req, dirfd: dirfd, base: base}
	if err := u.stage(); err != nil {
		return fsError(path.Dir(req.Path), err)
	}
	defer u.discard()
	var size int64
	for end := false; !end; {
		t, b, err := agentproto.ReadFrame(c)
		if err != nil {
			return err
		}
		switch t {
		case agentproto.FrameData:
			if _, err := u.f.Write(b); err != nil {
				return fsError(req.Path, err)
			}
			size += int64(len(b))
		case agentproto.FrameEnd:
			end = true
		case agentproto.FrameCancel:
			return errdefs.Precondition("upload cancelled")
		default:
			return errdefs.Invalid("unexpected frame %q during upload", byte(t))
		}
	}
	if err := u.place(); err != nil {
		return fsError(req.Path, err)
	}
	return fw.json(agentproto.FrameResult, agentproto.SizeResult{Size: size})
}

// upload is one file.upload's file. Its bytes go to f until they are all there: a
// file with a temporary name beside the file, renamed into place at the end; or, in
// place, an unnamed file of the directory (O_TMPFILE), copied into the file at the
// end, so nothing changes before every byte has come; or, in place on a filesystem
// without unnamed files, the file itself, as E2B's envd writes it.
type upload struct {
	s       *server
	req     *agentproto.Request
	dirfd   int
	base    string
	f       *os.File
	tmp     string // the temporary name (aside)
	direct  bool   // f is the file itself
	created bool   // in place: the upload made the file
	placed  bool
}

func (u *upload) stage() error {
	if !u.req.InPlace {
		u.tmp = ".airlock-upload-" + randomHex(8)
		fd, err := unix.Openat(u.dirfd, u.tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		u.f = os.NewFile(uintptr(fd), u.tmp)
		return nil
	}
	fd, err := openUnnamed(u.dirfd)
	switch err {
	case nil:
		u.f = os.NewFile(uintptr(fd), u.base)
		return nil
	case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL: // no unnamed files here
		u.direct = true
		u.f, u.created, err = u.openTarget()
		return err
	}
	return err
}

// openUnnamed makes an unnamed file in dirfd; a variable, so that a test can take the
// way of a filesystem without unnamed files.
var openUnnamed = func(dirfd int) (int, error) {
	return unix.Openat(dirfd, ".", unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
}

// openTarget opens the file itself for writing, emptied, making it if it is missing
// (created); never through a symlink, and only a regular file.
func (u *upload) openTarget() (f *os.File, created bool, err error) {
	const flags = unix.O_WRONLY | unix.O_NOFOLLOW | unix.O_NONBLOCK | unix.O_CLOEXEC
	fd, err := unix.Openat(u.dirfd, u.base, flags|unix.O_CREAT|unix.O_EXCL, 0o600)
	created = err == nil
	if err == unix.EEXIST {
		fd, err = unix.Openat(u.dirfd, u.base, flags, 0)
	}
	notFile := errdefs.Invalid("%s is not a regular file; an upload replaces only a file", u.req.Path)
	switch err {
	case nil:
	case unix.ELOOP:
		return nil, false, errdefs.Invalid("%s is a symlink: an upload in place does not follow it; write to the path it names", u.req.Path)
	case unix.ENXIO: // a FIFO nobody reads, a device without its driver
		return nil, false, notFile
	default:
		return nil, false, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		if err == nil {
			err = notFile
		}
		return nil, false, err
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		unix.Close(fd)
		return nil, false, err
	}
	return os.NewFile(uintptr(fd), u.base), created, nil
}

// own gives f the upload's owner and mode; chown first, as chown clears setuid and
// setgid bits.
func (u *upload) own(f *os.File) error {
	mode := u.req.Mode & 0o7777
	if mode == 0 {
		mode = 0o644
	}
	uid, gid := u.req.UID, u.req.GID
	if !u.s.opts.KeepOwner && ((uid >= 0 && uid != os.Geteuid()) || (gid >= 0 && gid != os.Getegid())) {
		if err := unix.Fchown(int(f.Fd()), uid, gid); err != nil {
			return err
		}
	}
	return unix.Fchmod(int(f.Fd()), mode)
}

// place puts the received bytes at the file's name.
func (u *upload) place() error {
	switch {
	case u.direct:
		if err := u.own(u.f); err != nil {
			return err
		}
		u.placed = true
		return u.f.Close()
	case u.req.InPlace:
		dst, created, err := u.openTarget()
		if err != nil {
			return err
		}
		u.created = created
		defer dst.Close()
		if err := u.own(dst); err != nil {
			return err
		}
		if _, err := u.f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		if _, err := io.Copy(dst, u.f); err != nil {
			return err
		}
		u.placed = true
		return dst.Close()
	}
	if err := u.own(u.f); err != nil {
		return err
	}
	if err := u.f.Close(); err != nil {
		return err
	}
	if err := unix.Renameat(u.dirfd, u.tmp, u.dirfd, u.base); err != nil {
		return err
	}
	u.placed = true
	return nil
}

// discard undoes what an upload that failed left: its temporary file, or a file it
// made itself; an unnamed file goes with its descriptor.
func (u *upload) discard() {
	if u.f != nil {
		u.f.Close()
	}
	switch {
	case u.placed:
	case u.tmp != "":
		_ = unix.Unlinkat(u.dirfd, u.tmp, 0)
	case u.created:
		_ = unix.Unlinkat(u.dirfd, u.base, 0)
	}
}

func (s *server) handleDownload(fw *frameWriter, req *agentproto.Request) error {
	if req.Op == agentproto.OpFileRead && (req.Offset < 0 || req.Length < 0) {
		return errdefs.Invalid("offset and length must not be negative")
	}
	rel, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	// O_NONBLOCK: opening a FIFO must not hang; it is refused below anyway.
	fd, err := s.openat(rel, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return fsError(req.Path, err)
	}
	f := os.NewFile(uintptr(fd), req.Path)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsError(req.Path, err)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return errdefs.Invalid("%s is a directory", req.Path)
	default:
		return errdefs.Invalid("%s is not a regular file", req.Path)
	}
	var r io.Reader = f
	if req.Op == agentproto.OpFileRead {
		if _, err := f.Seek(req.Offset, io.SeekStart); err != nil {
			return fsError(req.Path, err)
		}
		if req.Length > 0 {
			r = io.LimitReader(f, req.Length)
		}
	}
	buf := make([]byte, copyBuf)
	var size int64
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := fw.frame(agentproto.FrameData, buf[:n]); werr != nil {
				return werr
			}
			size += int64(n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return fsError(req.Path, err)
		}
	}
	return fw.json(agentproto.FrameResult, agentproto.SizeResult{Size: size})
}

func (s *server) handleList(fw *frameWriter, req *agentproto.Request) error {
	rel, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	fd, err := s.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return fsError(req.Path, err)
	}
	f := os.NewFile(uintptr(fd), req.Path)
	defer f.Close()
	names, err := f.Readdirnames(-1)
	if err != nil {
		return fsError(req.Path, err)
	}
	slices.Sort(names)
	out := make([]agentproto.FileInfo, 0, len(names))
	for _, name := range names {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			if err == unix.ENOENT {
				continue // removed meanwhile
			}
			return fsError(path.Join(req.Path, name), err)
		}
		fi := fileInfo(name, &st)
		if fi.IsSymlink {
			fi.Target = readlink(fd, name)
		}
		out = append(out, fi)
	}
	s.nameOwners(out)
	if !req.Chunked {
		return fw.json(agentproto.FrameResult, out)
	}
	// Entries go out in arrays of at most listChunk bytes.
	chunk := []byte{'['}
	for _, fi := range out {
		b, err := json.Marshal(fi)
		if err != nil {
			return err
		}
		if len(chunk) > 1 && len(chunk)+len(b)+1 > listChunk {
			if err := fw.frame(agentproto.FrameData, append(chunk, ']')); err != nil {
				return err
			}
			chunk = []byte{'['}
		}
		if len(chunk) > 1 {
			chunk = append(chunk, ',')
		}
		chunk = append(chunk, b...)
	}
	if len(chunk) > 1 {
		if err := fw.frame(agentproto.FrameData, append(chunk, ']')); err != nil {
			return err
		}
	}
	return fw.json(agentproto.FrameResult, struct{}{})
}

// listChunk bounds one Data frame of a chunked listing, well under MaxPayload: one
// entry (a name of at most 255 bytes, a link target of at most 4096, escaped) fits.
const listChunk = 256 << 10

func (s *server) handleStat(fw *frameWriter, req *agentproto.Request) error {
	rel, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	fd, err := s.openat(rel, unix.O_PATH, 0)
	if err == unix.ENOENT {
		// Perhaps a dangling symlink: describe the link itself.
		fd, err = s.openat(rel, unix.O_PATH|unix.O_NOFOLLOW, 0)
	}
	if err != nil {
		return fsError(req.Path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fsError(req.Path, err)
	}
	fi := []agentproto.FileInfo{fileInfo(path.Base(req.Path), &st)}
	s.nameOwners(fi)
	// The link itself, when the path names one: what it points to.
	if lfd, err := s.openat(rel, unix.O_PATH|unix.O_NOFOLLOW, 0); err == nil {
		fi[0].Target = readlink(lfd, "")
		unix.Close(lfd)
	}
	return fw.json(agentproto.FrameResult, fi[0])
}

func (s *server) handleMkdir(fw *frameWriter, req *agentproto.Request) error {
	rel, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	mode := req.Mode & 0o7777
	if mode == 0 {
		mode = 0o755
	}
	if req.Parents {
		err = s.mkdirAll(rel, mode, req.UID, req.GID)
	} else if err = s.mkdirOne(rel, mode); err == nil {
		err = s.own(rel, req.UID, req.GID)
	}
	if err != nil {
		return fsError(req.Path, err)
	}
	return fw.json(agentproto.FrameResult, struct{}{})
}

// own gives the directory rel, which the agent just made, to uid and gid (-1: keep),
// unless the agent keeps its own ids.
func (s *server) own(rel string, uid, gid int) error {
	if s.opts.KeepOwner || (uid < 0 || uid == os.Geteuid()) && (gid < 0 || gid == os.Getegid()) {
		return nil
	}
	fd, err := s.openat(rel, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Fchown(fd, uid, gid)
}

func (s *server) mkdirOne(rel string, mode uint32) error {
	if rel == "." {
		return unix.EEXIST
	}
	dirRel, base := splitRel(rel)
	dirfd, err := s.openat(dirRel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dirfd)
	return unix.Mkdirat(dirfd, base, mode)
}

// mkdirAll is mkdir -p: every missing element is created, owned by uid and gid (-1:
// the agent's); an existing directory is fine.
func (s *server) mkdirAll(rel string, mode uint32, uid, gid int) error {
	if rel == "." {
		return nil
	}
	elems := strings.Split(rel, "/")
	for i := range elems {
		prefix := strings.Join(elems[:i+1], "/")
		fd, err := s.openat(prefix, unix.O_PATH|unix.O_DIRECTORY, 0)
		if err == nil {
			unix.Close(fd)
			continue
		}
		if err != unix.ENOENT {
			return err
		}
		if err := s.mkdirOne(prefix, mode); err == unix.EEXIST {
			continue // made meanwhile, by someone else
		} else if err != nil {
			return err
		}
		if err := s.own(prefix, uid, gid); err != nil {
			return err
		}
	}
	return nil
}

func (s *server) handleRemove(fw *frameWriter, req *agentproto.Request) error {
	rel, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	if rel == "." {
		return errdefs.Invalid("refusing to remove /")
	}
	dirRel, base := splitRel(rel)
	dirfd, err := s.openat(dirRel, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fsError(req.Path, err)
	}
	defer unix.Close(dirfd)
	err = unix.Unlinkat(dirfd, base, 0)
	if err == unix.EISDIR {
		err = unix.Unlinkat(dirfd, base, unix.AT_REMOVEDIR)
		if (err == unix.ENOTEMPTY || err == unix.EEXIST) && req.Recursive {
			err = removeAll(dirfd, base)
		}
	}
	if err == unix.ENOTEMPTY || err == unix.EEXIST {
		return errdefs.Precondition("%s: directory not empty (remove it recursively)", req.Path)
	}
	if err != nil {
		return fsError(req.Path, err)
	}
	return fw.json(agentproto.FrameResult, struct{}{})
}

// removeAll removes the directory name in parent and everything below it, never
// following a symlink: each level is opened relative to its parent with O_NOFOLLOW.
func removeAll(parent int, name string) error {
	fd, err := unix.Openat(parent, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err == unix.ENOTDIR || err == unix.ELOOP {
		return unix.Unlinkat(parent, name, 0)
	}
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	for pass := 0; ; {
		names, rerr := f.Readdirnames(1024)
		for _, n := range names {
			err := unix.Unlinkat(fd, n, 0)
			if err == unix.EISDIR {
				err = removeAll(fd, n)
			}
			if err != nil && err != unix.ENOENT {
				return err
			}
		}
		if rerr == nil {
			continue
		}
		if rerr != io.EOF {
			return rerr
		}
		err := unix.Unlinkat(parent, name, unix.AT_REMOVEDIR)
		if err != unix.ENOTEMPTY || pass == 3 {
			return err
		}
		// Entries were skipped while the directory changed under the scan: rescan.
		pass++
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	}
}

// handleRename moves Path to Dest as rename(2) does, both resolved in the root: an
// existing destination is replaced unless it is a non-empty directory; missing parent
// directories are not created.
func (s *server) handleRename(fw *frameWriter, req *agentproto.Request) error {
	from, err := checkPath(req.Path)
	if err != nil {
		return err
	}
	to, err := checkPath(req.Dest)
	if err != nil {
		return err
	}
	if from == "." || to == "." {
		return errdefs.Invalid("cannot rename / or rename onto it")
	}
	fromDir, fromBase := splitRel(from)
	fromFD, err := s.openat(fromDir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fsError(req.Path, err)
	}
	defer unix.Close(fromFD)
	var st unix.Stat_t
	if err := unix.Fstatat(fromFD, fromBase, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fsError(req.Path, err)
	}
	toDir, toBase := splitRel(to)
	toFD, err := s.openat(toDir, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return fsError(req.Dest, err)
	}
	defer unix.Close(toFD)
	switch err := unix.Renameat(fromFD, fromBase, toFD, toBase); err {
	case nil:
	case unix.ENOTEMPTY, unix.EEXIST:
		return errdefs.Precondition("%s: a directory that is not empty is in the way", req.Dest)
	case unix.ENOENT:
		return fsError(req.Path, err) // the source went away meanwhile
	default:
		return fsError(req.Dest, err)
	}
	return fw.json(agentproto.FrameResult, struct{}{})
}
