"""get_context at session, user and agent scope: memory across sessions, never across users.

Two users tell the agent nearly the same things (only a name or a number differs), so a
search that ever crossed users would find the other user's turn first as often as not.
The real model embeds every turn (vectors reach the database through the inbox).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import ContextItem, MemoryClient, RemoteMemoryClient
from memq.authority import Role
from memq.cli import main
from memq.config import Config
from memq.embedding import Embedder
from memq.errors import ValidationError
from tests.conftest import store_args
from tests.embedding_events import send_embeddings
from tests.producers.serving import LOCAL_CLIENTS, serving

pytestmark = [pytest.mark.redis, pytest.mark.model]

T0 = datetime(2026, 2, 1, 9, 0, tzinfo=UTC)

HISTORY = {
    # user -> [(session, agent, [turns])]
    "alice": [
        ("alice-1", "travel", ["My dog is called Biscuit and he hates thunderstorms.",
                               "I'm allergic to peanuts, please remember that.",
                               "Book me a window seat to Lisbon on March 5th."]),
        ("alice-2", "travel", ["The hotel in Porto was lovely, room 214.",
                               "Can you find me a vegetarian restaurant nearby?"]),
        ("alice-3", "billing", ["My invoice number is INV-5531 for the January stay."]),
        ("alice-4", "travel", ["Let's plan something new."]),
    ],
    "bob": [
        ("bob-1", "travel", ["My dog is called Pretzel and he hates thunderstorms.",
                             "I'm allergic to shellfish, please remember that.",
                             "Book me an aisle seat to Madrid on March 7th."]),
        ("bob-2", "travel", ["The hotel in Porto was lovely, room 117.",
                             "Can you find me a vegan restaurant nearby?"]),
        ("bob-3", "billing", ["My invoice number is INV-8820 for the January stay."]),
        ("bob-4", "travel", ["Let's plan something new."]),
    ],
}

QUESTIONS = [
    "What is my dog called?", "What am I allergic to?", "Which seat did I book, and where to?",
    "What was my hotel room number in Porto?", "What kind of restaurant do I want?",
    "What is my invoice number?",
]


def record(client: MemoryClient, embedder: Embedder) -> dict[str, str]:
    """Every turn of both users, embedded; returns message id -> session."""
    sessions: dict[str, str] = {}
    texts: list[str] = []
    for user, history in HISTORY.items():
        for session, agent, turns in history:
            for text in turns:
                mid = client.append(session, "user", text, user_id=user, agent_id=agent,
                                    created_at=T0 + timedelta(minutes=len(texts)))
                sessions[mid] = session
                texts.append(text)
    client.flush()
    send_embeddings(client, list(sessions), embedder.embed(texts))
    return sessions


@pytest.fixture(params=["tri-hybrid", "recall"])
def scoped(request: pytest.FixtureRequest, config: Config, clients: list[MemoryClient],
           embedder: Embedder, client_kind: str, tmp_path: Path
           ) -> Iterator[tuple[MemoryClient, dict[str, str]]]:
    """The histories recorded, and the client that reads them: local, or (tests marked
    ``remote_too``) remote through a server with the same retrieval settings."""
    # A threshold that lets the tri-hybrid profile's semantic branch find the paraphrases.
    retrieval = dataclasses.replace(config.retrieval, profile=request.param,
                                    semantic_threshold=0.3, include_facts=True)
    local_kind = "local" if client_kind == "remote" else client_kind
    client = LOCAL_CLIENTS[local_kind](config=config.replace(retrieval=retrieval))
    client.query_vectors.embedder = embedder
    clients.append(client)
    where = record(client, embedder)
    if client_kind != "remote":
        yield client, where
        return
    role_urls = request.getfixturevalue("role_urls")
    with serving(config.replace(retrieval=retrieval), role_urls, tmp_path) as served:
        for base in served.bases.values():
            base.query_vectors.embedder = embedder  # the same real model, loaded once
        with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as remote:
            yield remote, where  # type: ignore[misc]


def sessions_of(items: list[ContextItem]) -> set[str]:
    return {item.session_id for item in items if not item.id.startswith("fact:")}


@pytest.mark.remote_too
def test_user_scope_finds_the_users_other_sessions_and_never_another_users(
    scoped: tuple[MemoryClient, dict[str, str]]
) -> None:
    client, where = scoped
    for user, other in (("alice", "bob"), ("bob", "alice")):
        mine = {s for s, _, _ in HISTORY[user]}
        for question in QUESTIONS:
            items = client.get_context(f"{user}-4", question, scope="user")
            assert sessions_of(items) <= mine, (user, question)
            assert {where[i.id] for i in items if i.id in where} <= mine
            assert not any(other in i.session_id for i in items)
        # The session's own scope sees nothing of the other sessions.
        alone = client.get_context(f"{user}-4", QUESTIONS[0])
        assert sessions_of(alone) == {f"{user}-4"}


def test_contextual_keys_never_cross_users(
    scoped: tuple[MemoryClient, dict[str, str]]
) -> None:
    """The recall profile's contextual keys (turns mixed with their neighbours) are held
    per scope like the vectors: only the user's own turns have one."""
    client, where = scoped
    client.get_context("alice-4", "What is my dog called?", scope="user")
    entries = list(client.vector_cache._entries.values())
    keyed = {mid for e in entries if e.keys is not None for mid in e.keys.index._ids}
    assert bool(keyed) == client.profile.contextual
    assert {where[mid] for mid in keyed} <= {"alice-1", "alice-2", "alice-3", "alice-4"}


@pytest.mark.remote_too
def test_the_answer_comes_from_an_earlier_session(
    scoped: tuple[MemoryClient, dict[str, str]]
) -> None:
    client, _ = scoped
    items = client.get_context("alice-4", "What is my dog called?", scope="user")
    found = [i for i in items if "Biscuit" in i.content]
    assert [i.session_id for i in found] == ["alice-1"]  # the item names its session
    assert not any("Pretzel" in i.content for i in items)


@pytest.mark.remote_too
def test_recency_stays_the_asking_sessions(scoped: tuple[MemoryClient, dict[str, str]]) -> None:
    client, _ = scoped
    items = client.get_context("alice-2", "Porto hotel", scope="user")
    recent = [i for i in items if "recency" in i.branches]
    assert recent
    assert {i.session_id for i in recent} == {"alice-2"}


@pytest.mark.remote_too
def test_agent_scope_stays_with_the_users_agent(
    scoped: tuple[MemoryClient, dict[str, str]]
) -> None:
    client, _ = scoped
    items = client.get_context("alice-4", "What is my invoice number?", scope="agent")
    assert sessions_of(items) <= {"alice-1", "alice-2", "alice-4"}  # travel only
    billing = client.get_context("alice-3", "What is my invoice number?", scope="agent")
    assert sessions_of(billing) == {"alice-3"}
    assert any("INV-5531" in i.content for i in billing)


@pytest.mark.remote_too
def test_facts_are_the_users_and_global_ones(
    scoped: tuple[MemoryClient, dict[str, str]]
) -> None:
    client, _ = scoped
    client.set_fact("health", "allergy", "peanuts", user_id="alice")
    client.set_fact("health", "allergy", "shellfish", user_id="bob")
    client.set_fact("office", "allergy policy", "no nuts in the office kitchen")
    client.flush()
    for scope in ("session", "user"):
        facts = [i.content for i in client.get_context("alice-2", "any allergy?", scope=scope)
                 if i.id.startswith("fact:")]
        assert sorted(facts) == ["health/allergy: peanuts",
                                 "office/allergy policy: no nuts in the office kitchen"]


def test_a_session_without_a_user_searches_only_itself(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    client = MemoryClient(config=config)
    client.query_vectors.embedder = embedder
    clients.append(client)
    record(client, embedder)
    client.append("anon", "user", "Nothing about dogs here.")
    client.flush()
    for scope in ("user", "agent"):
        items = client.get_context("anon", "What is my dog called?", scope=scope)
        assert sessions_of(items) == {"anon"}
    # A user without agents at agent scope: only the session too.
    client.append("no-agent", "user", "Hello", user_id="alice")
    items = client.get_context("no-agent", "What is my dog called?", scope="agent")
    assert sessions_of(items) == {"no-agent"}


def test_an_unsent_owner_is_known_at_once(
    config: Config, clients: list[MemoryClient], embedder: Embedder
) -> None:
    retrieval = dataclasses.replace(config.retrieval, profile="recall")
    client = MemoryClient(config=config.replace(retrieval=retrieval))
    client.query_vectors.embedder = embedder
    clients.append(client)
    record(client, embedder)
    client.append("alice-5", "user", "Where was I?", user_id="alice")  # not yet committed
    items = client.get_context("alice-5", "What is my dog called?", scope="user")
    assert "alice-1" in sessions_of(items)


@pytest.mark.parametrize("scope", ["users", "", None, 3, "session "])
@pytest.mark.remote_too
def test_a_bad_scope_is_refused(idle_client: MemoryClient, scope: Any) -> None:
    with pytest.raises(ValidationError, match="scope must be one of session, user, agent"):
        idle_client.get_context("s1", "q", scope=scope)


SECRET = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=6, max_size=10)
ISOLATION_RUNS = itertools.count()


def _shown(value: object) -> str:
    return repr(value)


@pytest.mark.remote_too
@settings(max_examples=4, derandomize=True, database=None, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.tuples(SECRET, SECRET).filter(lambda pair: pair[0] != pair[1]))
def test_no_read_api_shows_another_users_turns_or_facts(
    client: MemoryClient, config: Config, secrets: tuple[str, str]
) -> None:
    """Two users tell the same things but for one word; whatever each asks through every
    read of the client (local or over HTTP) and of the command line, the other's word never
    comes back: get_context at each scope, history, sessions, facts, fact_history,
    `memq context`, `memq sessions`, `memq facts list` and `memq facts history`."""
    run = next(ISOLATION_RUNS)
    users = {f"iso{run}-u1": secrets[0], f"iso{run}-u2": secrets[1]}
    for user, word in users.items():
        for n in range(2):
            client.append(f"{user}-s{n}", "user", f"My locker code is {word}, keep it.",
                          user_id=user, agent_id="keeper")
        client.set_fact("security", "locker", f"code {word}", user_id=user)
    client.flush()
    for user, word in users.items():
        other = next(w for u, w in users.items() if u != user)
        seen = _everything_read(client, config, user)
        assert word in seen  # the reads do return the user's own data
        assert other not in seen, (user, other)


def _everything_read(client: MemoryClient, config: Config, user: str) -> str:
    session = f"{user}-s1"
    reads: list[object] = [
        *(client.get_context(session, "What is my locker code?", scope=scope)
          for scope in ("session", "user", "agent")),
        client.history(session), client.history(f"{user}-s0"),
        client.sessions(user_id=user), client.sessions(user_id=user, agent_id="keeper"),
        client.facts(user_id=user), client.facts("security", user_id=user),
        client.fact_history("security", "locker", user_id=user),
    ]
    db = ["--db", config.db_path]
    commands = [*(["context", session, "--query", "locker code", "--scope", scope, "--json",
                   *store_args(config)] for scope in ("session", "user", "agent")),
                ["sessions", "--user", user, "--json", *db],
                ["facts", "list", "--user", user, "--json", *db],
                ["facts", "history", "security", "locker", "--user", user, "--json", *db]]
    for command in commands:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(command) == 0, command
        reads.append(out.getvalue())
    return "\n".join(_shown(read) for read in reads)
