"""The blocking transport: HTTP/1.1 with http.client over a unix socket or TCP.

Connections are kept alive and reused from a small pool (a call costs no connect);
one that the daemon closed while idle is noticed before reuse. A failure to reach the
daemon is raised as :class:`Unavailable`, naming the socket or address.
"""

import http.client
import select
import socket
import ssl
import threading
from typing import Any, Iterator, List, Optional, Tuple

from ._protocol import CONNECT_TIMEOUT, MAX_ERROR_BODY, MAX_IDLE, LineSplitter, Request, Target, decode_error, unavailable
from .errors import Internal


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a unix socket path."""

    def __init__(self, path: str, timeout: Optional[float] = None) -> None:
        super().__init__("airlock", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(CONNECT_TIMEOUT)
            s.connect(self.socket_path)
            s.settimeout(self.timeout)
        except BaseException:
            s.close()
            raise
        self.sock = s


class _TCPConnection(http.client.HTTPConnection):
    """An HTTPConnection with a connect timeout apart from the read timeout, and
    Nagle's algorithm off (a request is one small write); over TLS when given a context."""

    def __init__(self, host: str, port: int, timeout: Optional[float] = None,
                 tls: Optional[ssl.SSLContext] = None) -> None:
        super().__init__(host, port, timeout=timeout)
        self._tls = tls

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), CONNECT_TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._tls is not None:
            try:
                sock = self._tls.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
        sock.settimeout(self.timeout)
        self.sock = sock


def _dropped(conn: http.client.HTTPConnection) -> bool:
    """Whether an idle connection was closed by the daemon (readable means EOF)."""
    sock = conn.sock
    if sock is None:
        return True
    try:
        r, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(r)


class Transport:
    """Sends requests to one daemon; safe for use from several threads."""

    def __init__(self, target: Target, timeout: Optional[float] = None) -> None:
        self.target = target
        self.timeout = timeout
        self._idle: List[http.client.HTTPConnection] = []
        self._lock = threading.Lock()

    def _new(self) -> http.client.HTTPConnection:
        if self.target.network == "unix":
            return UnixHTTPConnection(self.target.address, timeout=self.timeout)
        return _TCPConnection(self.target.host, self.target.port, timeout=self.timeout, tls=self.target.tls)

    def _get(self) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            while self._idle:
                conn = self._idle.pop()
                if not _dropped(conn):
                    return conn, True
                conn.close()
        return self._new(), False

    def _put(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < MAX_IDLE:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def _open(self, req: Request[Any]) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Send req and return its connection and response (status and headers read)."""
        body, headers = req.encode(self.target)
        url = req.url()
        for attempt in (0, 1):
            conn, reused = self._get()
            try:
                if req.stream_body is not None:
                    body.seek(0)  # type: ignore[union-attr]
                conn.request(req.method, url, body=body or None, headers=headers)
                return conn, conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                # A kept-alive connection the daemon closed just as it was reused: the
                # request never reached it when the write failed, or it is safe to repeat.
                stale = isinstance(e, (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected))
                if attempt == 0 and reused and stale and (req.retry_safe or isinstance(e, BrokenPipeError)):
                    continue
                if isinstance(e, socket.timeout):
                    raise unavailable(self.target, TimeoutError(f"no answer within {self.timeout} s; the outcome is unknown")) from None
                raise unavailable(self.target, e) from None
            except BaseException:
                conn.close()
                raise
        raise AssertionError("unreachable")

    def _finish(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        if resp.will_close or not resp.isclosed():
            conn.close()
        else:
            self._put(conn)

    def call(self, req: Request[Any]) -> Tuple[int, bytes]:
        """Perform req and return the status and body of a 2xx answer; raise the
        matching AirlockError for any other."""
        conn, resp = self._open(req)
        try:
            if 200 <= resp.status <= 299:
                data = resp.read()
            else:
                data = resp.read(MAX_ERROR_BODY)
                conn.close()
                raise decode_error(resp.status, data)
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise unavailable(self.target, e) from None
        except BaseException:
            conn.close()
            raise
        self._finish(conn, resp)
        return resp.status, data

    def raw(self, req: Request[Any]) -> Tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
        """Perform req and return the connection and response of a 2xx answer, its body
        unread (give both to finish once it is); raise the matching AirlockError for
        any other."""
        conn, resp = self._open(req)
        if not 200 <= resp.status <= 299:
            try:
                data = resp.read(MAX_ERROR_BODY)
            except (OSError, http.client.HTTPException):
                data = b""
            finally:
                conn.close()
            raise decode_error(resp.status, data)
        return conn, resp

    def finish(self, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        """Give back the connection of a raw answer read to its end (or close it)."""
        self._finish(conn, resp)

    def lines(self, req: Request[Any]) -> "LineStream":
        """Perform req and return its answer's lines (an NDJSON stream)."""
        conn, resp = self.raw(req)
        return LineStream(self, conn, resp)


class LineStream:
    """The lines of a streamed answer, read as they arrive. Closing it before the end
    closes the connection, which cancels the command on the daemon."""

    def __init__(self, tr: Transport, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse) -> None:
        self._tr = tr
        self._conn: Optional[http.client.HTTPConnection] = conn
        self._resp = resp
        self._split = LineSplitter()

    def __iter__(self) -> Iterator[bytes]:
        while True:
            try:
                line = self._split.pop()
            except Internal:
                self.close()
                raise
            if line is not None:
                yield line
                continue
            try:
                data = self._resp.read1(65536) if self._conn is not None else b""
            except (OSError, http.client.HTTPException) as e:
                self.close()
                raise unavailable(self._tr.target, e) from None
            if not data:
                last = self._split.rest()
                if last:
                    yield last
                self._done()
                return
            self._split.feed(data)

    def _done(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._tr._finish(conn, self._resp)

    def close(self) -> None:
        """Abandon the stream: close its connection."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


__all__ = ["Transport", "LineStream", "UnixHTTPConnection"]
