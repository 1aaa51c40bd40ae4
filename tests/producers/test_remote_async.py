"""AsyncRemoteMemoryClient: the sync remote client's calls, awaited on one event loop."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from memq import AsyncRemoteMemoryClient, MemoryClient, RemoteMemoryClient
from memq.authority import Role
from memq.errors import NotFound, PermissionDenied, ValidationError
from memq.producers.context import ContextItem
from memq.producers.operations import BUILT_ON
from tests.producers.serving import Served

pytestmark = pytest.mark.redis


def test_many_coroutines_share_one_client(served: Served, client: MemoryClient) -> None:
    async def scenario() -> list[str]:
        async with AsyncRemoteMemoryClient(served.url, token=served.token()) as remote:
            ids = await asyncio.gather(*(remote.append(f"s{i % 4}", "user", f"turn {i}")
                                         for i in range(40)))
            await remote.flush()
            items = await remote.get_context("s0", "turn")
            assert all(isinstance(item, ContextItem) for item in items)
            assert await remote.role == Role.AGENT
            return list(ids)

    ids = asyncio.run(scenario())
    committed = {m.id for s in ("s0", "s1", "s2", "s3") for m in client.history(s)}
    assert committed == set(ids)


def test_errors_are_the_same_classes(served: Served) -> None:
    async def scenario() -> None:
        async with AsyncRemoteMemoryClient(served.url, token=served.token()) as remote:
            with pytest.raises(ValidationError):
                await remote.append("s", "robot", "x")
            with pytest.raises(NotFound):
                await remote.pause_task("no-such-task")
            with pytest.raises(PermissionDenied):
                await remote.allow_prefix("rm")
            task_id = await remote.schedule_task("t", "every day at 9am", "p")
            await remote.pause_task(task_id)  # read-your-writes, no flush
            assert (await remote.task(task_id)).is_paused

    asyncio.run(scenario())



LOCAL_ONLY = {"from_env", "with_own_outbox", "close"}
"""What only a client holding Redis and the database has (``close`` is ``aclose`` when
async)."""


def public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {name: inspect.signature(member) for name, member in vars_of(cls).items()
            if not name.startswith("_") and callable(member)}


def vars_of(cls: type) -> dict[str, object]:
    found: dict[str, object] = {}
    for klass in reversed(cls.__mro__):
        found.update(vars(klass))
    return found


def test_the_remote_clients_have_the_local_clients_methods_and_arguments() -> None:
    local = public_methods(MemoryClient)
    remote = public_methods(RemoteMemoryClient)
    aremote = public_methods(AsyncRemoteMemoryClient)
    for name, signature in local.items():
        if name in LOCAL_ONLY:
            continue
        assert remote[name].parameters.keys() == signature.parameters.keys(), name
        assert aremote[name].parameters.keys() == signature.parameters.keys(), name
        for parameter in signature.parameters.values():
            assert remote[name].parameters[parameter.name].default == parameter.default, name
    coroutines = {name for name, member in vars_of(AsyncRemoteMemoryClient).items()
                  if inspect.iscoroutinefunction(member)}
    followers = {name for name, member in vars_of(AsyncRemoteMemoryClient).items()
                 if inspect.isasyncgenfunction(member)}
    assert followers == set(BUILT_ON)
    assert set(local) - LOCAL_ONLY - {"batched", "role"} - followers <= coroutines


def test_the_async_client_reads_what_the_sync_one_reads(served: Served) -> None:
    with RemoteMemoryClient(served.url, token=served.token()) as sync:
        sync.append("s", "user", "hello", user_id="u")
        sync.set_fact("project", "language", "Python")
        task_id = sync.schedule_task("standup", "every weekday at 9am", "post it")
        sync.flush()

        async def read() -> list[object]:
            async with AsyncRemoteMemoryClient(served.url, token=served.token()) as aio:
                return [await aio.history("s"), await aio.get_context("s"),
                        await aio.sessions(user_id="u"), await aio.facts(),
                        await aio.task(task_id), await aio.tasks(),
                        await aio.allowed_prefixes(), await aio.is_command_allowed("ls")]

        assert asyncio.run(read()) == [
            sync.history("s"), sync.get_context("s"), sync.sessions(user_id="u"),
            sync.facts(), sync.task(task_id), sync.tasks(), sync.allowed_prefixes(),
            sync.is_command_allowed("ls")]
