"""The asyncio flavour, against the same daemon."""

import asyncio

import pytest

import airlock
from airlock.aio import AsyncClient, AsyncSandbox


def test_async_sandbox(new_name):
    async def main() -> None:
        async with AsyncClient() as client:
            name = new_name("aio")
            async with await AsyncSandbox.create(name, network="none", client=client) as sb:
                assert (await sb.state) == "running"
                res = await sb.exec("echo hi; echo there >&2; exit 2")
                assert (res.exit_code, res.stdout, res.stderr, res.state) == (2, "hi\n", "there\n", "failed")

                # Many calls at once on one event loop.
                results = await asyncio.gather(*(sb.exec(f"echo {i}") for i in range(8)))
                assert [r.stdout for r in results] == [f"{i}\n" for i in range(8)]

                chunks = []
                async with await sb.exec_stream("for i in 1 2 3; do echo $i; done; echo e >&2") as stream:
                    async for chunk in stream:
                        chunks.append((chunk.stream, chunk.text))
                # In order within each stream (stdout and stderr are separate pipes).
                assert [t for s, t in chunks if s == "stdout"] == ["1\n", "2\n", "3\n"]
                assert [t for s, t in chunks if s == "stderr"] == ["e\n"]
                assert stream.result is not None and stream.result.ok

                # Closing a stream early (awaitably, as asyncio code does) cancels its command.
                stream = await sb.exec_stream("echo start; exec sleep 300")
                assert (await stream.__anext__()).text == "start\n"
                assert (await sb.exec("pgrep -x sleep")).stdout != ""
                await stream.aclose()
                for _ in range(50):
                    if (await sb.exec("pgrep -x sleep || true")).stdout == "":
                        break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError("the command of a closed stream still runs")

                await sb.files.write("/root/a.txt", b"async")
                assert await sb.files.read("/root/a.txt") == b"async"
                assert "a.txt" in [f.name for f in await sb.files.list("/root")]
                await sb.files.remove("/root/a.txt")
                assert not await sb.files.exists("/root/a.txt")

                async with await sb.session("python") as ses:
                    await ses.send("n = 20")
                    assert (await ses.send("n * 2 + 2")).stdout == "42\n"

                gen = await sb.generation
                await sb.suspend()
                await sb.resume()
                assert await sb.generation == gen + 1

                again = await AsyncSandbox.get(name, client=client)
                assert again.id == sb.id
                with pytest.raises(airlock.AlreadyExists):
                    await AsyncSandbox.create(name, network="none", client=client)
            with pytest.raises(airlock.NotFound):
                await AsyncSandbox.get("missing-" + new_name("x"), client=client)
            live = [s.name for s in await client.list(states=["running", "suspended"])]
            assert name not in live

    asyncio.run(main())


def test_async_validation_and_unreachable(tmp_path):
    async def main() -> None:
        client = AsyncClient(socket=str(tmp_path / "none.sock"))
        with pytest.raises(airlock.InvalidArgument):
            await AsyncSandbox.create(42, client=client)  # a name is a str; what it may be is the daemon's
        with pytest.raises(airlock.InvalidArgument):
            await client.exec("sb_abc", "true", timeout="soon")  # the range is the daemon's; the type is checked here
        with pytest.raises(airlock.Unavailable) as ei:
            await AsyncSandbox.get("anything", client=client)
        assert ei.value.retryable and str(tmp_path / "none.sock") in str(ei.value)

    asyncio.run(main())


def test_async_default_client_across_event_loops(new_name):
    # The shared client's kept-alive connections belong to one loop; a second
    # asyncio.run (another loop) must still work.
    async def once() -> str:
        sb = await AsyncSandbox.create(new_name("loop"), network="none")
        try:
            return (await sb.exec("echo ok")).stdout
        finally:
            await sb.terminate()

    assert asyncio.run(once()) == "ok\n"
    assert asyncio.run(once()) == "ok\n"


def test_async_background_session_logs(new_name):
    async def main() -> None:
        async with AsyncClient() as client:
            async with await AsyncSandbox.create(new_name("aiobg"), network="none", client=client) as sb:
                ses = await sb.session("raw", argv=["sh", "-c", "echo up; echo warn >&2; sleep 0.3; echo done; exit 5"], background=True)
                assert ses.info.background
                res = await (await ses.logs(follow=True)).wait()
                assert (res.state, res.exit_code, res.stdout, res.stderr) == ("exited", 5, "up\ndone\n", "warn\n")
                assert (await (await ses.logs(tail=1)).wait()).stdout == "done\n"

    asyncio.run(main())
