"""Every API call as a validated :class:`Request`, shared by both clients.

Each function checks its arguments (raising :class:`InvalidArgument` before anything
is sent) and returns the request with the parser of its answer. The blocking and the
asyncio clients only send them.
"""

from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union
from urllib.parse import quote

from . import _validate as v
from ._protocol import Request, sandbox_path
from ._tree import TreeSummary
from .errors import Internal, InvalidArgument
from .types import ExecResult, FileInfo, NetworkPolicy, Operation, SandboxInfo, SessionInfo, Snapshot

Cmd = Union[str, Sequence[str]]


def _op_sandbox(doc: Dict[str, Any]) -> SandboxInfo:
    sb = doc.get("sandbox")
    if not isinstance(sb, dict):
        raise Internal("the daemon's answer has no sandbox")
    return SandboxInfo.from_json(sb)


def _op_snapshot(doc: Dict[str, Any]) -> Snapshot:
    snap = doc.get("snapshot")
    if not isinstance(snap, dict):
        raise Internal("the daemon's answer has no snapshot")
    return Snapshot.from_json(snap)


def status() -> Request[Dict[str, Any]]:
    return Request("GET", "/v1/status", parse=dict)


def operation(op_id: str) -> Request[Operation]:
    if not isinstance(op_id, str) or not op_id.startswith("op_"):
        raise InvalidArgument(f"invalid operation id {op_id!r}: an operation id looks like op_…")
    return Request("GET", "/v1/operations/" + op_id, parse=Operation.from_json)


def create(
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
    node_selector: Optional[Mapping[str, str]] = None,
    workspace_access: str = "rw",
    idempotency_key: Optional[str] = None,
    volumes: Optional[Sequence[Mapping[str, Any]]] = None,
) -> Request[SandboxInfo]:
    body: Dict[str, Any] = {"name": v.name(name)}
    if image is not None:
        body["image"] = v.image(image)
    limits: Dict[str, Any] = {}
    if cpu is not None:
        limits["cpu"] = v.cpu(cpu)
    if memory is not None:
        limits["memory"] = v.size(memory, "memory")
    if disk is not None:
        limits["disk"] = v.size(disk, "disk")
    if limits:
        body["limits"] = limits
    if network is not None:
        body["network"] = v.network(network)
    for key, val in (("idle_suspend", idle_suspend), ("max_lifetime", max_lifetime), ("ttl", ttl)):
        if val is not None:
            body[key] = v.duration(val, key)
    if env is not None:
        body["env"] = v.env(env)
    if labels is not None:
        body["labels"] = v.labels(labels)
    if node_selector is not None:
        body["node_selector"] = v.node_selector(node_selector)
    for key, val in (("pull", pull), ("runtime", runtime), ("role", role)):
        if val is not None:
            if not isinstance(val, str) or not val:
                raise InvalidArgument(f"invalid {key} {val!r}: give a non-empty str")
            body[key] = val
    if workspace is not None:
        if not isinstance(workspace, str) or not workspace.startswith("/"):
            raise InvalidArgument(f"invalid workspace {workspace!r}: give the absolute path of a directory of the daemon's machine")
        if workspace_access not in ("ro", "rw"):
            raise InvalidArgument(f"invalid workspace_access {workspace_access!r}: ro or rw")
        body["workspace"] = {"path": workspace, "access": workspace_access}
    if volumes:
        body["volumes"] = _volume_mounts(volumes)
    return Request("POST", "/v1/sandboxes", json=body, idempotency_key=v.idempotency_key(idempotency_key), parse=_op_sandbox)


def get(ref: str) -> Request[SandboxInfo]:
    return Request("GET", sandbox_path(v.ref(ref)), parse=SandboxInfo.from_json)


LIST_PAGE_SIZE = 1000


def list_sandboxes(
    states: Optional[Sequence[str]] = None,
    labels: Optional[Mapping[str, str]] = None,
    all_owners: bool = False,
    after: Optional[str] = None,
) -> Request[Tuple[List[SandboxInfo], Optional[str]]]:
    """One page of sandboxes from after on, and the after of the next page (None after the last)."""
    q: List[Tuple[str, str]] = []
    for s in [states] if isinstance(states, str) else (states or []):
        if not isinstance(s, str) or not s:
            raise InvalidArgument(f"invalid state {s!r}")
        q.append(("state", s))
    for k, val in sorted((v.labels(labels) or {}).items()):
        q.append(("label", f"{k}={val}"))
    if all_owners:
        q.append(("all_owners", "true"))
    q.append(("limit", str(LIST_PAGE_SIZE)))
    if after:
        q.append(("after", after))
    return Request(
        "GET",
        "/v1/sandboxes",
        query=q,
        parse=lambda d: ([SandboxInfo.from_json(s) for s in d.get("sandboxes") or []], d.get("next") or None),
    )


def terminate(ref: str, *, if_match: Optional[int] = None, idempotency_key: Optional[str] = None) -> Request[SandboxInfo]:
    return Request("DELETE", sandbox_path(v.ref(ref)), if_match=_version(if_match), idempotency_key=v.idempotency_key(idempotency_key), parse=_op_sandbox)


def lifecycle(ref: str, action: str, *, idempotency_key: Optional[str] = None) -> Request[SandboxInfo]:
    return Request("POST", sandbox_path(v.ref(ref), action), idempotency_key=v.idempotency_key(idempotency_key), parse=_op_sandbox)


def _version(x: Optional[int]) -> Optional[int]:
    if x is None:
        return None
    if not isinstance(x, int) or isinstance(x, bool) or x < 0:
        raise InvalidArgument(f"invalid version {x!r}: a non-negative int (SandboxInfo.version)")
    return x


def exec_(
    ref: str,
    cmd: Cmd,
    *,
    timeout: Optional[float] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    stdin: Union[str, bytes, None] = None,
    uid: Optional[int] = None,
    gid: Optional[int] = None,
    stream: bool = False,
) -> Request[ExecResult]:
    body: Dict[str, Any] = v.command(cmd)
    t = v.timeout(timeout)
    if t is not None:
        body["timeout"] = t
    if env is not None:
        body["env"] = v.env(env)
    if cwd is not None:
        body["cwd"] = v.path(cwd)
    if stdin is not None:
        data = v.text_or_bytes(stdin, "stdin")
        try:
            body["stdin"] = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidArgument("invalid stdin: the API carries stdin as text; give valid UTF-8") from None
    for key, val in (("uid", uid), ("gid", gid)):
        if val is not None:
            body[key] = v.uid(val, key)
    if stream:
        body["stream"] = True
    return Request("POST", sandbox_path(v.ref(ref), "exec"), json=body, stream=stream, parse=ExecResult.from_json)


def start_session(
    ref: str,
    kind: str = "python",
    *,
    argv: Optional[Sequence[str]] = None,
    env: Optional[Mapping[str, str]] = None,
    cwd: Optional[str] = None,
    background: bool = False,
) -> Request[SessionInfo]:
    body: Dict[str, Any] = {"kind": kind}
    a = v.session_kind(kind, argv)
    if a is not None:
        body["argv"] = a
    if env is not None:
        body["env"] = v.env(env)
    if cwd is not None:
        body["cwd"] = v.path(cwd)
    if background:
        if kind != "raw":
            raise InvalidArgument(f"a {kind} session takes input; only a raw session (with argv) runs in the background")
        body["background"] = True
    return Request("POST", sandbox_path(v.ref(ref), "sessions"), json=body, parse=SessionInfo.from_json)


def session_logs(ref: str, session_id: str, *, tail: int = 0, follow: bool = False) -> Request[ExecResult]:
    if not isinstance(tail, int) or isinstance(tail, bool) or tail < 0:
        raise InvalidArgument(f"invalid tail {tail!r}: give a number of lines, 0 (all kept) or more")
    query = []
    if tail:
        query.append(("tail", str(tail)))
    if follow:
        query.append(("follow", "true"))
    return Request(
        "GET",
        sandbox_path(v.ref(ref), "sessions", v.session_id(session_id), "logs"),
        query=query,
        stream=True,
        parse=ExecResult.from_json,
    )


def list_sessions(ref: str) -> Request[List[SessionInfo]]:
    return Request("GET", sandbox_path(v.ref(ref), "sessions"), parse=lambda d: [SessionInfo.from_json(s) for s in d.get("sessions") or []])


def send(ref: str, session_id: str, input: str, *, stream: bool = False) -> Request[ExecResult]:
    if not isinstance(input, str):
        raise InvalidArgument(f"invalid input {type(input).__name__}: give the message as a str")
    body: Dict[str, Any] = {"input": input}
    if stream:
        body["stream"] = True
    return Request(
        "POST",
        sandbox_path(v.ref(ref), "sessions", v.session_id(session_id), "send"),
        json=body,
        stream=stream,
        parse=ExecResult.from_json,
    )


def close_session(ref: str, session_id: str) -> Request[None]:
    return Request("DELETE", sandbox_path(v.ref(ref), "sessions", v.session_id(session_id)))


def upload(ref: str, path: str, data: Union[bytes, str], mode: Optional[int] = None) -> Request[FileInfo]:
    q = [("path", v.path(path))]
    m = v.file_mode(mode)
    if m:
        q.append(("mode", "0" + format(m, "o")))
    return Request("PUT", sandbox_path(v.ref(ref), "files"), query=q, body=v.text_or_bytes(data, "data"), parse=FileInfo.from_json)


def download(ref: str, path: str, offset: int = 0, length: Optional[int] = None) -> Request[bytes]:
    return Request("GET", sandbox_path(v.ref(ref), "files"), query=[("path", v.path(path))], raw=True, parse=bytes,
                   byte_range=v.byte_range(offset, length))


def upload_tar(ref: str, path: str, f: Any, size: int) -> Request[TreeSummary]:
    return Request("PUT", sandbox_path(v.ref(ref), "files", "tar"), query=[("path", v.path(path))],
                   stream_body=(f, size, "application/x-tar"), parse=TreeSummary.from_json)


def download_tar(ref: str, path: str) -> Request[bytes]:
    return Request("GET", sandbox_path(v.ref(ref), "files", "tar"), query=[("path", v.path(path))], raw=True, parse=bytes)


def list_files(ref: str, path: str) -> Request[List[FileInfo]]:
    return Request(
        "GET",
        sandbox_path(v.ref(ref), "files", "list"),
        query=[("path", v.path(path))],
        parse=lambda d: [FileInfo.from_json(f) for f in d.get("files") or []],
    )


def stat(ref: str, path: str) -> Request[FileInfo]:
    return Request("GET", sandbox_path(v.ref(ref), "files", "stat"), query=[("path", v.path(path))], parse=FileInfo.from_json)


def mkdir(ref: str, path: str, parents: bool = False) -> Request[None]:
    body: Dict[str, Any] = {"path": v.path(path)}
    if parents:
        body["parents"] = True
    return Request("POST", sandbox_path(v.ref(ref), "files", "mkdir"), json=body)


def remove(ref: str, path: str, recursive: bool = False) -> Request[None]:
    q = [("path", v.path(path))]
    if recursive:
        q.append(("recursive", "true"))
    return Request("DELETE", sandbox_path(v.ref(ref), "files"), query=q)


def snapshot(ref: str, labels: Optional[Mapping[str, str]] = None, *, memory: bool = False, idempotency_key: Optional[str] = None) -> Request[Snapshot]:
    """Snapshot a sandbox; with memory, a running runsc sandbox's memory and processes
    too (refused with the reason elsewhere), so a fork of it runs on from that point."""
    body: Dict[str, Any] = {}
    if labels:
        body["labels"] = v.labels(labels)
    if not isinstance(memory, bool):
        raise InvalidArgument(f"memory must be True or False, not {memory!r}")
    if memory:
        body["memory"] = True
    return Request("POST", sandbox_path(v.ref(ref), "snapshots"), json=body, idempotency_key=v.idempotency_key(idempotency_key), parse=_op_snapshot)


def stats(ref: str, *, history: bool = False, follow: bool = False) -> Request[Dict[str, Any]]:
    """A sandbox's usage (GET /v1/sandboxes/{ref}/stats) as the API's JSON object; with
    follow, an NDJSON stream of them."""
    q = [(k, "1") for k, on in (("history", history), ("follow", follow)) if on] or None
    return Request("GET", sandbox_path(v.ref(ref), "stats"), query=q, parse=dict)


def all_stats(*, all_owners: bool = False) -> Request[List[Dict[str, Any]]]:
    """Every visible sandbox's usage (GET /v1/stats)."""
    q = [("all_owners", "true")] if all_owners else None
    return Request("GET", "/v1/stats", query=q, parse=lambda d: list(d.get("sandboxes") or []))


def snapshots(ref: Optional[str] = None) -> Request[List[Snapshot]]:
    q = [("sandbox", v.ref(ref))] if ref is not None else None
    return Request("GET", "/v1/snapshots", query=q, parse=lambda d: [Snapshot.from_json(s) for s in d.get("snapshots") or []])


def delete_snapshot(snapshot_id: str) -> Request[None]:
    return Request("DELETE", "/v1/snapshots/" + quote(v.snapshot_id(snapshot_id), safe=""))


def restore(ref: str, snapshot_id: str, *, safety_snapshot: bool = True, idempotency_key: Optional[str] = None) -> Request[SandboxInfo]:
    body: Dict[str, Any] = {"snapshot": v.snapshot_id(snapshot_id)}
    if not safety_snapshot:
        body["no_safety_snapshot"] = True
    return Request("POST", sandbox_path(v.ref(ref), "restore"), json=body, idempotency_key=v.idempotency_key(idempotency_key), parse=_op_sandbox)


def fork(src: str, name: str, labels: Optional[Mapping[str, str]] = None, *, idempotency_key: Optional[str] = None) -> Request[SandboxInfo]:
    """Fork a sandbox (name or id) or a snapshot (``snap_…``) into a new sandbox."""
    if isinstance(src, str) and src.startswith("snap_"):
        path = "/v1/snapshots/" + quote(v.snapshot_id(src), safe="") + "/fork"
    else:
        path = sandbox_path(v.ref(src), "fork")
    body: Dict[str, Any] = {"name": v.name(name)}
    if labels:
        body["labels"] = v.labels(labels)
    return Request("POST", path, json=body, idempotency_key=v.idempotency_key(idempotency_key), parse=_op_sandbox)


# Volumes.


def _volume_mounts(volumes: Sequence[Mapping[str, Any]]) -> List[Dict[str, Any]]:
    """[{"name": "data", "path": "/data", "read_only": False}, …] as the API takes it."""
    out = []
    for m in volumes:
        if not isinstance(m, Mapping) or not isinstance(m.get("name"), str) or not isinstance(m.get("path"), str) or not m["path"].startswith("/"):
            raise InvalidArgument(f"invalid volume mount {m!r}: give {{'name': NAME, 'path': '/ABSOLUTE', 'read_only': bool}}")
        out.append({"name": m["name"], "path": m["path"], "read_only": bool(m.get("read_only", False))})
    return out


def _volume_path(name: str, verb: str = "") -> str:
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"invalid volume name {name!r}")
    return "/v1/volumes/" + quote(name, safe="") + ("/" + verb if verb else "")


def create_volume(name: str, size: Union[int, str, None] = None, *, from_snapshot: Optional[str] = None) -> Request[Dict[str, Any]]:
    body: Dict[str, Any] = {"name": v.name(name)}
    if size is not None:
        body["size"] = v.size(size, "size")
    if from_snapshot is not None:
        body["from"] = from_snapshot
    if "size" not in body and "from" not in body:
        raise InvalidArgument("a volume needs a size (such as '10G') or a snapshot to start from")
    return Request("POST", "/v1/volumes", json=body, parse=dict)


def volumes(kind: str = "volume") -> Request[List[Dict[str, Any]]]:
    if kind not in ("volume", "snapshot"):
        raise InvalidArgument(f"invalid kind {kind!r}: volume or snapshot")
    return Request("GET", "/v1/volumes", query=[("kind", kind)], parse=lambda d: list(d.get("volumes") or []))


def get_volume(name: str) -> Request[Dict[str, Any]]:
    return Request("GET", _volume_path(name), parse=dict)


def delete_volume(name: str) -> Request[None]:
    return Request("DELETE", _volume_path(name))


def resize_volume(name: str, size: Union[int, str]) -> Request[Dict[str, Any]]:
    return Request("POST", _volume_path(name, "resize"), json={"size": v.size(size, "size")}, parse=dict)


def snapshot_volume(name: str) -> Request[Dict[str, Any]]:
    return Request("POST", _volume_path(name, "snapshot"), json={}, parse=dict)


def attach_volume(name: str, sandbox: str, path: str, read_only: bool = False) -> Request[SandboxInfo]:
    body = {"sandbox": v.ref(sandbox), "path": path, "read_only": bool(read_only)}
    return Request("POST", _volume_path(name, "attach"), json=body, parse=SandboxInfo.from_json)


def detach_volume(name: str, sandbox: str) -> Request[SandboxInfo]:
    return Request("POST", _volume_path(name, "detach"), json={"sandbox": v.ref(sandbox)}, parse=SandboxInfo.from_json)
