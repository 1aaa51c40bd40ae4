"""memq's rq-scheduler: stopping on a signal makes no Redis call inside the handler."""

from __future__ import annotations

import signal

import pytest
import redis

from memq.testing import free_port
from memq.workers.scheduler import JSONScheduler


def test_a_stop_signal_exits_without_touching_redis() -> None:
    # Nothing listens there: any Redis call in the handler would raise ConnectionError.
    unreachable = redis.Redis(port=free_port(), socket_connect_timeout=0.5)
    scheduler = JSONScheduler(queue_name="q", connection=unreachable, interval=1)
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        scheduler._install_signal_handlers()
        handler = signal.getsignal(signal.SIGTERM)
        assert callable(handler)
        assert signal.getsignal(signal.SIGINT) is handler
        with pytest.raises(SystemExit):
            handler(signal.SIGTERM, None)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
