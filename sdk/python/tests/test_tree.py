"""Directory trees: upload_dir and download_dir through a real sandbox, and the
download's unpacking refusing hostile archives (these need no daemon)."""

import io
import os
import stat
import tarfile
from typing import Dict, List, Optional, Tuple

import pytest

import airlock
from airlock import _tree


def _tree_of(top: str) -> Dict[str, str]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            rel = os.path.relpath(p, top)
            st = os.lstat(p)
            desc = stat.filemode(st.st_mode)
            if stat.S_ISLNK(st.st_mode):
                desc += " -> " + os.readlink(p)
            elif stat.S_ISREG(st.st_mode):
                with open(p, "rb") as f:
                    desc += " " + f.read().decode()
            out[rel] = desc
    return out


def _make_tree(top: str) -> None:
    files = {"a b/with space.txt": (b"space", 0o644), "new\nline": (b"nl", 0o600), "ünï/cödé ☃": (b"uni", 0o755),
             "-leading-dash": (b"dash", 0o640)}
    for name, (body, mode) in files.items():
        p = os.path.join(top, name)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        with open(p, "wb") as f:
            f.write(body)
        os.chmod(p, mode)
    os.makedirs(os.path.join(top, "empty"))
    os.chmod(os.path.join(top, "empty"), 0o711)
    os.symlink("a b/with space.txt", os.path.join(top, "in"))
    os.symlink("/etc/passwd", os.path.join(top, "out"))


def test_dir_round_trip(sandbox: airlock.Sandbox, tmp_path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    _make_tree(str(src))
    up = sandbox.files.upload_dir(str(src), "/root/tree")
    assert (up.files, up.dirs, up.links, up.bytes) == (4, 3, 2, len(b"spacenlunidash"))
    assert sandbox.exec(["readlink", "/root/tree/out"]).stdout == "/etc/passwd\n"
    back = tmp_path / "back"
    down = sandbox.files.download_dir("/root/tree", str(back))
    assert (down.files, down.dirs, down.links, down.bytes) == (up.files, up.dirs, up.links, up.bytes)
    assert _tree_of(str(back)) == _tree_of(str(src))


def _craft(entries: List[Tuple[str, bytes, Optional[str], int]], pad: bool = True) -> io.BytesIO:
    """A tar stream of (name, type, link target, size) entries with no data checks."""
    buf = io.BytesIO()
    for name, typ, link, size in entries:
        ti = tarfile.TarInfo(name)
        ti.type, ti.size, ti.mode = typ, size, 0o644
        if link is not None:
            ti.linkname = link
        buf.write(ti.tobuf(format=tarfile.PAX_FORMAT))
        if typ == tarfile.REGTYPE and size < 1 << 20:
            buf.write(b"x" * size + b"\0" * (-size % 512))
    if pad:
        buf.write(b"\0" * 1024)
    buf.seek(0)
    return buf


HOSTILE = [
    ("dotdot", [("../x", tarfile.REGTYPE, None, 1)], '".." element'),
    ("absolute", [("/etc/x", tarfile.REGTYPE, None, 1)], "absolute name"),
    ("symlink then file through it", [("l", tarfile.SYMTYPE, "../outside", 0), ("l/x", tarfile.REGTYPE, None, 1)], "symbolic link 'l'"),
    ("symlink inside then file through it", [("d", tarfile.DIRTYPE, None, 0), ("l", tarfile.SYMTYPE, "d", 0),
                                             ("l/x", tarfile.REGTYPE, None, 1)], "symbolic link 'l'"),
    ("hardlink out", [("h", tarfile.LNKTYPE, "../outside/secret", 0)], "hard link"),
    ("hardlink absolute", [("h", tarfile.LNKTYPE, "/etc/passwd", 0)], "hard link"),
    ("char device", [("null", tarfile.CHRTYPE, None, 0)], "device node"),
    ("block device", [("sda", tarfile.BLKTYPE, None, 0)], "device node"),
    ("fifo", [("p", tarfile.FIFOTYPE, None, 0)], "FIFO"),
    ("huge declared size", [("big", tarfile.REGTYPE, None, 1 << 40)], "limit of"),
    ("deep", [("a/" * 300 + "f", tarfile.REGTYPE, None, 1)], "elements deep"),
]


@pytest.mark.parametrize("entries,reason", [(e, r) for _, e, r in HOSTILE], ids=[n for n, _, _ in HOSTILE])
def test_hostile_archive_refused(tmp_path, entries, reason) -> None:
    outside, dst = tmp_path / "outside", tmp_path / "dst"
    outside.mkdir()
    dst.mkdir()
    (outside / "secret").write_text("secret")
    with pytest.raises(airlock.ArchiveRefused) as ei:
        _tree.extract(_craft(entries), str(dst))
    assert reason in str(ei.value)
    assert sorted(os.listdir(tmp_path)) == ["dst", "outside"]
    assert os.listdir(outside) == ["secret"] and (outside / "secret").read_text() == "secret"
    assert not (dst / "big").exists()


def test_entry_limit(tmp_path) -> None:
    """A stream of a million entries is refused at the limit, having read no more."""

    class Million(io.RawIOBase):
        def __init__(self) -> None:
            self.n = 0
            self.buf = b""

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[override]
            while len(self.buf) < len(b) and self.n < 1_000_000:
                ti = tarfile.TarInfo(f"f{self.n % 26}")
                self.buf += ti.tobuf(format=tarfile.USTAR_FORMAT)
                self.n += 1
            k = min(len(b), len(self.buf))
            b[:k], self.buf = self.buf[:k], self.buf[k:]
            return k

    src = Million()
    with pytest.raises(airlock.ArchiveRefused) as ei:
        _tree.extract(io.BufferedReader(src), str(tmp_path), max_entries=1000)
    assert ei.value.limit and "more than 1000 entries" in str(ei.value)
    assert src.n < 2000


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME])
def test_huge_header_refused(tmp_path, kind) -> None:
    """A header claiming 64 MiB of records (which tarfile would read into memory whole)
    is refused having read no more than a bound of it."""

    class Zeros(io.RawIOBase):
        def __init__(self) -> None:
            ti = tarfile.TarInfo("././@LongLink")
            ti.type, ti.size = kind, 64 << 20
            self.head, self.read_bytes = ti.tobuf(format=tarfile.USTAR_FORMAT), 0

        def readable(self) -> bool:
            return True

        def readinto(self, b) -> int:  # type: ignore[override]
            chunk = self.head[:len(b)] or bytes(len(b))
            self.head = self.head[len(chunk):]
            b[:len(chunk)] = chunk
            self.read_bytes += len(chunk)
            return len(chunk)

    src = Zeros()
    with pytest.raises(airlock.ArchiveRefused) as ei:
        _tree.extract(io.BufferedReader(src), str(tmp_path))
    assert ei.value.limit and "at most 1048576 are read" in str(ei.value)
    assert src.read_bytes < 2 << 20
    assert os.listdir(tmp_path) == []


def test_sparse_map_refused(tmp_path) -> None:
    """A GNU sparse 1.0 file whose map claims more numbers than there is memory (which
    tarfile would read from the entry's data whatever their count) is refused before
    its map is read."""
    ti = tarfile.TarInfo("f")
    ti.size = 8 << 20
    ti.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "f",
                      "GNU.sparse.realsize": "1"}
    head = ti.tobuf(format=tarfile.PAX_FORMAT) + b"%d\n" % (1 << 40)
    src = io.BytesIO(head + b"0\n" * ((8 << 20) // 2))
    with pytest.raises(airlock.ArchiveRefused) as ei:
        _tree.extract(src, str(tmp_path))
    assert "GNU sparse" in str(ei.value)
    assert src.tell() < 1 << 20
    assert os.listdir(tmp_path) == []


def test_setuid_dropped_and_link_replaced(tmp_path) -> None:
    target = tmp_path / "target"
    target.write_text("keep")
    dst = tmp_path / "dst"
    dst.mkdir()
    os.symlink(str(target), str(dst / "f"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, mode in (("f", 0o644), ("suid", 0o6755)):
            ti = tarfile.TarInfo(name)
            ti.size, ti.mode = 3, mode
            tf.addfile(ti, io.BytesIO(b"new"))
    buf.seek(0)
    _tree.extract(buf, str(dst))
    assert target.read_text() == "keep", "the link was written through"
    assert (dst / "f").read_text() == "new" and not os.path.islink(dst / "f")
    assert stat.S_IMODE(os.stat(dst / "suid").st_mode) == 0o755


def test_async_dir_round_trip(new_name, tmp_path) -> None:
    import asyncio

    from airlock.aio import AsyncClient, AsyncSandbox

    src = tmp_path / "src"
    src.mkdir()
    _make_tree(str(src))

    async def main() -> None:
        async with AsyncClient() as client:
            async with await AsyncSandbox.create(new_name("aiotree"), network="none", client=client) as sb:
                up = await sb.files.upload_dir(str(src), "/root/tree")
                assert (up.files, up.links) == (4, 2)
                down = await sb.files.download_dir("/root/tree", str(tmp_path / "back"))
                assert (down.files, down.dirs, down.links, down.bytes) == (up.files, up.dirs, up.links, up.bytes)

    asyncio.run(main())
    assert _tree_of(str(tmp_path / "back")) == _tree_of(str(src))
