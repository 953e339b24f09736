"""The values the Airlock API answers with, as plain dataclasses.

They mirror the JSON types of ``api/types.go``; ``from_json`` builds each from a decoded
answer and ignores fields it does not know, so newer daemons can add some.
"""

import base64
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

__all__ = [
    "SandboxInfo",
    "NetworkPolicy",
    "Limits",
    "ExecResult",
    "Chunk",
    "FileInfo",
    "SessionInfo",
    "Snapshot",
    "Operation",
    "NETWORK_MODES",
    "EXEC_STATES",
    "SESSION_KINDS",
]

#: The egress modes a sandbox's network policy may have.
NETWORK_MODES = ("none", "deny_all", "baseline", "allowlist", "unrestricted")
#: How an exec (or a session's reply) can end.
EXEC_STATES = ("succeeded", "failed", "timeout", "cancelled", "oom_killed", "killed")
#: The kinds of session: a Python REPL, a shell, or any program (with argv).
SESSION_KINDS = ("python", "shell", "raw")


def _b64(v: Any) -> bytes:
    return base64.b64decode(v) if v else b""


@dataclass(frozen=True)
class Limits:
    """A sandbox's limits: cpu in cores, memory and disk in bytes."""

    cpu: float = 0.0
    memory: int = 0
    pids: int = 0
    open_files: int = 0
    disk: int = 0

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Limits":
        return cls(
            cpu=float(d.get("cpu", 0)),
            memory=int(d.get("memory", 0)),
            pids=int(d.get("pids", 0)),
            open_files=int(d.get("open_files", 0)),
            disk=int(d.get("disk", 0)),
        )


@dataclass(frozen=True)
class NetworkPolicy:
    """An egress policy: a mode (one of :data:`NETWORK_MODES`), allow rules
    ``HOST[:PORT][/METHODS]`` and private prefixes authorised explicitly."""

    mode: str
    allow: List[str] = field(default_factory=list)
    allow_private: List[str] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "NetworkPolicy":
        return cls(mode=d.get("mode", ""), allow=list(d.get("allow") or []), allow_private=list(d.get("allow_private") or []))

    def to_json(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {"mode": self.mode}
        if self.allow:
            out["allow"] = list(self.allow)
        if self.allow_private:
            out["allow_private"] = list(self.allow_private)
        return out


@dataclass(frozen=True)
class SandboxInfo:
    """A sandbox as the daemon showed it at one moment."""

    id: str
    name: str
    state: str
    image: str
    image_digest: str
    generation: int
    version: int
    limits: Limits
    network: NetworkPolicy
    created_at: str = ""
    last_activity: str = ""
    expires_at: str = ""
    idle_suspend: str = ""
    ttl: str = ""
    runtime: str = ""
    role: str = ""
    env: Dict[str, str] = field(default_factory=dict)
    labels: Dict[str, str] = field(default_factory=dict)
    suspended_at: Optional[str] = None
    # When the sandbox was marked lost (state "lost"): its node's lease lapsed; resume
    # it (on another node) or terminate it.
    lost_at: Optional[str] = None
    # When its files were last put in the cluster's object store.
    files_at: Optional[str] = None
    node: str = ""
    failure: str = ""
    parent: str = ""
    forked_from: str = ""
    owner: str = ""
    # The volumes attached: [{"name", "path", "read_only"}, …].
    volumes: List[Dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SandboxInfo":
        return cls(
            id=d.get("id", ""),
            name=d.get("name", ""),
            state=d.get("state", ""),
            image=d.get("image", ""),
            image_digest=d.get("image_digest", ""),
            generation=int(d.get("generation", 0)),
            version=int(d.get("version", 0)),
            limits=Limits.from_json(d.get("limits") or {}),
            network=NetworkPolicy.from_json(d.get("network") or {}),
            created_at=d.get("created_at", ""),
            last_activity=d.get("last_activity", ""),
            expires_at=d.get("expires_at", ""),
            idle_suspend=d.get("idle_suspend", ""),
            ttl=d.get("ttl", ""),
            volumes=list(d.get("volumes") or []),
            runtime=d.get("runtime", ""),
            role=d.get("role", ""),
            env=dict(d.get("env") or {}),
            labels=dict(d.get("labels") or {}),
            suspended_at=d.get("suspended_at"),
            lost_at=d.get("lost_at"),
            files_at=d.get("files_at"),
            node=d.get("node", ""),
            failure=d.get("failure", ""),
            parent=d.get("parent", ""),
            forked_from=d.get("forked_from", ""),
            owner=d.get("owner", ""),
        )


@dataclass(frozen=True)
class ExecResult:
    """How a command (or a session's reply) ended.

    ``state`` is one of :data:`EXEC_STATES`; a timeout or an OOM kill is a state, not an
    exception. ``stdout`` and ``stderr`` are text (invalid UTF-8 replaced);
    ``stdout_bytes`` and ``stderr_bytes`` are the exact bytes. ``duration`` is in seconds.
    """

    state: str
    exit_code: int
    duration: float
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: bytes = b""
    stderr_bytes: bytes = b""
    signal: str = ""
    truncated: bool = False
    stdout_dropped: int = 0
    stderr_dropped: int = 0
    error: str = ""

    @property
    def ok(self) -> bool:
        """Whether the command succeeded (state ``succeeded``, exit code 0)."""
        return self.state == "succeeded" and self.exit_code == 0

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "ExecResult":
        out = d.get("stdout_bytes")
        err = d.get("stderr_bytes")
        ob = _b64(out) if out else (d.get("stdout") or "").encode()
        eb = _b64(err) if err else (d.get("stderr") or "").encode()
        return cls(
            state=d.get("state", ""),
            exit_code=int(d.get("exit_code", 0)),
            duration=int(d.get("duration_ms", 0)) / 1000.0,
            stdout=ob.decode("utf-8", "replace") if out else (d.get("stdout") or ""),
            stderr=eb.decode("utf-8", "replace") if err else (d.get("stderr") or ""),
            stdout_bytes=ob,
            stderr_bytes=eb,
            signal=d.get("signal", ""),
            truncated=bool(d.get("truncated", False)),
            stdout_dropped=int(d.get("stdout_dropped", 0)),
            stderr_dropped=int(d.get("stderr_dropped", 0)),
            error=d.get("error", ""),
        )

    def with_output(self, stdout: bytes, stderr: bytes) -> "ExecResult":
        """This result with output collected from a stream."""
        return ExecResult(
            state=self.state,
            exit_code=self.exit_code,
            duration=self.duration,
            stdout=stdout.decode("utf-8", "replace"),
            stderr=stderr.decode("utf-8", "replace"),
            stdout_bytes=stdout,
            stderr_bytes=stderr,
            signal=self.signal,
            truncated=self.truncated,
            stdout_dropped=self.stdout_dropped,
            stderr_dropped=self.stderr_dropped,
            error=self.error,
        )


@dataclass(frozen=True)
class Chunk:
    """A piece of streamed output, as the sandbox produced it: ``stream`` is
    ``"stdout"`` or ``"stderr"``; ``data`` the bytes, ``text`` the same as text."""

    stream: str
    data: bytes

    @property
    def text(self) -> str:
        return self.data.decode("utf-8", "replace")


@dataclass(frozen=True)
class FileInfo:
    """A file in a sandbox. ``mode`` holds the Unix permission bits."""

    name: str
    size: int
    mode: int
    is_dir: bool
    path: str = ""
    mtime: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "FileInfo":
        return cls(
            name=d.get("name", ""),
            size=int(d.get("size", 0)),
            mode=int(d.get("mode", 0)),
            is_dir=bool(d.get("is_dir", False)),
            path=d.get("path", ""),
            mtime=d.get("mtime", ""),
        )


@dataclass(frozen=True)
class SessionInfo:
    """A session: its id, kind (one of :data:`SESSION_KINDS`) and pid; for a background
    session, whether its process has exited and with which code."""

    id: str
    kind: str
    pid: int
    background: bool = False
    exited: bool = False
    exit_code: int = 0

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "SessionInfo":
        return cls(
            id=d.get("id", ""),
            kind=d.get("kind", ""),
            pid=int(d.get("pid", 0)),
            background=bool(d.get("background", False)),
            exited=bool(d.get("exited", False)),
            exit_code=int(d.get("exit_code", 0)),
        )


@dataclass(frozen=True)
class Snapshot:
    """An immutable copy of a sandbox's writable layer."""

    id: str
    sandbox_id: str
    image_digest: str
    consistency: str
    state: str
    logical_size: int = 0
    stored_size: int = 0
    files: int = 0
    parent: str = ""
    created: str = ""
    labels: Dict[str, str] = field(default_factory=dict)
    chunks: List[str] = field(default_factory=list)
    #: The memory image of a snapshot taken with memory (runsc): ``{"bytes": …, "files":
    #: [{"name", "size", "sha256"}]}``; None: files only.
    memory: Optional[Dict[str, Any]] = None

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Snapshot":
        return cls(
            id=d.get("id", ""),
            sandbox_id=d.get("sandbox_id", ""),
            image_digest=d.get("image_digest", ""),
            consistency=d.get("consistency", ""),
            state=d.get("state", ""),
            logical_size=int(d.get("logical_size", 0)),
            stored_size=int(d.get("stored_size", 0)),
            files=int(d.get("files", 0)),
            parent=d.get("parent", ""),
            created=d.get("created", ""),
            labels=dict(d.get("labels") or {}),
            chunks=list(d.get("chunks") or []),
            memory=dict(d["memory"]) if isinstance(d.get("memory"), dict) else None,
        )


@dataclass(frozen=True)
class Operation:
    """The durable record of a mutating call (``op_…``)."""

    id: str
    kind: str
    state: str
    sandbox_id: str = ""
    error: Optional[Dict[str, Any]] = None
    created_at: str = ""
    updated_at: str = ""

    @classmethod
    def from_json(cls, d: Dict[str, Any]) -> "Operation":
        return cls(
            id=d.get("id", ""),
            kind=d.get("kind", ""),
            state=d.get("state", ""),
            sandbox_id=d.get("sandbox_id", ""),
            error=d.get("error"),
            created_at=d.get("created_at", ""),
            updated_at=d.get("updated_at", ""),
        )
