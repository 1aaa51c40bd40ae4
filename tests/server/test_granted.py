"""The client of ``memq mcp --http``: each call admitted against the request's key and
spending its budget, each key reading its own uncommitted turns and nobody else's."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from memq import MemoryClient
from memq.config import Config
from memq.errors import NotFound, RateLimited
from memq.server.budgets import Budgets
from memq.server.granted import CALLER, GrantedClient
from memq.server.principals import Grant, KeyRing, keys_in
from memq.testing import WriterThread

pytestmark = [pytest.mark.redis]


@contextmanager
def acting_as(grant: Grant) -> Iterator[None]:
    reset = CALLER.set(grant)
    try:
        yield
    finally:
        CALLER.reset(reset)


def grants_of(config: Config, *users: str, **budget: int) -> list[Grant]:
    """One key of each user, as the server's door finds them."""
    with MemoryClient(config=config) as person:
        secrets = [person.create_key(f"for {u}", users=[u], can=["read", "write"],
                                     **budget).secret  # type: ignore[arg-type]
                   for u in users]
        person.flush()
        ring = KeyRing(keys_in(person.readers))
        found = [ring.grant_of(secret) for secret in secrets]
    assert all(found)
    return [g for g in found if g is not None]


def contents(items: list[object]) -> list[str]:
    return [item.content for item in items]  # type: ignore[attr-defined]


def test_a_key_reads_its_turn_back_before_the_writer_commits_it(
        config: Config, writer: WriterThread) -> None:
    (alice,) = grants_of(config, "alice")
    writer.stop()
    with MemoryClient(config=config) as base, MemoryClient(config=config) as keyed:
        tools = GrantedClient(base, keyed)
        with acting_as(alice):
            tools.append("alice-trip", "user", "a window seat")
            assert contents(tools.get_context("alice-trip")) == ["a window seat"]
        writer.start()
        with acting_as(alice):
            tools.flush()
            assert contents(tools.get_context("alice-trip")) == ["a window seat"]


def test_another_keys_uncommitted_turns_are_not_read_through_a_key(
        config: Config, writer: WriterThread) -> None:
    first, second = grants_of(config, "alice", "alice")
    with MemoryClient(config=config) as base, MemoryClient(config=config) as keyed:
        tools = GrantedClient(base, keyed)
        with acting_as(first):
            tools.append("alice-trip", "user", "a window seat")
            tools.flush()
        writer.stop()
        with acting_as(first):
            tools.append("alice-trip", "user", "and no onions")
            tools.append("alice-new", "user", "a new trip")
        with acting_as(second):
            assert contents(tools.get_context("alice-trip")) == ["a window seat"]
            with pytest.raises(NotFound):  # started by the first key, not committed
                tools.get_context("alice-new")
        with acting_as(first):
            assert contents(tools.get_context("alice-trip")) == [
                "a window seat", "and no onions"]


def test_only_the_most_recent_callers_clients_are_kept(config: Config,
                                                       writer: WriterThread) -> None:
    alice, bob = grants_of(config, "alice", "bob")
    with MemoryClient(config=config) as base, MemoryClient(config=config) as keyed:
        tools = GrantedClient(base, keyed, cap=1)
        for grant in (alice, bob, alice):
            with acting_as(grant):
                tools.append(f"{sorted(grant.users or ())[0]}-chat", "user", "hello")
        assert list(tools._for_grant) == [alice]
        with acting_as(alice):
            tools.flush()
            assert contents(tools.get_context("alice-chat")) == ["hello", "hello"]


def test_a_keys_calls_spend_its_budget_on_the_counters_every_server_shares(
        config: Config, writer: WriterThread) -> None:
    # Three units: the other server's one, the append's and the flush's, at once.
    (alice,) = grants_of(config, "alice", units_per_s=3, concurrent=1)
    with MemoryClient(config=config) as base, MemoryClient(config=config) as keyed:
        tools = GrantedClient(base, keyed, budgets=Budgets.configured(keyed))
        other_server = Budgets.configured(keyed)
        with acting_as(alice):
            # Its one place, taken on another server:
            with other_server.spend(alice, 1), \
                    pytest.raises(RateLimited, match="calls running"):
                tools.append("alice-trip", "user", "refused")
            other_server.give_back_idle(older_than=0.0)  # kept there no longer
            # A write costs one per event, as through memq serve: four are never let in.
            with pytest.raises(RateLimited, match="more than this key's budget of 3"):
                tools.append_many([{"session_id": "alice-trip", "role": "user",
                                    "content": str(n)} for n in range(4)])
            tools.append("alice-trip", "user", "let in")
            tools.flush()
        assert contents(base.history("alice-trip")) == ["let in"]  # nothing refused landed
