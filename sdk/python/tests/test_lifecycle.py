"""Suspend, resume, snapshots, forks, the context manager and errors."""

import os

import pytest

import airlock
from airlock import Sandbox


def test_suspend_resume_keeps_files_and_bumps_generation(sandbox):
    sandbox.files.write("/root/keep.txt", "kept")
    sandbox.exec("echo gone > /tmp/scratch")
    gen = sandbox.generation
    assert sandbox.suspend().info.state == "suspended"
    assert sandbox.state == "suspended"
    assert sandbox.resume().info.state == "running"
    assert sandbox.generation == gen + 1
    assert sandbox.files.read("/root/keep.txt") == b"kept"
    assert sandbox.exec("cat /tmp/scratch").exit_code != 0  # tmpfs is wiped

    # Any call resumes a suspended sandbox transparently.
    sandbox.suspend()
    assert sandbox.exec("cat /root/keep.txt").stdout == "kept"
    assert sandbox.generation == gen + 2


def test_snapshot_and_fork(client, sandbox, new_name):
    sandbox.files.write("/root/state.txt", "v1")
    snap = sandbox.snapshot(labels={"step": "one"})
    assert snap.id.startswith("snap_") and snap.state == "ready"
    assert snap.sandbox_id == sandbox.id and snap.labels == {"step": "one"}
    assert snap.id in [s.id for s in sandbox.snapshots()]
    sandbox.files.write("/root/state.txt", "v2")

    fork = sandbox.fork(new_name("fork"))
    assert fork.id != sandbox.id and fork.info.forked_from == sandbox.id
    assert fork.files.read("/root/state.txt") == b"v2"

    restored = Sandbox.from_snapshot(snap, new_name("snap"), client=client)
    assert restored.files.read("/root/state.txt") == b"v1"
    fork.files.write("/root/state.txt", "fork's own")
    assert sandbox.files.read("/root/state.txt") == b"v2"

    restored.terminate()
    fork.terminate()
    client.delete_snapshot(snap.id)
    assert snap.id not in [s.id for s in client.snapshots()]


def test_context_manager_terminates(client, new_name):
    name = new_name("with")
    with Sandbox.create(name, network="none", client=client) as sb:
        assert sb.exec("true").ok
        sb_id = sb.id
    try:
        info = client.get(sb_id)
    except airlock.NotFound:
        return
    assert info.state == "terminated"
    # Terminating again is not an error.
    sb.terminate()


def test_context_manager_terminates_on_error(client, new_name):
    name = new_name("witherr")
    with pytest.raises(RuntimeError):
        with Sandbox.create(name, network="none", client=client) as sb:
            raise RuntimeError("user code failed")
    live = [s.name for s in Sandbox.list(states=["running", "suspended"], client=client)]
    assert sb.name not in live


def test_error_classes(client, new_name, sandbox):
    with pytest.raises(airlock.NotFound) as ei:
        Sandbox.get("no-such-sandbox-" + new_name("x"), client=client)
    e = ei.value
    assert isinstance(e, airlock.AirlockError) and e.code == "not_found" and e.status == 404
    assert not e.retryable

    with pytest.raises(airlock.AlreadyExists) as ei:
        Sandbox.create(sandbox.name, network="none", client=client)
    assert ei.value.code == "already_exists" and ei.value.status == 409

    # An argument only the daemon can judge comes back as InvalidArgument too.
    with pytest.raises(airlock.InvalidArgument) as ei:
        Sandbox.create(new_name("big"), cpu=100000, network="none", client=client)
    assert ei.value.status == 400 and "cpu" in ei.value.message

    with pytest.raises(airlock.NotFound):
        client.send(sandbox.name, "ses_0000000000000000", "1")


def test_create_pulls_an_image_not_here(client, new_name):
    """The daemon pulls a registry image a create names and does not have yet."""
    ref = os.environ.get("AIRLOCK_TEST_PULL_IMAGE")
    if not ref:
        pytest.skip("set AIRLOCK_TEST_PULL_IMAGE to REF@DIGEST of an image the daemon can pull and has not yet")
    ref, digest = ref.rsplit("@", 1)
    sb = Sandbox.create(new_name("pull"), image=ref, network="none", client=client)
    assert sb.info.state == "running" and sb.info.image_digest == digest

    with pytest.raises(airlock.NotFound, match="pull it first"):
        Sandbox.create(new_name("never"), image="itest-py-no-such-image", pull="never", client=client)
    with pytest.raises(airlock.InvalidArgument, match="always or never"):
        Sandbox.create(new_name("bad"), image=ref, pull="sometimes", client=client)
