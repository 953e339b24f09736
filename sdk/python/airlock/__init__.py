"""Airlock's Python SDK: durable, named, isolated sandboxes for untrusted code.

Standard library only. It talks to the Airlock daemon's HTTP API over its unix socket
(``$AIRLOCK_SOCKET``, default ``/run/airlock/airlock.sock``) or over TCP with a bearer
token (``$AIRLOCK_URL``, ``$AIRLOCK_TOKEN``)::

    from airlock import Sandbox

    with Sandbox.create("demo") as sb:          # terminated when the block ends
        res = sb.exec("python3 -c 'print(6 * 7)'", timeout=30)
        print(res.exit_code, res.stdout)

Errors are subclasses of :class:`AirlockError` named for the API's codes
(:class:`NotFound`, :class:`AlreadyExists`, ...); a daemon that cannot be reached is
:class:`Unavailable` (``retryable``). :mod:`airlock.aio` is the asyncio flavour.
"""

from .client import Client, ExecStream, default_client
from .errors import (
    AirlockError,
    AlreadyExists,
    FailedPrecondition,
    IdempotencyConflict,
    Internal,
    InvalidArgument,
    NotFound,
    PermissionDenied,
    QuotaExceeded,
    StreamBroken,
    Unauthenticated,
    Unavailable,
    VersionConflict,
)
from ._tree import ArchiveRefused, TreeSummary
from .sandbox import Files, Sandbox, Session
from .types import (
    EXEC_STATES,
    NETWORK_MODES,
    SESSION_KINDS,
    Chunk,
    ExecResult,
    FileInfo,
    Limits,
    NetworkPolicy,
    Operation,
    SandboxInfo,
    SessionInfo,
    Snapshot,
)

__version__ = "0.1.0"

__all__ = [
    "Client",
    "ExecStream",
    "default_client",
    "Sandbox",
    "Files",
    "Session",
    "AirlockError",
    "ArchiveRefused",
    "TreeSummary",
    "AlreadyExists",
    "FailedPrecondition",
    "IdempotencyConflict",
    "Internal",
    "InvalidArgument",
    "NotFound",
    "PermissionDenied",
    "QuotaExceeded",
    "StreamBroken",
    "Unauthenticated",
    "Unavailable",
    "VersionConflict",
    "Chunk",
    "ExecResult",
    "FileInfo",
    "Limits",
    "NetworkPolicy",
    "Operation",
    "SandboxInfo",
    "SessionInfo",
    "Snapshot",
    "EXEC_STATES",
    "NETWORK_MODES",
    "SESSION_KINDS",
]
