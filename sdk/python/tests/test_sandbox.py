"""Create, reconnect, exec, streams, sessions and files against a real daemon."""

import os
import time

import pytest

import airlock
from airlock import Sandbox


def test_create_get_exec(client, new_name):
    name = new_name("exec")
    sb = Sandbox.create(name, network="none", cpu=0.5, memory="128Mi", idle_suspend=120, labels={"suite": "python"}, client=client)
    assert sb.name == name and sb.id.startswith("sb_")
    assert sb.info.state == "running"
    assert sb.info.limits.memory == 128 << 20
    assert sb.info.idle_suspend in ("2m0s", "2m")
    assert sb.info.labels == {"suite": "python"}

    # Reconnect by name, as another process would, with a client of its own.
    other = airlock.Client()
    again = Sandbox.get(name, client=other)
    assert again.id == sb.id
    assert again.state == "running"

    res = again.exec("echo out; echo err >&2; exit 3")
    assert (res.exit_code, res.stdout, res.stderr, res.state) == (3, "out\n", "err\n", "failed")
    assert not res.ok
    assert isinstance(res.duration, float) and res.duration >= 0

    # Usage, from the host's accounting: the agent runs, within the limits set.
    st = sb.stats(history=True)
    assert {"cpu", "memory", "disk", "pids", "network", "history"} <= set(st), st
    assert st["state"] == "running" and st["memory"]["used_bytes"] > 0 and st["memory"]["limit_bytes"] == 128 << 20, st
    assert any(s["id"] == sb.id for s in client.all_stats())
    followed = client.follow_stats(sb.id)
    first = next(followed)
    followed.close()
    assert first["id"] == sb.id and first["state"] == "running", first

    res = sb.exec(["/bin/echo", "argv", "as", "given"])
    assert (res.exit_code, res.stdout, res.state) == (0, "argv as given\n", "succeeded")
    assert res.ok

    res = sb.exec("cat; echo; echo $GREETING; pwd", stdin="from stdin", env={"GREETING": "hello"}, cwd="/tmp")
    assert res.stdout == "from stdin\nhello\n/tmp\n"

    res = sb.exec("sleep 5", timeout=0.5)
    assert res.state == "timeout", res
    assert res.duration < 4

    res = sb.exec("printf '\\377ok'")
    assert res.stdout_bytes == b"\xffok"
    assert res.stdout == "\ufffdok"
    other.close()


def test_exec_stream_yields_chunks_in_order_as_produced(sandbox):
    got = []
    with sandbox.exec_stream("for i in 1 2 3 4 5; do echo line$i; done; echo oops >&2; sleep 1; echo last") as stream:
        for chunk in stream:
            got.append((time.monotonic(), chunk))
    assert stream.result is not None and stream.result.exit_code == 0 and stream.result.state == "succeeded"
    out = [c.text for _, c in got if c.stream == "stdout"]
    assert "".join(out) == "line1\nline2\nline3\nline4\nline5\nlast\n"
    assert [c.text for _, c in got if c.stream == "stderr"] == ["oops\n"]
    # Output is delivered as it is produced: the lines before the sleep arrive about a
    # second before the last one.
    first, last = got[0][0], got[-1][0]
    assert last - first > 0.5, [(round(t - first, 3), c) for t, c in got]
    assert got[-1][1].text == "last\n"


def test_exec_stream_wait_and_failure(sandbox):
    stream = sandbox.exec_stream(["sh", "-c", "echo a; echo b >&2; exit 7"])
    res = stream.wait()
    assert (res.exit_code, res.state, res.stdout, res.stderr) == (7, "failed", "a\n", "b\n")
    # Iterating again after the end yields nothing.
    assert list(stream) == []


# Whether a process named sleep runs, by pgrep's exit status (0 found, 1 none): any other
# status (127: no pgrep in the image) ends the loop as "pgrep failed". The loop's own
# sleeps do not overlap pgrep, so any sleep it sees is the streamed command's.
_PGREP_SLEEP = ("for i in $(seq 50); do pgrep -x sleep >/dev/null; rc=$?; "
                "case $rc in {want}) echo {word}; exit;; 0|1) ;; *) echo \"pgrep failed: $rc\"; exit;; esac; "
                "sleep 0.1; done; ps -ef")


def test_exec_stream_close_cancels(sandbox):
    stream = sandbox.exec_stream("echo started; sleep 30; echo never")
    first = next(iter(stream))
    assert first.text == "started\n"
    # The precondition of the check below: pgrep is there and sees the running sleep.
    res = sandbox.exec(_PGREP_SLEEP.format(want=0, word="seen"))
    assert res.stdout == "seen\n", f"pgrep (in the sandbox's image) must see the streamed command's sleep: {res}"
    t0 = time.monotonic()
    stream.close()
    # The sandbox is usable at once, and the cancelled command is gone.
    res = sandbox.exec(_PGREP_SLEEP.format(want=1, word="gone"))
    assert res.stdout == "gone\n", res
    assert time.monotonic() - t0 < 10


def test_background_session_logs(sandbox):
    ses = sandbox.session("raw", argv=["sh", "-c", "echo up; echo warn >&2; sleep 0.3; echo done; exit 5"], background=True)
    assert ses.info.background
    res = ses.logs(follow=True).wait()
    assert (res.state, res.exit_code) == ("exited", 5)
    assert res.stdout == "up\ndone\n" and res.stderr == "warn\n"
    assert ses.logs(tail=1).wait().stdout == "done\n"
    ended = [s for s in sandbox.sessions() if s.id == ses.id]
    assert ended and ended[0].info.exited and ended[0].info.exit_code == 5
    with pytest.raises(airlock.InvalidArgument):
        sandbox.session("python", background=True)


def test_session_round_trip(sandbox):
    with sandbox.session("python") as ses:
        assert ses.kind == "python" and ses.id and ses.pid > 0
        res = ses.send("x = 41")
        assert res.ok and res.stdout == ""
        res = ses.send("x + 1")
        assert (res.state, res.stdout) == ("succeeded", "42\n")
        res = ses.send("raise ValueError('boom')")
        assert res.state == "failed" and "ValueError: boom" in res.stderr
        stream = ses.send_stream("for i in range(3): print(i)")
        assert stream.wait().stdout == "0\n1\n2\n"
        assert [s.id for s in sandbox.sessions()] == [ses.id]
    assert sandbox.sessions() == []

    with sandbox.session("shell") as sh:
        sh.send("cd /tmp && export V=kept")
        res = sh.send("echo $PWD $V")
        assert res.stdout == "/tmp kept\n"


def test_files_write_read_list_remove(sandbox):
    info = sandbox.files.write("/root/hello.txt", "hello, airlock\n")
    assert info.size == 15 and info.name == "hello.txt"
    assert sandbox.files.read("/root/hello.txt") == b"hello, airlock\n"
    assert sandbox.files.read_text("/root/hello.txt") == "hello, airlock\n"

    blob = bytes(range(256)) * 1024
    info = sandbox.files.write("/root/tool.bin", blob, mode=0o750)
    assert info.size == len(blob) and info.mode & 0o777 == 0o750
    assert sandbox.files.read("/root/tool.bin") == blob
    # Parts, read without the rest: from an offset, for a length, past the end.
    assert sandbox.files.read("/root/tool.bin", offset=300, length=5) == blob[300:305]
    assert sandbox.files.read("/root/tool.bin", offset=len(blob) - 7) == blob[-7:]
    assert sandbox.files.read("/root/tool.bin", offset=len(blob) + 1, length=3) == b""
    assert sandbox.files.read("/root/hello.txt", length=5) == b"hello"

    sandbox.files.mkdir("/root/dir/sub", parents=True)
    entries = {f.name: f for f in sandbox.files.list("/root")}
    assert {"hello.txt", "tool.bin", "dir"} <= set(entries)
    assert entries["dir"].is_dir and not entries["hello.txt"].is_dir
    assert sandbox.exec("cat /root/hello.txt").stdout == "hello, airlock\n"

    sandbox.files.remove("/root/hello.txt")
    assert not sandbox.files.exists("/root/hello.txt")
    with pytest.raises(airlock.NotFound):
        sandbox.files.read("/root/hello.txt")
    with pytest.raises(airlock.AirlockError):
        sandbox.files.remove("/root/dir")  # not empty
    sandbox.files.remove("/root/dir", recursive=True)
    assert not sandbox.files.exists("/root/dir")


def test_workspace_is_mounted(client, new_name, tmp_path):
    (tmp_path / "in.txt").write_text("from the host\n")
    if os.geteuid() == 0:
        # The daemon mounts a directory of root's read-only only: give it to a user.
        for p in (tmp_path, tmp_path / "in.txt"):
            os.chown(p, 1000, 1000)
    sb = Sandbox.create(new_name("ws"), network="none", workspace=str(tmp_path), client=client)
    assert sb.exec("cat /workspace/in.txt").stdout == "from the host\n"
    assert sb.exec("echo from the sandbox > /workspace/out.txt").ok
    assert (tmp_path / "out.txt").read_text() == "from the sandbox\n"  # no copy: the same directory

    ro = Sandbox.create(new_name("wsro"), network="none", workspace=str(tmp_path), workspace_access="ro", client=client)
    res = ro.exec("echo x > /workspace/nope.txt")
    assert not res.ok and "Read-only file system" in res.stderr
    assert not (tmp_path / "nope.txt").exists()
