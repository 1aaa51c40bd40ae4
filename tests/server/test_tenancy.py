"""Tenants at the door of ``memq serve``: two tenants use the same names (``alice``, ``s1``)
and share nothing; a key names only its own tenant's data, whatever it sends."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import MemoryClient, RemoteMemoryClient, tenants
from memq.config import Config
from memq.errors import EventsRejected, MemqError, NotFound, PermissionDenied, ValidationError
from memq.producers.operations import OPERATIONS
from memq.server import bodies
from tests.producers.serving import Served
from tests.server.conftest import key_for

pytestmark = [pytest.mark.redis]

EVERY_RIGHT = ["read", "write", "forget", "delegate"]


def fill(client: RemoteMemoryClient, word: str) -> None:
    """The same names in every tenant, with content of the tenant's own (``word``)."""
    client.append("s1", "user", f"{word} plans a trip to Lisbon", user_id="alice",
                  agent_id="a1")
    client.append("s2", "user", f"{word} has no user", agent_id="a1")
    client.set_fact("diet", "likes", f"{word} figs", user_id="alice")
    client.set_fact("house", "rule", f"{word} global rule")
    client.put_document(["notes"], "k", {"note": f"{word} note"}, user_id="alice")
    client.put_document(["notes"], "g", {"note": f"{word} global note"})
    client.schedule_task("nightly", "every day at 2am", f"{word} nightly prompt")
    for session in ("s1", "s1", "s1"):  # a macro learned: search, then open
        client.record_tool_call(session, "search", {"q": f"{word} query"})
        client.record_tool_call(session, "open", {"path": f"{word}.md"})
    client.flush()


@pytest.fixture
def acme(admin: RemoteMemoryClient, served: Served) -> Iterator[RemoteMemoryClient]:
    with key_for(admin, served, tenant="acme", can=EVERY_RIGHT) as client:
        fill(client, "acme")
        yield client


@pytest.fixture
def globex(admin: RemoteMemoryClient, served: Served) -> Iterator[RemoteMemoryClient]:
    with key_for(admin, served, tenant="globex", can=EVERY_RIGHT) as client:
        fill(client, "globex")
        yield client


def test_two_tenants_use_the_same_names_and_each_sees_its_own(
        acme: RemoteMemoryClient, globex: RemoteMemoryClient) -> None:
    for client, word in ((acme, "acme"), (globex, "globex")):
        assert [m.content for m in client.history("s1")] == [f"{word} plans a trip to Lisbon"]
        assert {(s.session_id, s.user_id) for s in client.sessions()} == {
            ("s1", "alice"), ("s2", None)}
        assert [(f.value, f.user_id) for f in client.facts(user_id="alice")] == [
            (f"{word} figs", "alice"), (f"{word} global rule", None)]
        assert [f.value for f in client.facts()] == [f"{word} global rule"]
        found = client.get_context("s1", "trip to Lisbon rule figs", scope="user")
        assert found
        assert all(word in item.content for item in found), found
        assert {item.session_id for item in found} <= {"s1"}
        notes = client.search_documents(["notes"], user_id="alice")
        assert [d.document.value["note"] for d in notes] == [f"{word} note"]
        assert [d.document.user_id for d in client.search_documents(["notes"])] == [None]
        assert client.document(["notes"], "g").value == {"note": f"{word} global note"}


def test_the_default_tenants_keys_and_data_are_untouched_by_other_tenants(
        admin: RemoteMemoryClient, served: Served, acme: RemoteMemoryClient) -> None:
    with key_for(admin, served, can=EVERY_RIGHT) as default:
        assert {s.session_id for s in default.sessions()} == {"bob-chat"}
        assert default.facts() == []
        assert default.history("s1") == []  # as for any session that does not exist
        assert default.get_context("s1", "Lisbon", scope="user") == []
    with key_for(admin, served, tenant="acme", can=EVERY_RIGHT) as other_key:
        assert other_key.history("bob-chat") == []
        assert [f.value for f in other_key.facts(user_id="bob")] == ["acme global rule"]


def test_the_person_sees_every_tenant_and_can_list_one(admin: RemoteMemoryClient,
                                                       acme: RemoteMemoryClient,
                                                       globex: RemoteMemoryClient) -> None:
    listed = {s.session_id for s in admin.sessions()}
    assert {"bob-chat", "acme\x1fs1", "globex\x1fs1"} <= listed
    assert {s.session_id for s in admin.sessions(tenant="acme")} == {"acme\x1fs1",
                                                                     "acme\x1fs2"}
    assert {s.session_id for s in admin.sessions(tenant="default")} == {"bob-chat"}
    with pytest.raises(NotFound, match="no tenant"):
        acme.sessions(tenant="globex")


@pytest.mark.parametrize("tenant", ["default", "acme"])
@pytest.mark.parametrize("name", ["session_id", "user_id", "agent_id"])
def test_a_key_cannot_write_a_stored_id(admin: RemoteMemoryClient, served: Served,
                                        globex: RemoteMemoryClient, tenant: str,
                                        name: str) -> None:
    """The default tenant stores ids as they are: its keys, above all, must not name
    another tenant's stored id."""
    given = {"session_id": "s9", name: f"globex{tenants.SEPARATOR}alice"}
    with key_for(admin, served, tenant=tenant, can=EVERY_RIGHT) as key:
        with pytest.raises(ValidationError, match=f"{name} contains a control character"):
            key.append(given.pop("session_id"), "user", "x", **given)
        with pytest.raises(ValidationError, match="session_id contains a control character"):
            key.history(f"globex{tenants.SEPARATOR}s1")
        with pytest.raises(ValidationError, match="user_id contains a control character"):
            key.facts(user_id=f"globex{tenants.SEPARATOR}alice")


def test_each_tenant_has_its_own_tasks_and_macros(
        admin: RemoteMemoryClient, served: Served, acme: RemoteMemoryClient,
        globex: RemoteMemoryClient) -> None:
    """The same task and tool names in two tenants: each key sees, changes and uses its
    own; another tenant's task or macro is 404 by its id, as one that does not exist."""
    mine, theirs = (client.tasks() for client in (acme, globex))
    assert [(t.name, t.prompt) for t in mine] == [("nightly", "acme nightly prompt")]
    assert [(t.name, t.prompt) for t in theirs] == [("nightly", "globex nightly prompt")]
    [acme_open] = acme.suggest_next_tools("search", {"q": "x"})
    assert (acme_open.tool, acme_open.args) == ("open", {"path": "<path>"})
    [globex_open] = globex.suggest_next_tools("search", {"q": "x"})
    assert acme_open.macro_id != globex_open.macro_id
    with key_for(admin, served, can=EVERY_RIGHT) as default:
        assert [t.name for t in default.tasks()] == ["standup"]
        assert default.suggest_next_tools("search") == []
        for call, target in (("pause_task", mine[0].id), ("delete_task", mine[0].id),
                             ("task", mine[0].id), ("use_macro", acme_open.macro_id)):
            with pytest.raises(NotFound):
                getattr(default, call)(target)
        with pytest.raises(NotFound):
            acme.pause_task(default.tasks()[0].id)
    with pytest.raises(NotFound):
        acme.use_macro(globex_open.macro_id)
    acme.pause_task(mine[0].id)
    acme.use_macro(acme_open.macro_id)
    acme.flush()
    assert acme.task(mine[0].id).is_paused
    assert not globex.task(theirs[0].id).is_paused
    assert {t.name for t in admin.tasks()} >= {"standup", "acme\x1fnightly",
                                                "globex\x1fnightly"}


def test_a_tenants_feed_shows_its_own_tasks_and_macros_in_its_names(
        admin: RemoteMemoryClient, served: Served, acme: RemoteMemoryClient,
        globex: RemoteMemoryClient) -> None:
    acme.delete_task(acme.tasks()[0].id)
    acme.use_macro(acme.suggest_next_tools("search")[0].macro_id)
    acme.flush()
    seen = list(acme.changes(types=["task.*", "macro.*"], follow=False))
    assert [c.type for c in seen] == ["task.scheduled", *["macro.observed"] * 6,
                                      "task.deleted", "macro.used"]
    assert {(c.data or {}).get("name") for c in seen if c.type.startswith("task.")} == {
        "nightly"}
    assert {(c.data or {}).get("tool") for c in seen if c.type.startswith("macro.")} == {
        "search", "open"}
    with key_for(admin, served, can=["read"]) as default:
        theirs = list(default.changes(types=["task.*", "macro.*"], follow=False))
    assert [(c.type, (c.data or {}).get("name")) for c in theirs] == [
        ("task.scheduled", "standup")]


def test_each_tenant_has_its_own_approvals(admin: RemoteMemoryClient, served: Served,
                                           acme: RemoteMemoryClient) -> None:
    """The person approves per tenant; a key checks commands against its own tenant's,
    whatever tenant it names, and sees no other tenant's approval in the feed."""
    admin.allow_prefix("git status")
    admin.allow_prefix("npm test", tenant="acme")
    admin.flush()
    assert acme.is_command_allowed("npm test --watch") is True
    assert acme.is_command_allowed("git status") is False
    assert [p.prefix for p in acme.allowed_prefixes()] == ["npm test"]
    with pytest.raises(NotFound, match="no tenant"):
        acme.is_command_allowed("git status", tenant="default")
    with key_for(admin, served, can=["read"]) as default:
        assert default.is_command_allowed("git status") is True
        assert default.is_command_allowed("npm test") is False
        assert [c.data for c in default.changes(types=["prefix.*"], follow=False)] == [
            {"prefix": "git status"}]
    assert [c.data for c in acme.changes(types=["prefix.*"], follow=False)] == [
        {"prefix": "npm test", "tenant": "acme"}]
    assert [p.prefix for p in admin.allowed_prefixes(tenant="acme")] == ["npm test"]
    admin.revoke_prefix("npm test", tenant="acme")
    admin.flush()
    assert acme.is_command_allowed("npm test") is False


def test_the_writer_keeps_a_keys_events_inside_its_tenant(
        admin: RemoteMemoryClient, served: Served, config: Config,
        globex: RemoteMemoryClient) -> None:
    """The second check: events sent for an acme key (as a server with a bug in its own
    mapping would send them) that reach another tenant's ids are set aside."""
    made = admin.create_key("k", tenant="acme", can=["read", "write"])
    admin.flush()
    with MemoryClient(config=config) as inside:  # a client that skips the server's mapping
        inside.outbox.acting_for = made.id
        ok = inside.append("acme\x1fs5", "user", "mine", user_id="acme\x1falice")
        inside.append("globex\x1fs1", "user", "into globex's", user_id="globex\x1falice")
        inside.append("bob-chat", "user", "into the default tenant's")
        inside.set_fact("house", "rule", "overwrites every tenant's")
        inside.schedule_task("t", "in 2 hours", "p")
        inside.record_tool_call("acme\x1fs5", "search", {"q": "x"})
        with pytest.raises(EventsRejected) as refused:
            inside.flush()
    reasons = sorted(r.reason for r in refused.value.rejections)
    assert reasons == sorted([
        f"message.appended: session 'globex\\x1fs1' is outside key {made.id}'s tenant acme",
        f"message.appended: session 'bob-chat' is outside key {made.id}'s tenant acme",
        f"fact.set: the default tenant's global data, outside key {made.id}'s tenant acme",
        f"task.scheduled: task 't' is outside key {made.id}'s tenant acme",
        f"macro.observed: tool 'search' is outside key {made.id}'s tenant acme",
    ]), reasons
    assert [m.content for m in globex.history("s1")] == ["globex plans a trip to Lisbon"]
    assert ok in {m.id for m in admin.history("acme\x1fs5")}


# -- generated: every operation of the table, naming the other tenant's ids ---------------

GLOBEX = {"session_id": "s1", "user_id": "alice", "agent_id": "a1", "category": "diet",
          "key": "likes", "namespace": ["notes"], "prefix": ["notes"], "tool": "search",
          "name": "nightly"}
"""Where an argument of this name can point at globex's data (the same names as acme's)."""
GLOBEX_CONTENT = ("globex plans", "globex has no user", "globex figs", "globex global",
                  "globex note", "globex nightly", "globex query", "globex.md",
                  "globex\\x1f")
"""What globex wrote, and its stored ids as a repr shows them (a caller's own data may hold
the word "globex": a name it was drawn)."""


def test_a_page_anchored_elsewhere_is_not_found_in_the_tenants_own_names(
        acme: RemoteMemoryClient) -> None:
    """The session's stored form holds the tenant's name: an error once showed it."""
    other = acme.history("s2")[0].id
    with pytest.raises(NotFound) as missing:
        acme.history("s1", before=other)
    assert str(missing.value) == f"no message {other!r} in session 's1'"


def globex_rows(db_path: str) -> list[object]:
    """Everything of globex's in the database file, as a dump to compare."""
    conn = apsw.Connection(db_path, flags=apsw.SQLITE_OPEN_READONLY)
    mark = tenants.inside("globex", "")
    try:
        return [conn.execute(query, (mark,)).fetchall() for query in (
            "SELECT * FROM messages WHERE substr(session_id, 1, 7) = ? ORDER BY id",
            "SELECT * FROM facts WHERE substr(user_id, 1, 7) = ? ORDER BY category, key",
            "SELECT * FROM sessions WHERE substr(session_id, 1, 7) = ? ORDER BY session_id",
            "SELECT * FROM documents WHERE substr(user_id, 1, 7) = ? ORDER BY namespace, key",
            "SELECT * FROM events WHERE substr(session_id, 1, 7) = ? ORDER BY seq",
            "SELECT * FROM scheduled_tasks WHERE substr(name, 1, 7) = ? ORDER BY id",
            "SELECT * FROM macros WHERE substr(trigger_tool, 1, 7) = ? ORDER BY id",
        )]
    finally:
        conn.close()


def arguments_for(name: str, data: st.DataObject, ids: dict[str, object]
                  ) -> dict[str, object]:
    given: dict[str, object] = {}
    names = {**GLOBEX, **ids}
    for parameter, _ in bodies.arguments(OPERATIONS[name]):
        if parameter.name in names:
            named = names[parameter.name]
            smuggled = tenants.inside("globex", named) if isinstance(named, str) else named
            given[parameter.name] = data.draw(st.sampled_from([named, smuggled, "nobody",
                                                               None]))
        elif parameter.default is inspect.Parameter.empty:
            given[parameter.name] = data.draw(st.text(min_size=1, max_size=12))
    if name == "append_many":
        given["turns"] = [{"session_id": data.draw(st.sampled_from(["s1", "globex\x1fs1"])),
                           "role": "user", "content": "x", "user_id": "alice"}]
    if name == "put_document":
        given["value"] = {"note": "x"}
    return given


CALLERS = ["acme's key of every user", "acme's key of alice",
           "a token delegated by acme's key", "the default tenant's key of every user"]


@contextmanager
def caller(admin: RemoteMemoryClient, served: Served, kind: str
           ) -> Iterator[RemoteMemoryClient]:
    tenant = "default" if kind == CALLERS[3] else "acme"
    users = ["alice"] if kind == CALLERS[1] else None
    with key_for(admin, served, tenant=tenant, users=users, can=EVERY_RIGHT) as key:
        if kind != CALLERS[2]:
            yield key
            return
        token = key.delegate(users=["alice"]).token
    with RemoteMemoryClient(served.url, token=token) as client:
        yield client


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_call_of_another_tenants_key_reaches_a_tenants_data(
    admin: RemoteMemoryClient, served: Served, config: Config, globex: RemoteMemoryClient,
    data: st.DataObject,
) -> None:
    ids = {"message_id": globex.history("s1")[0].id, "task_id": globex.tasks()[0].id,
           "macro_id": globex.suggest_next_tools("search")[0].macro_id}
    before = globex_rows(config.db_path)
    name = data.draw(st.sampled_from(sorted(OPERATIONS)))
    given = arguments_for(name, data, ids)
    with caller(admin, served, data.draw(st.sampled_from(CALLERS))) as other:
        try:
            answer = getattr(other, name)(**given)
        except (NotFound, PermissionDenied, ValidationError, MemqError):
            answer = None
        other.flush()
    assert not any(marker in repr(answer) for marker in GLOBEX_CONTENT), (name, given, answer)
    assert globex_rows(config.db_path) == before, (name, given)


def test_an_erased_macro_use_is_no_keys_change(admin: RemoteMemoryClient, served: Served,
                                               acme: RemoteMemoryClient) -> None:
    """A use of a macro that only a forgotten session taught is erased with its name: no
    key's feed shows it (it once fell to the default tenant, as if logged before tenants)."""
    for _ in range(3):
        acme.record_tool_call("s9", "deploy", {"q": "x"})
        acme.record_tool_call("s9", "rollback", {"p": "y"})
    acme.flush()
    used = acme.use_macro(acme.suggest_next_tools("deploy")[0].macro_id)
    acme.flush()
    forgotten = acme.forget_session("s9")
    acme.flush()
    acme.wait_forgotten(forgotten)
    with key_for(admin, served, can=["read"]) as default:
        theirs = default.changes_page(types=["macro.used"], limit=1000).changes
    mine = acme.changes_page(types=["macro.used"], limit=1000).changes
    assert used not in {c.id for c in [*theirs, *mine]}
    assert used in {c.id for c in admin.changes_page(types=["macro.used"]).changes}


@pytest.mark.parametrize("call", [
    lambda key: key.schedule_task(" ", "in 2 hours", "p"),
    lambda key: key.record_tool_call("s1", "", {}),
    lambda key: key.suggest_next_tools(""),
    lambda key: key.append("", "user", "x"),
    lambda key: key.facts(user_id=""),
])
def test_a_blank_name_is_refused_in_every_tenant(acme: RemoteMemoryClient,
                                                 call: object) -> None:
    """Inside a tenant the empty name is its pseudo-user's (its global data): a key may not
    name it, as a default tenant's key may not name an empty id."""
    with pytest.raises(ValidationError, match="must not be empty"):
        call(acme)  # type: ignore[operator]
