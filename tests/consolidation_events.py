"""Committing a ``session.consolidated`` event, as the consolidation workers do."""

from __future__ import annotations

from memq import MemoryClient
from memq.config import Config
from memq.events import EventType


def send_summary(config: Config, session_id: str, source_ids: list[str],
                 summary_id: str = "sum-1") -> None:
    """Commit the summary ``summary_id`` of ``source_ids`` and wait for the writer."""
    with MemoryClient(config=config) as worker:
        worker._send(EventType.SESSION_CONSOLIDATED, {
            "summary_id": summary_id, "content": f"Summary of {len(source_ids)} turns.",
            "source_ids": source_ids, "importance": 0.7, "facts": []}, session_id=session_id)
        worker.flush()
