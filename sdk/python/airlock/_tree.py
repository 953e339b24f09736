"""Directory trees as tar streams: packing a local tree for an upload, and unpacking
a download, which the sandbox wrote, as hostile input.

:func:`extract` checks every entry before it writes anything for it: its name
(relative, no "..", bounded length and depth), its type (directories, regular files,
symbolic links, hard links to a file of the same archive; devices, FIFOs and the rest
are refused), its declared size against what is left of ``max_bytes``, and the count
against ``max_entries``. It never writes through a symbolic link: the directories of
an entry's path are opened one by one relative to each other with ``O_NOFOLLOW`` (a
link there refuses the entry), and files are created with ``O_EXCL | O_NOFOLLOW``
after what was at their name is removed. setuid and setgid bits are dropped. A
refused archive stops at the refused entry: what came before it stays in the
directory, nothing is outside it.
"""

import errno
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from typing import IO, Callable, Dict, List, Optional, Set, Tuple

from .errors import InvalidArgument

#: Defaults of a download's bounds.
DEFAULT_MAX_ENTRIES = 500_000
DEFAULT_MAX_BYTES = 8 << 30
MAX_NAME = 4096
MAX_DEPTH = 256
MAX_ELEM = 255

_CHUNK = 256 << 10


class ArchiveRefused(InvalidArgument):
    """A downloaded archive had an entry that is never unpacked, or passed a limit;
    the message names the entry and why."""

    def __init__(self, entry: str, reason: str, limit: bool = False) -> None:
        self.entry = entry
        self.reason = reason
        self.limit = limit
        msg = f"archive entry {entry!r} refused: {reason}" if entry else f"archive refused: {reason}"
        super().__init__(msg, code="invalid_argument", status=400)


@dataclass
class TreeSummary:
    """What a tree copy held: files, directories, links and the bytes of files."""

    path: str = ""
    files: int = 0
    dirs: int = 0
    links: int = 0
    bytes: int = 0

    @classmethod
    def from_json(cls, d: Dict[str, object]) -> "TreeSummary":
        return cls(path=str(d.get("path", "")), files=int(d.get("files", 0)), dirs=int(d.get("dirs", 0)),  # type: ignore[arg-type]
                   links=int(d.get("links", 0)), bytes=int(d.get("bytes", 0)))  # type: ignore[arg-type]


def check_name(name: str) -> List[str]:
    """The elements of an entry's name, checked; [] is the directory itself."""
    if not name:
        raise ArchiveRefused(name, "an empty name")
    if len(name.encode("utf-8", "surrogateescape")) > MAX_NAME:
        raise ArchiveRefused(name[:64] + "…", f"a name longer than {MAX_NAME} bytes", limit=True)
    if "\x00" in name:
        raise ArchiveRefused(name, "a NUL byte in the name")
    if name.startswith("/") or name.startswith("\\") or (len(name) > 1 and name[1] == ":"):
        raise ArchiveRefused(name, "an absolute name; entries must be relative to the directory")
    if "\\" in name:
        raise ArchiveRefused(name, 'a backslash in the name; elements are separated by "/"')
    out = []
    for e in name.rstrip("/").split("/"):
        if e in ("", "."):
            continue
        if e == "..":
            raise ArchiveRefused(name, 'a ".." element; entries must stay inside the directory')
        if len(e.encode("utf-8", "surrogateescape")) > MAX_ELEM:
            raise ArchiveRefused(name, f"an element longer than {MAX_ELEM} bytes", limit=True)
        out.append(e)
    if len(out) > MAX_DEPTH:
        raise ArchiveRefused(name, f"{len(out)} elements deep; at most {MAX_DEPTH} are allowed", limit=True)
    return out


#: The most bytes of a header's own records (a PAX header, a GNU long name or link)
#: that are read: tarfile reads them whole into memory (Go's archive/tar stops at the
#: same 1 MiB).
MAX_HEADER_RECORDS = 1 << 20

_RECORD_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                 tarfile.GNUTYPE_LONGLINK)


class _BoundedTarInfo(tarfile.TarInfo):
    """A header whose records tarfile would read into memory whatever their size (or, for
    a GNU sparse file, block after block) is refused before they are read."""

    def _proc_member(self, tf: tarfile.TarFile) -> tarfile.TarInfo:
        if self.type in _RECORD_TYPES and self.size > MAX_HEADER_RECORDS:
            raise ArchiveRefused(self.name, f"a header of {self.size} bytes of records; at most {MAX_HEADER_RECORDS} are read",
                                 limit=True)
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise ArchiveRefused(self.name, f"an entry of type {self.type!r}; only directories, regular files and links are unpacked")
        return super()._proc_member(tf)

    def _proc_gnusparse_10(self, next: tarfile.TarInfo, pax_headers: Dict[str, str], tf: tarfile.TarFile) -> None:
        # A PAX header's GNU sparse 1.0 file: tarfile would read its map, as many
        # numbers as its first line says, from the entry's data into memory.
        raise ArchiveRefused(next.name, "a GNU sparse file; only directories, regular files and links are unpacked")


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class _Extractor:
    def __init__(self, root_fd: int, max_entries: int, max_bytes: int,
                 progress: Optional[Callable[[TreeSummary], None]]) -> None:
        self.root_fd = root_fd
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self.progress = progress
        self.sum = TreeSummary()
        self.files: Set[Tuple[str, ...]] = set()
        self.modes: Dict[Tuple[str, ...], int] = {}

    def open_dir(self, orig: str, elems: List[str], make: bool) -> int:
        """A descriptor of the directory elems, each element opened relative to the last
        and never through a link; missing ones are made when make."""
        fd = os.dup(self.root_fd)
        try:
            for i, e in enumerate(elems):
                try:
                    nfd = os.open(e, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not make:
                        raise
                    os.mkdir(e, 0o700, dir_fd=fd)
                    nfd = os.open(e, _DIR_FLAGS, dir_fd=fd)
                except OSError as err:
                    if err.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        st = os.stat(e, dir_fd=fd, follow_symlinks=False)
                        what = "the symbolic link" if stat.S_ISLNK(st.st_mode) else "the non-directory"
                        raise ArchiveRefused(orig, f"its path goes through {what} {'/'.join(elems[:i + 1])!r}, which is never followed") from None
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise

    def clear(self, orig: str, parent: int, base: str) -> None:
        """Remove what is at base (not a directory, which is refused)."""
        try:
            st = os.stat(base, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if stat.S_ISDIR(st.st_mode):
            raise ArchiveRefused(orig, "a directory is already at its name")
        os.unlink(base, dir_fd=parent)

    def entry(self, tf: tarfile.TarFile, m: tarfile.TarInfo) -> None:
        elems = check_name(m.name)
        key = tuple(elems)
        mode = m.mode & 0o1777  # setuid and setgid dropped
        if m.isdir():
            if elems:
                os.close(self.open_dir(m.name, elems, make=True))
                if key not in self.modes:
                    self.sum.dirs += 1
                self.modes[key] = mode
            return
        if not elems:
            raise ArchiveRefused(m.name, "an entry cannot replace the directory itself")
        if m.ischr() or m.isblk():
            raise ArchiveRefused(m.name, "a device node; only directories, regular files and links are unpacked")
        if m.isfifo():
            raise ArchiveRefused(m.name, "a FIFO; only directories, regular files and links are unpacked")
        if not (m.isreg() or m.issym() or m.islnk()) or m.type == tarfile.GNUTYPE_SPARSE:
            raise ArchiveRefused(m.name, f"an entry of type {m.type!r}; only directories, regular files and links are unpacked")
        if m.isreg() and (m.size < 0 or m.size > self.max_bytes - self.sum.bytes):
            raise ArchiveRefused(m.name, f"a file of {m.size} bytes would pass the limit of {self.max_bytes} bytes in all "
                                         f"({self.sum.bytes} written so far)", limit=True)
        link_key: Tuple[str, ...] = ()
        if m.islnk():
            try:
                link_key = tuple(check_name(m.linkname))
            except ArchiveRefused:
                link_key = ()
            if link_key not in self.files:
                raise ArchiveRefused(m.name, f"a hard link to {m.linkname!r}, which is not a file made earlier from this archive")
        if m.issym() and (not m.linkname or "\x00" in m.linkname or len(m.linkname) > MAX_NAME):
            raise ArchiveRefused(m.name, "a symbolic link with an empty, NUL-bearing or over-long target")
        parent = self.open_dir(m.name, elems[:-1], make=True)
        base = elems[-1]
        try:
            self.clear(m.name, parent, base)
            self.files.discard(key)
            if m.issym():
                os.symlink(m.linkname, base, dir_fd=parent)
                self.sum.links += 1
            elif m.islnk():
                src = self.open_dir(m.name, list(link_key[:-1]), make=False)
                try:
                    st = os.stat(link_key[-1], dir_fd=src, follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode):
                        raise ArchiveRefused(m.name, f"a hard link to {m.linkname!r}, which is no longer a regular file")
                    os.link(link_key[-1], base, src_dir_fd=src, dst_dir_fd=parent, follow_symlinks=False)
                finally:
                    os.close(src)
                self.sum.links += 1
            else:
                self.write(tf, m, parent, base)
                self.files.add(key)
                self.sum.files += 1
                self.sum.bytes += m.size
        finally:
            os.close(parent)

    def write(self, tf: tarfile.TarFile, m: tarfile.TarInfo, parent: int, base: str) -> None:
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(base, flags, 0o600, dir_fd=parent)
        try:
            src = tf.extractfile(m)
            left = m.size
            while left > 0 and src is not None:
                b = src.read(min(left, _CHUNK))
                if not b:
                    raise ArchiveRefused(m.name, f"the stream ended after {m.size - left} of the file's {m.size} bytes")
                _write_all(fd, b)
                left -= len(b)
            os.fchmod(fd, mode_bits(m.mode))
            os.utime(fd, (m.mtime, m.mtime))
        finally:
            os.close(fd)

    def finish(self) -> None:
        # Directories get their modes last, deepest first, so that a read-only one did
        # not stop its own entries being written.
        for key in sorted(self.modes, key=len, reverse=True):
            try:
                fd = self.open_dir("/".join(key), list(key), make=False)
            except (OSError, ArchiveRefused):
                continue
            try:
                os.fchmod(fd, self.modes[key])
            finally:
                os.close(fd)


def mode_bits(mode: int) -> int:
    return mode & 0o1777


def _write_all(fd: int, b: bytes) -> None:
    view = memoryview(b)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def extract(stream: IO[bytes], dest: str, *, max_entries: int = DEFAULT_MAX_ENTRIES, max_bytes: int = DEFAULT_MAX_BYTES,
            progress: Optional[Callable[[TreeSummary], None]] = None) -> TreeSummary:
    """Unpack the tar stream into the existing directory dest; see the module doc."""
    root_fd = os.open(dest, _DIR_FLAGS & ~os.O_NOFOLLOW)
    x = _Extractor(root_fd, max_entries, max_bytes, progress)
    try:
        try:
            tf = tarfile.open(fileobj=stream, mode="r|", tarinfo=_BoundedTarInfo)
        except tarfile.TarError as e:
            raise ArchiveRefused("", f"not a valid tar stream: {e}") from None
        n = 0
        try:
            while True:
                try:
                    m = tf.next()
                except tarfile.TarError as e:
                    raise ArchiveRefused("", f"not a valid tar stream: {e}") from None
                if m is None:
                    break
                n += 1
                if n > max_entries:
                    raise ArchiveRefused(m.name, f"more than {max_entries} entries (the limit on entries)", limit=True)
                x.entry(tf, m)
                tf.members = []  # a stream's members are not kept
                if progress is not None:
                    progress(x.sum)
        finally:
            x.finish()
    finally:
        os.close(root_fd)
    return x.sum


def pack(local: str) -> Tuple[IO[bytes], int]:
    """A temporary file holding the tree under local as a tar stream, and its length.
    Links are written as links, never followed; sockets, FIFOs and devices are skipped."""
    if not os.path.isdir(local):
        raise InvalidArgument(f"{local} is not a directory")
    out = tempfile.TemporaryFile()
    try:
        with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tf:
            _pack_dir(tf, local, "")
        size = out.tell()
        out.seek(0)
        return out, size
    except BaseException:
        out.close()
        raise


def _pack_dir(tf: tarfile.TarFile, top: str, rel: str) -> None:
    here = os.path.join(top, rel) if rel else top
    for name in sorted(os.listdir(here)):
        r = f"{rel}/{name}" if rel else name
        p = os.path.join(top, r)
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        ti = tarfile.TarInfo(r)
        ti.mode = stat.S_IMODE(st.st_mode)
        ti.mtime = int(st.st_mtime)
        if stat.S_ISDIR(st.st_mode):
            ti.type = tarfile.DIRTYPE
            tf.addfile(ti)
            _pack_dir(tf, top, r)
        elif stat.S_ISLNK(st.st_mode):
            ti.type, ti.linkname = tarfile.SYMTYPE, os.readlink(p)
            tf.addfile(ti)
        elif stat.S_ISREG(st.st_mode):
            fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
            with os.fdopen(fd, "rb") as f:
                ti.size = os.fstat(fd).st_size
                tf.addfile(ti, f)
