"""The macros projection: learning transitions per session, counts, templates, rebuild."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq.events import EventType
from memq.store import schema
from memq.store.projections.macros import (
    MAX_MACRO_ID,
    MAX_TEMPLATES,
    content_id,
    forget_session,
)
from memq.toolcalls import ANY_ARGS, args_pattern, confidence
from tests.store.eventlog import EventLog, at, event


def call(session: str, tool: str, args: dict[str, Any], minute: int = 0):
    return event(EventType.MACRO_OBSERVED, {"tool": tool, "args": args}, session=session,
                 created_at=at(minute))


def coding_session(n: int) -> list[tuple[str, dict[str, Any]]]:
    """What an agent fixing one module does: look, read, edit, test, commit."""
    module = f"src/mod{n}.py"
    return [
        ("terminal", {"command": "git status"}),
        ("terminal", {"command": "git diff"}),
        ("read_file", {"path": module}),
        ("edit_file", {"path": module, "old": f"bug{n}", "new": f"fix{n}"}),
        ("terminal", {"command": f"pytest tests/test_mod{n}.py -q"}),
        ("terminal", {"command": "git status"}),
        ("terminal", {"command": f'git commit -am "fix mod{n}"'}),
    ]


def macro(log: EventLog, tool: str, pattern: str, next_tool: str) -> dict[str, Any]:
    rows = log.rows(
        """SELECT id, next_args, confidence, transition_count, trigger_count, used_count,
                  created_at, updated_at
           FROM macros WHERE trigger_tool = ? AND trigger_args_pattern = ? AND next_tool = ?""",
        tool, pattern, next_tool,
    )
    assert len(rows) == 1, (tool, pattern, next_tool, rows)
    keys = ("id", "next_args", "confidence", "transitions", "trigger", "used", "created", "updated")
    found = dict(zip(keys, rows[0], strict=True))
    found["next_args"] = orjson.loads(found["next_args"])
    return found


def pattern(**args: Any) -> str:
    return args_pattern(args)


@pytest.fixture
def learned(log: EventLog) -> EventLog:
    # Six sessions, their calls interleaved round-robin as concurrent agents would send
    # them; the last one also strays once to a web search after reading its file.
    sessions = {f"s{n}": coding_session(n) for n in range(1, 7)}
    sessions["s6"].insert(3, ("web_search", {"query": "python decorator syntax"}))
    events, minute = [], 0
    for step in range(max(len(s) for s in sessions.values())):
        for session, calls in sessions.items():
            if step < len(calls):
                minute += 1
                events.append(call(session, *calls[step], minute=minute))
    for start in range(0, len(events), 10):  # several batches, as the writer would see them
        log.send(*events[start : start + 10])
    assert log.rejections() == []
    return log


def test_transitions_are_learned_within_sessions_only(learned: EventLog) -> None:
    # 6 sessions of 7 calls (one of 8): 6 * 6 + 1 transitions, never across sessions.
    total = learned.rows("SELECT sum(transition_count) FROM macros WHERE trigger_args_pattern = ?",
                         ANY_ARGS)[0][0]
    assert total == 37
    assert learned.rows("SELECT count(*) FROM macro_last_calls")[0][0] == 6


def test_read_then_edit_the_same_file(learned: EventLog) -> None:
    read_edit = macro(learned, "read_file", pattern(path="x.py"), "edit_file")
    assert read_edit["transitions"] == 5  # s6 searched the web in between
    assert read_edit["trigger"] == 6
    assert read_edit["confidence"] == pytest.approx((5 + 1) / (6 + 4))
    assert read_edit["next_args"]["path"] == "${path}"  # the path just read, not a literal
    stray = macro(learned, "read_file", pattern(path="x.py"), "web_search")
    assert stray["confidence"] == pytest.approx((1 + 1) / (6 + 4))
    assert stray["trigger"] == 6


def test_git_status_then_diff_with_the_most_frequent_arguments(learned: EventLog) -> None:
    status = macro(learned, "terminal", pattern(command="git status"), "terminal")
    # Each session runs git status twice: once before git diff, once before the commit.
    assert (status["transitions"], status["trigger"]) == (12, 12)
    assert status["confidence"] == pytest.approx(13 / 16)
    # git diff 6 times; the commits 6 times too, as one template: a message is a value, so
    # a template keeps its shape only. On a tie the latest wins (the commits came last).
    assert status["next_args"] == {"command": "git commit -am <str>"}
    counts = dict(learned.rows("SELECT template, count FROM macro_next_args WHERE macro_id = ?",
                               status["id"]))
    assert counts == {'{"command":"git diff"}': 6, '{"command":"git commit -am <str>"}': 6}
    diff = macro(learned, "terminal", pattern(command="git diff"), "read_file")
    assert diff["confidence"] == pytest.approx(7 / 10)
    tests = macro(learned, "terminal", pattern(command="pytest a/b.py -q"), "terminal")
    assert (tests["transitions"], tests["next_args"]) == (6, {"command": "git status"})


def test_tool_level_rows_learn_whatever_the_arguments(learned: EventLog) -> None:
    to_terminal = macro(learned, "terminal", ANY_ARGS, "terminal")
    to_read = macro(learned, "terminal", ANY_ARGS, "read_file")
    assert (to_terminal["transitions"], to_read["transitions"]) == (18, 6)
    assert to_terminal["trigger"] == to_read["trigger"] == 24
    assert to_terminal["confidence"] == pytest.approx(19 / 28)
    assert to_read["confidence"] == pytest.approx(7 / 28)
    search = macro(learned, "web_search", ANY_ARGS, "edit_file")
    assert search["transitions"] == 1


def test_times_come_from_the_events(learned: EventLog) -> None:
    first = learned.rows("SELECT min(created_at), max(updated_at) FROM macros")[0]
    assert first == (at(7), at(43))  # s1's second call .. the last call of all


def test_a_new_successor_lowers_its_siblings(log: EventLog) -> None:
    log.send(*[call("s", tool, {}) for tool in ["a", "b", "a", "b", "a", "b", "a", "c"]])
    b, c = macro(log, "a", "{}", "b"), macro(log, "a", "{}", "c")
    assert (b["transitions"], c["transitions"], b["trigger"], c["trigger"]) == (3, 1, 4, 4)
    assert b["confidence"] == pytest.approx(4 / 8)
    assert c["confidence"] == pytest.approx(2 / 8)


def test_next_args_templates_are_bounded(log: EventLog) -> None:
    events = []
    for n in range(MAX_TEMPLATES + 10):
        events += [call("s", "search", {}), call("s", "open", {"url_id": f"id{n}"})]
    events += [call("s", "search", {}), call("s", "open", {"url_id": "id3"})]
    log.send(*events)
    opened = macro(log, "search", "{}", "open")
    count = log.rows("SELECT count(*) FROM macro_next_args WHERE macro_id = ?", opened["id"])
    assert count[0][0] == MAX_TEMPLATES
    assert opened["next_args"] == {"url_id": "id3"}  # the most frequent (2), not the latest


def test_ties_between_templates_go_to_the_latest(log: EventLog) -> None:
    log.send(call("s", "a", {}), call("s", "b", {"mode": "r"}), call("s", "a", {}),
             call("s", "b", {"mode": "w"}))
    assert macro(log, "a", "{}", "b")["next_args"] == {"mode": "w"}


def test_macro_used_counts_uses(learned: EventLog) -> None:
    row = macro(learned, "read_file", pattern(path="x.py"), "edit_file")
    learned.send(event(EventType.MACRO_USED, {"macro_id": row["id"]}, created_at=at(99)),
                 event(EventType.MACRO_USED, {"macro_id": row["id"]}, created_at=at(100)))
    after = macro(learned, "read_file", pattern(path="x.py"), "edit_file")
    assert (after["used"], after["updated"]) == (2, at(100))


@pytest.mark.parametrize(
    ("etype", "payload", "session", "reason"),
    [
        (EventType.MACRO_USED, {"macro_id": 999}, None, "unknown macro 999"),
        (EventType.MACRO_USED, {"macro_id": 0}, None, "payload.macro_id must be at least 1"),
        (EventType.MACRO_USED, {"macro_id": "1"}, None, "payload.macro_id must be an integer"),
        (EventType.MACRO_OBSERVED, {"tool": "a\nb", "args": {}}, "s",
         "tool contains a control character"),
        (EventType.MACRO_OBSERVED, {"tool": " ", "args": {}}, "s", "tool must not be empty"),
        (EventType.MACRO_OBSERVED, {"tool": "t", "args": []}, "s",
         "payload.args must be an object"),
        (EventType.MACRO_OBSERVED, {"tool": "t", "args": {}}, None, "session_id must be a string"),
    ],
)
def test_bad_macro_events_are_set_aside(log: EventLog, etype: str, payload: dict[str, Any],
                                        session: str | None, reason: str) -> None:
    result = log.send(event(etype, payload, session=session), call("ok", "t", {}))
    assert (result.rejected, result.applied) == (1, 1)
    assert reason in log.rejections()[0]


def test_a_rejected_call_does_not_break_the_chain(log: EventLog) -> None:
    log.send(call("s", "a", {}), event(EventType.MACRO_OBSERVED, {"tool": "", "args": {}},
                                       session="s"), call("s", "b", {}))
    assert macro(log, "a", "{}", "b")["transitions"] == 1


def test_rebuild_gives_the_same_macros(learned: EventLog) -> None:
    row = macro(learned, "terminal", ANY_ARGS, "terminal")
    learned.send(event(EventType.MACRO_USED, {"macro_id": row["id"]}, created_at=at(200)))
    learned.assert_rebuild_equal()


def test_counts_stay_consistent_on_a_random_workload(log: EventLog) -> None:
    rng = random.Random(8)
    commands = ["git status", "git diff", "ls -la", "make test", "git log -n 3"]
    calls = []
    for minute in range(600):
        tool = rng.choice(["terminal", "read_file", "edit_file", "search"])
        args: dict[str, Any] = {
            "terminal": lambda: {"command": rng.choice(commands)},
            "read_file": lambda: {"path": f"src/m{rng.randrange(5)}.py"},
            "edit_file": lambda: {"path": f"src/m{rng.randrange(5)}.py", "new": "x"},
            "search": lambda: {"query": rng.choice(["a b", "c", "d e f"])},
        }[tool]()
        calls.append(call(f"s{rng.randrange(7)}", tool, args, minute=minute % 1400))
    for start in range(0, len(calls), 97):
        log.send(*calls[start : start + 97])
    sessions = {c.session_id for c in calls}
    rows = log.rows("""SELECT id, trigger_tool, trigger_args_pattern, transition_count,
                              trigger_count, confidence, next_args FROM macros""")
    totals: dict[tuple[str, str], int] = {}
    for _, tool, trigger, transitions, _, _, _ in rows:
        totals[tool, trigger] = totals.get((tool, trigger), 0) + transitions
    for macro_id, tool, trigger, transitions, trigger_count, stored, next_args in rows:
        assert trigger_count == totals[tool, trigger]
        assert stored == confidence(transitions, trigger_count)  # SQL and Python agree exactly
        templates = log.rows("""SELECT template, count, last_seq FROM macro_next_args
                                WHERE macro_id = ? ORDER BY count DESC, last_seq DESC""", macro_id)
        assert 1 <= len(templates) <= MAX_TEMPLATES
        assert next_args == templates[0][0]
    assert sum(t for (_, trigger), t in totals.items() if trigger == ANY_ARGS) == (
        len(calls) - len(sessions))
    log.assert_rebuild_equal()


def test_forgetting_a_session_drops_its_last_call(log: EventLog) -> None:
    log.send(call("s1", "a", {"path": "secret.txt"}), call("s2", "a", {}))
    cur = log.conn.cursor()
    forget_session(cur, "s1")
    assert log.rows("SELECT session_id FROM macro_last_calls") == [("s2",)]
    log.send(call("s1", "b", {}))  # a fresh start: no transition from the forgotten call
    assert log.rows("SELECT count(*) FROM macros")[0][0] == 0


def test_an_upgrade_relearns_macros_without_the_values_they_kept(log: EventLog) -> None:
    """Rows learned by the old rule kept literal values (a token too); the migration
    relearns the macro tables from the log, so they hold none and match a rebuild."""
    token = "Bearer 7fQ2mZ9xKp4LwR8vT1nY"
    log.send(call("s", "login", {"user": "ann"}, 1),
             call("s", "http_get", {"headers": {"Authorization": token}, "n": 7}, 2),
             call("t", "login", {"user": "bob"}, 3), call("t", "http_get", {"n": 8}, 4))
    row = macro(log, "login", ANY_ARGS, "http_get")
    old = orjson.dumps({"headers": {"Authorization": token}, "n": 7}).decode()
    log.conn.execute("UPDATE macros SET next_args = ?", (old,))  # as the old rule stored it
    log.conn.execute("UPDATE macro_next_args SET template = ? WHERE macro_id = ? "
                     "AND template LIKE '%<secret>%'", (old, row["id"]))
    log.conn.execute("DELETE FROM schema_migrations WHERE name = '0012_macros_without_literals'")
    before = log.dump()
    assert "7fQ2mZ9x" in repr(before["macros"])

    assert schema.migrate(log.conn) == ["0012_macros_without_literals"]
    after = log.dump()
    assert "7fQ2mZ9x" not in repr(after["macros"]) + repr(after["macro_next_args"])
    assert macro(log, "login", ANY_ARGS, "http_get")["id"] == row["id"]
    log.assert_rebuild_equal()


def ids_by_transition(log: EventLog) -> dict[tuple[str, str, str], tuple[int, int]]:
    """Each macro's (id, used_count), by its transition."""
    return {(t, p, n): (i, u) for i, t, p, n, u in log.rows(
        "SELECT id, trigger_tool, trigger_args_pattern, next_tool, used_count FROM macros")}


def use(macro_id: int, minute: int = 0, *, version: int = 0):
    return event(EventType.MACRO_USED, {"macro_id": macro_id}, created_at=at(minute),
                 version=version)


def test_a_learned_macro_is_named_by_its_transition(learned: EventLog) -> None:
    rows = ids_by_transition(learned)
    assert rows
    assert all(i == content_id(*key) for key, (i, _) in rows.items())
    assert all(1 <= i <= MAX_MACRO_ID for i, _ in rows.values())
    # The order in which they were learned is kept beside: 1, 2, 3...
    assert learned.rows("SELECT ordinal FROM macros ORDER BY ordinal") == [
        (n,) for n in range(1, len(rows) + 1)]


def test_forgetting_calls_keeps_the_ids_and_uses_of_the_macros_left(log: EventLog) -> None:
    """The macros of the calls left keep their ids and the uses recorded of them: before,
    a forget renumbered every macro learned after the forgotten ones, so a use of another
    session's macro was lost (tombstoned as unknown) or counted for a different one."""
    log.send(call("gone", "read_file", {"path": "a.py"}), call("gone", "edit_file", {}),
             *(call("kept", tool, {}) for tool in ("ls", "cat", "grep", "wc")))
    before = ids_by_transition(log)
    kept = before[("grep", "{}", "wc")][0]
    log.send(use(kept), use(kept))
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="gone"))
    after = ids_by_transition(log)
    assert after == {key: (i, 2 if i == kept else 0) for key, (i, _) in before.items()
                     if key[0] != "read_file"}
    assert log.rows("SELECT count(*) FROM events WHERE type = 'macro.used' "
                    "AND erased_by IS NOT NULL") == [(0,)]
    log.assert_rebuild_equal()


_CALLS = st.lists(st.tuples(st.sampled_from(["gone", "kept"]),
                            st.sampled_from(["ls", "cat", "grep", "edit"]),
                            st.booleans()), min_size=2, max_size=30)


@pytest.mark.slow  # a generated run of several seconds: `make test`, not test-fast
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_CALLS, st.lists(st.integers(0, 10**6), max_size=8))
def test_generated_forgets_never_move_the_macros_left(
    tmp_path_factory: pytest.TempPathFactory, calls: list[tuple[str, str, bool]],
    picks: list[int],
) -> None:
    log = EventLog(tmp_path_factory.mktemp("macro-ids"))
    try:
        log.send(*(call(s, tool, {"path": "a.py"} if with_args else {}, i)
                   for i, (s, tool, with_args) in enumerate(calls)))
        before = ids_by_transition(log)
        ids = sorted(i for i, _ in before.values())
        used = Counter(ids[p % len(ids)] for p in picks) if ids else Counter()
        if used:
            log.send(*(use(i) for i in used.elements()))
        log.send(event(EventType.SESSION_FORGOTTEN, {}, session="gone"))
        after = ids_by_transition(log)
        # Every macro left is one of before, under the same id, with every use of it.
        for key, (i, uses) in after.items():
            assert (before[key][0], uses) == (i, used[i]), key
        # ... and it is left exactly when calls of the session kept still teach it.
        kept = [(tool, with_args) for s, tool, with_args in calls if s == "kept"]
        taught = {(a, n) for (a, _), (n, _) in itertools.pairwise(kept)}
        assert {(t, n) for t, _, n in after} == taught
        log.assert_rebuild_equal()
    finally:
        log.close()


def test_a_client_of_version_1_names_the_id_it_read(log: EventLog) -> None:
    log.send(call("s", "ls", {}), call("s", "cat", {}))
    macro_id = content_id("ls", "{}", "cat")
    assert log.send(use(macro_id, version=1)).applied == 1
    assert ids_by_transition(log)[("ls", "{}", "cat")] == (macro_id, 1)
    assert log.rows("SELECT version, payload FROM events WHERE type = 'macro.used'") == [
        (2, f'{{"macro_id":{macro_id}}}')]
    log.assert_rebuild_equal()


def as_the_old_rule_logged_it(log: EventLog) -> None:
    """Make the log and tables those of a database before migration 0024: ids by place,
    and each use logged in version 1 naming its macro by place."""
    for seq, macro_id in log.rows("SELECT seq, json_extract(payload, '$.macro_id') FROM events "
                                  "WHERE type = 'macro.used' AND erased_by IS NULL"):
        [(place,)] = log.rows("SELECT ordinal FROM macros WHERE id = ?", macro_id)
        log.conn.execute("UPDATE events SET version = 1, payload = ? WHERE seq = ?",
                         (orjson.dumps({"macro_id": place}).decode(), seq))
    log.conn.execute("UPDATE macros SET id = ordinal")
    log.conn.execute("DELETE FROM schema_migrations WHERE name = '0024_macro_content_ids'")


def test_an_upgrade_names_the_uses_logged_by_place_by_their_macros_ids(
    log: EventLog,
) -> None:
    """Migration 0024 relearns the macros under the new rule and rewrites each use that was
    logged by place to name its macro's id: a later forget, which moves the places, leaves
    it with its macro. A redelivery of the old entry is not counted again."""
    log.send(call("gone", "read_file", {}), call("gone", "edit_file", {}),
             *(call("kept", tool, {}) for tool in ("ls", "cat", "grep")))
    grep = content_id("cat", "{}", "grep")
    old_use = use(log.rows("SELECT ordinal FROM macros WHERE id = ?", grep)[0][0], version=1)
    log.send(use(grep))
    log.conn.execute("UPDATE events SET event_id = ? WHERE type = 'macro.used'", (old_use.id,))
    as_the_old_rule_logged_it(log)

    assert schema.migrate(log.conn) == ["0024_macro_content_ids"]
    assert ids_by_transition(log)[("cat", "{}", "grep")] == (grep, 1)
    assert log.rows("SELECT version, payload FROM events WHERE type = 'macro.used'") == [
        (2, f'{{"macro_id":{grep}}}')]
    log.send(event(EventType.SESSION_FORGOTTEN, {}, session="gone"))
    assert ids_by_transition(log)[("cat", "{}", "grep")] == (grep, 1)
    assert log.send(old_use).applied == 0
    assert ids_by_transition(log)[("cat", "{}", "grep")] == (grep, 1)
    log.assert_rebuild_equal()


def test_an_imported_id_at_the_limit_leaves_later_macros_without_a_place(
    log: EventLog,
) -> None:
    last = 2**63 - 1
    log.send(event(EventType.MACRO_IMPORTED, {
        "macro_id": last, "trigger_tool": "old", "trigger_args_pattern": "*",
        "next_tool": "older", "next_args": None, "confidence": 0.5, "used_count": 0,
        "created_at": at(0), "updated_at": at(0)}))
    result = log.send(call("s", "ls", {}), call("s", "cat", {}), call("s", "grep", {}))
    assert result.rejected == 0
    assert log.rows("SELECT ordinal FROM macros ORDER BY ordinal IS NULL, ordinal") == [
        (last,), (None,), (None,), (None,), (None,)]
    log.conn.execute("DELETE FROM schema_migrations WHERE name = '0024_macro_content_ids'")
    assert schema.migrate(log.conn) == ["0024_macro_content_ids"]
    log.assert_rebuild_equal()


def test_an_imported_id_moves_a_learned_macro_to_the_next_free_one(log: EventLog) -> None:
    taken = content_id("ls", "{}", "cat")
    log.send(event(EventType.MACRO_IMPORTED, {
        "macro_id": taken, "trigger_tool": "old", "trigger_args_pattern": "*",
        "next_tool": "older", "next_args": None, "confidence": 0.5, "used_count": 3,
        "created_at": at(0), "updated_at": at(0)}))
    log.send(call("s", "ls", {}), call("s", "cat", {}))
    rows = ids_by_transition(log)
    assert rows[("old", "*", "older")] == (taken, 3)
    assert rows[("ls", "{}", "cat")][0] == taken % MAX_MACRO_ID + 1
    log.assert_rebuild_equal()
