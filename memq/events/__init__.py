"""The event vocabulary: every change to memq's state is one of these events.

Pure (no storage, no Redis), so producers and the writer validate with the same code:

- :mod:`memq.events.vocabulary`: the types, their schema versions and payload fields;
- :mod:`memq.events.fields`: what a field's value, or an identifier, must respect;
- :mod:`memq.events.rules`: the rules of single fields beyond type and size;
- :mod:`memq.events.envelope`: the wire form, and decoding it with full validation.

Import from here (``from memq.events import Event, decode``); the modules are the layout.
"""

from memq.events.envelope import (
    ENVELOPE_FIELDS,
    MAX_DEPTH,
    Event,
    check_payload,
    checked_payload,
    decode,
    encode,
    from_dict,
)
from memq.events.fields import (
    INT64_LIMIT,
    MAX_FACT_VALUE_CHARS,
    SHORT,
    Field,
    Schema,
    check_characters,
    check_count,
    check_identifier,
    check_proposed_fact,
    check_query,
)
from memq.events.rules import MAX_SUMMARY_SOURCES, TASK_ID
from memq.events.vocabulary import (
    FACT_SOURCES,
    MAX_EMBEDDING_DIM,
    MAX_MIN_AGE_HOURS,
    ROLES,
    SCHEMAS,
    TASK_SOURCES,
    UPCASTERS,
    EventType,
    Upcaster,
)

__all__ = [
    "ENVELOPE_FIELDS",
    "FACT_SOURCES",
    "INT64_LIMIT",
    "MAX_DEPTH",
    "MAX_EMBEDDING_DIM",
    "MAX_FACT_VALUE_CHARS",
    "MAX_MIN_AGE_HOURS",
    "MAX_SUMMARY_SOURCES",
    "ROLES",
    "SCHEMAS",
    "SHORT",
    "TASK_ID",
    "TASK_SOURCES",
    "UPCASTERS",
    "Event",
    "EventType",
    "Field",
    "Schema",
    "Upcaster",
    "check_characters",
    "check_count",
    "check_identifier",
    "check_payload",
    "check_proposed_fact",
    "check_query",
    "checked_payload",
    "decode",
    "encode",
    "from_dict",
]
