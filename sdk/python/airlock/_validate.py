"""Argument checks made before anything is sent.

Each function returns the value in its wire form or raises :class:`InvalidArgument`
(a :class:`ValueError`) saying what is allowed. The daemon checks everything again;
these checks only make the common mistakes fail early, with a clear message.

Rules the daemon owns are not copied here: what a name, a label, an environment
variable or a path may be, and the ranges of limits and durations, are left to the
daemon, whose ``invalid_argument`` (saying what was wrong and what is allowed) comes
back as :class:`InvalidArgument`. Here a value is only checked to have the Python type
its wire form needs. A size string is read here, because the API takes bytes; it
follows the daemon's reader (internal/units), and both are tested against one table of
cases, internal/units/testdata/sizes.json.
"""

import math
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from .errors import InvalidArgument
from .types import NETWORK_MODES, SESSION_KINDS, NetworkPolicy

_SIZE_NUM = re.compile(r"[0-9.]*")
_SIZE_UNIT = {
    "": 1, "b": 1,
    "k": 1 << 10, "kb": 1 << 10, "ki": 1 << 10, "kib": 1 << 10,
    "m": 1 << 20, "mb": 1 << 20, "mi": 1 << 20, "mib": 1 << 20,
    "g": 1 << 30, "gb": 1 << 30, "gi": 1 << 30, "gib": 1 << 30,
    "t": 1 << 40, "tb": 1 << 40, "ti": 1 << 40, "tib": 1 << 40,
}
#: The largest size the daemon reads (1 EiB), as internal/units.Max.
_SIZE_MAX = 1 << 60
#: The forms of a size, as internal/units.Forms says them.
SIZE_FORMS = ("use bytes (1048576) or a number with a unit: 512M, 1G, 1.5GiB "
              "(K, M, G and T count in 1024s, with or without B or iB, as docker's do: 1G = 1GB = 1GiB)")

def _fail(msg: str) -> InvalidArgument:
    return InvalidArgument(msg, code="invalid_argument")


def name(v: Any, what: str = "sandbox name") -> str:
    """A new sandbox's name; the daemon says what a name may be."""
    if not isinstance(v, str):
        raise _fail(f"invalid {what} {v!r}: give a str")
    return v


def ref(v: Any) -> str:
    """A reference to an existing sandbox: its name or its id (``sb_…``)."""
    if isinstance(v, str) and v:
        return v
    raise _fail(f"invalid sandbox reference {v!r}: give a sandbox name or an id (sb_…) as a str")


def snapshot_id(v: Any) -> str:
    """A snapshot id (``snap_…``: the prefix tells it from a sandbox's name)."""
    if isinstance(v, str) and v.startswith("snap_"):
        return v
    raise _fail(f"invalid snapshot id {v!r}: a snapshot id is a str starting with snap_")


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _go_duration(seconds: float) -> str:
    ms = round(seconds * 1000)
    return f"{ms}ms" if ms % 1000 else f"{ms // 1000}s"


def timeout(v: Any) -> Optional[str]:
    """An exec timeout in seconds (None: the daemon's default), as a Go duration; the
    daemon checks its range."""
    if v is None:
        return None
    if not _number(v) or not math.isfinite(v):
        raise _fail(f"invalid timeout {v!r}: give a number of seconds, or None")
    return _go_duration(float(v))


def duration(v: Any, what: str) -> Optional[str]:
    """A duration given in seconds or as a Go duration string ("10m"); the daemon
    checks its form and range."""
    if v is None:
        return None
    if isinstance(v, str):
        return v
    if _number(v) and math.isfinite(v):
        return _go_duration(float(v))
    raise _fail(f"invalid {what} {v!r}: give seconds, or a duration such as '10m' or '24h'")


def cpu(v: Any) -> Optional[float]:
    """A CPU limit in cores; the daemon checks its range."""
    if v is None:
        return None
    if not _number(v) or not math.isfinite(v):
        raise _fail(f"invalid cpu {v!r}: give a number of cores (e.g. 0.5 or 2)")
    return float(v)


def parse_size(s: str) -> int:
    """The bytes of a size string such as "512M", "1GiB" or "1.5G", read as the daemon
    reads it (internal/units.ParseSize): every unit counts in 1024s."""
    t = s.strip()
    num = _SIZE_NUM.match(t).group(0)  # type: ignore[union-attr]
    unit = t[len(num):].strip().lower()
    mult = _SIZE_UNIT.get(unit)
    if not num or mult is None:
        raise _fail(f"invalid size {s!r}: {SIZE_FORMS}")
    try:
        v = float(int(num)) if mult == 1 else float(num) * mult
    except ValueError:
        raise _fail(f"invalid size {s!r}: {SIZE_FORMS}") from None
    if v > _SIZE_MAX:
        raise _fail(f"invalid size {s!r}: must be at most 1EiB")
    return int(v)


def size(v: Any, what: str) -> Optional[int]:
    """A size in bytes, as an int or a string such as "512MiB" or "2G" (powers of 1024);
    the daemon checks its range."""
    if v is None:
        return None
    if isinstance(v, str):
        try:
            return parse_size(v)
        except InvalidArgument as e:
            raise _fail(f"invalid {what}: {e.message}") from None
    if isinstance(v, int) and not isinstance(v, bool):
        return v
    raise _fail(f"invalid {what} {v!r}: give bytes as an int, or a size such as '512MiB' or '2G'")


def network(v: Any) -> Optional[Dict[str, Any]]:
    """An egress policy: a mode name, a :class:`NetworkPolicy` or an equivalent dict."""
    if v is None:
        return None
    if isinstance(v, str):
        v = NetworkPolicy(mode=v)
    elif isinstance(v, Mapping):
        unknown = set(v) - {"mode", "allow", "allow_private"}
        if unknown:
            raise _fail(f"invalid network policy: unknown keys {sorted(unknown)}; allowed: mode, allow, allow_private")
        v = NetworkPolicy(mode=v.get("mode", ""), allow=list(v.get("allow") or []), allow_private=list(v.get("allow_private") or []))
    if not isinstance(v, NetworkPolicy):
        raise _fail(f"invalid network {v!r}: give a mode ({', '.join(NETWORK_MODES)}) or a NetworkPolicy")
    if v.mode not in NETWORK_MODES and not (v.mode == "" and v.allow):
        raise _fail(f"unknown network mode {v.mode!r}: one of {', '.join(NETWORK_MODES)}")
    for r in list(v.allow) + list(v.allow_private):
        if not isinstance(r, str) or not r or any(c.isspace() for c in r):
            raise _fail(f"invalid network rule {r!r}: a rule is HOST[:PORT][/METHODS] without spaces")
    return v.to_json()


def _str_map(v: Any, what: str) -> Optional[Dict[str, str]]:
    if v is None:
        return None
    if not isinstance(v, Mapping) or not all(isinstance(k, str) and isinstance(x, str) for k, x in v.items()):
        raise _fail(f"invalid {what} {v!r}: give a dict of str to str")
    return dict(v)


def env(v: Any) -> Optional[Dict[str, str]]:
    """Environment variables; the daemon says what a name and a value may be."""
    return _str_map(v, "env")


def labels(v: Any) -> Optional[Dict[str, str]]:
    """Labels; the daemon says what a key and a value may be."""
    return _str_map(v, "labels")


def node_selector(v: Any) -> Optional[Dict[str, str]]:
    """Labels a sandbox's node must carry; the daemon says what a key and value may be."""
    return _str_map(v, "node_selector")


def command(v: Any) -> Dict[str, Any]:
    """A command: a str runs with ``/bin/sh -c``; a list of str is the argv itself."""
    if isinstance(v, str):
        if not v.strip():
            raise _fail("empty command: give a shell command (str) or an argv (list of str)")
        if "\x00" in v:
            raise _fail("invalid command: it contains a NUL byte")
        return {"shell": v}
    if isinstance(v, Sequence) and not isinstance(v, (bytes, bytearray)):
        argv: List[str] = list(v)
        if not argv:
            raise _fail("empty argv: give at least the program to run")
        for a in argv:
            if not isinstance(a, str) or "\x00" in a:
                raise _fail(f"invalid argv element {a!r}: each is a str without NUL bytes")
        if not argv[0]:
            raise _fail("invalid argv: the program (argv[0]) is empty")
        return {"argv": argv}
    raise _fail(f"invalid command {v!r}: give a shell command (str) or an argv (list of str)")


def path(v: Any) -> str:
    """A path inside the sandbox; the daemon says what a path may be (absolute)."""
    if not isinstance(v, str):
        raise _fail(f"invalid path {v!r}: give a str, an absolute path inside the sandbox such as '/home/user/data.txt'")
    return v


def session_kind(v: Any, argv: Any) -> Optional[List[str]]:
    """A session's kind and argv (required for ``raw``)."""
    if v not in SESSION_KINDS:
        raise _fail(f"unknown session kind {v!r}: one of {', '.join(SESSION_KINDS)}")
    if argv is None:
        if v == "raw":
            raise _fail("a raw session needs argv: the program to run and its arguments")
        return None
    out: List[str] = command(list(argv) if not isinstance(argv, str) else [argv])["argv"]
    return out


def uid(v: Any, what: str) -> Optional[int]:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > 0xFFFFFFFF:
        raise _fail(f"invalid {what} {v!r}: a non-negative int")
    return v


def byte_range(offset: Any, length: Any) -> Optional[Tuple[int, Optional[int]]]:
    """A part of a file: offset (a non-negative int) and length (None: to the end, else a
    positive int); None for the whole file."""
    if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
        raise _fail(f"invalid offset {offset!r}: a non-negative int")
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length <= 0):
        raise _fail(f"invalid length {length!r}: a positive int, or None for the rest of the file")
    if offset == 0 and length is None:
        return None
    return offset, length


def text_or_bytes(v: Any, what: str) -> bytes:
    if isinstance(v, str):
        return v.encode()
    if isinstance(v, (bytes, bytearray, memoryview)):
        return bytes(v)
    raise _fail(f"invalid {what}: give bytes or str, not {type(v).__name__}")


def file_mode(v: Any) -> Optional[int]:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0 or v > 0o7777:
        raise _fail(f"invalid mode {v!r}: Unix permission bits from 0 to 0o7777, e.g. 0o644")
    return v


def image(v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, str) or not v or any(c.isspace() for c in v):
        raise _fail(f"invalid image {v!r}: give an image name such as 'host' or 'python:3.12-slim'")
    return v


def idempotency_key(v: Any) -> Optional[str]:
    if v is None:
        return None
    if not isinstance(v, str) or not v or len(v) > 255 or any(ord(c) < 0x21 or ord(c) > 0x7E for c in v):
        raise _fail(f"invalid idempotency key {v!r}: 1 to 255 printable ASCII characters without spaces")
    return v


def session_id(v: Any) -> str:
    if not isinstance(v, str) or not v:
        raise _fail(f"invalid session id {v!r}: give the id a session was started with")
    return v
