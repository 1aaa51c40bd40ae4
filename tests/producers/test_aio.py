"""AsyncMemoryClient: what only an async client can get wrong.

The behavioural tests of ``MemoryClient`` run against it too (the ``client`` and
``make_client`` fixtures); these are about concurrency on one event loop, cancellation,
not blocking the loop, and being the same API.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import redis

import memq
from memq import AsyncMemoryClient, MemoryClient, names
from memq.config import ClientConfig, Config
from memq.errors import BrokerError, FlushTimeout, ValidationError
from memq.producers import aio
from memq.producers.operations import BUILT_ON
from memq.producers.outbox import PIPELINE_SIZE
from memq.testing import WriterThread, free_port

pytestmark = pytest.mark.redis

NOT_COROUTINES = {"batched", "from_env", "role"}
"""MemoryClient's public names whose async form is not a coroutine function."""

SYNC_ONLY = {"close", "with_own_outbox"}
"""``close``: ``aclose`` / ``async with`` instead; ``with_own_outbox``: what ``memq serve``
(a sync server of the sync client) gives each remote client."""


def public_names(cls: type) -> set[str]:
    return {n for n in dir(cls) if not n.startswith("_") and n not in {"config", "profile"}}


def test_it_is_imported_from_memq_and_listed() -> None:
    assert memq.AsyncMemoryClient is AsyncMemoryClient
    assert "AsyncMemoryClient" in memq.__all__


def test_every_method_of_the_sync_client_is_there_with_the_same_arguments() -> None:
    assert public_names(MemoryClient) - SYNC_ONLY <= public_names(AsyncMemoryClient)
    for name in public_names(MemoryClient) - SYNC_ONLY - NOT_COROUTINES:
        sync, async_ = getattr(MemoryClient, name), getattr(AsyncMemoryClient, name)
        if not callable(sync):
            continue
        followed = name in BUILT_ON and inspect.isasyncgenfunction(async_)  # changes()
        assert followed or inspect.iscoroutinefunction(async_), name
        assert list(inspect.signature(async_).parameters.items()) == \
            list(inspect.signature(sync).parameters.items()), name


def test_from_env_reads_the_url_file_of_the_role_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("MEMQ_REDIS_URL", "MEMQ_DB", "MEMQ_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    for role in ("agent", "admin"):
        (tmp_path / "data" / f"{role}.url").write_text(f"redis://memq-{role}:pw@h:1/0\n")

    async def main() -> None:
        async with AsyncMemoryClient.from_env() as agent, \
                AsyncMemoryClient.from_env(role="admin") as person:
            assert agent.config.redis_url == "redis://memq-agent:pw@h:1/0"
            assert person.config.redis_url == "redis://memq-admin:pw@h:1/0"

    asyncio.run(main())
    with pytest.raises(ValidationError, match="role must be one of"):
        AsyncMemoryClient.from_env(role="root")


def test_a_bad_call_raises_before_anything_is_sent(config: Config) -> None:
    async def main() -> None:
        async with AsyncMemoryClient(config=config) as client:
            with pytest.raises(ValidationError, match="role must be one of"):
                await client.append("s", "robot", "hi")
            with pytest.raises(ValidationError, match="scope must be one of"):
                await client.get_context("s", scope="everyone")
            assert client.outbox.last_sent is None

    asyncio.run(main())


def test_many_concurrent_appends_from_one_loop_are_all_committed(
    config: Config, writer: WriterThread
) -> None:
    async def main() -> list[str]:
        async with AsyncMemoryClient(config=config) as client:
            pipelines: list[int] = []
            send = client.outbox._send

            def counted(raws: list[bytes], stream: str) -> Any:
                pipelines.append(len(raws))
                return send(raws, stream)

            client.outbox._send = counted  # type: ignore[method-assign]
            sent = await asyncio.gather(*(client.append("s", "user", f"turn {i}")
                                          for i in range(300)))
            # Sent while others were on their way, they shared pipelines rather than
            # taking a round trip each.
            assert sum(pipelines) == 300
            assert len(pipelines) <= 4, pipelines
            await client.flush()
            assert sorted(m.id for m in await client.history("s", 1000)) == sorted(sent)
            return sent

    sent = asyncio.run(main())
    assert len(set(sent)) == 300
    with MemoryClient(config=config) as other:  # committed, not only remembered
        assert len(other.history("s", 1000)) == 300


def test_a_cancelled_append_does_not_hold_up_the_others(
    config: Config, writer: WriterThread
) -> None:
    async def main() -> None:
        async with AsyncMemoryClient(config=config) as client:
            tasks = [asyncio.create_task(client.append("s", "user", f"turn {i}"))
                     for i in range(20)]
            await asyncio.sleep(0)  # every one has queued, or is on its way
            tasks[10].cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            assert isinstance(done[10], asyncio.CancelledError)
            kept = [d for i, d in enumerate(done) if i != 10]
            assert all(isinstance(d, str) for d in kept), kept
            await client.flush()
            assert set(kept) <= {m.id for m in await client.history("s")}

    asyncio.run(main())


def test_every_append_of_a_shared_pipeline_that_fails_raises(config: Config) -> None:
    dead = config.replace(redis_url=f"redis://127.0.0.1:{free_port()}/0",
                          client=ClientConfig(retry_for_s=0.2))

    async def main() -> list[Any]:
        async with AsyncMemoryClient(config=dead) as client:
            return await asyncio.gather(*(client.append("s", "user", f"turn {i}")
                                          for i in range(5)), return_exceptions=True)

    outcomes = asyncio.run(main())
    assert [type(o) for o in outcomes] == [BrokerError] * 5
    assert all("did not answer" in str(o) for o in outcomes), outcomes


def test_concurrent_appends_in_a_batch_are_pipelined_and_all_sent(
    config: Config, writer: WriterThread
) -> None:
    """More than a pipeline's worth from many tasks at once: drains run while others
    keep buffering, and every event is sent exactly once."""
    count = PIPELINE_SIZE * 2 + 7

    async def main() -> None:
        async with AsyncMemoryClient(config=config) as client:
            async with client.batched():
                sent = await asyncio.gather(*(client.append("s", "user", f"turn {i}")
                                              for i in range(count)))
            assert client.outbox.buffered == 0
            await client.flush()
            assert sorted(m.id for m in await client.history("s", 10_000)) == sorted(sent)

    asyncio.run(main())
    assert writer_entries(config) == count


def writer_entries(config: Config) -> int:
    """Entries ever added to the inboxes (the writer trims what it committed)."""
    connection = redis.Redis.from_url(config.redis_url)
    return sum(int(connection.xinfo_stream(stream)["entries-added"])
               for stream in names.INBOX_STREAMS if connection.exists(stream))


def test_a_cancelled_flush_loses_nothing(config: Config) -> None:
    async def main() -> None:
        async with AsyncMemoryClient(config=config) as client:
            sent = [await client.append("s", "user", f"turn {i}") for i in range(20)]
            waiting = asyncio.create_task(client.flush(timeout=30))
            await asyncio.sleep(0.05)  # no writer yet: the flush is waiting
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            with WriterThread(config):
                await client.flush()
                assert [m.id for m in await client.history("s")] == sent

    asyncio.run(main())


def test_a_flush_cancelled_at_any_moment_is_cancelled(config: Config) -> None:
    """redis.asyncio can return normally from a pipeline cancelled at the wrong moment:
    the cancellation must still reach the caller, however early it comes."""
    async def main() -> None:
        async with AsyncMemoryClient(config=config) as client:
            await client.append("s", "user", "hi")
            for i in range(40):
                waiting = asyncio.create_task(client.flush(timeout=5))
                await asyncio.sleep(0.0005 * (i % 8))
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting

    asyncio.run(main())


def test_a_flush_without_a_writer_times_out(config: Config) -> None:
    async def main() -> None:
        async with AsyncMemoryClient(config=config) as client:
            await client.append("s", "user", "hi")
            with pytest.raises(FlushTimeout, match="is `memq writer` running"):
                await client.flush(timeout=0.1)

    asyncio.run(main())


def test_writes_and_flush_never_leave_the_loop(
    config: Config, writer: WriterThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Native: Redis I/O is awaited on the loop; only SQLite reads go to a thread."""
    hops: list[str] = []
    to_thread = asyncio.to_thread

    async def counted(fn: Callable[..., Any], *args: Any) -> Any:
        hops.append(getattr(fn, "__name__", repr(fn)))
        return await to_thread(fn, *args)

    monkeypatch.setattr(aio.asyncio, "to_thread", counted)

    async def main() -> None:
        async with AsyncMemoryClient(config=config) as client:
            for i in range(5):
                await client.append("s", "user", f"turn {i}")
            await client.record_tool_call("s", "ls", {"path": "/tmp"})
            await client.flush()
            assert hops == []
            await client.history("s")
            assert hops  # a read does go to a worker thread

    asyncio.run(main())


async def max_gap_while(work: Callable[[], Awaitable[Any]]) -> float:
    """The longest the loop went without running a 1 ms ticker while ``work`` ran."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not done.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0.005)
    try:
        await work()
    finally:
        done.set()
        await ticking
    return max(gaps)


@pytest.mark.model
def test_get_context_does_not_block_the_loop(config: Config, writer: WriterThread) -> None:
    """The loop keeps ticking while the async client embeds and searches; a blocking call
    of the same work, made on the loop, stops it for as long as it takes."""
    queries = [f"what did the tool print about file {i}?" for i in range(16)]

    async def main() -> tuple[float, float]:
        with MemoryClient(config=config) as blocking:
            async with AsyncMemoryClient(config=config) as client:
                for i in range(30):
                    await client.append("s", "tool", f"ls printed file {i}.txt " + "x" * 500)
                await client.flush()
                await client.get_context("s", query="warm up the model")
                blocking.get_context("s", query="warm up the model")

                async def awaited() -> None:
                    for q in queries[:8]:
                        await client.get_context("s", query=q)

                async def blocked() -> None:
                    for q in queries[8:]:
                        blocking.get_context("s", query=q)

                return await max_gap_while(awaited), await max_gap_while(blocked)

    awaited_gap, blocked_gap = asyncio.run(main())
    assert awaited_gap < blocked_gap / 2, (awaited_gap, blocked_gap)
