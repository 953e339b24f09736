"""The object most code uses: a :class:`Sandbox`, addressed by name, with its files
and sessions.

A Sandbox holds only a client and the sandbox's name and id; every method calls the
daemon, so any process can reconnect to a sandbox with :meth:`Sandbox.get`.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from .client import Client, ExecStream, default_client
from . import _validate
from ._tree import TreeSummary
from .errors import NotFound
from .types import ExecResult, FileInfo, NetworkPolicy, SandboxInfo, SessionInfo, Snapshot

__all__ = ["Sandbox", "Files", "Session"]

Cmd = Union[str, Sequence[str]]


class Files:
    """The files of a sandbox (``sandbox.files``). Paths are absolute paths inside it."""

    def __init__(self, sb: "Sandbox") -> None:
        self._sb = sb

    def write(self, path: str, data: Union[bytes, str], *, mode: Optional[int] = None) -> FileInfo:
        """Write data (str is UTF-8) to path, replacing any file there; mode sets the
        permission bits (e.g. ``0o755``)."""
        return self._sb.client.upload(self._sb._ref, path, data, mode=mode)

    def read(self, path: str, *, offset: int = 0, length: Optional[int] = None) -> bytes:
        """The content of the file at path; with offset and length, only that part of it
        (empty past the end)."""
        return self._sb.client.download(self._sb._ref, path, offset=offset, length=length)

    def read_text(self, path: str, encoding: str = "utf-8") -> str:
        """The content of the file at path, as text."""
        return self.read(path).decode(encoding)

    def upload_dir(self, local: str, path: str) -> TreeSummary:
        """Copy the local directory ``local`` to the directory path (see
        :meth:`airlock.Client.upload_dir`)."""
        return self._sb.client.upload_dir(self._sb._ref, local, path)

    def download_dir(self, path: str, local: str, **limits: Any) -> TreeSummary:
        """Copy the directory path to the local directory ``local``, unpacked as
        hostile input (see :meth:`airlock.Client.download_dir`)."""
        return self._sb.client.download_dir(self._sb._ref, path, local, **limits)

    def list(self, path: str = "/") -> List[FileInfo]:
        """The entries of the directory at path."""
        return self._sb.client.list_files(self._sb._ref, path)

    def stat(self, path: str) -> FileInfo:
        """The file at path (NotFound if there is none)."""
        return self._sb.client.stat(self._sb._ref, path)

    def exists(self, path: str) -> bool:
        """Whether anything is at path."""
        try:
            self.stat(path)
        except NotFound:
            return False
        return True

    def mkdir(self, path: str, *, parents: bool = False) -> None:
        """Make a directory; with parents, missing parents too."""
        self._sb.client.mkdir(self._sb._ref, path, parents=parents)

    def remove(self, path: str, *, recursive: bool = False) -> None:
        """Delete a file or an empty directory; with recursive, a directory and all it holds."""
        self._sb.client.remove(self._sb._ref, path, recursive=recursive)


class Session:
    """A long-lived process in a sandbox (a Python REPL, a shell, or any program) that
    takes messages with :meth:`send`. Python sessions keep their globals between
    sends and print the value of a last expression, as a REPL does. Use it in a
    ``with`` block to close it at the end."""

    def __init__(self, sb: "Sandbox", info: SessionInfo) -> None:
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

    def __repr__(self) -> str:
        return f"Session({self.id!r}, kind={self.kind!r}, sandbox={self._sb.name!r})"

    def send(self, input: str) -> ExecResult:
        """Send a message (code for python, a command line for shell, raw input for raw)
        and return the reply's collected output and how it ended."""
        return self._sb.client.send(self._sb._ref, self.id, input)

    def send_stream(self, input: str) -> ExecStream:
        """Send a message and stream the reply as it arrives."""
        return self._sb.client.send_stream(self._sb._ref, self.id, input)

    def logs(self, *, tail: int = 0, follow: bool = False) -> ExecStream:
        """A background session's output: its last ``tail`` lines (0: all kept) and,
        with ``follow``, what comes after until the process ends. Iterate the stream
        for chunks; its ``result`` says ``running`` or ``exited`` and the exit code."""
        return self._sb.client.session_logs(self._sb._ref, self.id, tail=tail, follow=follow)

    def close(self) -> None:
        """End the session and its process (a session already gone is not an error)."""
        try:
            self._sb.client.close_session(self._sb._ref, self.id)
        except NotFound:
            pass

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Sandbox:
    """A durable, named, isolated sandbox.

    Make one with :meth:`create`, or reconnect to one from any process with
    :meth:`get`. In a ``with`` block the sandbox is terminated on exit::

        with Sandbox.create("demo") as sb:
            print(sb.exec("echo hi").stdout)
    """

    def __init__(self, info: SandboxInfo, client: Optional[Client] = None) -> None:
        self.client = client or default_client()
        self.info = info
        self.files = Files(self)

    def __repr__(self) -> str:
        return f"Sandbox({self.name!r}, id={self.id!r})"

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def _ref(self) -> str:
        # The id: a later sandbox that reuses the name is another sandbox.
        return self.info.id or self.info.name

    # Finding sandboxes.

    @classmethod
    def create(
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
        volumes: Optional[Sequence[Mapping[str, Any]]] = None,
        client: Optional[Client] = None,
    ) -> "Sandbox":
        """Make a sandbox and return it once it is running.

        Args:
            name: unique among the caller's sandboxes: 1 to 63 lowercase letters,
                digits or '-', starting and ending with a letter or digit.
            image: the image (default ``"host"``, the host's own /usr, read-only),
                or a registry reference such as ``"python:3.12-slim"``.
            pull: when the daemon pulls ``image`` from its registry first:
                ``"missing"`` (default: when it is not here), ``"always"`` or ``"never"``.
            cpu: cores, e.g. ``0.5``. memory, disk: bytes, or a size like ``"512Mi"``.
            network: egress mode ``none``, ``deny_all``, ``baseline`` (default),
                ``allowlist`` or ``unrestricted``, or a :class:`NetworkPolicy`.
            idle_suspend: seconds (or ``"10m"``) without traffic before it suspends
                (default 10 minutes, at least 1 minute).
            max_lifetime, ttl: seconds or a duration string; see the API.
            env, labels: str to str.
            workspace: the absolute path of a directory of the daemon's machine to
                mount at /workspace as it is (no copy), ``workspace_access`` ``"rw"``
                (default) or ``"ro"``. Its owner shows as the sandbox's root. Only over
                the unix socket, for a directory the calling user owns, on runc.
            node_selector: str to str: labels the sandbox's node must carry (the
                daemons' config ``node.labels``).
            idempotency_key: makes a retry after a lost answer safe.
            volumes: the caller's volumes to attach, each
                ``{"name": "data", "path": "/data", "read_only": False}`` (one writer
                per volume at a time).
            client: the client to use (default: :func:`default_client`).
        """
        c = client or default_client()
        info = c.create(
            name, image=image, pull=pull, cpu=cpu, memory=memory, disk=disk, network=network, idle_suspend=idle_suspend,
            max_lifetime=max_lifetime, ttl=ttl, env=env, labels=labels, runtime=runtime, role=role,
            workspace=workspace, workspace_access=workspace_access, node_selector=node_selector,
            idempotency_key=idempotency_key, volumes=volumes,
        )
        return cls(info, c)

    @classmethod
    def get(cls, ref: str, *, client: Optional[Client] = None) -> "Sandbox":
        """The sandbox of this name (or id), from any process; NotFound if none."""
        c = client or default_client()
        return cls(c.get(ref), c)

    @classmethod
    def list(
        cls,
        *,
        states: Optional[Sequence[str]] = None,
        labels: Optional[Mapping[str, str]] = None,
        client: Optional[Client] = None,
    ) -> List["Sandbox"]:
        """The caller's sandboxes in one of states (any, if None) carrying every label given."""
        c = client or default_client()
        return [cls(i, c) for i in c.list(states=states, labels=labels)]

    @classmethod
    def from_snapshot(
        cls,
        snapshot: Union[str, Snapshot],
        name: str,
        *,
        labels: Optional[Mapping[str, str]] = None,
        client: Optional[Client] = None,
    ) -> "Sandbox":
        """A new sandbox named name, started from a snapshot."""
        c = client or default_client()
        sid = _validate.snapshot_id(snapshot.id if isinstance(snapshot, Snapshot) else snapshot)
        return cls(c.fork(sid, name, labels), c)

    # State.

    def refresh(self) -> SandboxInfo:
        """Read the sandbox again; :attr:`info` is updated and returned."""
        self.info = self.client.get(self._ref)
        return self.info

    @property
    def state(self) -> str:
        """The sandbox's state now (a fresh read): ``running``, ``suspended``, ..."""
        return self.refresh().state

    @property
    def generation(self) -> int:
        """How many containers have been built behind this handle, now (a fresh read).
        It grows by one on every resume or restore: compare it across calls to notice
        that the sandbox restarted (its processes and /tmp are then gone)."""
        return self.refresh().generation

    # Running code.

    def exec(
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
        """Run a command to completion. cmd is a shell command (str, run with
        ``/bin/sh -c``) or an argv (list of str); timeout is in seconds. How it ended
        (``timeout``, ``oom_killed``...) is in the result's ``state``, not an exception.
        A suspended sandbox is resumed first."""
        return self.client.exec(self._ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid)

    def exec_stream(
        self,
        cmd: Cmd,
        *,
        timeout: Optional[float] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        stdin: Union[str, bytes, None] = None,
        uid: Optional[int] = None,
        gid: Optional[int] = None,
    ) -> ExecStream:
        """Run a command and iterate over its output chunks as they are produced::

            with sb.exec_stream("make") as stream:
                for chunk in stream:
                    print(chunk.stream, chunk.text, end="")
            print(stream.result.exit_code)
        """
        return self.client.exec_stream(self._ref, cmd, timeout=timeout, env=env, cwd=cwd, stdin=stdin, uid=uid, gid=gid)

    def session(
        self,
        kind: str = "python",
        *,
        argv: Optional[Sequence[str]] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[str] = None,
        background: bool = False,
    ) -> Session:
        """Start a session: ``python`` (a REPL), ``shell`` (``/bin/sh``, or argv) or
        ``raw`` (argv, any program; a reply ends when its output goes quiet). A
        ``background`` raw session (a server, a long job) takes no input; its output is
        kept in a log that :meth:`Session.logs` reads."""
        return Session(self, self.client.start_session(self._ref, kind, argv=argv, env=env, cwd=cwd, background=background))

    def sessions(self) -> List[Session]:
        """The sandbox's live sessions."""
        return [Session(self, i) for i in self.client.sessions(self._ref)]

    # Lifecycle.

    def suspend(self) -> "Sandbox":
        """Stop compute, keeping the handle and the writable layer; under runsc the
        memory and processes too (info["persistence"] says which). Idempotent."""
        self.info = self.client.suspend(self._ref)
        return self

    def resume(self) -> "Sandbox":
        """Start again (generation + 1): a fresh container, or under runsc the
        processes restored as they were suspended. Any call to a suspended sandbox
        resumes it too; this pays the start up front."""
        self.info = self.client.resume(self._ref)
        return self

    def terminate(self) -> None:
        """End the sandbox and delete what it owns. Terminating a sandbox that is
        already gone is not an error."""
        try:
            self.info = self.client.terminate(self._ref)
        except NotFound:
            pass

    def snapshot(self, labels: Optional[Mapping[str, str]] = None, *, memory: bool = False) -> Snapshot:
        """Take a snapshot of the writable layer (crash-consistent while running); with
        memory, its memory and processes too (runsc), so a fork of it runs on from there."""
        return self.client.snapshot(self._ref, labels, memory=memory)

    def stats(self, *, history: bool = False) -> Dict[str, Any]:
        """This sandbox's resource use (see :meth:`Client.stats`)."""
        return self.client.stats(self._ref, history=history)

    def snapshots(self) -> List[Snapshot]:
        """This sandbox's snapshots."""
        return self.client.snapshots(self._ref)

    def restore(self, snapshot: Union[str, Snapshot], *, safety_snapshot: bool = True) -> "Sandbox":
        """Replace the writable layer with a snapshot's; the sandbox must be suspended."""
        sid = snapshot.id if isinstance(snapshot, Snapshot) else snapshot
        self.info = self.client.restore(self._ref, sid, safety_snapshot=safety_snapshot)
        return self

    def fork(self, name: str, *, labels: Optional[Mapping[str, str]] = None) -> "Sandbox":
        """A new sandbox named name with a copy of this one's writable layer."""
        return type(self)(self.client.fork(self._ref, name, labels), self.client)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.terminate()
