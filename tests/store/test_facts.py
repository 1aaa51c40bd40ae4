"""The facts projection: upsert, the user guard, deletion, history, relevance, rebuild."""

from __future__ import annotations

import orjson
import pytest

from memq.config import RetrievalConfig, from_mapping
from memq.errors import ConfigError
from memq.events import EventType
from memq.store.read import facts as fact_reads
from memq.store.read.fact_search import relevant_facts, words
from memq.store.read.facts import Fact, fact_history, list_facts
from tests.store.eventlog import EventLog, at, event


def set_fact(category: str, key: str, value: str, source: str = "agent", *, minute: int = 0,
             force: bool | None = None, user: str | None = None):
    payload: dict[str, object] = {"category": category, "key": key, "value": value,
                                  "source": source}
    if force is not None:
        payload["force"] = force
    if user is not None:
        payload["user_id"] = user
    return event(EventType.FACT_SET, payload, created_at=at(minute))


def delete_fact(category: str, key: str, source: str | None = "agent", *, minute: int = 0,
                force: bool | None = None, user: str | None = None):
    payload: dict[str, object] = {"category": category, "key": key}
    if source is not None:
        payload["source"] = source
    if force is not None:
        payload["force"] = force
    if user is not None:
        payload["user_id"] = user
    return event(EventType.FACT_DELETED, payload, created_at=at(minute))


def current(log: EventLog, key: str = "editor") -> tuple[object, ...] | None:
    rows = log.rows("SELECT value, source, created_at, updated_at FROM facts WHERE key = ?", key)
    return rows[0] if rows else None


def test_upsert_keeps_created_at_and_moves_updated_at(log: EventLog) -> None:
    log.send(set_fact("prefs", "editor", "vim", minute=1))
    first_id = log.rows("SELECT id FROM facts")[0][0]
    log.send(set_fact("prefs", "editor", "emacs", minute=5))
    assert current(log) == ("emacs", "agent", at(1), at(5))
    assert log.rows("SELECT id FROM facts") == [(first_id,)]  # one row per (category, key)


def test_same_key_in_two_categories_is_two_facts(log: EventLog) -> None:
    log.send(set_fact("prefs", "editor", "vim"), set_fact("team", "editor", "nano"))
    assert log.rows("SELECT category, value FROM facts ORDER BY category") == [
        ("prefs", "vim"), ("team", "nano")]


@pytest.mark.parametrize(
    ("first", "second", "force", "expected"),
    [
        ("user", "agent", None, ("vim", "user")),       # the guard
        ("user", "agent", False, ("vim", "user")),
        ("user", "agent", True, ("emacs", "agent")),    # said explicitly
        ("user", "user", None, ("emacs", "user")),
        ("agent", "agent", None, ("emacs", "agent")),
        ("agent", "user", None, ("emacs", "user")),
    ],
)
def test_user_fact_guard(log: EventLog, first: str, second: str, force: bool | None,
                         expected: tuple[str, str]) -> None:
    log.send(set_fact("prefs", "editor", "vim", first, minute=1))
    result = log.send(set_fact("prefs", "editor", "emacs", second, minute=2, force=force))
    assert result.applied == 1  # accepted into the log either way
    assert current(log)[:2] == expected  # type: ignore[index]
    assert log.rows("SELECT count(*) FROM events")[0][0] == 2
    if expected[0] == "vim":
        assert current(log)[3] == at(1)  # a protected fact's updated_at does not move  # type: ignore[index]


@pytest.mark.parametrize(
    ("source", "force", "deleted"),
    [("agent", None, False), ("agent", True, True), ("user", None, True), (None, None, True)],
)
def test_deleting_a_user_fact(log: EventLog, source: str | None, force: bool | None,
                              deleted: bool) -> None:
    log.send(set_fact("prefs", "editor", "vim", "user"))
    log.send(delete_fact("prefs", "editor", source, force=force))
    assert (current(log) is None) is deleted


def test_delete_then_set_starts_a_new_fact(log: EventLog) -> None:
    log.send(set_fact("prefs", "editor", "vim", minute=1), delete_fact("prefs", "editor", minute=2),
             delete_fact("prefs", "editor", minute=3),  # deleting nothing is a no-op
             set_fact("prefs", "editor", "helix", minute=4))
    assert current(log) == ("helix", "agent", at(4), at(4))
    assert log.rejections() == []


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"category": "  ", "key": "k", "value": "v", "source": "agent"},
         "category must not be empty"),
        ({"category": "c", "key": "a\x07b", "value": "v", "source": "agent"},
         "key contains a control character"),
        ({"category": "c", "key": "k", "value": "v", "source": "robot"},
         "payload.source must be one of agent, user"),
        ({"category": "c", "key": "k", "value": "v", "source": "agent", "force": "yes"},
         "payload.force must be a boolean"),
        ({"category": "c", "key": "k", "source": "agent"}, "payload.value is missing"),
        ({"category": "c" * 201, "key": "k", "value": "v", "source": "agent"},
         "over the 200 limit"),
    ],
)
def test_bad_fact_events_are_set_aside(log: EventLog, payload: dict[str, object],
                                       reason: str) -> None:
    result = log.send(event(EventType.FACT_SET, payload), set_fact("ok", "k", "v"))
    assert (result.rejected, result.applied) == (1, 1)  # the batch goes on
    assert reason in log.rejections()[0]
    assert log.rows("SELECT category FROM facts") == [("ok",)]


def test_bad_deletion_is_set_aside(log: EventLog) -> None:
    log.send(event(EventType.FACT_DELETED, {"category": "c", "key": "", "source": "agent"}))
    assert "key must not be empty" in log.rejections()[0]


def test_history_lists_every_change_with_who_and_whether_it_applied(log: EventLog) -> None:
    log.send(
        set_fact("prefs", "editor", "vim", "user", minute=1),
        set_fact("prefs", "editor", "emacs", "agent", minute=2),             # protected
        set_fact("prefs", "other", "x", "agent", minute=3),                  # another key
        set_fact("prefs", "editor", "nano", "agent", minute=4, force=True),
        set_fact("prefs", "editor", "ed", "agent", minute=5),                # now agent's
        delete_fact("prefs", "editor", "agent", minute=6),
        set_fact("prefs", "editor", "vi", "agent", minute=7),
    )
    history = fact_history(log.reader(), "prefs", "editor")
    assert [(c.action, c.value, c.source, c.force, c.created_at, c.applied) for c in history] == [
        ("set", "vim", "user", False, at(1), True),
        ("set", "emacs", "agent", False, at(2), False),
        ("set", "nano", "agent", True, at(4), True),
        ("set", "ed", "agent", False, at(5), True),
        ("deleted", None, "agent", False, at(6), True),
        ("set", "vi", "agent", False, at(7), True),
    ]
    assert [c.seq for c in history] == sorted(c.seq for c in history)
    ids = {r[0] for r in log.rows("SELECT event_id FROM events")}
    assert {c.event_id for c in history} <= ids
    assert fact_history(log.reader(), "prefs", "missing") == []


def test_history_matches_names_exactly(log: EventLog) -> None:
    tricky = 'it\'s "quoted" %_ \\ ünï'
    log.send(set_fact(tricky, tricky, "v"), set_fact("it's", tricky, "w"))
    assert [c.value for c in fact_history(log.reader(), tricky, tricky)] == ["v"]
    assert fact_history(log.reader(), "IT'S", tricky) == []  # case matters, as in the table


def test_list_facts_by_category(log: EventLog) -> None:
    log.send(set_fact("b", "y", "1"), set_fact("a", "z", "2"), set_fact("b", "x", "3"))
    reader = log.reader()
    assert [(f.category, f.key) for f in list_facts(reader)] == [("a", "z"), ("b", "x"), ("b", "y")]
    assert [f.key for f in list_facts(reader, "b")] == ["x", "y"]
    assert list_facts(reader, "nope") == []


def test_rebuild_gives_the_same_facts(log: EventLog) -> None:
    log.send(
        set_fact("prefs", "editor", "vim", "user", minute=1),
        set_fact("prefs", "editor", "emacs", "agent", minute=2),
        set_fact("prefs", "shell", "zsh", minute=3),
        delete_fact("prefs", "shell", minute=4),
        set_fact("prefs", "shell", "fish", minute=5),
        set_fact("prefs", "lang", "en", minute=6),
        delete_fact("prefs", "lang", None, minute=7),
        set_fact("prefs", "tz", "Europe/Paris", minute=8),
    )
    log.assert_rebuild_equal()


# -- relevance -------------------------------------------------------------------------------


FACTS = [
    ("preferences", "favourite_editor", "The user edits code in Neovim"),
    ("preferences", "shell", "zsh with oh-my-zsh"),
    ("profile", "name", "Ada Lovelace"),
    ("profile", "timezone", "Europe/London"),
    ("project", "language", "The project is written in Python 3.11"),
    ("project", "test_command", "make test"),
]


@pytest.fixture
def facts_log(log: EventLog) -> EventLog:
    log.send(*(set_fact(c, k, v, minute=i) for i, (c, k, v) in enumerate(FACTS)))
    return log


def keys(matches) -> list[str]:
    return [m.fact.key for m in matches]


def test_relevant_facts_rank_by_shared_words(facts_log: EventLog) -> None:
    reader = facts_log.reader()
    assert keys(relevant_facts(reader, "Which editor should I open the code in?", 5))[0] == (
        "favourite_editor")
    assert keys(relevant_facts(reader, "what is my name", 5)) == ["name"]
    assert keys(relevant_facts(reader, "run the tests", 5)) == ["test_command"]  # prefix match
    assert keys(relevant_facts(reader, "which TIMEZONE am I in", 5)) == ["timezone"]


def test_relevant_facts_scores_and_limit(facts_log: EventLog) -> None:
    matches = relevant_facts(facts_log.reader(), "project language python editor", 2)
    assert len(matches) == 2
    assert keys(matches) == ["language", "favourite_editor"]
    assert matches[0].score > matches[1].score > 0


def test_rare_words_weigh_more_than_common_ones(facts_log: EventLog) -> None:
    # "project" is in two facts (category), "python" in one: the python fact must win even
    # against a fact mentioning "project" as category.
    matches = relevant_facts(facts_log.reader(), "python", 5)
    assert keys(matches) == ["language"]


@pytest.mark.parametrize("query", [None, "", "   ", "what is the", "???"])
def test_no_content_words_no_facts(facts_log: EventLog, query: str | None) -> None:
    assert relevant_facts(facts_log.reader(), query, 5) == []


def test_ties_go_to_the_most_recently_updated(log: EventLog) -> None:
    log.send(set_fact("a", "k1", "coffee", minute=1), set_fact("b", "k2", "coffee", minute=9),
             set_fact("c", "k3", "coffee", minute=5))
    assert keys(relevant_facts(log.reader(), "coffee", 3)) == ["k2", "k3", "k1"]


def test_words_ignore_case_punctuation_and_stopwords() -> None:
    assert words("The user's Favourite_EDITOR, is: Neovim!") == {
        "user", "s", "favourite", "editor", "neovim"}


def test_retrieval_fact_settings() -> None:
    assert (RetrievalConfig().include_facts, RetrievalConfig().facts_limit) == (False, 5)
    config = from_mapping({"retrieval": {"include_facts": True, "facts_limit": 3}})
    assert (config.retrieval.include_facts, config.retrieval.facts_limit) == (True, 3)
    with pytest.raises(ConfigError, match="facts_limit must be at least 1"):
        from_mapping({"retrieval": {"facts_limit": 0}})
    with pytest.raises(ConfigError, match="include_facts must be bool"):
        from_mapping({"retrieval": {"include_facts": "yes"}})


def test_fact_events_stay_small_json(log: EventLog) -> None:
    log.send(set_fact("c", "k", "v", force=True))
    payload = orjson.loads(log.rows("SELECT payload FROM events")[0][0])
    assert payload == {"category": "c", "key": "k", "value": "v", "source": "agent", "force": True}


@pytest.mark.parametrize("user", [None, "u1"])
def test_history_seeks_the_fact_history_index(log: EventLog, user: str | None) -> None:
    log.send(set_fact("prefs", "editor", "vim"))
    plan = " ".join(str(row[-1]) for row in log.reader().execute(
        f"EXPLAIN QUERY PLAN {fact_reads.HISTORY}", (user, "prefs", "editor")))
    assert "USING INDEX events_fact_history" in plan
    assert "TEMP B-TREE" not in plan
    assert EventType.FACT_SET.value == "fact.set"  # the index's WHERE names these types
    assert EventType.FACT_DELETED.value == "fact.deleted"


def values(facts: list[Fact]) -> list[tuple[str | None, str]]:
    return [(f.user_id, f.value) for f in facts]


def test_each_user_has_its_own_value_of_a_key(log: EventLog) -> None:
    log.send(set_fact("prefs", "editor", "vim"), set_fact("prefs", "editor", "nano", user="u1"),
             set_fact("prefs", "editor", "emacs", user="u2"),
             set_fact("prefs", "editor", "ed", user="u1", minute=2))
    conn = log.reader()
    assert values(list_facts(conn)) == [(None, "vim")]
    assert values(list_facts(conn, user_id="u1")) == [(None, "vim"), ("u1", "ed")]
    assert values(list_facts(conn, "prefs", "u2")) == [(None, "vim"), ("u2", "emacs")]
    assert values(list_facts(conn, user_id="u3")) == [(None, "vim")]
    log.assert_rebuild_equal()


def test_the_user_guard_holds_per_user(log: EventLog) -> None:
    log.send(set_fact("prefs", "lang", "pt", "user", user="u1"),
             set_fact("prefs", "lang", "en", user="u2"))
    log.send(set_fact("prefs", "lang", "fr", user="u1"), set_fact("prefs", "lang", "de", user="u2"))
    log.send(delete_fact("prefs", "lang", user="u1"))  # an agent's: the user's value stays
    assert values(list_facts(log.reader(), user_id="u1")) == [("u1", "pt")]
    assert values(list_facts(log.reader(), user_id="u2")) == [("u2", "de")]
    log.send(delete_fact("prefs", "lang", user="u2"))
    assert list_facts(log.reader(), user_id="u2") == []
    assert [(c.value, c.applied) for c in fact_history(log.reader(), "prefs", "lang", "u1")] \
        == [("pt", True), ("fr", False), (None, False)]
    assert [c.value for c in fact_history(log.reader(), "prefs", "lang")] == []
    log.assert_rebuild_equal()


def test_relevant_facts_never_include_another_users(log: EventLog) -> None:
    log.send(set_fact("health", "allergy", "peanuts", user="u1"),
             set_fact("health", "allergy", "shellfish", user="u2"),
             set_fact("office", "allergy policy", "no nuts in the kitchen"))
    found = {m.fact.value for m in relevant_facts(log.reader(), "any allergy?", 5, "u1")}
    assert found == {"peanuts", "no nuts in the kitchen"}
    found = {m.fact.value for m in relevant_facts(log.reader(), "any allergy?", 5)}
    assert found == {"no nuts in the kitchen"}


def test_a_tenants_users_see_its_global_facts_and_no_other_tenants(log: EventLog) -> None:
    """A tenant's global facts belong to its pseudo-user (memq/tenants.py): its users see
    them, and neither the default tenant's (no user) nor another tenant's."""
    log.send(set_fact("office", "allergy policy", "default: no nuts"),
             set_fact("office", "allergy policy", "acme: no shellfish", user="acme\x1f"),
             set_fact("office", "allergy policy", "globex: no dairy", user="globex\x1f"),
             set_fact("health", "allergy", "acme's alice: peanuts", user="acme\x1falice"))
    conn = log.reader()
    assert {m.fact.value for m in relevant_facts(conn, "allergy?", 5, "acme\x1falice")} == {
        "acme: no shellfish", "acme's alice: peanuts"}
    assert values(list_facts(conn, user_id="globex\x1falice")) == [
        ("globex\x1f", "globex: no dairy")]
    assert values(list_facts(conn, user_id="acme\x1f")) == [("acme\x1f", "acme: no shellfish")]
    assert values(list_facts(conn, user_id="alice")) == [(None, "default: no nuts")]
    log.assert_rebuild_equal()


@pytest.mark.parametrize("bad", ["", "a\x00b", "a\nb", "x" * 201])
def test_a_bad_user_id_on_a_fact_is_set_aside(log: EventLog, bad: str) -> None:
    assert log.send(set_fact("c", "k", "v", user=bad)).rejected == 1
    assert log.send(delete_fact("c", "k", user=bad)).rejected == 1
    assert log.rows("SELECT count(*) FROM facts") == [(0,)]


def test_listing_a_users_facts_seeks_the_unique_index(log: EventLog) -> None:
    plan = " ".join(str(row[-1]) for row in log.reader().execute(
        f"EXPLAIN QUERY PLAN SELECT id FROM facts WHERE {fact_reads.VISIBLE_TO}",
        fact_reads.visible_to("u")))
    assert "SEARCH facts USING COVERING INDEX facts_by_key" in plan
