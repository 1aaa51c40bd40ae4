"""The catalogue of event types: each has a schema, an authority decision, an applier (the
writer's and the rebuild's), and a rule for how a forget reaches it; or this test names
what is missing. A new type cannot land half-made."""

from __future__ import annotations

import re

import pytest

from memq.authority import RIGHTS
from memq.events import SCHEMAS, EventType
from memq.store.projections import APPLIERS, BATCH_APPLIERS, erasing, forgetting
from memq.store.rebuild import replay

TYPES = sorted(EventType)


@pytest.mark.parametrize("etype", TYPES)
def test_every_type_is_whole(etype: str) -> None:
    missing = [what for what, present in (
        ("a schema (memq/events/vocabulary.py)", etype in SCHEMAS),
        ("an authority row (memq/authority.py RIGHTS)", any(r.event_type == etype
                                                            for r in RIGHTS)),
        ("an applier (store/projections/)", etype in APPLIERS or etype in BATCH_APPLIERS),
        ("an erasure rule (store/projections/forgetting.py ERASURE)",
         etype in forgetting.ERASURE),
    ) if not present]
    assert missing == [], f"{etype} has no {', no '.join(missing)}"


def test_the_rebuild_applies_what_the_writer_applies() -> None:
    """The rebuild replays the log through the same appliers (store/rebuild.py): no type is
    rebuilt by a path of its own that could drift."""
    assert "apply_event" in replay.__code__.co_names or "apply_events" in replay.__code__.co_names


def _types_in(statement: str) -> set[str]:
    listed = re.search(r"type IN \(([^)]*)\)", statement)
    assert listed is not None
    return set(re.findall(r"'([a-z_.]+)'", listed.group(1)))


def test_the_erasure_statements_name_exactly_the_types_the_catalogue_says() -> None:
    by = {how: {t for t, rule in forgetting.ERASURE.items() if rule == how}
          for how in (forgetting.BY_MESSAGE, forgetting.BY_USER)}
    assert _types_in(erasing.TOMBSTONE_RESULTS) == by[forgetting.BY_MESSAGE]
    assert (_types_in(forgetting._TOMBSTONE_FACTS) | _types_in(forgetting._TOMBSTONE_DOCUMENTS)
            == by[forgetting.BY_USER])


def test_every_type_a_forget_keeps_says_why() -> None:
    kept = {t: rule for t, rule in forgetting.ERASURE.items()
            if rule not in (forgetting.BY_SESSION, forgetting.BY_MESSAGE, forgetting.BY_USER)}
    assert all(rule.startswith("none: ") and len(rule) > 10 for rule in kept.values()), kept


def test_a_type_kept_by_session_names_its_session() -> None:
    """The session statement reaches an event through its session_id: a type erased that
    way must be able to carry one."""
    for etype, rule in forgetting.ERASURE.items():
        if rule == forgetting.BY_SESSION and etype != EventType.MACRO_USED:
            assert SCHEMAS[etype].needs_session, etype
