"""API keys at the door of ``memq serve``: each reaches only its grant, and outside it the
answer is the one for something that does not exist."""

from __future__ import annotations

import base64
import inspect
import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import apsw
import httpx
import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, RemoteMemoryClient, names
from memq.authority import Role
from memq.clock import now_rfc3339, uuid7
from memq.config import Config
from memq.errors import (
    AuthenticationFailed,
    EventsRejected,
    MemqError,
    NotFound,
    PermissionDenied,
    ValidationError,
)
from memq.events import Event, EventType, encode
from memq.producers.operations import OPERATIONS
from memq.server import bodies
from memq.testing import WriterThread, wait_committed
from tests.producers.serving import Served, serving
from tests.server.conftest import key_for

pytestmark = [pytest.mark.redis]


def test_a_key_of_one_user_works_in_that_users_sessions(admin: RemoteMemoryClient,
                                                        served: Served) -> None:
    with key_for(admin, served, users=["alice"]) as alice:
        alice.append("alice-chat", "user", "alice's own words")  # the key's user, filled in
        alice.set_fact("diet", "likes", "pears", user_id="alice")
        alice.flush()
        assert [m.content for m in alice.history("alice-chat")] == ["alice's own words"]
        assert [s.session_id for s in alice.sessions()] == ["alice-chat"]
        assert alice.sessions()[0].user_id == "alice"
        assert [f.value for f in alice.facts(user_id="alice")] == ["pears"]
        assert alice.get_context("alice-chat", "words", scope="user")


OUTSIDE = {
    "history": lambda c: c.history("bob-chat"),
    "context": lambda c: c.get_context("bob-chat", "plan"),
    "context at user scope": lambda c: c.get_context("bob-chat", "plan", scope="user"),
    "append": lambda c: c.append("bob-chat", "user", "hijack"),
    "append to a new session as bob": lambda c: c.append("new", "user", "x", user_id="bob"),
    "forget": lambda c: c.forget_session("bob-chat"),
    "forget a message": lambda c: c.forget_message("bob-chat", "any"),
    "record a tool call": lambda c: c.record_tool_call("bob-chat", "search", {"q": "x"}),
    "facts": lambda c: c.facts(user_id="bob"),
    "fact history": lambda c: c.fact_history("diet", "likes", user_id="bob"),
    "set a fact": lambda c: c.set_fact("diet", "likes", "nothing", user_id="bob"),
    "sessions": lambda c: c.sessions(user_id="bob"),
    "document": lambda c: c.document(["notes"], "k", user_id="bob"),
    "a session that does not exist": lambda c: c.history("no-such-chat"),
}


def test_anything_of_another_user_does_not_exist_for_the_key(
    admin: RemoteMemoryClient, served: Served
) -> None:
    answered = {}
    with key_for(admin, served, users=["alice"], can=["read", "write", "forget"]) as alice:
        for what, call in OUTSIDE.items():
            try:
                answered[what] = call(alice)
            except NotFound:
                continue
    assert answered == {}
    assert [m.content for m in admin.history("bob-chat")] == ["bob's secret plan"]


def test_lists_show_only_the_grant(admin: RemoteMemoryClient, served: Served) -> None:
    with key_for(admin, served, users=["alice"]) as alice:
        assert alice.sessions() == []
        assert alice.tasks() == []
        assert [f.user_id for f in alice.facts()] == []  # the globals alone: none here
        with pytest.raises(NotFound):
            alice.task(admin.tasks()[0].id)


REFUSED = [
    ({"users": ["alice"], "can": ["read"]}, lambda c: c.append("a", "user", "x"), "write"),
    ({"users": ["alice"]}, lambda c: c.forget_session("a"), "forget"),
    ({"users": ["alice"]}, lambda c: c.schedule_task("t", "in 2 hours", "p"), "tasks"),
    ({"users": ["alice"]}, lambda c: c.set_fact("c", "k", "v"), "name the user_id"),
    ({"users": None, "agents": ["a1"]}, lambda c: c.get_context("a", scope="user"),
     "session or agent"),
    ({"users": None, "agents": ["a1"]}, lambda c: c.schedule_task("t", "in 2 hours", "p"),
     "tasks"),
    ({"users": ["alice", "carol"]}, lambda c: c.sessions(), "name the user_id"),
    ({"users": ["alice", "carol"]}, lambda c: c.append("n", "user", "x"), "several users"),
    ({"users": None}, lambda c: c.api_keys(), "admin"),
    ({"users": None}, lambda c: c.create_key("mine"), "admin"),
    ({"users": None}, lambda c: c.revoke_key("0" * 16), "admin"),
]


def test_what_a_key_may_not_do_is_refused_by_name(admin: RemoteMemoryClient,
                                                  served: Served) -> None:
    for grant, call, refused in REFUSED:
        with key_for(admin, served, **grant) as client, \
                pytest.raises(PermissionDenied, match=refused):
            call(client)


def test_a_key_of_every_user_reaches_every_session(admin: RemoteMemoryClient,
                                                  served: Served) -> None:
    with key_for(admin, served, users=None, can=["read"]) as reader:
        assert [m.content for m in reader.history("bob-chat")] == ["bob's secret plan"]
        assert len(reader.tasks()) == 1


def test_a_key_of_one_agent_reaches_only_its_sessions(admin: RemoteMemoryClient,
                                                      served: Served) -> None:
    with key_for(admin, served, users=None, agents=["a2"]) as other:
        with pytest.raises(NotFound):
            other.history("bob-chat")
        assert other.sessions() == []
    with key_for(admin, served, users=None, agents=["a1"]) as own:
        assert [s.session_id for s in own.sessions()] == ["bob-chat"]


def test_a_revoked_or_expired_key_is_refused(admin: RemoteMemoryClient, served: Served
                                             ) -> None:
    made = admin.create_key("short", users=["alice"])
    past = admin.create_key("old", users=["alice"],
                            expires_at=datetime.now(UTC) - timedelta(minutes=1))
    admin.flush()
    with RemoteMemoryClient(served.url, token=made.secret) as client:
        assert client.sessions() == []
        admin.revoke_key(made.id)
        admin.flush()
        with pytest.raises(AuthenticationFailed):
            client.sessions()
    with RemoteMemoryClient(served.url, token=past.secret) as client, \
            pytest.raises(AuthenticationFailed):
        client.sessions()
    listed = {key.id: key for key in admin.api_keys()}
    assert listed[made.id].revoked_at is not None
    assert listed[past.id].expires_at is not None


def test_a_secret_near_a_keys_is_refused(admin: RemoteMemoryClient, served: Served) -> None:
    made = admin.create_key("k", users=["alice"])
    admin.flush()
    near = made.secret[:-1] + ("A" if made.secret[-1] != "A" else "B")
    for token in (near, made.secret.upper(), made.secret + "x", f"mk_{made.id}_"):
        answer = httpx.get(f"{served.url}/v1/sessions",
                           headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401, token


def test_the_database_keeps_no_secret(admin: RemoteMemoryClient, served: Served,
                                      config: Config) -> None:
    made = admin.create_key("k", users=["alice"])
    admin.flush()
    assert made.secret.encode() not in Path(config.db_path).read_bytes()
    assert admin.api_keys()[0].name == "k"


def test_require_keys_refuses_the_shared_agent_token(
    config: Config, role_urls: dict[Role, str], writer: WriterThread, tmp_path: Path
) -> None:
    with serving(config, role_urls, tmp_path, require_keys=True) as running:
        with RemoteMemoryClient(running.url, token=running.token(Role.AGENT)) as agent, \
                pytest.raises(AuthenticationFailed):
            agent.sessions()
        with RemoteMemoryClient(running.url, token=running.token(Role.ADMIN)) as person:
            assert person.sessions() == []


# -- generated: every operation of the table, naming the other user's ids -----------------

BOB = {"session_id": "bob-chat", "user_id": "bob", "agent_id": "a1", "category": "diet",
       "key": "likes", "namespace": ["notes"], "prefix": ["notes"]}
"""Where an argument of this name can point at bob's data."""
BOBS_CONTENT = ("bob's secret plan", "figs", "bob-chat", "bob's note")


def bobs_rows(db_path: str) -> list[object]:
    """Everything of bob's in the database file, as a dump to compare."""
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return [conn.execute(query, ("bob",)).fetchall() for query in (
            "SELECT * FROM messages WHERE session_id IN "
            "(SELECT session_id FROM sessions WHERE user_id = ?) ORDER BY id",
            "SELECT * FROM facts WHERE user_id = ? ORDER BY category, key",
            "SELECT * FROM sessions WHERE user_id = ? ORDER BY session_id",
            "SELECT * FROM documents WHERE user_id = ? ORDER BY namespace, key",
            "SELECT * FROM events WHERE session_id IN "
            "(SELECT session_id FROM sessions WHERE user_id = ?) ORDER BY seq",
        )]
    finally:
        conn.close()


def arguments_for(name: str, data: st.DataObject, bobs: dict[str, object]
                  ) -> dict[str, object]:
    """Arguments of ``name``: each that can name bob's data names it, or something else."""
    given: dict[str, object] = {}
    for parameter, _ in bodies.arguments(OPERATIONS[name]):
        if parameter.name in bobs:
            given[parameter.name] = data.draw(st.sampled_from(
                [bobs[parameter.name], bobs[parameter.name], "alice", None]))
        elif parameter.default is inspect.Parameter.empty:
            given[parameter.name] = data.draw(st.text(min_size=1, max_size=12))
    if name == "append_many":
        given["turns"] = [{"session_id": "bob-chat", "role": "user", "content": "x"}]
    if name in ("put_document",):
        given["value"] = {"note": "x"}
    return given


CALLERS = ["a key of alice", "a token delegated for alice by a key of alice and bob"]


@contextmanager
def caller(admin: RemoteMemoryClient, served: Served, kind: str
           ) -> Iterator[RemoteMemoryClient]:
    rights = ["read", "write", "forget"]
    if kind == CALLERS[0]:
        with key_for(admin, served, users=["alice"], can=rights) as client:
            yield client
        return
    with key_for(admin, served, users=["alice", "bob"], can=[*rights, "delegate"]) as key:
        token = key.delegate(users=["alice"]).token
    with RemoteMemoryClient(served.url, token=token) as client:
        yield client


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_call_of_a_key_reaches_another_users_data(
    admin: RemoteMemoryClient, served: Served, config: Config, data: st.DataObject
) -> None:
    admin.put_document(["notes"], "k", {"note": "bob's note"}, user_id="bob")
    admin.flush()
    message_id = admin.history("bob-chat")[0].id
    before = bobs_rows(config.db_path)
    bobs = {**BOB, "message_id": message_id}
    name = data.draw(st.sampled_from(sorted(OPERATIONS)))
    given = arguments_for(name, data, bobs)
    with caller(admin, served, data.draw(st.sampled_from(CALLERS))) as alice:
        try:
            answer = getattr(alice, name)(**given)
        except (NotFound, PermissionDenied, ValidationError, MemqError):
            answer = None
        alice.flush()
    assert not any(marker in repr(answer) for marker in BOBS_CONTENT), (name, given, answer)
    assert bobs_rows(config.db_path) == before, (name, given)


NOT_TEXT = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                 max_size=3),
    max_leaves=6,
).filter(lambda value: value is not None)
"""A JSON value that is not a string: what an id is compared with the grant as."""
ODD_TEXT = st.builds(lambda before, odd, after: before + odd + after, st.text(max_size=4),
                     st.characters(categories=["Cs", "Cc"]), st.text(max_size=4))
"""Text no id may hold: a lone surrogate (not UTF-8) or a control character. The grant
looks a session's owner up in SQLite before the call's own checks, which could not take
a lone surrogate: the server answered 500."""
WRITTEN = [op for op in sorted(OPERATIONS.values(), key=lambda op: op.name)
           if op.method == "POST" and not op.path_args]


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_an_id_that_is_not_text_gets_a_problem_from_a_limited_key(
    admin: RemoteMemoryClient, served: Served, config: Config, data: st.DataObject
) -> None:
    """An id is compared with the key's grant before the call's own checks read it: a list
    or an object there once met a set lookup, and a lone surrogate SQLite, and the server
    answered 500."""
    op = data.draw(st.sampled_from(WRITTEN), label="operation")
    name = data.draw(st.sampled_from(["user_id", "agent_id", "session_id"]), label="id")
    body = {name: data.draw(NOT_TEXT | ODD_TEXT, label="value")}
    if op.name == "append_many":
        body = {"turns": [{"session_id": "s1", "role": "user", "content": "x", **body}]}
    before = bobs_rows(config.db_path)
    made = admin.create_key("test", users=["alice"], agents=["a1"],
                            can=["read", "write", "forget"])
    admin.flush()
    answer = httpx.post(f"{served.url}/v1{op.path}", content=json.dumps(body),  # \udXXX escapes
                        headers={"Authorization": f"Bearer {made.secret}",
                                 "Content-Type": "application/json"})
    assert answer.status_code < 500, (op.name, body, answer.text)
    if answer.status_code >= 400:
        assert answer.headers["content-type"] == "application/problem+json"
    assert bobs_rows(config.db_path) == before


# -- delegated tokens ------------------------------------------------------------------------


def test_a_delegated_token_reaches_only_the_narrower_grant(admin: RemoteMemoryClient,
                                                          served: Served) -> None:
    with key_for(admin, served, users=["alice", "bob"],
                 can=["read", "write", "delegate"]) as backend:
        run = backend.delegate(users=["alice"], minutes=5)
        assert run.expires_at.endswith("Z")
        with RemoteMemoryClient(served.url, token=run.token) as agent:
            agent.append("alice-run", "user", "hello")  # alice, the token's only user
            agent.flush()
            assert [m.content for m in agent.history("alice-run")] == ["hello"]
            with pytest.raises(NotFound):
                agent.history("bob-chat")  # the key reaches bob; the token does not
            with pytest.raises(PermissionDenied, match="delegate"):
                agent.delegate(users=["alice"])  # never further
            with pytest.raises(PermissionDenied, match="forget"):
                agent.forget_session("alice-run")  # the key may not either
        assert [m.content for m in backend.history("bob-chat")] == ["bob's secret plan"]


@pytest.mark.parametrize(("asked", "refused"), [
    ({"users": ["carol"]}, "users carol: beyond"),
    ({"can": ["read", "forget"]}, "can forget: beyond"),
    ({"can": ["delegate"]}, "can delegate: beyond"),
    ({"agents": ["a9"]}, None),  # the key spans every agent: any subset is within
])
def test_a_delegation_beyond_the_key_is_refused(admin: RemoteMemoryClient, served: Served,
                                                asked: dict[str, object],
                                                refused: str | None) -> None:
    with key_for(admin, served, users=["alice"], can=["read", "delegate"]) as backend:
        if refused is None:
            assert backend.delegate(**asked).token.startswith("md_")  # type: ignore[arg-type]
            return
        with pytest.raises(PermissionDenied, match=refused):
            backend.delegate(**asked)  # type: ignore[arg-type]


def test_a_delegation_naming_a_name_no_call_could_use_is_refused_now(
        admin: RemoteMemoryClient, served: Served) -> None:
    """An agent's name is at most 200 characters in every call: a longer one in a token
    (its key spans every agent) made a token no call could use, or one too long to read."""
    with key_for(admin, served, users=["alice"], can=["read", "delegate"]) as backend:
        with pytest.raises(ValidationError, match="agents: a name is 201 characters"):
            backend.delegate(agents=["a" * 201])
        assert backend.delegate(agents=["a" * 200]).token.startswith("md_")


@pytest.mark.parametrize("call", ["task", "pause_task", "resume_task", "delete_task"])
def test_a_key_limited_to_some_users_cannot_tell_a_task_from_no_task(
        admin: RemoteMemoryClient, served: Served, call: str) -> None:
    """Tasks are every user's: a limited key sees none. Its tenant's task once got "no task
    ..." and a made-up id "no scheduled task ...": the texts told which ids exist."""
    real = admin.tasks()[0].id
    made_up = str(uuid7())
    told = []
    with key_for(admin, served, users=["alice"], can=["read", "write", "forget"]) as key:
        for task_id in (real, made_up):
            with pytest.raises(NotFound) as refused:
                getattr(key, call)(task_id)
            told.append(str(refused.value).replace(task_id, "ID"))
    assert told[0] == told[1]
    assert admin.task(real).name == "standup"


_UNSENDABLE = st.one_of(st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
                       st.characters(max_codepoint=0x1F), st.characters(
                           min_codepoint=0x7F, max_codepoint=0x9F))
"""What no name may hold: a lone surrogate (no UTF-8), a control character (the tenants'
separator among them)."""
_DELEGATORS: dict[str, str] = {}


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["users", "agents", "can"]),
       name=st.tuples(st.text(max_size=8), _UNSENDABLE, st.text(max_size=8)).map("".join))
def test_a_delegation_naming_what_no_name_may_hold_is_refused_as_a_mistake(
        admin: RemoteMemoryClient, served: Served, field: str, name: str) -> None:
    """A lone surrogate once answered 500 and broke the server's log line; a control
    character minted a token that every later call refused. Sent as JSON escapes, as any
    client may (ensure_ascii writes a lone surrogate as \\udXXX)."""
    if served.url not in _DELEGATORS:  # one key for the examples of one server
        _DELEGATORS[served.url] = admin.create_key(
            "delegator", users=["alice"], can=["read", "delegate"]).secret
        admin.flush()
    body = json.dumps({field: ["alice" if field == "users" else "read", name]})
    answer = httpx.post(f"{served.url}/v1/keys/delegate", content=body.encode(),
                        headers={"Authorization": f"Bearer {_DELEGATORS[served.url]}",
                                 "Content-Type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["title"] == "ValidationError"
    assert field in answer.json()["detail"]


def test_a_delegation_asking_for_no_right_is_refused_not_given_every_right(
        admin: RemoteMemoryClient, served: Served) -> None:
    """``can=[]`` once read as "not said" and minted a token with all the key's rights."""
    with key_for(admin, served, users=["alice"], can=["read", "write", "delegate"]) as backend:
        with pytest.raises(ValidationError, match="can: name at least one right"):
            backend.delegate(can=[])
        assert backend.delegate(can=["read"]).token.startswith("md_")


def test_a_delegated_token_dies_with_its_key_and_a_forged_one_is_refused(
    admin: RemoteMemoryClient, served: Served
) -> None:
    made = admin.create_key("backend", users=["alice"], can=["read", "delegate"])
    admin.flush()
    with RemoteMemoryClient(served.url, token=made.secret) as backend:
        run = backend.delegate()
    with RemoteMemoryClient(served.url, token=served.token()) as shared, \
            pytest.raises(PermissionDenied, match="delegated tokens are minted by a key"):
        shared.delegate()
    body, _, signature = run.token.removeprefix("md_").partition(".")
    claims = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).replace(b"alice", b"bob")
    forged = "md_" + base64.urlsafe_b64encode(claims).decode().rstrip("=") + "." + signature
    respelt = run.token[:-1] + chr(ord(run.token[-1]) ^ 1)
    for token in (forged, respelt, run.token + "x", "md_", "md_.", "md_" + "A" * 70000):
        answer = httpx.get(f"{served.url}/v1/sessions",
                           headers={"Authorization": f"Bearer {token}"})
        assert answer.status_code == 401, token[:80]
    with RemoteMemoryClient(served.url, token=run.token) as agent:
        assert agent.sessions() == []
        admin.revoke_key(made.id)
        admin.flush()
        with pytest.raises(AuthenticationFailed):
            agent.sessions()


TOKENS = st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1,
                 max_size=200) | st.builds(
    lambda head, tail: head + tail, st.sampled_from(["mk_", "md_", "mk_0123456789abcdef_"]),
    st.text(alphabet="abcdefABCDEF0123456789_-.=", max_size=120))


@settings(max_examples=80, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(token=TOKENS)
def test_any_other_token_is_refused_never_a_fault(served: Served, token: str) -> None:
    answer = httpx.post(f"{served.url}/v1/context", json={"session_id": "s"},
                        headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code == 401, (token, answer.text)


# -- the writer's own check -------------------------------------------------------------------


def test_the_writer_sets_aside_what_a_key_may_not_send_and_records_what_it_sent(
    admin: RemoteMemoryClient, served: Served, config: Config
) -> None:
    """The second check: events that reach the writer for a key outside its grant (as a
    server with a bug in its own check would send them) are set aside with the reason."""
    made = admin.create_key("k", users=["alice"], can=["read", "write"])
    admin.flush()
    with MemoryClient(config=config) as inside:  # a client that skips the server's check
        inside.outbox.acting_for = made.id
        inside.append("alice-chat", "user", "mine", user_id="alice")
        ok = inside.set_fact("diet", "likes", "pears", user_id="alice")
        inside._send(EventType.MESSAGE_APPENDED, {  # bob's session, no user named
            "message_id": "m-bob", "role": "user", "content": "into bob's",
            "importance": 0.5}, session_id="bob-chat")
        inside.set_fact("diet", "likes", "nothing", user_id="bob")
        inside.set_fact("global", "k", "v")
        inside.schedule_task("t", "in 2 hours", "p")
        inside.forget_session("alice-chat")
        with pytest.raises(EventsRejected) as refused:
            inside.flush()
    reasons = sorted(r.reason for r in refused.value.rejections)
    assert reasons == sorted([
        "message.appended: session 'bob-chat' of a user outside key "
        f"{made.id}'s grant",
        f"fact.set: the data of a user outside key {made.id}'s grant",
        f"fact.set: a global fact or document of no user, outside key {made.id}'s grant",
        f"task.scheduled: tasks are every user's and agent's, outside key {made.id}'s",
        f"key {made.id} may not forget",
    ]), reasons
    assert [m.content for m in admin.history("bob-chat")] == ["bob's secret plan"]
    assert [m.content for m in admin.history("alice-chat")] == ["mine"]
    audit = audit_rows(config, made.id)
    assert {event_id for event_id, _ in audit} >= {ok}
    assert all(key == made.id for _, key in audit)


def audit_rows(config: Config, key_id: str) -> list[tuple[str, str]]:
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return conn.execute("SELECT e.event_id, k.key_id FROM event_keys AS k JOIN events AS e"
                            " USING (seq) WHERE k.key_id = ?", (key_id,)).fetchall()
    finally:
        conn.close()


def test_only_the_keys_stream_names_a_key_and_no_agent_may_push_it(
    config: Config, role_urls: dict[Role, str], writer: WriterThread
) -> None:
    """An agent host marking its events with a key's id would put them in the key's audit:
    the mark is refused on its queue, and the keys' queue is the admin's alone."""
    agent = redis.Redis.from_url(role_urls[Role.AGENT])
    with pytest.raises(redis.exceptions.NoPermissionError):
        agent.rpush(names.INBOX_QUEUES[names.KEYS_INBOX_STREAM], b"x")
    with MemoryClient(redis_url=role_urls[Role.AGENT], db_path=config.db_path) as forger:
        forger.outbox.acting_for = "0123456789abcdef"  # its events go to the keys' queue
        with pytest.raises(PermissionDenied, match="may not do that"):  # which it may not push
            forger.append("s", "user", "as if through a key")
    admin = redis.Redis.from_url(config.redis_url)
    raw = encode(Event(id=uuid7(), type=EventType.MESSAGE_APPENDED, session_id="s",
                       created_at=now_rfc3339(), payload={
                           "message_id": uuid7(), "role": "user", "content": "x",
                           "importance": 0.5}))
    admin.rpush(names.INBOX_QUEUES[names.INBOX_STREAM], f"{'a' * 32}:{'b' * 16}\n".encode() + raw)
    admin.rpush(names.INBOX_QUEUES[names.KEYS_INBOX_STREAM], f"{'a' * 32}\n".encode() + raw)
    wait_committed(admin)
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        reasons = sorted(r for (r,) in conn.execute("SELECT reason FROM rejected_events"))
    finally:
        conn.close()
    assert reasons == ["an entry of memq:inbox:keys must name the API key it was sent for",
                       "only memq:inbox:keys names API keys, not memq:inbox"]


# -- found by review: what a key must not reach through the server's own caches -------------


def poison(client: RemoteMemoryClient, session_id: str) -> None:
    """A batch refused at its second turn: its first turn's session was once remembered as
    the caller's although nothing was sent."""
    client.append("alice-own", "user", "mine", agent_id="a1")
    client.flush()
    with pytest.raises(ValidationError):
        client.append_many([
            {"session_id": session_id, "role": "user", "content": "never sent"},
            {"session_id": "alice-own", "role": "user", "content": "x", "agent_id": "a2"},
        ])


def test_a_turn_never_sent_claims_no_session(admin: RemoteMemoryClient, served: Served
                                             ) -> None:
    with key_for(admin, served, users=["alice"], can=["read", "write", "forget"]) as alice:
        poison(alice, "bob-tomorrow")
        with pytest.raises(NotFound):
            alice.history("bob-tomorrow")
        admin.append("bob-tomorrow", "user", "bob's diagnosis", user_id="bob")
        admin.flush()  # bob's own turn is not refused as "alice's session" either
        for call in (lambda: alice.history("bob-tomorrow"),
                     lambda: alice.get_context("bob-tomorrow", "diagnosis"),
                     lambda: alice.forget_session("bob-tomorrow")):
            with pytest.raises(NotFound):
                call()
    assert [m.content for m in admin.history("bob-tomorrow")] == ["bob's diagnosis"]


def test_a_delegated_token_cannot_reach_through_a_claim_either(admin: RemoteMemoryClient,
                                                              served: Served) -> None:
    with key_for(admin, served, users=["alice", "bob"],
                 can=["read", "write", "forget", "delegate"]) as key:
        token = key.delegate(users=["alice"]).token
    with RemoteMemoryClient(served.url, token=token) as run:
        poison(run, "bob-tomorrow")
        admin.append("bob-tomorrow", "user", "bob's diagnosis", user_id="bob")
        admin.flush()
        with pytest.raises(NotFound):
            run.forget_session("bob-tomorrow")
        run.append("alice-new", "user", "its own, read back at once")
        assert [m.content for m in run.history("alice-new")] == ["its own, read back at once"]
    assert [m.content for m in admin.history("bob-tomorrow")] == ["bob's diagnosis"]


def test_a_key_of_one_agent_sees_neither_other_agents_nor_tasks(admin: RemoteMemoryClient,
                                                                served: Served) -> None:
    admin.append("bob-other-agent", "user", "said to a2", user_id="bob", agent_id="a2")
    admin.flush()
    with key_for(admin, served, users=None, agents=["a1"]) as a1:
        found = a1.get_context("bob-chat", "said", scope="agent")
        assert "said to a2" not in [i.content for i in found]
        assert a1.tasks() == []
        with pytest.raises(NotFound):
            a1.pause_task(admin.tasks()[0].id)


def test_a_refused_call_spends_the_budget_and_another_forget_is_not_found(
    admin: RemoteMemoryClient, served: Served
) -> None:
    event = admin.forget_session("bob-chat")
    admin.flush()
    made = admin.create_key("small", users=["alice"], can=["read", "forget"], units_per_s=3)
    admin.flush()
    with RemoteMemoryClient(served.url, token=made.secret) as alice:
        with pytest.raises(NotFound):
            alice.wait_forgotten(event, 1)
        answers = []  # 12 calls in well under a second: one second's window sees 6 at least
        for _ in range(12):
            try:
                alice.history("bob-chat")
            except MemqError as exc:
                answers.append(type(exc).__name__)
    assert "RateLimited" in answers


def test_the_writer_checks_a_delegated_tokens_narrower_grant(
    admin: RemoteMemoryClient, served: Served, config: Config
) -> None:
    """A token for alice from a key of alice and bob: the writer judges its events by the
    token's grant, not the key's (as a server with a bug in its own check would send them)."""
    from memq import narrowing

    made = admin.create_key("k", users=["alice", "bob"], can=["read", "write", "forget"])
    admin.flush()
    with MemoryClient(config=config) as inside:
        inside.outbox.acting_for = f"{made.id}:{narrowing.encode(['alice'], None, ['write'])}"
        inside.append("alice-run", "user", "mine", user_id="alice")
        inside.append("bob-chat", "user", "into bob's")
        inside.forget_session("alice-run")
        inside.outbox.acting_for = f"{made.id}:not-a-narrowing"
        inside.append("alice-run", "user", "with a broken mark")
        with pytest.raises(EventsRejected) as refused:
            inside.flush()
    reasons = [r.reason for r in refused.value.rejections]
    assert len(reasons) == 3, reasons
    assert reasons[:2] == [
        f"message.appended: session 'bob-chat' of a user outside key {made.id}'s grant",
        f"key {made.id} may not forget"]
    assert reasons[2].startswith(f"sent for key {made.id} with not a narrowing")
    assert [m.content for m in admin.history("bob-chat")] == ["bob's secret plan"]


def test_a_delegated_token_names_few_enough_users_to_travel_with_its_events(
    admin: RemoteMemoryClient, served: Served
) -> None:
    with key_for(admin, served, users=None, can=["read", "delegate"]) as backend:
        assert backend.delegate(users=[f"u{i}" for i in range(32)]).token
        with pytest.raises(ValidationError, match="at most 32, got 33"):
            backend.delegate(users=[f"u{i}" for i in range(33)])


def test_a_refused_claim_in_the_shared_owner_cache_does_not_widen_a_search(
        admin: RemoteMemoryClient, served: Served, writer: WriterThread, config: Config,
        role_urls: dict[Role, str], tmp_path: Path) -> None:
    """Two servers of one deployment: mallory's first turn of 'next' goes through B, bob's
    through A just after (before the writer commits either). The writer keeps mallory's and
    refuses bob's, but A's owner cache, shared by every key, keeps 'next' as bob's."""
    mallory_key = admin.create_key("m", users=["mallory"])
    bob_key = admin.create_key("b", users=["bob"])
    admin.flush()
    (tmp_path / "b").mkdir()
    with serving(config, role_urls, tmp_path / "b", key_ttl_s=0.0) as other:
        writer.stop()  # only to order the two turns as two servers can
        with RemoteMemoryClient(other.url, token=mallory_key.secret) as on_b:
            on_b.append("next", "user", "mallory's first turn")
        with RemoteMemoryClient(served.url, token=bob_key.secret) as bob:
            bob.append("next", "user", "bob's new chat")
            writer.start()
            with pytest.raises(EventsRejected):
                bob.flush()
    with RemoteMemoryClient(served.url, token=mallory_key.secret) as mallory:
        assert [m.content for m in mallory.history("next")] == ["mallory's first turn"]
        found = [i.content for i in mallory.get_context("next", "secret plan", scope="user")]
    assert "bob's secret plan" not in found, found


def test_a_client_that_kept_an_ordinal_from_before_keys_were_counted_still_flushes(
        admin: RemoteMemoryClient, served: Served) -> None:
    """A remote client alive across the upgrade holds a queue ordinal as its last write
    (Memq-Sent): its flushes return, and its next write's position passes it."""
    with key_for(admin, served, users=["alice"], can=["read", "write"]) as key:
        key._sent.note("5000-0")
        key.flush(timeout=5)
        key.append("s1", "user", "hello", user_id="alice")
        sent = key._sent.position
        assert sent is not None
        assert sent[0] > names.KEY_POSITION_BASE
        key.flush(timeout=5)
        assert [m.content for m in key.history("s1")] == ["hello"]


def test_a_token_delegated_for_many_users_flushes(admin: RemoteMemoryClient,
                                                  served: Served) -> None:
    users = [f"customer-{i:04d}" for i in range(30)]  # a sender field of ~1,000 bytes
    with key_for(admin, served, users=users, can=["read", "write", "delegate"]) as backend:
        run = backend.delegate(users=users, minutes=5)
        with RemoteMemoryClient(served.url, token=run.token) as agent:
            agent.append("run-1", "user", "hello", user_id=users[0])
            agent.flush(timeout=5)
            assert [m.content for m in agent.history("run-1")] == ["hello"]
