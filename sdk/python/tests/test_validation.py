"""Arguments are checked before anything is sent, and a daemon that cannot be reached
is a retryable error naming where it was looked for."""

import json
import pathlib
import socket

import pytest

import airlock
from airlock import Client, Sandbox
from airlock._protocol import resolve_target


@pytest.fixture
def nowhere(tmp_path):
    """A client whose daemon does not exist: a call that sent anything would fail
    with Unavailable, so an InvalidArgument proves nothing was sent."""
    return Client(socket=str(tmp_path / "nobody.sock"))


BAD_CREATES = [
    ({"name": 42}, "sandbox name"),
    ({"name": "ok", "network": "open"}, "network mode"),
    ({"name": "ok", "network": {"mode": "none", "deny": []}}, "unknown keys"),
    ({"name": "ok", "cpu": "2"}, "cpu"),
    ({"name": "ok", "cpu": float("inf")}, "cpu"),
    ({"name": "ok", "memory": "lots"}, "memory"),
    ({"name": "ok", "memory": "1.5"}, "memory"),
    ({"name": "ok", "disk": 1.5}, "disk"),
    ({"name": "ok", "idle_suspend": [10]}, "idle_suspend"),
    ({"name": "ok", "env": {"A": 1}}, "env"),
    ({"name": "ok", "labels": ["a"]}, "labels"),
    ({"name": "ok", "node_selector": ["zone=a"]}, "node_selector"),
    ({"name": "ok", "image": ""}, "image"),
    ({"name": "ok", "workspace": "relative/dir"}, "workspace"),
    ({"name": "ok", "workspace": "/tmp", "workspace_access": "rwx"}, "workspace_access"),
    ({"name": "ok", "volumes": [{"name": "data", "path": "relative"}]}, "volume mount"),
    ({"name": "ok", "volumes": ["data:/data"]}, "volume mount"),
]


@pytest.mark.parametrize("kwargs,says", BAD_CREATES)
def test_create_validates_before_sending(nowhere, kwargs, says):
    name = kwargs.pop("name")
    with pytest.raises(airlock.InvalidArgument) as ei:
        Sandbox.create(name, client=nowhere, **kwargs)
    assert says in str(ei.value)
    assert isinstance(ei.value, ValueError) and ei.value.status == 0


# The sizes the daemon reads, and the ones it refuses: one table for both (see
# internal/units/units_test.go).
SIZES = json.loads((pathlib.Path(__file__).resolve().parents[3] / "internal/units/testdata/sizes.json").read_text())


@pytest.mark.parametrize("text,want", sorted(SIZES["accepted"].items()))
def test_size_reads_as_the_daemon_does(nowhere, text, want):
    from airlock._validate import parse_size
    assert parse_size(text) == want
    # Accepted sizes are sent: the call gets as far as the (missing) daemon.
    with pytest.raises(airlock.Unavailable):
        Sandbox.create("ok", memory=text, disk=text, client=nowhere)


@pytest.mark.parametrize("text", SIZES["refused"])
def test_size_refused_as_the_daemon_refuses(nowhere, text):
    with pytest.raises(airlock.InvalidArgument, match="memory") as ei:
        Sandbox.create("ok", memory=text, client=nowhere)
    assert ei.value.status == 0, "refused before sending"


@pytest.mark.parametrize("kwargs,says", [
    ({"memory": 1024}, "memory"),
    ({"memory": "1M"}, "memory"),
    ({"disk": "1M"}, "disk"),
    ({"cpu": 0.001}, "cpu"),
    ({"cpu": -1}, "cpu"),
    ({"idle_suspend": 10}, "idle_suspend"),
    ({"idle_suspend": "soon"}, "idle_suspend"),
    ({"ttl": "-1h"}, "ttl"),
])
def test_ranges_are_the_daemons(client, new_name, kwargs, says):
    """Ranges the daemon owns are not copied into the SDK: its invalid_argument comes back
    as InvalidArgument, and nothing is made."""
    name = new_name("py-range")
    with pytest.raises(airlock.InvalidArgument) as ei:
        Sandbox.create(name, network="none", client=client, **kwargs)
    assert ei.value.status == 400 and says in str(ei.value)
    with pytest.raises(airlock.NotFound):
        Sandbox.get(name, client=client)


@pytest.mark.parametrize("timeout,says", [(-1, "invalid timeout"), (0, "invalid timeout"), (90000, "too long")])
def test_exec_timeout_range_is_the_daemons(sandbox, timeout, says):
    with pytest.raises(airlock.InvalidArgument) as ei:
        sandbox.exec("true", timeout=timeout)
    assert ei.value.status == 400 and says in str(ei.value)


def _sb(client):
    return Sandbox(airlock.SandboxInfo.from_json({"id": "sb_abc", "name": "abc"}), client)


BAD_CALLS = [
    (lambda sb: sb.exec("true", timeout=float("nan")), "timeout"),
    (lambda sb: sb.exec("true", timeout="30"), "timeout"),
    (lambda sb: sb.exec_stream("true", timeout=float("inf")), "timeout"),
    (lambda sb: sb.exec(""), "empty command"),
    (lambda sb: sb.exec([]), "empty argv"),
    (lambda sb: sb.exec(["ls", 3]), "argv"),
    (lambda sb: sb.exec(b"ls"), "command"),
    (lambda sb: sb.exec("true", cwd=b"/tmp"), "path"),
    (lambda sb: sb.exec("true", env={"A": None}), "env"),
    (lambda sb: sb.session("ruby"), "session kind"),
    (lambda sb: sb.session("raw"), "needs argv"),
    (lambda sb: sb.files.write(None, b"x"), "path"),
    (lambda sb: sb.files.write("/x", 12), "bytes or str"),
    (lambda sb: sb.files.write("/x", b"x", mode=0o17777), "mode"),
    (lambda sb: sb.fork(7), "sandbox name"),
    (lambda sb: sb.restore("snapshot-1"), "snapshot id"),
    (lambda sb: Sandbox.get("", client=sb.client), "sandbox reference"),
    (lambda sb: Sandbox.from_snapshot("nope", "ok", client=sb.client), "snapshot id"),
]


# What a name, a label, an environment variable or a path may be is the daemon's rule,
# not copied here: its invalid_argument comes back as InvalidArgument, saying what was
# wrong and what is allowed, and nothing is made.
@pytest.mark.parametrize("kwargs,says", [
    ({"name": "Bad_Name"}, "a name is 1 to 63 lowercase letters"),
    ({"name": "x" * 64}, "a name is 1 to 63 lowercase letters"),
    ({"env": {"1BAD": "x"}}, "invalid environment variable name \"1BAD\": use letters, digits and '_'"),
    ({"labels": {"bad key": "x"}}, "invalid label key \"bad key\": 1 to 64 letters"),
    ({"node_selector": {"bad key": "x"}}, "node_selector: invalid label key \"bad key\": 1 to 64 letters"),
])
def test_create_rules_are_the_daemons(client, new_name, kwargs, says):
    name = kwargs.pop("name", None) or new_name("py-rule")
    with pytest.raises(airlock.InvalidArgument) as ei:
        Sandbox.create(name, network="none", client=client, **kwargs)
    assert ei.value.status == 400 and says in str(ei.value)
    with pytest.raises(airlock.NotFound):
        Sandbox.get(name, client=client)


@pytest.mark.parametrize("call,says", [
    (lambda sb: sb.exec("true", env={"A-B": "1"}), "invalid environment variable name \"A-B\": use letters, digits and '_'"),
    (lambda sb: sb.session("raw", argv=["true"], env={"A-B": "1"}), "invalid environment variable name \"A-B\""),
    (lambda sb: sb.exec("true", cwd="relative"), "give an absolute path inside the sandbox"),
    (lambda sb: sb.files.write("notabs", b"x"), "must be absolute"),
    (lambda sb: sb.files.read("x"), "must be absolute"),
    (lambda sb: sb.files.remove("a/b"), "must be absolute"),
    (lambda sb: sb.fork("Not Valid"), "a name is 1 to 63 lowercase letters"),
])
def test_call_rules_are_the_daemons(sandbox, call, says):
    with pytest.raises(airlock.InvalidArgument) as ei:
        call(sandbox)
    assert ei.value.status == 400 and says in str(ei.value)


def test_bad_references_are_not_found(client):
    """A reference no sandbox or snapshot can have is simply not found, and stays in its
    place in the URL."""
    with pytest.raises(airlock.NotFound, match="../etc"):
        Sandbox.get("../etc", client=client)
    with pytest.raises(airlock.NotFound, match="snap_../x"):
        Sandbox.from_snapshot("snap_../x", "ok", client=client)


@pytest.mark.parametrize("call,says", BAD_CALLS)
def test_calls_validate_before_sending(nowhere, call, says):
    with pytest.raises(ValueError) as ei:
        call(_sb(nowhere))
    assert isinstance(ei.value, airlock.InvalidArgument)
    assert says in str(ei.value)


def test_bad_client_arguments(tmp_path):
    with pytest.raises(airlock.InvalidArgument):
        Client(url="ftp://example.com:21")
    with pytest.raises(airlock.InvalidArgument):
        Client(url="https://example.com:443", ca_file=str(tmp_path / "none.pem"))
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate")
    with pytest.raises(airlock.InvalidArgument):
        Client(url="https://example.com:443", ca_file=str(not_pem))
    with pytest.raises(airlock.InvalidArgument):
        Client(url="http://host:99999")
    with pytest.raises(airlock.InvalidArgument):
        Client(socket="/tmp/x.sock", timeout=-1)


def test_missing_socket_is_retryable_unavailable(tmp_path):
    path = str(tmp_path / "gone.sock")
    c = Client(socket=path)
    with pytest.raises(airlock.Unavailable) as ei:
        Sandbox.get("anything", client=c)
    e = ei.value
    assert e.retryable and e.code == "unavailable" and isinstance(e, airlock.AirlockError)
    assert path in str(e) and "daemon" in str(e)


def test_refusing_socket_is_retryable_unavailable(tmp_path):
    # A socket file nobody accepts on (a daemon that died): connection refused.
    path = str(tmp_path / "dead.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    try:
        with pytest.raises(airlock.Unavailable) as ei:
            Client(socket=path).exec("sb_abc", "true")
    finally:
        s.close()
    assert ei.value.retryable and path in str(ei.value)


def test_unreachable_tcp_is_retryable_unavailable():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens on the port now
    with pytest.raises(airlock.Unavailable) as ei:
        Client(url=f"http://127.0.0.1:{port}", token="t").status()
    assert f"127.0.0.1:{port}" in str(ei.value) and ei.value.retryable


def test_target_precedence(monkeypatch, tmp_path):
    for k in ("AIRLOCK_SOCKET", "AIRLOCK_URL", "AIRLOCK_TOKEN", "AIRLOCK_API", "AIRLOCK_SESSION_TOKEN_FILE"):
        monkeypatch.delenv(k, raising=False)
    assert resolve_target().address == "/run/airlock/airlock.sock"
    monkeypatch.setenv("AIRLOCK_SOCKET", "/env.sock")
    assert resolve_target().address == "/env.sock"
    assert resolve_target(socket="/arg.sock").address == "/arg.sock"
    monkeypatch.setenv("AIRLOCK_URL", "http://10.0.0.1:7070")
    monkeypatch.setenv("AIRLOCK_TOKEN", "tok")
    t = resolve_target()
    assert (t.network, t.address, t.token) == ("tcp", "10.0.0.1:7070", "tok")
    assert resolve_target(socket="/arg.sock").network == "unix"  # an argument beats the environment
    t = resolve_target(url="host.example:81", socket="/arg.sock", token="mine")
    assert (t.network, t.address, t.token) == ("tcp", "host.example:81", "mine")
    assert "tok" not in repr(t)

    # Inside a sandbox: $AIRLOCK_API with the session credential from its file.
    for k in ("AIRLOCK_SOCKET", "AIRLOCK_URL", "AIRLOCK_TOKEN"):
        monkeypatch.delenv(k)
    tok = tmp_path / "token"
    tok.write_text("session-cred\n")
    monkeypatch.setenv("AIRLOCK_API", "http://airlock.internal")
    monkeypatch.setenv("AIRLOCK_SESSION_TOKEN_FILE", str(tok))
    t = resolve_target()
    assert (t.network, t.address, t.token) == ("tcp", "airlock.internal:80", "session-cred")


def test_stream_error_carries_its_status():
    """An error inside a stream (after its 200) gets the status the API gives its code,
    as an error answer would."""
    from airlock._protocol import EventReader
    with pytest.raises(airlock.NotFound) as e:
        EventReader().feed(b'{"type":"error","error":{"code":"not_found","message":"gone"}}\n')
    assert e.value.status == 404 and e.value.code == "not_found"
    with pytest.raises(airlock.Internal) as e:
        EventReader().feed(b'{"type":"error","error":"not an object"}\n')
    assert e.value.status == 500


def test_fork_keeps_the_subclass(monkeypatch):
    """A subclass of Sandbox gets forks of its own class, as create gives it."""
    class Mine(Sandbox):
        pass
    client = Client(socket="/nonexistent.sock")
    info = {"id": "sb_1", "name": "a", "state": "running"}
    monkeypatch.setattr(client, "fork", lambda ref, name, labels: airlock.SandboxInfo.from_json(dict(info, id="sb_2", name=name)))
    forked = Mine(airlock.SandboxInfo.from_json(info), client).fork("b")
    assert type(forked) is Mine and forked.name == "b"


@pytest.mark.parametrize("kw,what", [
    ({"offset": -1}, "offset"), ({"offset": 1.5}, "offset"), ({"offset": True}, "offset"),
    ({"length": 0}, "length"), ({"length": -3}, "length"), ({"length": "10"}, "length"),
])
def test_bad_file_part(nowhere, kw, what):
    sb = Sandbox(airlock.SandboxInfo.from_json({"id": "sb_1", "name": "a", "state": "running"}), nowhere)
    with pytest.raises(airlock.InvalidArgument, match=what):
        sb.files.read("/etc/hostname", **kw)


def test_file_part_from_a_whole_answer():
    """A 200 (a daemon without ranges) is cut to the part asked for; a 206 is the part."""
    from airlock import _calls
    from airlock._protocol import file_part
    req = _calls.download("box", "/f", 2, 3)
    assert req.encode(resolve_target(socket="/x"))[1]["Range"] == "bytes=2-4"
    assert file_part(req, 200, b"0123456789") == b"234"
    assert file_part(req, 206, b"234") == b"234"
    rest = _calls.download("box", "/f", 7)
    assert rest.encode(resolve_target(socket="/x"))[1]["Range"] == "bytes=7-"
    assert file_part(rest, 200, b"0123456789") == b"789"
    assert "Range" not in _calls.download("box", "/f").encode(resolve_target(socket="/x"))[1]


def test_list_all_owners_asks_for_every_owner():
    """all_owners=True asks the daemon for every owner's sandboxes; by default only the caller's."""
    from airlock import _calls
    assert ("all_owners", "true") in _calls.list_sandboxes(all_owners=True).query
    assert not any(k == "all_owners" for k, _ in _calls.list_sandboxes(["running"]).query)


def test_list_sandboxes_pages():
    """List asks for pages of 1000 and reads next from each answer."""
    from airlock import _calls
    first = _calls.list_sandboxes()
    assert ("limit", "1000") in first.query and not any(k == "after" for k, _ in first.query)
    assert ("after", "c1") in _calls.list_sandboxes(after="c1").query
    page, nxt = first.parse({"sandboxes": [], "next": "c1"})
    assert page == [] and nxt == "c1"
    assert first.parse({"sandboxes": []}) == ([], None)
    info = airlock.SandboxInfo.from_json({"id": "sb_1", "name": "box", "owner": "alice"})
    assert info.owner == "alice"


def test_a_lost_sandbox_reads_with_its_node_and_when():
    info = airlock.SandboxInfo.from_json({"id": "sb_abc", "name": "abc", "state": "lost", "node": "node-b",
                                          "lost_at": "2026-12-06T10:00:00Z", "files_at": "2026-12-06T09:00:00Z"})
    assert (info.state, info.node, info.lost_at, info.files_at) == ("lost", "node-b", "2026-12-06T10:00:00Z", "2026-12-06T09:00:00Z")


def test_volume_calls_validate_before_sending(nowhere):
    with pytest.raises(airlock.InvalidArgument):
        nowhere.create_volume("data")  # no size
    with pytest.raises(airlock.InvalidArgument):
        nowhere.resize_volume("data", "lots")
    with pytest.raises(airlock.InvalidArgument):
        nowhere.volumes(kind="everything")


def test_snapshot_memory(nowhere):
    """memory=True asks for the memory image too; anything but a bool is refused
    before anything is sent."""
    from airlock import _calls

    assert _calls.snapshot("box", memory=True).json == {"memory": True}
    assert _calls.snapshot("box").json == {}
    with pytest.raises(airlock.InvalidArgument, match="memory"):
        nowhere.snapshot("box", memory="yes")
    snap = airlock.Snapshot.from_json({"id": "snap_1", "memory": {"bytes": 5, "files": [{"name": "pages.img", "size": 5, "sha256": "ab"}]}})
    assert snap.memory["bytes"] == 5
    assert airlock.Snapshot.from_json({"id": "snap_2"}).memory is None
