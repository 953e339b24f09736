"""The wire side of the SDK, shared by the blocking and the asyncio clients.

It owns where the daemon is (:class:`Target`), how a call becomes an HTTP request
(:class:`Request`), how an error answer becomes an exception, and how an NDJSON exec
stream becomes lines (:class:`LineSplitter`) and then chunks and a result
(:class:`EventReader`). It does no I/O.
"""

import base64
import json
import os
import ssl
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Generic, List, Optional, Tuple, TypeVar, Union
from urllib.parse import quote, urlencode, urlsplit

from .errors import (AirlockError, FailedPrecondition, Internal, InvalidArgument, StreamBroken, Unavailable, code_for_status,
                     error_from_code, status_for_code)
from .types import Chunk, ExecResult

#: Where the daemon listens when neither an argument nor the environment says otherwise.
DEFAULT_SOCKET = "/run/airlock/airlock.sock"

#: Seconds to wait for a connection to the daemon.
CONNECT_TIMEOUT = 10.0

#: Idle connections kept per client.
MAX_IDLE = 8

#: How much of an error answer is read.
MAX_ERROR_BODY = 64 << 10

#: The longest NDJSON line accepted in a stream (a line is at most 64 KiB of output,
#: which JSON escaping can grow).
MAX_EVENT_LINE = 1 << 20

USER_AGENT = "airlock-python/0.1"


@dataclass(frozen=True)
class Target:
    """The daemon a client reaches: a unix socket path, or a TCP host and port."""

    network: str  # "unix" or "tcp"
    address: str  # socket path or "host:port"
    host: str = ""
    port: int = 0
    token: str = field(default="", repr=False)
    #: For an https:// URL: the TLS context its connections use; None is plain HTTP.
    tls: Optional[ssl.SSLContext] = field(default=None, repr=False)

    @property
    def host_header(self) -> str:
        return "airlock" if self.network == "unix" else self.address


def _parse_url(url: str) -> Tuple[str, int, bool]:
    """The host, port and whether it is HTTPS, of a daemon's URL."""
    raw = url if "://" in url else "http://" + url
    want = "give http://HOST:PORT, https://HOST:PORT (a daemon with tls_cert) or HOST:PORT"
    try:
        u = urlsplit(raw)
        port = u.port
    except ValueError:
        raise InvalidArgument(f"invalid url {url!r}: {want}") from None
    if u.scheme not in ("http", "https") or not u.hostname or u.path not in ("", "/") or u.query:
        raise InvalidArgument(f"invalid url {url!r}: {want}")
    https = u.scheme == "https"
    return u.hostname, port or (443 if https else 80), https


def _tls_context(ca_file: Optional[str]) -> ssl.SSLContext:
    """A context trusting the certificates in ``ca_file`` (else ``$AIRLOCK_CA_FILE``,
    else the system's)."""
    path = ca_file or os.environ.get("AIRLOCK_CA_FILE") or None
    try:
        ctx = ssl.create_default_context(cafile=path)
    except (OSError, ssl.SSLError) as e:
        raise InvalidArgument(f"invalid ca_file {path!r}: {e}") from None
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx


def resolve_target(socket: Optional[str] = None, url: Optional[str] = None, token: Optional[str] = None,
                   ca_file: Optional[str] = None) -> Target:
    """Say which daemon to reach, like the Go SDK (client.New) and the CLI.

    In order: ``url``, then ``socket``; then ``$AIRLOCK_URL``, then ``$AIRLOCK_SOCKET``;
    then, inside an Airlock sandbox, ``$AIRLOCK_API`` with the session credential read
    from ``$AIRLOCK_SESSION_TOKEN_FILE``; then :data:`DEFAULT_SOCKET`. The token is
    ``token``, else ``$AIRLOCK_TOKEN`` (else, inside a sandbox, the session credential).
    An ``https://`` URL trusts the certificates in ``ca_file``, else
    ``$AIRLOCK_CA_FILE``, else the system's.
    """
    for what, v in (("socket", socket), ("url", url), ("token", token), ("ca_file", ca_file)):
        if v is not None and not isinstance(v, str):
            raise InvalidArgument(f"invalid {what} {v!r}: give a str")
    env = os.environ
    tok = token if token else env.get("AIRLOCK_TOKEN", "")
    if not url and not socket:
        if env.get("AIRLOCK_URL"):
            url = env["AIRLOCK_URL"]
        elif env.get("AIRLOCK_SOCKET"):
            socket = env["AIRLOCK_SOCKET"]
        elif env.get("AIRLOCK_API"):
            api = env["AIRLOCK_API"]
            try:
                parsed = urlsplit(api)
                ok = parsed.scheme == "http" and bool(parsed.hostname)
            except ValueError:
                ok = False
            if ok:
                url = api
                if not tok and env.get("AIRLOCK_SESSION_TOKEN_FILE"):
                    try:
                        with open(env["AIRLOCK_SESSION_TOKEN_FILE"], encoding="utf-8") as f:
                            tok = f.read().strip()
                    except OSError:
                        pass
    if url:
        host, port, https = _parse_url(url)
        addr = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        return Target("tcp", addr, host, port, tok, _tls_context(ca_file) if https else None)
    sock = socket or DEFAULT_SOCKET
    if "\x00" in sock:
        raise InvalidArgument(f"invalid socket path {sock!r}")
    return Target("unix", sock, token=tok)


T = TypeVar("T")


def no_result(_: Any) -> None:
    """The parser of an answer that carries nothing the caller needs."""
    return None


@dataclass
class Request(Generic[T]):
    """One HTTP call, before it is sent.

    ``json`` is encoded as the body when set; ``body`` is sent raw otherwise.
    ``stream`` marks an NDJSON exec stream; ``parse`` turns the decoded JSON answer
    into the result, or with ``raw`` the answer's bytes (a file download).
    """

    method: str
    path: str
    query: Optional[List[Tuple[str, str]]] = None
    json: Any = None
    body: Optional[bytes] = None
    idempotency_key: Optional[str] = None
    if_match: Optional[int] = None
    parse: Callable[[Any], T] = no_result  # type: ignore[assignment]
    stream: bool = False
    raw: bool = False
    # byte_range asks for a part of a file: (offset, length or None for the rest).
    byte_range: Optional[Tuple[int, Optional[int]]] = None
    # stream_body is a body sent from a file: (the file, its length, its content type).
    stream_body: Optional[Tuple[Any, int, str]] = None

    @property
    def retry_safe(self) -> bool:
        """Whether sending the request twice cannot do the work twice."""
        return self.method in ("GET", "HEAD", "DELETE", "PUT") or self.idempotency_key is not None

    def url(self) -> str:
        u = self.path
        if self.query:
            u += "?" + urlencode(self.query, quote_via=quote)
        return u

    def encode(self, target: Target) -> Tuple[bytes, Dict[str, str]]:
        """The body and headers to send to target."""
        headers = {"Host": target.host_header, "User-Agent": USER_AGENT, "Accept": "application/json"}
        body = b""
        if self.json is not None:
            body = json.dumps(self.json, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        elif self.body is not None:
            body = self.body
            headers["Content-Type"] = "application/octet-stream"
        if self.stream_body is not None:
            f, size, ctype = self.stream_body
            f.seek(0)
            headers["Content-Type"] = ctype
            headers["Content-Length"] = str(size)
            body = f
        elif body or self.method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        if target.token:
            headers["Authorization"] = "Bearer " + target.token
        if self.idempotency_key:
            headers["Idempotency-Key"] = self.idempotency_key
        if self.if_match is not None:
            headers["If-Match"] = f'"{self.if_match}"'
        if self.byte_range is not None:
            off, n = self.byte_range
            headers["Range"] = f"bytes={off}-" if n is None else f"bytes={off}-{off + n - 1}"
        return body, headers


def file_part(req: "Request[Any]", status: int, body: bytes) -> bytes:
    """The part of a file req asked for, from a 2xx answer: a 206 is the part itself; a
    200 (a daemon without ranges, or a symbolic link) is the whole file, cut here."""
    if req.byte_range is None or status == 206:
        return body
    off, n = req.byte_range
    return body[off:] if n is None else body[off:off + n]


def sandbox_path(ref: str, *rest: str) -> str:
    """``/v1/sandboxes/{ref}`` followed by the escaped elements of rest."""
    p = "/v1/sandboxes/" + quote(ref, safe="")
    for r in rest:
        p += "/" + quote(r, safe="")
    return p


def decode_error(status: int, body: bytes) -> AirlockError:
    """The exception for a non-2xx answer; a body that is not the API's error shape
    (from a proxy, say) still gives one, with a code derived from the status."""
    try:
        doc = json.loads(body.decode("utf-8"))
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict) and err.get("code"):
            return error_from_code(str(err["code"]), str(err.get("message", "")), status=status, details=err.get("details"))
    except (ValueError, UnicodeDecodeError):
        pass
    msg = body.decode("utf-8", "replace").strip() or f"HTTP {status}"
    return error_from_code(code_for_status(status), msg, status=status)


def decode_answer(req: "Request[T]", body: bytes) -> T:
    """The result of a 2xx answer."""
    if req.raw:
        return req.parse(body)
    if req.parse is no_result:
        return req.parse(None)
    try:
        doc = json.loads(body.decode("utf-8")) if body else {}
    except (ValueError, UnicodeDecodeError) as e:
        raise Internal(f"decode {req.method} {req.path} answer: {e}") from None
    return req.parse(doc)


class LineSplitter:
    """Cuts the bytes of a streamed answer, as they arrive, into NDJSON lines.

    The transport feeds it what it reads and takes the complete lines with :meth:`pop`;
    at the end of the answer, :meth:`rest` is a last line without its newline.
    """

    def __init__(self) -> None:
        self._buf = b""
        self._pos = 0  # where the next line starts in _buf

    def feed(self, data: bytes) -> None:
        """Add bytes read from the answer."""
        self._buf = self._buf[self._pos :] + data
        self._pos = 0

    def pop(self) -> Optional[bytes]:
        """The next complete line (with its newline), or None until more is fed.
        Raises :class:`Internal` once the line being gathered exceeds
        :data:`MAX_EVENT_LINE`."""
        i = self._buf.find(b"\n", self._pos)
        if i >= 0:
            line = self._buf[self._pos : i + 1]
            self._pos = i + 1
            return line
        if len(self._buf) - self._pos > MAX_EVENT_LINE:
            raise Internal(f"read stream: a line longer than {MAX_EVENT_LINE} bytes")
        return None

    def rest(self) -> bytes:
        """What is left once the answer has ended: a last line without its newline, or b""."""
        line = self._buf[self._pos :]
        self._buf, self._pos = b"", 0
        return line


Event = Union[Chunk, ExecResult]


class EventReader:
    """Turns the lines of an NDJSON exec or send stream into chunks and the result.

    Unknown event types are skipped, so newer daemons can add some; an ``error``
    event raises its exception.
    """

    def feed(self, line: bytes) -> Optional[Event]:
        """The chunk or result a line carries, or None for a line to skip."""
        line = line.strip()
        if not line:
            return None
        try:
            ev = json.loads(line.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as e:
            raise Internal(f"read stream: bad event line: {e}") from None
        if not isinstance(ev, dict):
            raise Internal(f"read stream: an event line that is not an object: {line[:60]!r}")
        typ = ev.get("type")
        if typ in ("stdout", "stderr"):
            if ev.get("bytes"):
                data = base64.b64decode(ev["bytes"])
            else:
                data = (ev.get("data") or "").encode("utf-8")
            return Chunk(stream=typ, data=data)
        if typ == "exit":
            if not isinstance(ev.get("result"), dict):
                raise Internal("exit event without a result")
            return ExecResult.from_json(ev["result"])
        if typ == "error":
            err = ev.get("error")
            if not isinstance(err, dict):
                err = {"code": "internal", "message": "stream error without details"}
            code = str(err.get("code", "internal"))
            raise error_from_code(code, str(err.get("message", "")), status=status_for_code(code), details=err.get("details"))
        return None

    @staticmethod
    def broken(target: Target) -> StreamBroken:
        return StreamBroken(f"airlock at {target.address}: stream ended without a result; how the command ended is unknown")


def unavailable(target: Target, err: BaseException) -> AirlockError:
    """The error for failing to reach target: the retryable Unavailable, or
    FailedPrecondition when the daemon answered with a certificate not trusted."""
    what = "socket" if target.network == "unix" else "address"
    reason = str(err) or type(err).__name__
    if isinstance(err, FileNotFoundError):
        reason = "no such socket (is the daemon running?)"
    elif isinstance(err, ConnectionRefusedError):
        reason = "connection refused (is the daemon running?)"
    elif isinstance(err, PermissionError):
        reason = "permission denied (are you in the airlock group, or root?)"
    elif isinstance(err, ssl.SSLCertVerificationError):
        # Not worth a retry: the daemon is there, and its certificate is not trusted.
        return FailedPrecondition(f"airlock daemon at {target.address}: its certificate is not trusted "
                                  f"(give its CA as ca_file= or in $AIRLOCK_CA_FILE): {reason}")
    return Unavailable(f"airlock daemon unreachable at {what} {target.address}: {reason}")
