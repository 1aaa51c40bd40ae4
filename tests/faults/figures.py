"""The reliability figures the fault suite measures, printed when the run ends.

Each test adds what it proved (kills survived, appends verified, bad inputs refused, events
lost) with :func:`add`; ``tests/faults/conftest.py`` prints the totals, so
``pytest -m faults`` reproduces the README's reliability figures.
"""

from __future__ import annotations

from collections import Counter

LABELS = {
    "kills": "writer SIGKILLs survived",
    "kills_in_hand": "  of which with a batch delivered and not acknowledged",
    "worker_kills": "embed/consolidate workers SIGKILLed mid-job",
    "appends": "acknowledged appends verified",
    "events": "acknowledged events verified (appends, facts, embeddings)",
    "bad_inputs": "hostile inputs refused or stored verbatim",
    "fuzzed": "fuzzed inbox entries, each with a good neighbour committed",
    "fuzzed_set_aside": "  of which set aside with a reason",
    "stream_ids": "sender-chosen stream ids and raw queue items survived",
    "read_paths": "generated events applied, every read then answering",
    "redis_restarts": "Redis restarts ridden out",
    "disk_full": "disk-full stalls recovered",
    "failovers": "Redis master failovers (SIGKILL, Sentinel) ridden out",
    "restores": "databases lost under load, restored from the replica",
    "restore_reapplied": "  inbox entries applied again beyond the restored replica",
    "lost": "events lost",
    "lost_unreplicated": "  appends lost to a failover with wait_replicas = 0 (counted)",
    "duplicated": "events duplicated",
}

FIGURES: Counter[str] = Counter()


def add(name: str, amount: int = 1) -> None:
    if name not in LABELS:
        raise KeyError(f"unknown figure {name!r}; add it to LABELS")
    FIGURES[name] += amount


def lines() -> list[str]:
    """The summary, or nothing when no fault test ran."""
    if not FIGURES:
        return []
    return [f"{LABELS[name]:<60}{FIGURES[name]:>10}" for name in LABELS]
