"""Messages on their way out: those of a big forget, invisible from its commit on.

A forget of many messages hides its sessions' messages logged before it in the transaction
that applies it, and the writer erases them a step at a time after that
(``store/projections/erasure_steps.py``). Every read that answers with messages, or with
what an event said of them, keeps to :func:`visible` rows.
"""

from __future__ import annotations


def hides(alias: str) -> str:
    """SQL: the row ``erasing AS x`` hides the row ``alias`` (a message, or an event: each
    has its session and its position in the log)."""
    return f"x.session_id = {alias}.session_id AND {alias}.seq < x.by_seq"


def visible(alias: str = "messages") -> str:
    """SQL: the message row ``alias`` is not one a forget is still erasing. ``erasing`` is
    empty but while a big forget is under way: the first test, which SQLite runs once per
    statement, spares every row its own lookup (a search over 100,000 turns took a fifth
    longer with one per row)."""
    return (f"(NOT EXISTS (SELECT 1 FROM erasing) "
            f"OR NOT EXISTS (SELECT 1 FROM erasing AS x WHERE {hides(alias)}))")
