"""What waits for a vector: the oldest waiting message's age, a session's count, its words.

Driven through the writer's own batch code (tests/store/eventlog.py), without Redis.
"""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from memq.clock import parse_rfc3339
from memq.config import DEFAULT_MODEL_NAME
from memq.events import EventType
from memq.store.read import embedding_backlog as backlog
from memq.store.read.scope import Scope
from tests.embedding_events import embedded_event
from tests.store.eventlog import EventLog, event
from tests.store.test_fts import appended, record

MODEL = DEFAULT_MODEL_NAME
UNIT = np.eye(384, dtype=np.float32)[0]



def embed(log: EventLog, *ids: str, model: str = MODEL) -> None:
    assert log.send(*[embedded_event(mid, UNIT, model) for mid in ids]).rejected == 0


def fail(log: EventLog, message_id: str) -> None:
    failed = event(EventType.MESSAGE_EMBEDDING_FAILED,
                   {"message_id": message_id, "model": MODEL, "error": "boom"})
    assert log.send(failed).rejected == 0


def recorded_at(log: EventLog, message_id: str):
    (row,) = log.rows("SELECT e.recorded_at FROM events e JOIN messages m ON m.seq = e.seq "
                      "WHERE m.id = ?", message_id)
    return parse_rfc3339(row[0])


def test_nothing_waits_when_every_message_has_a_vector_an_error_or_no_words(
        log: EventLog) -> None:
    done, failed, _ = record(log, "embedded already", "the model refused this", "   ")
    embed(log, done)
    fail(log, failed)
    assert backlog.first_waiting(log.conn, MODEL) is None
    assert backlog.oldest_age_s(log.conn, MODEL) is None
    assert backlog.waiting_in_scope(log.conn, Scope("s1"), MODEL) == 0


def test_the_oldest_waiting_message_is_aged_from_when_the_writer_recorded_it(
        log: EventLog) -> None:
    # created_at says 2026-03-01 (an import may say years back): the age ignores it.
    first, second = record(log, "first turn", "second turn")
    embed(log, first)
    now = recorded_at(log, second) + timedelta(seconds=42)
    assert backlog.oldest_age_s(log.conn, MODEL, now=now) == pytest.approx(42.0)


def test_a_vector_of_another_model_still_waits_for_the_configured_one(log: EventLog) -> None:
    old_model, fresh = record(log, "embedded by the old model", "embedded by this one")
    embed(log, old_model, model="old/model")
    embed(log, fresh)
    assert backlog.waiting_in_scope(log.conn, Scope("s1"), MODEL) == 1
    assert backlog.waiting_in_scope(log.conn, Scope("s1"), "old/model") == 1
    first = log.rows("SELECT seq FROM messages WHERE id = ?", old_model)[0][0]
    assert backlog.first_waiting(log.conn, MODEL) == first


def test_a_sessions_count_leaves_other_sessions_out(log: EventLog) -> None:
    record(log, "mine, waiting", "mine too", session="a")
    record(log, "theirs, waiting", session="b")
    (done,) = record(log, "mine, embedded", session="a")
    embed(log, done)
    assert backlog.waiting_in_scope(log.conn, Scope("a"), MODEL) == 2
    assert backlog.waiting_in_scope(log.conn, Scope("b"), MODEL) == 1
    assert backlog.waiting_in_scope(log.conn, Scope("nobody"), MODEL) == 0


def test_words_find_only_messages_still_waiting_in_the_session(log: EventLog) -> None:
    done, waiting, _ = record(log, "the invoice export failed at midnight",
                              "invoice export retried and failed again",
                              "lunch plans for friday")
    record(log, "invoice export failed in another session", session="other")
    embed(log, done)
    found = backlog.lexical_waiting(log.conn, Scope("s1"), "why did the invoice export fail?",
                                    MODEL, limit=5)
    assert [mid for mid, _ in found] == [waiting]
    assert found[0][1] > 0
    embed(log, waiting)
    assert backlog.lexical_waiting(log.conn, Scope("s1"), "invoice export", MODEL, limit=5) == []


def test_the_seeks_use_the_backlog_index(log: EventLog) -> None:
    (mid,) = record(log, "waiting")
    embed(log, mid, model="old/model")
    plans = [" ".join(str(c) for c in row) for sql in (backlog._FIRST_NEVER_EMBEDDED,
                                                        backlog._FIRST_OF_MODEL)
             for row in log.conn.execute(f"EXPLAIN QUERY PLAN {sql}",
                                         () if "?" not in sql else ("old/model",))]
    # Each searches messages by the backlog index (then looks each row up in `erasing`,
    # by its key: store/read/hidden.py).
    scans = [plan for plan in plans if "messages" in plan]
    assert len(scans) == 2, plans
    assert all("messages_embedding_backlog" in plan for plan in scans), plans
    assert all("USING PRIMARY KEY" in plan for plan in plans if " x " in plan), plans


def test_an_appended_message_waits_until_its_vector_arrives(log: EventLog) -> None:
    mid, message = appended("a fresh turn")
    log.send(message)  # type: ignore[arg-type]
    assert backlog.waiting_in_scope(log.conn, Scope("s1"), MODEL) == 1
    embed(log, mid)
    assert backlog.waiting_in_scope(log.conn, Scope("s1"), MODEL) == 0
