"""The JSON bodies of the API, as pydantic models made from the methods' signatures: they
make the OpenAPI schema and say which fields a body has (an unknown one or a missing one
is refused here).

What a value may hold is left to :class:`~memq.producers.client.MemoryClient`, which
checks every argument it is given: a field is declared with its JSON type for the schema
but passed on as sent (``Any``), so a remote caller gets the local client's own messages
("limit must be an integer from 1 to 10000, got 2.5"), not a second, different set. Only
what the server itself must bound (how many turns one request carries, how long a request
may wait) is checked here.
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, create_model

from memq.producers.operations import OPERATIONS, Kind, Operation
from memq.producers.surface import Surface

MAX_BATCH = 1000
"""Most turns one ``POST /v1/messages/batch`` carries."""

MAX_WAIT_S = 300.0
"""Longest a request may wait for the writer (flush, forget)."""

POSITION = r"^[0-9]{1,20}-[0-9]{1,20}$"
"""An inbox position as ``Memq-Sent`` gives it."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


def arguments(op: Operation) -> list[tuple[inspect.Parameter, Any]]:
    """The method's arguments a caller sends (not ``self``, never a private one), each
    with its declared type."""
    method = getattr(Surface, op.name)
    hints = typing.get_type_hints(method)
    return [(p, hints[p.name]) for p in inspect.signature(method).parameters.values()
            if p.name != "self" and p.name not in op.private]


def body_model(op: Operation) -> type[Body] | None:
    """The body of ``op``: its arguments but those in the path, under their wire names;
    None if it has none."""
    return _body_model(op.name)


@functools.cache
def _body_model(name: str) -> type[Body] | None:
    op = OPERATIONS[name]
    fields: dict[str, Any] = {}
    for parameter, hint in arguments(op):
        if parameter.name in op.path_args:
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[op.renamed.get(parameter.name, parameter.name)] = _field(op, parameter.name,
                                                                        hint, default)
    if op.kind is Kind.WAIT:
        fields["sent"] = (str | None, Field(default=None, pattern=POSITION, strict=True,
                                            description="the highest Memq-Sent this "
                                                        "client was given"))
    if not fields:
        return None
    return create_model(_camel(op.name), __base__=Body, **fields)


def _field(op: Operation, name: str, hint: Any, default: Any) -> tuple[Any, Any]:
    if op.kind is Kind.WAIT and name == "timeout":
        return float, Field(default=default, gt=0, le=MAX_WAIT_S, strict=True)
    if op.name == "append_many":  # each turn a body of its own, and so many at most
        turn = body_model(OPERATIONS["append"])
        return cast(Any, list)[turn], Field(default=default, max_length=MAX_BATCH)
    return Annotated[Any, WithJsonSchema(json_schema(hint))], default


def json_schema(hint: Any) -> dict[str, Any]:
    """The JSON type of a declared Python type, for the schema."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if typing.get_origin(hint) in (types.UnionType, typing.Union):
        schema = json_schema(args[0])
        if len(args) < len(typing.get_args(hint)):
            schema["type"] = [schema.get("type", "string"), "null"]
        return schema
    origin = typing.get_origin(hint) or hint
    for kinds, name in ((str, "string"), (datetime, "string"), (bool, "boolean"),
                        (int, "integer"), (float, "number")):
        if origin is kinds:
            return {"type": name}
    if isinstance(origin, type) and issubclass(origin, Mapping):
        return {"type": "object"}
    if isinstance(origin, type) and issubclass(origin, (Sequence, tuple)):
        return {"type": "array"}
    return {}


def _camel(name: str) -> str:
    return "".join(part.title() for part in name.split("_"))


class Role(BaseModel):
    role: str


class Delegate(Body):
    """A delegated token's grant: each omitted part is the key's own."""

    users: Annotated[Any, WithJsonSchema({"type": ["array", "null"]})] = None
    agents: Annotated[Any, WithJsonSchema({"type": ["array", "null"]})] = None
    can: Annotated[Any, WithJsonSchema({"type": ["array", "null"]})] = None
    minutes: Annotated[Any, WithJsonSchema({"type": "number"})] = 15.0

