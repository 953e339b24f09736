"""The asyncio transport: HTTP/1.1 written and parsed over asyncio streams (a unix
socket or TCP), with kept-alive connections reused from a small pool. No thread is
used; every wait is a coroutine.

Only what the daemon's answers need is parsed: a status line, headers, and a body
framed by Content-Length, chunked transfer coding, or the end of the connection.
"""

import asyncio
import socket
from typing import Any, AsyncIterator, Awaitable, Dict, List, Optional, Tuple, TypeVar

from ._protocol import CONNECT_TIMEOUT, MAX_ERROR_BODY, MAX_EVENT_LINE, MAX_IDLE, LineSplitter, Request, Target, decode_error, unavailable
from .errors import Internal

#: The longest header section accepted.
MAX_HEAD = 64 << 10

T = TypeVar("T")


class _Conn:
    """One connection to the daemon."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        try:
            self.writer.close()
        except RuntimeError:
            # Its event loop is closed (a pooled connection of an earlier asyncio.run):
            # end the connection at least; the descriptor goes with the transport.
            sock = self.writer.get_extra_info("socket")
            try:
                if sock is not None:
                    sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Stale(Exception):
    """A reused connection turned out closed before any answer."""


class Response:
    """An answer whose status and headers were read; its body is read on demand."""

    def __init__(self, tr: "AsyncTransport", conn: _Conn, status: int, headers: Dict[str, str], method: str) -> None:
        self._tr = tr
        self._conn: Optional[_Conn] = conn
        self.status = status
        self.headers = headers
        te = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in te
        self._left: Optional[int] = None  # bytes left of a Content-Length body or of a chunk
        self._eof = False
        self._keep = headers.get("connection", "").lower() != "close"
        if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
            self._eof = True
        elif not self._chunked:
            if "content-length" in headers:
                try:
                    self._left = int(headers["content-length"])
                except ValueError:
                    raise Internal(f"bad Content-Length {headers['content-length']!r}") from None
                self._eof = self._left == 0
            else:
                self._keep = False  # the body ends with the connection

    async def read1(self, n: int = 65536) -> bytes:
        """Up to n bytes of the body, as soon as some are there; b"" at its end."""
        if self._eof or self._conn is None:
            return b""
        r = self._conn.reader
        if self._chunked:
            if not self._left:
                size_line = await self._tr._io(r.readline())
                if not size_line.endswith(b"\n"):
                    raise ConnectionResetError("connection closed inside a chunked body")
                try:
                    size = int(size_line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise Internal(f"bad chunk size line {size_line[:40]!r}") from None
                if size == 0:
                    while (await self._tr._io(r.readline())).strip():  # trailers
                        pass
                    self._end()
                    return b""
                self._left = size
            data = await self._tr._io(r.read(min(n, self._left)))
            if not data:
                raise ConnectionResetError("connection closed inside a chunk")
            self._left -= len(data)
            if self._left == 0:
                await self._tr._io(r.readexactly(2))  # the chunk's CRLF
            return data
        if self._left is not None:
            data = await self._tr._io(r.read(min(n, self._left)))
            if not data:
                raise ConnectionResetError("connection closed inside the body")
            self._left -= len(data)
            if self._left == 0:
                self._end()
            return data
        data = await self._tr._io(r.read(n))
        if not data:
            self._end()
        return data

    async def read(self, limit: Optional[int] = None) -> bytes:
        """The rest of the body (at most limit bytes, then the connection is dropped)."""
        parts: List[bytes] = []
        total = 0
        while True:
            data = await self.read1()
            if not data:
                return b"".join(parts)
            parts.append(data)
            total += len(data)
            if limit is not None and total >= limit:
                self.close()
                return b"".join(parts)[:limit]

    def _end(self) -> None:
        self._eof = True
        conn, self._conn = self._conn, None
        if conn is not None:
            if self._keep:
                self._tr._put(conn)
            else:
                conn.close()

    def close(self) -> None:
        """Drop the connection (a body not read to its end cannot be reused)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


class AsyncTransport:
    """Sends requests to one daemon from coroutines. Idle connections belong to the
    event loop that made them; used from another loop, they are dropped."""

    def __init__(self, target: Target, timeout: Optional[float] = None) -> None:
        self.target = target
        self.timeout = timeout
        self._idle: List[_Conn] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    async def _io(self, aw: Awaitable[T]) -> T:
        if self.timeout is None:
            return await aw
        return await asyncio.wait_for(aw, self.timeout)

    async def _new(self) -> _Conn:
        if self.target.network == "unix":
            opening = asyncio.open_unix_connection(self.target.address, limit=2 * MAX_EVENT_LINE)
        else:
            opening = asyncio.open_connection(self.target.host, self.target.port, limit=2 * MAX_EVENT_LINE,
                                              ssl=self.target.tls)
        reader, writer = await asyncio.wait_for(opening, CONNECT_TIMEOUT)
        return _Conn(reader, writer)

    def _take(self) -> Optional[_Conn]:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            idle, self._idle, self._loop = self._idle, [], loop
            for c in idle:
                c.close()
        while self._idle:
            c = self._idle.pop()
            if not c.reader.at_eof() and not c.writer.is_closing():
                return c
            c.close()
        return None

    def _put(self, conn: _Conn) -> None:
        try:
            same = asyncio.get_running_loop() is self._loop
        except RuntimeError:
            same = False
        if same and len(self._idle) < MAX_IDLE:
            self._idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    async def _exchange(self, conn: _Conn, req: Request[Any], head: bytes, body: Any, reused: bool) -> Response:
        if req.stream_body is None:
            conn.writer.write(head + body)
            await self._io(conn.writer.drain())
        else:  # a body sent from a file, a piece at a time
            conn.writer.write(head)
            body.seek(0)
            while True:
                piece = body.read(256 << 10)
                if not piece:
                    break
                conn.writer.write(piece)
                await self._io(conn.writer.drain())
        while True:
            status, headers = await self._read_head(conn, reused)
            if not 100 <= status < 200:  # skip interim answers; the real one follows
                return Response(self, conn, status, headers, req.method)

    async def _read_head(self, conn: _Conn, reused: bool) -> Tuple[int, Dict[str, str]]:
        line = await self._io(conn.reader.readline())
        if not line:
            if reused:
                raise _Stale()
            raise ConnectionResetError("the daemon closed the connection without an answer")
        parts = line.decode("latin-1").split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise Internal(f"not an HTTP answer: {line[:60]!r}")
        headers: Dict[str, str] = {}
        size = 0
        while True:
            h = await self._io(conn.reader.readline())
            size += len(h)
            if size > MAX_HEAD:
                raise Internal("the answer's headers are too long")
            if not h.endswith(b"\n"):
                raise ConnectionResetError("connection closed inside the headers")
            h = h.strip()
            if not h:
                return int(parts[1]), headers
            k, _, val = h.decode("latin-1").partition(":")
            headers[k.strip().lower()] = val.strip()

    async def open(self, req: Request[Any]) -> Response:
        """Send req and return its answer with status and headers read."""
        body, headers = req.encode(self.target)
        head = f"{req.method} {req.url()} HTTP/1.1\r\n".encode() + "".join(f"{k}: {v}\r\n" for k, v in headers.items()).encode("latin-1") + b"\r\n"
        for attempt in (0, 1):
            conn = self._take()
            reused = conn is not None
            try:
                if conn is None:
                    conn = await self._new()
                return await self._exchange(conn, req, head, body, reused)
            except _Stale:
                conn.close()  # type: ignore[union-attr]
                if attempt == 0 and req.retry_safe:
                    continue
                raise unavailable(self.target, ConnectionResetError("the daemon closed a kept-alive connection; the outcome is unknown")) from None
            except asyncio.TimeoutError:
                if conn is not None:
                    conn.close()
                raise unavailable(self.target, TimeoutError(f"no answer within {self.timeout} s; the outcome is unknown")) from None
            except (OSError, asyncio.IncompleteReadError) as e:
                if conn is not None:
                    conn.close()
                if attempt == 0 and reused and isinstance(e, (BrokenPipeError, ConnectionResetError)) and req.retry_safe:
                    continue
                raise unavailable(self.target, e) from None
            except BaseException:
                if conn is not None:
                    conn.close()
                raise
        raise AssertionError("unreachable")

    async def call(self, req: Request[Any]) -> Tuple[int, bytes]:
        """Perform req and return the status and body of a 2xx answer; raise the
        matching AirlockError for any other."""
        resp = await self.open(req)
        try:
            if 200 <= resp.status <= 299:
                return resp.status, await resp.read()
            data = await resp.read(MAX_ERROR_BODY)
            resp.close()
        except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
            resp.close()
            raise unavailable(self.target, e) from None
        except BaseException:
            resp.close()
            raise
        raise decode_error(resp.status, data)

    async def raw(self, req: Request[Any]) -> Response:
        """Perform req and return a 2xx answer, its body unread; raise the matching
        AirlockError for any other."""
        resp = await self.open(req)
        if not 200 <= resp.status <= 299:
            try:
                data = await resp.read(MAX_ERROR_BODY)
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError):
                data = b""
            resp.close()
            raise decode_error(resp.status, data)
        return resp

    async def lines(self, req: Request[Any]) -> "AsyncLineStream":
        """Perform req and return its answer's lines (an NDJSON stream)."""
        return AsyncLineStream(self, await self.raw(req))


class AsyncLineStream:
    """The lines of a streamed answer, as they arrive. Closing it before the end
    closes the connection, which cancels the command on the daemon."""

    def __init__(self, tr: AsyncTransport, resp: Response) -> None:
        self._tr = tr
        self._resp = resp
        self._split = LineSplitter()

    async def __aiter__(self) -> AsyncIterator[bytes]:
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
                data = await self._resp.read1()
            except (OSError, asyncio.IncompleteReadError, asyncio.TimeoutError) as e:
                self.close()
                raise unavailable(self._tr.target, e) from None
            if not data:
                last = self._split.rest()
                if last:
                    yield last
                return
            self._split.feed(data)

    def close(self) -> None:
        """Abandon the stream: close its connection."""
        self._resp.close()
