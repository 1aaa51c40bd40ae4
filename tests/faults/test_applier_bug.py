"""A bug in a projection must not stop the writer: before, an applier raising anything but
InvalidEvent killed the writer, and the entry, never acknowledged, killed every restart
too. Now the event is set aside with the error, its batch goes on, and once the bug is
fixed ``memq rejected replay`` applies it."""

from __future__ import annotations

import subprocess

import apsw
import pytest

from memq import MemoryClient
from memq.config import Config
from memq.errors import EventsRejected
from memq.events import Event
from memq.store import projections
from memq.store.effects import Effects
from memq.testing import WriterThread
from tests.conftest import ROOT, memq_command
from tests.faults import figures

pytestmark = [pytest.mark.faults, pytest.mark.redis]


def buggy(cur: apsw.Cursor, event: Event, seq: int, effects: Effects) -> None:
    raise KeyError("a key the applier forgot")


def test_an_applier_bug_sets_the_event_aside_and_the_writer_goes_on(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = WriterThread(config)
    monkeypatch.setitem(projections.APPLIERS, "fact.set", buggy)
    writer.start()
    try:
        with MemoryClient(config=config) as client, client.batched():
            before = client.append("s1", "user", "before")
            client.set_fact("c", "k", "v")
            after = client.append("s1", "user", "after")
        with pytest.raises(EventsRejected, match="a key the applier forgot"):
            client.flush(30)
        assert [m.id for m in client.history("s1")] == [before, after]
        assert writer.thread is not None
        assert writer.thread.is_alive()
    finally:
        writer.stop()
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    (reason,) = [r[0] for r in conn.execute("SELECT reason FROM rejected_events")]
    conn.close()
    assert reason == "fact.set: cannot be applied (KeyError: 'a key the applier forgot')"

    monkeypatch.undo()  # the bug is fixed: replay the event
    writer = WriterThread(config)
    writer.start()
    try:
        done = subprocess.run(memq_command("rejected", "replay", "--all", "--db", config.db_path,
                                           "--redis-url", config.redis_url),
                              cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        with MemoryClient(config=config) as client:
            client.append("s1", "user", "marker")
            client.flush(30)
            assert [(f.key, f.value) for f in client.facts("c")] == [("k", "v")]
    finally:
        writer.stop()
    figures.add("bad_inputs")
