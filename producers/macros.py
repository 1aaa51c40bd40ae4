"""Learned tool chaining: record tool calls, get the likely next ones, report a macro used.

The learning rule is :mod:`memq.toolcalls`; the writer keeps the counts. A suggestion
comes from the macros triggered by the tool with the call's argument pattern or with any
arguments; for each next tool the more confident of the two is kept, and only those at
or above ``[macros] min_confidence`` are returned, best first. The macros read are the
tenant's aggregate, or for a key limited to some users its users' own
(:attr:`MacrosOps.macro_owners`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from memq.errors import NotFound, ValidationError
from memq.events import EventType, check_identifier
from memq.printable import shown
from memq.producers.mixin import ClientBase
from memq.producers.ops import Op, Read
from memq.store.read.macros import Macro, candidates, trigger_tool
from memq.toolcalls import ANY_ARGS, args_pattern, confidence, fill_template, shrink_args

MAX_ID = 2**63 - 1
"""SQLite's largest integer: a bigger id cannot exist, nor be looked up."""


@dataclass(frozen=True)
class MacroSuggestion:
    macro_id: int
    tool: str
    """The tool to call next."""
    args: Any
    """Its most usual arguments, with references to this call's arguments filled in;
    None when none were recorded. Other values are placeholders for the caller to fill
    (``<path>``, ``<email>``, ``<str>``, ``<text>``, ``<secret>``...), bare words as they
    were (command words, and the words of short unquoted text): through a key limited to
    some users, only those of its users' calls; else any user's of the tenant (see the
    security model)."""
    confidence: float
    count: int
    """How many times this transition was seen."""
    used_count: int
    pattern: str
    """The trigger pattern that matched (``*``: the tool with any arguments)."""


class MacrosOps(ClientBase):
    """The tool-chaining operations (``producers/ops.py``) both clients run."""

    macro_owners: frozenset[str] | None = None
    """Whose learned macros this client reads: None, the tenant-wide aggregate (a local
    client, a shared token, a key of every user); else those stored users' own rows, set
    by ``memq serve`` from a key's grant (``server/grants.py``), never by a caller."""

    def _record_tool_call_op(
        self, session_id: str, tool: str, args: Mapping[str, Any] | None
    ) -> Op[str]:
        check_identifier("session_id", session_id,
                         max_chars=self.config.limits.max_session_id_chars)
        payload = {"tool": check_identifier("tool", tool), "args": self._tool_args(args)}
        return (yield from self._send_op(EventType.MACRO_OBSERVED, payload,
                                         session_id=session_id))

    def _suggest_next_tools_op(
        self, tool: str, args: Mapping[str, Any] | None
    ) -> Op[list[MacroSuggestion]]:
        tool = check_identifier("tool", tool)
        shrunk = self._tool_args(args)
        owners = self.macro_owners
        rows = yield Read(candidates, (tool, args_pattern(shrunk), owners))
        if owners is not None and len(owners) > 1:
            rows = merged(rows)
        settings = self.config.macros
        chosen = [m for m in _best_per_next_tool(rows) if m.confidence >= settings.min_confidence]
        # References are filled from this call's own arguments, as given: a secret of the
        # caller's own may come back to it, never anyone else's (templates hold none).
        own = dict(args or {})
        return [_suggestion(m, own) for m in chosen[: settings.suggest_limit]]

    def _use_macro_op(self, macro_id: int) -> Op[str]:
        if isinstance(macro_id, bool) or not isinstance(macro_id, int) or not (
            1 <= macro_id <= MAX_ID
        ):
            raise ValidationError(f"macro_id must be a positive integer, got {shown(macro_id):.60}")
        tool = yield Read(trigger_tool, (macro_id,))
        if tool is None:
            raise NotFound(f"no macro {macro_id}")
        # The trigger tool names the macro's tenant, for the change feed (memq.tenants).
        return (yield from self._send_op(EventType.MACRO_USED,
                                         {"macro_id": macro_id, "tool": tool}))

    def _tool_args(self, args: Mapping[str, Any] | None) -> dict[str, Any]:
        if args is None:
            return {}
        if not isinstance(args, Mapping):
            raise ValidationError(f"args must be a mapping, got {type(args).__name__}")
        if not all(isinstance(k, str) for k in args):
            raise ValidationError("args keys must be strings")
        shrunk = shrink_args(args)  # learning needs nothing of long text but its presence
        try:
            size = len(orjson.dumps(shrunk))
        except TypeError as exc:
            raise ValidationError(f"args must be JSON-serialisable: {exc}") from None
        limit = self.config.limits.max_content_bytes
        if size > limit:
            raise ValidationError(f"args are {size} bytes once shortened, over the {limit} limit")
        return shrunk


def merged(rows: list[Macro]) -> list[Macro]:
    """Several users' rows of the same transition as one: their counts summed and the
    confidence estimated again from them; its id and template are the row's with the most
    transitions (ties: the older, then the lower id)."""
    same: dict[tuple[str, str, str], list[Macro]] = {}
    for row in rows:
        same.setdefault((row.trigger_tool, row.trigger_args_pattern, row.next_tool),
                        []).append(row)
    return [_merge(group) for group in same.values()]


def _merge(group: list[Macro]) -> Macro:
    if len(group) == 1:
        return group[0]
    lead = min(group, key=lambda m: (-m.transition_count, m.created_at, m.id))
    transitions = sum(m.transition_count for m in group)
    triggers = sum(m.trigger_count for m in group)
    return dataclasses.replace(
        lead, transition_count=transitions, trigger_count=triggers,
        confidence=confidence(transitions, triggers),
        used_count=sum(m.used_count for m in group),
        created_at=min(m.created_at for m in group),
        updated_at=max(m.updated_at for m in group))


def _best_per_next_tool(rows: list[Macro]) -> list[Macro]:
    # The specific pattern and the any-arguments row may both propose a tool: keep the
    # more confident, the specific one on a tie, then order the survivors best first.
    best: dict[str, Macro] = {}
    for macro in rows:
        current = best.get(macro.next_tool)
        if current is None or _rank(macro) < _rank(current):
            best[macro.next_tool] = macro
    return sorted(best.values(), key=_rank)


def _rank(macro: Macro) -> tuple[float, bool, int, str, int]:
    # Ids are hashes (store/projections/macros.py): on a full tie the older macro wins.
    return (-macro.confidence, macro.trigger_args_pattern == ANY_ARGS,
            -macro.transition_count, macro.created_at, macro.id)


def _suggestion(macro: Macro, args: dict[str, Any]) -> MacroSuggestion:
    filled = None if macro.next_args is None else fill_template(macro.next_args, args)
    return MacroSuggestion(
        macro_id=macro.id, tool=macro.next_tool, args=filled, confidence=macro.confidence,
        count=macro.transition_count, used_count=macro.used_count,
        pattern=macro.trigger_args_pattern,
    )
