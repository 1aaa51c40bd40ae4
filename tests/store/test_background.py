"""The writer's background follow-ups: in order, waited for, never stopped by a failure."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from memq.store.write.background import Background


@pytest.fixture
def background() -> Iterator[Background]:
    worker = Background("test-followups", max_pending=2)
    yield worker
    worker.close()


def test_calls_run_in_order_and_wait_sees_them_done(background: Background) -> None:
    done: list[int] = []
    for i in range(20):
        background.submit(lambda i=i: (time.sleep(0.001), done.append(i)))
    background.wait()
    assert done == list(range(20))


def test_a_failing_call_is_logged_and_the_next_one_runs(
    background: Background, caplog: pytest.LogCaptureFixture
) -> None:
    done: list[str] = []
    background.submit(lambda: 1 / 0)  # type: ignore[func-returns-value]
    background.submit(lambda: done.append("after"))
    background.wait()
    assert done == ["after"]
    assert "a background follow-up failed" in caplog.text
    assert "ZeroDivisionError" in caplog.text


def test_submit_blocks_while_max_pending_calls_wait(background: Background) -> None:
    gate = threading.Event()
    background.submit(gate.wait)  # running
    background.submit(lambda: None)
    background.submit(lambda: None)  # two waiting: the limit
    blocked = threading.Thread(target=background.submit, args=(lambda: None,))
    blocked.start()
    blocked.join(0.2)
    assert blocked.is_alive()
    gate.set()
    blocked.join(5)
    assert not blocked.is_alive()


def test_close_runs_what_is_pending_then_stops() -> None:
    worker = Background("test-close")
    done: list[int] = []
    for i in range(5):
        worker.submit(lambda i=i: (time.sleep(0.01), done.append(i)))
    worker.close()
    assert done == list(range(5))
    worker.close()  # twice is harmless
