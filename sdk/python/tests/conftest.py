"""Fixtures of the SDK's tests. They run against a real Airlock daemon, never a mock
of its API: $AIRLOCK_SOCKET (or $AIRLOCK_URL) names it, as for any SDK user. The Go
test TestPythonSDK (internal/integration/python_sdk_test.go) starts a node and runs
this suite against it. Every sandbox a test makes is terminated when it ends."""

import os
import secrets
from typing import Callable, Iterator, List

import pytest

import airlock


@pytest.fixture(scope="session")
def client() -> Iterator[airlock.Client]:
    if not (os.environ.get("AIRLOCK_SOCKET") or os.environ.get("AIRLOCK_URL")):
        pytest.skip("set AIRLOCK_SOCKET (or AIRLOCK_URL) to a running daemon; "
                    "`go test -run TestPythonSDK ./internal/integration/` starts one and runs this suite")
    c = airlock.Client()
    try:
        c.status()
    except airlock.Unavailable as e:
        pytest.fail(f"the daemon is not reachable: {e}")
    yield c
    c.close()


@pytest.fixture
def new_name(client: airlock.Client) -> Iterator[Callable[[str], str]]:
    """Returns unique sandbox names; every sandbox of such a name still alive at the
    end of the test is terminated."""
    names: List[str] = []

    def make(prefix: str = "py") -> str:
        name = f"{prefix}-{secrets.token_hex(4)}"
        names.append(name)
        return name

    yield make
    for name in names:
        try:
            client.terminate(name)
        except airlock.NotFound:
            pass


@pytest.fixture
def sandbox(client: airlock.Client, new_name: Callable[[str], str]) -> airlock.Sandbox:
    """A running sandbox (no network), terminated after the test."""
    return airlock.Sandbox.create(new_name("py"), network="none", client=client)
