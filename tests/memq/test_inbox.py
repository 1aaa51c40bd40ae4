"""The inbox's wire: what a send puts in Redis, and its replicas' confirmation."""

from __future__ import annotations

import pytest

from memq import broker, names
from memq.inbox import send_to_inbox


@pytest.mark.redis
def test_too_few_replicas_confirming_raises_and_the_entries_are_in_redis(
    redis_url: str,
) -> None:
    client = broker.connect(redis_url)  # a Redis without replicas: WAIT 1 times out
    with pytest.raises(broker.NotReplicated, match="only 0 of 1 replicas confirmed them"):
        send_to_inbox(client, [b"{}", b"{}"], replicas=1, wait_timeout_s=0.05)
    assert client.llen(names.INBOX_QUEUES[names.INBOX_STREAM]) == 2
    assert send_to_inbox(client, [b"{}"], replicas=0)  # no WAIT: no wait
