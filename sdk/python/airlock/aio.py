"""The asyncio flavour of the SDK: :class:`AsyncSandbox` and :class:`AsyncClient`.

It speaks HTTP/1.1 over asyncio streams itself (no thread executor): every call is a
coroutine, and many can run at once on one event loop::

    import asyncio
    from airlock.aio import AsyncSandbox

    async def main():
        async with await AsyncSandbox.create("demo") as sb:
            res = await sb.exec("echo hi")
            async for chunk in await sb.exec_stream("for i in 1 2 3; do echo $i; done"):
                print(chunk.text, end="")

    asyncio.run(main())

The methods, arguments, results and exceptions are those of :mod:`airlock`; only
:attr:`AsyncSandbox.state` and :attr:`AsyncSandbox.generation` are awaited
(``await sb.generation``), as they read the sandbox afresh.
"""

import asyncio
import io
import os
import shutil
from typing import Any, Awaitable, Dict, List, Mapping, Optional, Sequence, Tuple, Union

from . import _calls, _tree
from ._aiotransport import AsyncLineStream, AsyncTransport
from ._protocol import EventReader, Request, T, Target, decode_answer, file_part, resolve_target
from . import _validate
from ._tree import TreeSummary
from .errors import InvalidArgument, NotFound
from .types import Chunk, ExecResult, FileInfo, NetworkPolicy, Operation, SandboxInfo, SessionInfo, Snapshot

__all__ = ["AsyncClient", "AsyncExecStream", "AsyncSandbox", "AsyncFiles", "AsyncSession", "default_async_client"]

Cmd = Union[str, Sequence[str]]


class AsyncExecStream:
    """The output of a streamed exec or send: ``async for chunk in stream``. Once it
    is exhausted, :attr:`result` says how the command ended. Closing it early (or
    leaving an ``async with`` block) cancels the command."""

    def __init__(self, lines: AsyncLineStream, target: Target) -> None:
        self._lines = lines
        self._iter = lines.__aiter__()
        self._reader = EventReader()
        self._target = target
        #: How the command ended; None until the stream is exhausted.
        self.result: Optional[ExecResult] = None

    def __aiter__(self) -> "AsyncExecStream":
        return self

    async def __anext__(self) -> Chunk:
        if self.result is not None:
            raise StopAsyncIteration
        try:
            async for line in self._iter:
                ev = self._reader.feed(line)
                if isinstance(ev, Chunk):
                    return ev
                if isinstance(ev, ExecResult):
                    self.result = ev
                    async for _ in self._iter:  # reach the end: the connection is reused
                        pass
                    raise StopAsyncIteration
        except StopAsyncIteration:
            raise
        except BaseException:
            self._lines.close()
            raise
        self._lines.close()
        raise EventReader.broken(self._target)

    async def wait(self) -> ExecResult:
        """Read the rest of the stream and return the result, with the output read
        from here on collected into its ``stdout`` and ``stderr``."""
        out: Dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        async for chunk in self:
            out[chunk.stream] += chunk.data
        assert self.result is not None
        self.result = self.result.with_output(bytes(out["stdout"]), bytes(out["stderr"]))
        return self.result

    def close(self) -> None:
        """Stop reading; a command still running is cancelled."""
        self._lines.close()

    async def aclose(self) -> None:
        """:meth:`close`, awaitable, as asyncio code and ``contextlib.aclosing`` expect."""
        self.close()

    async def __aenter__(self) -> "AsyncExecStream":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()


class AsyncClient:
    """The asyncio twin of :class:`airlock.Client` (same arguments and methods, as
    coroutines). Use one client from one event loop at a time."""

    def __init__(
        self,
        socket: Optional[str] = None,
        url: Optional[str] = None,
        token: Optional[str] = None,
        *,
        timeout: Optional[float] = None,
        ca_file: Optional[str] = None,
    ) -> None:
        if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0):
            raise InvalidArgument(f"invalid timeout {timeout!r}: a positive number of seconds, or None")
        self.target = resolve_target(socket, url, token, ca_file)
        self._tr = AsyncTransport(self.target, timeout)

    def __repr__(self) -> str:
        return f"AsyncClient({self.target.network}:{self.target.address})"

    @property
    def address(self) -> str:
        return self.target.address

    def close(self) -> None:
        """Close the idle connections."""
        self._tr.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        self.close()

    async def _do(self, req: Request[T]) -> T:
        _, body = await self._tr.call(req)
        return decode_answer(req, body)

    async def _stream(self, req: Request[Any]) -> AsyncExecStream:
        return AsyncExecStream(await self._tr.lines(req), self.target)

    async def status(self) -> Dict[str, Any]:
        return await self._do(_calls.status())

    async def operation(self, op_id: str) -> Operation:
        return await self._do(_calls.operation(op_id))

    async def create(
        self,
        name: str,
        *,
        image: Optional[str] = None,
        pull: Optional[str] = None,
        cpu: Optional[float] = None,
        memory: Union[int, str, None] = None,
        disk: Union[int, str, None] = None,
        network: Union[str, NetworkPolicy, Mapping[str, Any], None] = None,
        idle_suspend: Union[float, str, None] = None,
        max_lifetime: Union[float, str, None] = None,
        ttl: Union[float, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        runtime: Optional[str] = None,
        role: Optional[str] = None,
        workspace: Optional[str] = None,
        workspace_access: str = "rw",
        node_selector: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        volumes: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> SandboxInfo:
        return await self._do(
            _calls.create(
                name, image=image, pull=pull, cpu=cpu, memory=memory, disk=disk, network=network, idle_suspend=idle_suspend,
                max_lifetime=max_lifetime, ttl=ttl, env=env, labels=labels, runtime=runtime, role=role,
                workspace=workspace, workspace_access=workspace_access, node_selector=node_selector,
                idempotency_key=idempotency_key, volumes=volumes,
            )
        )

    async def get(self, ref: str) -> SandboxInfo:
        return await self._do(_calls.get(ref))

    async def list(
        self, *, states: Optional[Sequence[str]] = None, labels: Optional[Mapping[str, str]] = None, all_owners: bool = False
    ) -> List[SandboxInfo]:
        out: List[SandboxInfo] = []
        after: Optional[str] = None
        while True:
            page, after = await self._do(_calls.list_sandboxes(states, labels, all_owners, after))
            out.extend(page)
            if not after:
                return out

    async def terminate(self, ref: str, *, if_match: Optional[int] = None, idempotency_key: Optional[str] = None) -> SandboxInfo:
        return await self._do(_calls.terminate(ref, if_match=if_match, idempotency_key=idempotency_key))

    async def suspend(self, ref: str, *, idempotency_key: Optional[str] = None) -> SandboxInfo:
        return await self._do(_calls.lifecycle(ref, "suspend", idempotency_key=idempotency_key))

    async def resume(self, ref: str, *, idempotency_key: Optional[str] = None) -> SandboxInfo:
        return await self._do(_calls.lifecycle(ref, "resume", idempotency_key=idempotency_key))

    async def exec(
        self,
        ref: str,
        cmd: Cmd,
        *,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
    ) -> ExecResult:
        return await self._do(_calls.exec_(ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid))

    async def exec_stream(
        self,
        ref: str,
        cmd: Cmd,
        *,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
    ) -> AsyncExecStream:
        return await self._stream(_calls.exec_(ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid, stream=True))

    async def start_session(
        self,
        ref: str,
        kind: str = "python",
        *,
        argv: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        background: bool = False,
    ) -> SessionInfo:
        return await self._do(_calls.start_session(ref, kind, argv=argv, env=env, cwd=cwd, background=background))

    async def session_logs(self, ref: str, session_id: str, *, tail: int = 0, follow: bool = False) -> AsyncExecStream:
        return await self._stream(_calls.session_logs(ref, session_id, tail=tail, follow=follow))

    async def sessions(self, ref: str) -> List[SessionInfo]:
        return await self._do(_calls.list_sessions(ref))

    async def send(self, ref: str, session_id: str, input: str) -> ExecResult:
        return await self._do(_calls.send(ref, session_id, input))

    async def send_stream(self, ref: str, session_id: str, input: str) -> AsyncExecStream:
        return await self._stream(_calls.send(ref, session_id, input, stream=True))

    async def close_session(self, ref: str, session_id: str) -> None:
        await self._do(_calls.close_session(ref, session_id))

    async def upload(self, ref: str, path: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> FileInfo:
        return await self._do(_calls.upload(ref, path, data, mode))

    async def download(self, ref: str, path: str, *, offset: int = 0, length: Optional[int] = None) -> bytes:
        req = _calls.download(ref, path, offset, length)
        try:
            status, body = await self._tr.call(req)
        except InvalidArgument as e:
            if req.byte_range is not None and e.status == 416:
                return b""
            raise
        return file_part(req, status, body)

    async def upload_dir(self, ref: str, local: str, path: str) -> TreeSummary:
        """Copy the local directory ``local`` into the sandbox as the directory path
        (see :meth:`airlock.Client.upload_dir`)."""
        f, size = await asyncio.to_thread(_tree.pack, local)
        with f:
            return await self._do(_calls.upload_tar(ref, path, f, size))

    async def download_dir(self, ref: str, path: str, local: str, *, max_entries: int = _tree.DEFAULT_MAX_ENTRIES,
                           max_bytes: int = _tree.DEFAULT_MAX_BYTES) -> TreeSummary:
        """Copy the directory path of the sandbox to the local directory ``local``,
        unpacked as hostile input (see :meth:`airlock.Client.download_dir`). The
        unpacking runs in a thread; the answer is read on this loop."""
        loop = asyncio.get_running_loop()
        made = not os.path.lexists(local)
        if made:
            os.mkdir(local, 0o755)
        try:
            resp = await self._tr.raw(_calls.download_tar(ref, path))

            class _Body(io.RawIOBase):
                def readable(self) -> bool:
                    return True

                def readinto(self, b: Any) -> int:
                    data = asyncio.run_coroutine_threadsafe(resp.read1(len(b)), loop).result()
                    b[:len(data)] = data
                    return len(data)

            try:
                out = await asyncio.to_thread(_tree.extract, io.BufferedReader(_Body(), 256 << 10), local,
                                              max_entries=max_entries, max_bytes=max_bytes)
                await resp.read()  # the rest of the stream, past the archive's end
            finally:
                resp.close()
            out.path = local
            return out
        except BaseException:
            if made:
                shutil.rmtree(local, ignore_errors=True)
            raise

    async def list_files(self, ref: str, path: str) -> List[FileInfo]:
        return await self._do(_calls.list_files(ref, path))

    async def stat(self, ref: str, path: str) -> FileInfo:
        return await self._do(_calls.stat(ref, path))

    async def mkdir(self, ref: str, path: str, *, parents: bool = False) -> None:
        await self._do(_calls.mkdir(ref, path, parents))

    async def remove(self, ref: str, path: str, *, recursive: bool = False) -> None:
        await self._do(_calls.remove(ref, path, recursive))

    # Volumes: encrypted filesystems of their own that outlive sandboxes.

    async def create_volume(self, name: str, size: Union[int, str, None] = None, *, from_snapshot: Optional[str] = None) -> Dict[str, Any]:
        """Make a volume of size bytes ("10G"), empty or a copy of a volume snapshot."""
        return await self._do(_calls.create_volume(name, size, from_snapshot=from_snapshot))

    async def volumes(self, kind: str = "volume") -> List[Dict[str, Any]]:
        """The caller's volumes, or its volume snapshots (kind="snapshot")."""
        return await self._do(_calls.volumes(kind))

    async def get_volume(self, name: str) -> Dict[str, Any]:
        """One volume, with the sandboxes it is attached to."""
        return await self._do(_calls.get_volume(name))

    async def delete_volume(self, name: str) -> None:
        """Remove a volume (refused while attached) or a volume snapshot (by id)."""
        await self._do(_calls.delete_volume(name))

    async def resize_volume(self, name: str, size: Union[int, str]) -> Dict[str, Any]:
        """Grow a volume; a volume never shrinks."""
        return await self._do(_calls.resize_volume(name, size))

    async def snapshot_volume(self, name: str) -> Dict[str, Any]:
        """Copy a volume to a checksummed volume snapshot."""
        return await self._do(_calls.snapshot_volume(name))

    async def attach_volume(self, name: str, sandbox: str, path: str, read_only: bool = False) -> SandboxInfo:
        """Attach a volume to a suspended sandbox (one writer at a time)."""
        return await self._do(_calls.attach_volume(name, sandbox, path, read_only))

    async def detach_volume(self, name: str, sandbox: str) -> SandboxInfo:
        """Detach a volume from a suspended sandbox."""
        return await self._do(_calls.detach_volume(name, sandbox))

    async def snapshot(self, ref: str, labels: Optional[Mapping[str, str]] = None, *, memory: bool = False, idempotency_key: Optional[str] = None) -> Snapshot:
        return await self._do(_calls.snapshot(ref, labels, memory=memory, idempotency_key=idempotency_key))

    async def stats(self, ref: str, *, history: bool = False) -> Dict[str, Any]:
        return await self._do(_calls.stats(ref, history=history))

    async def all_stats(self, *, all_owners: bool = False) -> List[Dict[str, Any]]:
        return await self._do(_calls.all_stats(all_owners=all_owners))

    async def snapshots(self, ref: Optional[str] = None) -> List[Snapshot]:
        return await self._do(_calls.snapshots(ref))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._do(_calls.delete_snapshot(snapshot_id))

    async def restore(self, ref: str, snapshot_id: str, *, safety_snapshot: bool = True, idempotency_key: Optional[str] = None) -> SandboxInfo:
        return await self._do(_calls.restore(ref, snapshot_id, safety_snapshot=safety_snapshot, idempotency_key=idempotency_key))

    async def fork(self, src: str, name: str, labels: Optional[Mapping[str, str]] = None, *, idempotency_key: Optional[str] = None) -> SandboxInfo:
        return await self._do(_calls.fork(src, name, labels, idempotency_key=idempotency_key))


_defaults: Dict[Tuple[str, str, str], AsyncClient] = {}


def default_async_client() -> AsyncClient:
    """The shared asyncio client for the environment's daemon, made on first use."""
    t = resolve_target()
    key = (t.network, t.address, t.token)
    c = _defaults.get(key)
    if c is None:
        c = _defaults[key] = AsyncClient()
    return c


class AsyncFiles:
    """The files of an :class:`AsyncSandbox`; see :class:`airlock.Files`."""

    def __init__(self, sb: "AsyncSandbox") -> None:
        self._sb = sb

    async def write(self, path: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> FileInfo:
        return await self._sb.client.upload(self._sb._ref, path, data, mode=mode)

    async def read(self, path: str, *, offset: int = 0, length: Optional[int] = None) -> bytes:
        return await self._sb.client.download(self._sb._ref, path, offset=offset, length=length)

    async def read_text(self, path: str, encoding: str = "utf-8") -> str:
        return (await self.read(path)).decode(encoding)

    async def upload_dir(self, local: str, path: str) -> TreeSummary:
        return await self._sb.client.upload_dir(self._sb._ref, local, path)

    async def download_dir(self, path: str, local: str, **limits: Any) -> TreeSummary:
        return await self._sb.client.download_dir(self._sb._ref, path, local, **limits)

    async def list(self, path: str = "/") -> List[FileInfo]:
        return await self._sb.client.list_files(self._sb._ref, path)

    async def stat(self, path: str) -> FileInfo:
        return await self._sb.client.stat(self._sb._ref, path)

    async def exists(self, path: str) -> bool:
        try:
            await self.stat(path)
        except NotFound:
            return False
        return True

    async def mkdir(self, path: str, *, parents: bool = False) -> None:
        await self._sb.client.mkdir(self._sb._ref, path, parents=parents)

    async def remove(self, path: str, *, recursive: bool = False) -> None:
        await self._sb.client.remove(self._sb._ref, path, recursive=recursive)


class AsyncSession:
    """A session of an :class:`AsyncSandbox`; see :class:`airlock.Session`."""

    def __init__(self, sb: "AsyncSandbox", info: SessionInfo) -> None:
        self._sb = sb
        self.info = info

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def kind(self) -> str:
        return self.info.kind

    @property
    def pid(self) -> int:
        return self.info.pid

    async def send(self, input: str) -> ExecResult:
        return await self._sb.client.send(self._sb._ref, self.id, input)

    async def send_stream(self, input: str) -> AsyncExecStream:
        return await self._sb.client.send_stream(self._sb._ref, self.id, input)

    async def logs(self, *, tail: int = 0, follow: bool = False) -> AsyncExecStream:
        return await self._sb.client.session_logs(self._sb._ref, self.id, tail=tail, follow=follow)

    async def close(self) -> None:
        try:
            await self._sb.client.close_session(self._sb._ref, self.id)
        except NotFound:
            pass

    async def __aenter__(self) -> "AsyncSession":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()


class AsyncSandbox:
    """The asyncio twin of :class:`airlock.Sandbox`. ``async with`` terminates it."""

    def __init__(self, info: SandboxInfo, client: Optional[AsyncClient] = None) -> None:
        self.client = client or default_async_client()
        self.info = info
        self.files = AsyncFiles(self)

    def __repr__(self) -> str:
        return f"AsyncSandbox({self.name!r}, id={self.id!r})"

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def _ref(self) -> str:
        return self.info.id or self.info.name

    @classmethod
    async def create(
        cls,
        name: str,
        *,
        image: Optional[str] = None,
        pull: Optional[str] = None,
        cpu: Optional[float] = None,
        memory: Union[int, str, None] = None,
        disk: Union[int, str, None] = None,
        network: Union[str, NetworkPolicy, Mapping[str, Any], None] = None,
        idle_suspend: Union[float, str, None] = None,
        max_lifetime: Union[float, str, None] = None,
        ttl: Union[float, str, None] = None,
        env: Optional[Mapping[str, str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        runtime: Optional[str] = None,
        role: Optional[str] = None,
        workspace: Optional[str] = None,
        workspace_access: str = "rw",
        node_selector: Optional[Mapping[str, str]] = None,
        idempotency_key: Optional[str] = None,
        client: Optional[AsyncClient] = None,
    ) -> "AsyncSandbox":
        """Make a sandbox; see :meth:`airlock.Sandbox.create`."""
        c = client or default_async_client()
        info = await c.create(
            name, image=image, pull=pull, cpu=cpu, memory=memory, disk=disk, network=network, idle_suspend=idle_suspend,
            max_lifetime=max_lifetime, ttl=ttl, env=env, labels=labels, runtime=runtime, role=role,
            workspace=workspace, workspace_access=workspace_access, node_selector=node_selector,
            idempotency_key=idempotency_key,
        )
        return cls(info, c)

    @classmethod
    async def get(cls, ref: str, *, client: Optional[AsyncClient] = None) -> "AsyncSandbox":
        """The sandbox of this name (or id); NotFound if none."""
        c = client or default_async_client()
        return cls(await c.get(ref), c)

    @classmethod
    async def list(
        cls,
        *,
        states: Optional[Sequence[str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        client: Optional[AsyncClient] = None,
    ) -> List["AsyncSandbox"]:
        c = client or default_async_client()
        return [cls(i, c) for i in await c.list(states=states, labels=labels)]

    @classmethod
    async def from_snapshot(
        cls,
        snapshot: Union[str, Snapshot],
        name: str,
        *,
        labels: Optional[Mapping[str, str]] = None,
        client: Optional[AsyncClient] = None,
    ) -> "AsyncSandbox":
        c = client or default_async_client()
        sid = _validate.snapshot_id(snapshot.id if isinstance(snapshot, Snapshot) else snapshot)
        return cls(await c.fork(sid, name, labels), c)

    async def refresh(self) -> SandboxInfo:
        self.info = await self.client.get(self._ref)
        return self.info

    async def _field(self, name: str) -> Any:
        return getattr(await self.refresh(), name)

    @property
    def state(self) -> Awaitable[str]:
        """The state now: ``await sb.state``."""
        return self._field("state")

    @property
    def generation(self) -> Awaitable[int]:
        """The generation now: ``await sb.generation``; see :attr:`airlock.Sandbox.generation`."""
        return self._field("generation")

    async def exec(
        self,
        cmd: Cmd,
        *,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
    ) -> ExecResult:
        return await self.client.exec(self._ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid)

    async def exec_stream(
        self,
        cmd: Cmd,
        *,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
    ) -> AsyncExecStream:
        return await self.client.exec_stream(self._ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid)

    async def session(
        self,
        kind: str = "python",
        *,
        argv: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        background: bool = False,
    ) -> AsyncSession:
        return AsyncSession(self, await self.client.start_session(self._ref, kind, argv=argv, env=env, cwd=cwd, background=background))

    async def sessions(self) -> List[AsyncSession]:
        return [AsyncSession(self, i) for i in await self.client.sessions(self._ref)]

    async def suspend(self) -> "AsyncSandbox":
        self.info = await self.client.suspend(self._ref)
        return self

    async def resume(self) -> "AsyncSandbox":
        self.info = await self.client.resume(self._ref)
        return self

    async def terminate(self) -> None:
        try:
            self.info = await self.client.terminate(self._ref)
        except NotFound:
            pass

    async def snapshot(self, labels: Optional[Mapping[str, str]] = None, *, memory: bool = False) -> Snapshot:
        return await self.client.snapshot(self._ref, labels, memory=memory)

    async def snapshots(self) -> List[Snapshot]:
        return await self.client.snapshots(self._ref)

    async def stats(self, *, history: bool = False) -> Dict[str, Any]:
        return await self.client.stats(self._ref, history=history)

    async def restore(self, snapshot: Union[str, Snapshot], *, safety_snapshot: bool = True) -> "AsyncSandbox":
        sid = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        self.info = await self.client.restore(self._ref, sid, safety_snapshot=safety_snapshot)
        return self

    async def fork(self, name: str, *, labels: Optional[Mapping[str, str]] = None) -> "AsyncSandbox":
        return type(self)(await self.client.fork(self._ref, name, labels), self.client)

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.terminate()

