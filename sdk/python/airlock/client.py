"""The blocking client: one method per API call, over a kept-alive connection pool.

:class:`Client` mirrors the Go SDK (``client/``): it keeps no sandbox state, every
call goes to the daemon. Most code uses :class:`airlock.Sandbox` instead, which wraps
a client and a sandbox's name.
"""

import json
import os
import shutil
import threading
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from . import _calls, _tree
from ._tree import TreeSummary
from ._protocol import EventReader, Request, T, Target, decode_answer, file_part, resolve_target
from ._transport import LineStream, Transport
from .errors import InvalidArgument
from .types import Chunk, ExecResult, FileInfo, NetworkPolicy, Operation, SandboxInfo, SessionInfo, Snapshot

__all__ = ["Client", "ExecStream", "default_client"]

Cmd = Union[str, Sequence[str]]


class ExecStream:
    """The output of a streamed exec or send, chunk by chunk as the sandbox produces it.

    Iterate over it for :class:`~airlock.types.Chunk` values; once it is exhausted,
    :attr:`result` says how the command ended. Closing it early (or leaving a ``with``
    block) closes the connection, which cancels the command. Output is not kept: the
    result's ``stdout`` and ``stderr`` are empty unless :meth:`wait` collected them.
    """

    def __init__(self, lines: LineStream, target: Target) -> None:
        self._lines = lines
        self._iter = iter(lines)
        self._reader = EventReader()
        self._target = target
        #: How the command ended; None until the stream is exhausted.
        self.result: Optional[ExecResult] = None

    def __iter__(self) -> Iterator[Chunk]:
        return self

    def __next__(self) -> Chunk:
        if self.result is not None:
            raise StopIteration
        try:
            for line in self._iter:
                ev = self._reader.feed(line)
                if isinstance(ev, Chunk):
                    return ev
                if isinstance(ev, ExecResult):
                    self.result = ev
                    # The exit event is the last line: reach the end of the answer, so
                    # that its connection goes back to the pool.
                    for _ in self._iter:
                        pass
                    raise StopIteration
        except StopIteration:
            raise
        except BaseException:
            self._lines.close()
            raise
        self._lines.close()
        raise EventReader.broken(self._target)

    def wait(self) -> ExecResult:
        """Read the rest of the stream and return the result, with the output read
        from here on collected into its ``stdout`` and ``stderr``."""
        out: Dict[str, bytearray] = {"stdout": bytearray(), "stderr": bytearray()}
        for chunk in self:
            out[chunk.stream] += chunk.data
        assert self.result is not None
        self.result = self.result.with_output(bytes(out["stdout"]), bytes(out["stderr"]))
        return self.result

    def close(self) -> None:
        """Stop reading; a command still running is cancelled."""
        self._lines.close()

    def __enter__(self) -> "ExecStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Client:
    """A connection to one Airlock daemon. Safe for use from several threads.

    Args:
        socket: the daemon's unix socket (default ``$AIRLOCK_SOCKET``, then
            ``/run/airlock/airlock.sock``).
        url: ``http://HOST:PORT`` of a daemon listening on TCP, or
            ``https://HOST:PORT`` of one with ``tls_cert`` (default ``$AIRLOCK_URL``); it
            wins over ``socket``.
        token: the bearer token for TCP (default ``$AIRLOCK_TOKEN``).
        timeout: seconds to wait on any one read from the daemon (default None: as long
            as the call takes, which for an exec is as long as the command runs).
        ca_file: for an ``https://`` URL, a PEM file of the certificates to trust
            (default ``$AIRLOCK_CA_FILE``, else the system's).

    Inside an Airlock sandbox, with none of these set, the client reaches the API
    through ``$AIRLOCK_API`` with the sandbox's session credential, as the Go SDK does.
    """

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
        self._tr = Transport(self.target, timeout)

    def __repr__(self) -> str:
        return f"Client({self.target.network}:{self.target.address})"

    @property
    def address(self) -> str:
        """The daemon this client reaches: a socket path or host:port."""
        return self.target.address

    def close(self) -> None:
        """Close the idle connections (a later call opens new ones)."""
        self._tr.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # The plumbing: every method below builds a request in _calls and sends it here.

    def _do(self, req: Request[T]) -> T:
        _, body = self._tr.call(req)
        return decode_answer(req, body)

    def _stream(self, req: Request[Any]) -> ExecStream:
        return ExecStream(self._tr.lines(req), self.target)

    # Daemon.

    def status(self) -> Dict[str, Any]:
        """The daemon's version and health checks."""
        return self._do(_calls.status())

    def operation(self, op_id: str) -> Operation:
        """The durable record of a mutating call, to learn how a call whose answer was
        lost ended."""
        return self._do(_calls.operation(op_id))

    # Sandboxes.

    def create(
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
        """Make a sandbox; answers once it is running. See :meth:`Sandbox.create`."""
        return self._do(
            _calls.create(
                name, image=image, pull=pull, cpu=cpu, memory=memory, disk=disk, network=network, idle_suspend=idle_suspend,
                max_lifetime=max_lifetime, ttl=ttl, env=env, labels=labels, runtime=runtime, role=role,
                workspace=workspace, workspace_access=workspace_access, node_selector=node_selector,
                idempotency_key=idempotency_key, volumes=volumes,
            )
        )

    def get(self, ref: str) -> SandboxInfo:
        """A sandbox by name or id."""
        return self._do(_calls.get(ref))

    def list(
        self, *, states: Optional[Sequence[str]] = None, labels: Optional[Mapping[str, str]] = None, all_owners: bool = False
    ) -> List[SandboxInfo]:
        """The sandboxes in one of states (any, if None) that carry every label given.

        ``all_owners=True`` lists every owner's (each names its ``owner``), for a caller
        with the admin permission; another owner's sandbox is reached by its id.
        The list is read page by page; a sandbox that exists from the first page to the
        last is listed exactly once.
        """
        out: List[SandboxInfo] = []
        after: Optional[str] = None
        while True:
            page, after = self._do(_calls.list_sandboxes(states, labels, all_owners, after))
            out.extend(page)
            if not after:
                return out

    def terminate(self, ref: str, *, if_match: Optional[int] = None, idempotency_key: Optional[str] = None) -> SandboxInfo:
        """End a sandbox and delete what it owns; its handle remains as a tombstone."""
        return self._do(_calls.terminate(ref, if_match=if_match, idempotency_key=idempotency_key))

    def suspend(self, ref: str, *, idempotency_key: Optional[str] = None) -> SandboxInfo:
        """Stop a sandbox's compute, keeping its handle and writable layer. Idempotent."""
        return self._do(_calls.lifecycle(ref, "suspend", idempotency_key=idempotency_key))

    def resume(self, ref: str, *, idempotency_key: Optional[str] = None) -> SandboxInfo:
        """Start a suspended sandbox in a fresh container (generation + 1)."""
        return self._do(_calls.lifecycle(ref, "resume", idempotency_key=idempotency_key))

    # Exec and sessions.

    def exec(
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
        """Run a command to completion and return its collected output."""
        return self._do(_calls.exec_(ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid))

    def exec_stream(
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
    ) -> ExecStream:
        """Run a command and stream its output as it is produced."""
        return self._stream(_calls.exec_(ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid, stream=True))

    def start_session(
        self,
        ref: str,
        kind: str = "python",
        *,
        argv: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        background: bool = False,
    ) -> SessionInfo:
        """Start a long-lived process: kind ``python``, ``shell`` or ``raw`` (with argv).
        A ``background`` raw session keeps its output in a log (the last MiB), read with
        :meth:`session_logs`, and takes no input."""
        return self._do(_calls.start_session(ref, kind, argv=argv, env=env, cwd=cwd, background=background))

    def session_logs(self, ref: str, session_id: str, *, tail: int = 0, follow: bool = False) -> ExecStream:
        """Stream a background session's log: its last ``tail`` lines (0: all it keeps)
        and, with ``follow``, what the process writes after, until it ends. The stream's
        result has state ``running`` or ``exited`` and the exit code."""
        return self._stream(_calls.session_logs(ref, session_id, tail=tail, follow=follow))

    def sessions(self, ref: str) -> List[SessionInfo]:
        """The sandbox's live sessions."""
        return self._do(_calls.list_sessions(ref))

    def send(self, ref: str, session_id: str, input: str) -> ExecResult:
        """Give input to a session and return the reply's collected output."""
        return self._do(_calls.send(ref, session_id, input))

    def send_stream(self, ref: str, session_id: str, input: str) -> ExecStream:
        """Give input to a session and stream the reply as it arrives."""
        return self._stream(_calls.send(ref, session_id, input, stream=True))

    def close_session(self, ref: str, session_id: str) -> None:
        """End a session and its process."""
        self._do(_calls.close_session(ref, session_id))

    # Files.

    def upload(self, ref: str, path: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> FileInfo:
        """Write data to path in the sandbox, replacing any file there."""
        return self._do(_calls.upload(ref, path, data, mode))

    def download(self, ref: str, path: str, *, offset: int = 0, length: Optional[int] = None) -> bytes:
        """The content of the file at path in the sandbox; with offset and length, only
        that part of it (empty past the end), read without reading the rest."""
        req = _calls.download(ref, path, offset, length)
        try:
            status, body = self._tr.call(req)
        except InvalidArgument as e:
            if req.byte_range is not None and e.status == 416:
                return b""  # the part starts past the end
            raise
        return file_part(req, status, body)

    def upload_dir(self, ref: str, local: str, path: str) -> TreeSummary:
        """Copy the local directory ``local`` into the sandbox as the directory path
        (made with its missing parents; files already there are overwritten). Modes and
        symbolic links are kept; links are never followed, so nothing outside ``local``
        is read. Sockets, FIFOs and devices are skipped."""
        f, size = _tree.pack(local)
        with f:
            return self._do(_calls.upload_tar(ref, path, f, size))

    def upload_tar(self, ref: str, path: str, archive: str) -> TreeSummary:
        """Unpack the local tar archive (a file name) into the directory path of the
        sandbox, made with its missing parents."""
        with open(archive, "rb") as f:
            return self._do(_calls.upload_tar(ref, path, f, os.fstat(f.fileno()).st_size))

    def download_dir(self, ref: str, path: str, local: str, *, max_entries: int = _tree.DEFAULT_MAX_ENTRIES,
                     max_bytes: int = _tree.DEFAULT_MAX_BYTES,
                     progress: Optional[Callable[[TreeSummary], None]] = None) -> TreeSummary:
        """Copy the directory path of the sandbox to the local directory ``local``
        (made if missing; files already there are overwritten). The archive is the
        sandbox's, so it is unpacked as hostile input: nothing is written outside
        ``local``, no link is ever followed (a symbolic link is made as a link, with
        its target as the sandbox gave it), setuid and setgid bits are dropped, and an
        archive with an absolute name, a ".." element, a path through a link, a device
        node or FIFO, a hard link out, or more than ``max_entries`` entries or
        ``max_bytes`` bytes of files raises :class:`ArchiveRefused` at that entry. On
        any failure a local directory that download_dir made is removed again."""
        made = False
        if not os.path.lexists(local):
            os.mkdir(local, 0o755)
            made = True
        try:
            conn, resp = self._tr.raw(_calls.download_tar(ref, path))
            try:
                out = _tree.extract(resp, local, max_entries=max_entries, max_bytes=max_bytes, progress=progress)
                resp.read()  # the rest of the stream, past the archive's end
            except BaseException:
                conn.close()
                raise
            self._tr.finish(conn, resp)
            out.path = local
            return out
        except BaseException:
            if made:
                shutil.rmtree(local, ignore_errors=True)
            raise

    def list_files(self, ref: str, path: str) -> List[FileInfo]:
        """The entries of the directory at path."""
        return self._do(_calls.list_files(ref, path))

    def stat(self, ref: str, path: str) -> FileInfo:
        """The file at path."""
        return self._do(_calls.stat(ref, path))

    def mkdir(self, ref: str, path: str, *, parents: bool = False) -> None:
        """Make a directory (with parents, missing parents too)."""
        self._do(_calls.mkdir(ref, path, parents))

    def remove(self, ref: str, path: str, *, recursive: bool = False) -> None:
        """Delete a file or an empty directory (with recursive, any directory)."""
        self._do(_calls.remove(ref, path, recursive))

    # Snapshots and forks.

    # Volumes: encrypted filesystems of their own that outlive sandboxes.

    def create_volume(self, name: str, size: Union[int, str, None] = None, *, from_snapshot: Optional[str] = None) -> Dict[str, Any]:
        """Make a volume of size bytes ("10G"), empty or a copy of a volume snapshot."""
        return self._do(_calls.create_volume(name, size, from_snapshot=from_snapshot))

    def volumes(self, kind: str = "volume") -> List[Dict[str, Any]]:
        """The caller's volumes, or its volume snapshots (kind="snapshot")."""
        return self._do(_calls.volumes(kind))

    def get_volume(self, name: str) -> Dict[str, Any]:
        """One volume, with the sandboxes it is attached to."""
        return self._do(_calls.get_volume(name))

    def delete_volume(self, name: str) -> None:
        """Remove a volume (refused while attached) or a volume snapshot (by id)."""
        self._do(_calls.delete_volume(name))

    def resize_volume(self, name: str, size: Union[int, str]) -> Dict[str, Any]:
        """Grow a volume; a volume never shrinks."""
        return self._do(_calls.resize_volume(name, size))

    def snapshot_volume(self, name: str) -> Dict[str, Any]:
        """Copy a volume to a checksummed volume snapshot."""
        return self._do(_calls.snapshot_volume(name))

    def attach_volume(self, name: str, sandbox: str, path: str, read_only: bool = False) -> SandboxInfo:
        """Attach a volume to a suspended sandbox (one writer at a time)."""
        return self._do(_calls.attach_volume(name, sandbox, path, read_only))

    def detach_volume(self, name: str, sandbox: str) -> SandboxInfo:
        """Detach a volume from a suspended sandbox."""
        return self._do(_calls.detach_volume(name, sandbox))

    def snapshot(self, ref: str, labels: Optional[Mapping[str, str]] = None, *, memory: bool = False, idempotency_key: Optional[str] = None) -> Snapshot:
        """Snapshot a running (crash-consistent) or suspended sandbox's writable layer;
        with memory, a running runsc sandbox's memory and processes too (``Snapshot.memory``),
        so a fork of the snapshot runs on from that point."""
        return self._do(_calls.snapshot(ref, labels, memory=memory, idempotency_key=idempotency_key))

    def stats(self, ref: str, *, history: bool = False) -> Dict[str, Any]:
        """A sandbox's resource use as the node last sampled it: ``cpu``, ``memory``,
        ``disk``, ``pids`` and ``network`` (see GET /v1/sandboxes/{ref}/stats); with
        ``history=True`` its recent samples too. A sandbox not running answers zeros."""
        return self._do(_calls.stats(ref, history=history))

    def follow_stats(self, ref: str, *, history: bool = False) -> Iterator[Dict[str, Any]]:
        """The sandbox's usage once per sampling interval, until it is terminated; closing
        the iterator ends the stream."""
        stream = self._tr.lines(_calls.stats(ref, history=history, follow=True))
        try:
            for line in stream:
                if line.strip():
                    yield json.loads(line)
        finally:
            stream.close()

    def all_stats(self, *, all_owners: bool = False) -> List[Dict[str, Any]]:
        """The usage of every sandbox you can see that is not terminated."""
        return self._do(_calls.all_stats(all_owners=all_owners))

    def snapshots(self, ref: Optional[str] = None) -> List[Snapshot]:
        """The snapshots, of one sandbox when ref is given."""
        return self._do(_calls.snapshots(ref))

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Remove a snapshot (refused while a sandbox depends on it)."""
        self._do(_calls.delete_snapshot(snapshot_id))

    def restore(self, ref: str, snapshot_id: str, *, safety_snapshot: bool = True, idempotency_key: Optional[str] = None) -> SandboxInfo:
        """Replace a suspended sandbox's writable layer with a snapshot's."""
        return self._do(_calls.restore(ref, snapshot_id, safety_snapshot=safety_snapshot, idempotency_key=idempotency_key))

    def fork(self, src: str, name: str, labels: Optional[Mapping[str, str]] = None, *, idempotency_key: Optional[str] = None) -> SandboxInfo:
        """Make a new sandbox from src: a sandbox name or id, or a snapshot id (``snap_…``)."""
        return self._do(_calls.fork(src, name, labels, idempotency_key=idempotency_key))


_defaults: Dict[Tuple[str, str, str], Client] = {}
_defaults_lock = threading.Lock()


def default_client() -> Client:
    """The shared client for the environment's daemon ($AIRLOCK_URL, $AIRLOCK_SOCKET,
    ...), made on first use; a change of those variables gives another one."""
    t = resolve_target()
    key = (t.network, t.address, t.token)
    with _defaults_lock:
        c = _defaults.get(key)
        if c is None:
            c = _defaults[key] = Client()
        return c
