"""Learned tool macros through keys: a key limited to some users is suggested only what its
users' calls taught, and any other macro is 404 for it, as one that does not exist; a key
of every user and the shared tokens read the tenant's aggregate, as before."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, RemoteMemoryClient
from memq.config import Config
from memq.errors import EventsRejected, NotFound, PermissionDenied
from memq.producers.macros import MacroSuggestion
from memq.producers.operations import OPERATIONS
from memq.server import grants
from memq.server.granted import CALLER, GrantedClient
from memq.server.principals import KeyRing, keys_in
from memq.store.projections.macros import content_id
from memq.testing import WriterThread
from memq.toolcalls import ANY_ARGS, args_pattern
from tests.producers.serving import Served
from tests.server.conftest import key_for

pytestmark = [pytest.mark.redis]

BOBS = {"cmd": "deploy projectzebra now"}
"""Bob's call, with words no one else uses: they stay literal in what macros keep."""
ALICES = {"cmd": "git status"}


def habit(client: MemoryClient | RemoteMemoryClient, session: str, first: dict[str, Any],
          then: str = "notify", times: int = 3) -> None:
    """The same two calls, ``times`` times: a macro above the default threshold."""
    for _ in range(times):
        client.record_tool_call(session, "terminal", first)
        client.record_tool_call(session, then, {"note": f"{first['cmd']} done"})


@pytest.fixture
def bobs_habit(admin: RemoteMemoryClient) -> RemoteMemoryClient:
    habit(admin, "bob-chat", BOBS, then="page_oncall")  # bob-chat is bob's session
    admin.flush()
    return admin


def plain(suggestions: list[MacroSuggestion]) -> list[tuple[Any, ...]]:
    """What a suggestion says, but its id."""
    return [(s.tool, s.args, s.confidence, s.count, s.used_count, s.pattern)
            for s in suggestions]


def test_a_key_of_one_user_is_never_shown_another_users_calls(
        bobs_habit: RemoteMemoryClient, served: Served) -> None:
    with key_for(bobs_habit, served, users=["alice"]) as alice:
        assert alice.suggest_next_tools("terminal", BOBS) == []
        assert alice.suggest_next_tools("terminal") == []
        alice.append("alice-chat", "user", "let me look")
        habit(alice, "alice-chat", ALICES)
        alice.flush()
        mine = alice.suggest_next_tools("terminal", ALICES)
        after_bobs = alice.suggest_next_tools("terminal", BOBS)
    assert [(s.tool, s.args, s.count) for s in mine] == [
        ("notify", {"note": "git status done"}, 3)]
    # After a call with bob's words, what alice alone taught: bob's habit is not even
    # tested for (the pattern of his words matches none of her rows).
    assert plain(after_bobs) == [("notify", {"note": "git status done"}, 4 / 7, 3, 0, ANY_ARGS)]
    assert "projectzebra" not in repr([mine, after_bobs])
    assert mine[0].macro_id == content_id("terminal", args_pattern(ALICES), "notify", "alice")
    # A key of every user and the shared token read the aggregate, as before.
    expected_id = content_id("terminal", args_pattern(BOBS), "page_oncall")
    with key_for(bobs_habit, served, users=None) as everyone:
        [theirs] = everyone.suggest_next_tools("terminal", BOBS)
    [shared] = bobs_habit.suggest_next_tools("terminal", BOBS)
    assert theirs == shared
    assert (shared.macro_id, shared.tool, shared.count) == (expected_id, "page_oncall", 3)
    assert shared.args == {"note": "deploy projectzebra now done"}  # bare words, as before


def test_a_key_of_several_users_reads_their_rows_merged(
        bobs_habit: RemoteMemoryClient, served: Served) -> None:
    bobs_habit.append("carol-chat", "user", "hi", user_id="carol")
    habit(bobs_habit, "carol-chat", BOBS, then="page_oncall", times=1)
    bobs_habit.flush()
    with key_for(bobs_habit, served, users=["bob", "carol"]) as both:
        [merged] = both.suggest_next_tools("terminal", BOBS)
    pattern = args_pattern(BOBS)
    assert (merged.count, merged.confidence) == (4, (4 + 1) / (4 + 4))
    assert merged.macro_id == content_id("terminal", pattern, "page_oncall", "bob")


def test_another_users_macro_or_the_aggregate_is_not_found_for_a_key(
        bobs_habit: RemoteMemoryClient, served: Served) -> None:
    bobs_row = content_id("terminal", args_pattern(BOBS), "page_oncall", "bob")
    aggregate = content_id("terminal", args_pattern(BOBS), "page_oncall")
    with key_for(bobs_habit, served, users=["alice"]) as alice:
        for macro_id in (bobs_row, aggregate, bobs_row + 1):
            with pytest.raises(NotFound, match=f"^no macro {macro_id}$"):
                alice.use_macro(macro_id)
    with key_for(bobs_habit, served, users=["bob"]) as bob:
        [his] = bob.suggest_next_tools("terminal", BOBS)
        assert his.macro_id == bobs_row
        bob.use_macro(his.macro_id)
        bob.flush()
        assert bob.suggest_next_tools("terminal", BOBS)[0].used_count == 1


def test_the_writer_sets_aside_a_keys_use_of_another_users_macro(
        bobs_habit: RemoteMemoryClient, config: Config) -> None:
    """As a server with a bug in its own check would send it."""
    made = bobs_habit.create_key("alice", users=["alice"], can=["read", "write"])
    bobs_habit.flush()
    bobs_row = content_id("terminal", args_pattern(BOBS), "page_oncall", "bob")
    with MemoryClient(config=config) as inside:
        inside.outbox.acting_for = made.id
        inside.use_macro(bobs_row)
        with pytest.raises(EventsRejected) as refused:
            inside.flush()
    assert [r.reason for r in refused.value.rejections] == [
        f"macro.used: macro {bobs_row} is not one of key {made.id}'s users'"]
    assert bobs_habit.suggest_next_tools("terminal", BOBS)[0].used_count == 0


def test_forgetting_a_user_takes_their_macros(bobs_habit: RemoteMemoryClient,
                                              served: Served) -> None:
    bobs_habit.append("carol-chat", "user", "hi", user_id="carol")
    habit(bobs_habit, "carol-chat", BOBS, then="page_oncall")  # the same habit as bob's
    bobs_habit.flush()
    with key_for(bobs_habit, served, users=["bob"]) as bob:
        assert [s.count for s in bob.suggest_next_tools("terminal", BOBS)] == [3]
        bobs_habit.forget_user("bob")
        bobs_habit.flush()
        assert bob.suggest_next_tools("terminal", BOBS) == []
    assert [s.count for s in bobs_habit.suggest_next_tools("terminal", BOBS)] == [3]


def test_the_mcp_servers_client_reads_the_macros_of_the_requests_key(
        config: Config, writer: WriterThread) -> None:
    with MemoryClient(config=config) as person:
        person.append("bob-chat", "user", "hi", user_id="bob")
        habit(person, "bob-chat", BOBS)
        secret = person.create_key("alice", users=["alice"], can=["read", "write"]).secret
        person.flush()
        grant = KeyRing(keys_in(person.readers)).grant_of(secret)
        assert person.suggest_next_tools("terminal", BOBS)
    with MemoryClient(config=config) as base, MemoryClient(config=config) as keyed:
        tools = GrantedClient(base, keyed)
        reset = CALLER.set(grant)
        try:
            assert tools.suggest_next_tools("terminal", BOBS) == []
            with pytest.raises(NotFound):
                tools.use_macro(content_id("terminal", args_pattern(BOBS), "notify", "bob"))
        finally:
            CALLER.reset(reset)


def test_a_keys_client_that_would_read_the_aggregate_is_refused(
        config: Config, writer: WriterThread) -> None:
    """A server that made a key's client without its grant's macros fails closed."""
    with MemoryClient(config=config) as person:
        secret = person.create_key("alice", users=["alice"], can=["read", "write"]).secret
        person.flush()
        grant = KeyRing(keys_in(person.readers)).grant_of(secret)
        assert grant is not None
        with pytest.raises(PermissionDenied, match="reads other macros than the key's"):
            grants.admit(grant, OPERATIONS["suggest_next_tools"], {"tool": "terminal"},
                         person)
        keyed = person.with_own_outbox(private=True)
        grants.as_key(keyed, grant)
        assert grants.admit(grant, OPERATIONS["suggest_next_tools"], {"tool": "terminal"},
                            keyed) == {"tool": "terminal"}


# -- generated: what a key of alice is suggested depends on alice's calls alone -----------

_TOOLS = ("terminal", "read_file", "notify")
_ARGS = ({}, ALICES, BOBS, {"cmd": "ship zebra tonight"})
_CALLS = st.lists(st.tuples(st.sampled_from(["alice", "bob"]), st.integers(0, 1),
                            st.sampled_from(_TOOLS), st.integers(0, len(_ARGS) - 1)),
                  min_size=1, max_size=24)
_tenants = itertools.count()


@contextmanager
def tenant_with(admin: RemoteMemoryClient, served: Served, calls: list[tuple[str, int, str, int]]
                ) -> Iterator[RemoteMemoryClient]:
    """A tenant of its own holding ``calls``, each in a session of its user; the answer is
    a key of alice there."""
    tenant = f"gen{next(_tenants)}"
    with ExitStack() as stack:
        writer = stack.enter_context(key_for(admin, served, tenant=tenant))
        for user, n in itertools.product(("alice", "bob"), range(2)):
            writer.append(f"{user}-{n}", "user", "hi", user_id=user)
        for user, n, tool, args in calls:
            writer.record_tool_call(f"{user}-{n}", tool, _ARGS[args])
        writer.flush()
        yield stack.enter_context(key_for(admin, served, tenant=tenant, users=["alice"]))


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(calls=_CALLS)
def test_a_key_of_alice_is_suggested_what_alices_calls_alone_would_suggest(
        admin: RemoteMemoryClient, served: Served, calls: list[tuple[str, int, str, int]]
) -> None:
    alices = [c for c in calls if c[0] == "alice"]
    hers = {_ARGS[args]["cmd"] for _, _, _, args in alices if _ARGS[args]}
    with tenant_with(admin, served, calls) as both, tenant_with(admin, served, alices) as alone:
        for tool, args in itertools.product(_TOOLS, _ARGS):
            seen = both.suggest_next_tools(tool, args)
            assert plain(seen) == plain(alone.suggest_next_tools(tool, args)), (tool, args)
            if not any("zebra" in words for words in (*hers, *args.values())):
                assert "zebra" not in repr(plain(seen)), (tool, args, seen)
