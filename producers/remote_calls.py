"""What the remote clients send for a method, and how they read the answer: derived from
the operation's row (:data:`~memq.producers.operations.OPERATIONS`) and the method's
signature in :mod:`memq.producers.surface`, for both remote clients.

A :class:`Call` is a method, a path, a JSON body and how to turn the answer into the
local client's result types; the two remote clients differ only in how they send it.
Errors come back as problem details and are raised as the :mod:`memq.errors` class they
name (:func:`memq.problems.to_error`).
"""

from __future__ import annotations

import dataclasses
import functools
import re
import threading
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import quote

import httpx
import orjson

from memq.clock import normalize_rfc3339
from memq.errors import ConfigError, MemqError, ValidationError
from memq.printable import shown
from memq.problems import to_error
from memq.producers.changes import ChangesPage
from memq.producers.context import ContextItem
from memq.producers.documents import FoundDocument
from memq.producers.keys import DelegatedToken
from memq.producers.macros import MAX_ID
from memq.producers.operations import OPERATIONS, Kind, Operation
from memq.producers.surface import Surface
from memq.store.read.changes import Change
from memq.store.read.documents import Document
from memq.store.read.keys import ApiKey
from memq.store.read.webhooks import Webhook

T = TypeVar("T")
CLIENT_ID_HEADER = "Memq-Client-Id"
SENT_HEADER = "Memq-Sent"
POSITION = re.compile(r"[0-9]{1,20}-[0-9]{1,20}")
DEFAULT_TIMEOUT_S = 30.0
"""How long a call waits for the server, beyond what the call itself waits (flush)."""


def server_url(given: str) -> str:
    """The server's address without a trailing slash; a ConfigError when httpx cannot read
    it as one ("http://host:abc"), rather than httpx's own error from the first call."""
    try:
        httpx.URL(given)
    except httpx.InvalidURL as exc:
        raise ConfigError(f"not a server address: {shown(given):.80} ({exc})") from None
    return given.rstrip("/")


def _nothing(body: Any) -> None:
    return None


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    body: Any = None
    decode: Callable[[Any], Any] = _nothing
    waits_s: float = 0.0
    """How long the server may take on purpose (a flush's timeout)."""

    def content(self) -> bytes | None:
        if self.body is None:
            return None
        try:
            return orjson.dumps(self.body)
        except TypeError as exc:
            raise ValidationError(f"arguments must be JSON-serialisable: {exc}") from None

    def result(self, status: int, raw: bytes) -> Any:
        """The call's result from the answer, or the memq error it stands for."""
        try:
            body = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = raw[:200].decode("utf-8", "replace")
        if status >= 400:
            raise to_error(status, body)
        try:
            return self.decode(body)
        except (KeyError, TypeError, ValueError) as exc:
            raise MemqError(f"{self.method} {self.path}: unexpected answer ({exc})") from None


class Sent:
    """The highest inbox position this client's writes reached, as the server reports it
    (``Memq-Sent``): its waits ask for that much, so any server can answer them."""

    def __init__(self) -> None:
        self.position: tuple[int, int] | None = None
        self._lock = threading.Lock()

    def note(self, header: str | None) -> None:
        if header is None or not POSITION.fullmatch(header):
            return
        ms, _, seq = header.partition("-")
        position = (int(ms), int(seq))
        with self._lock:
            if self.position is None or position > self.position:
                self.position = position

    def text(self) -> str | None:
        position = self.position
        return None if position is None else f"{position[0]}-{position[1]}"


# -- the request -----------------------------------------------------------------------------


def call(name: str, arguments: Mapping[str, Any], sent: Sent) -> Call:
    """The request for ``name(**arguments)`` (``self`` and private arguments left out)."""
    op = OPERATIONS[name]
    given = {k: v for k, v in arguments.items() if k != "self" and k not in op.private}
    path = "/v1" + op.path
    for arg in op.path_args:
        path = path.replace(f"{{{arg}}}", _path_part(name, arg, given.pop(arg)))
    body = {op.renamed.get(k, k): wire(v, k) for k, v in given.items()}
    waits_s = 0.0
    if op.kind is Kind.WAIT:
        body["sent"] = sent.text()
        waits_s = 2 * _seconds(given.get("timeout"))
    decode = _answer(op, decoder(name))
    return Call(op.method, path, body or None, decode, waits_s)


def wire(value: Any, what: str) -> Any:
    """A value as JSON carries it: a datetime as its RFC 3339 text, any mapping as an
    object, any tuple or list as an array; anything else as given, for the server's check."""
    if isinstance(value, datetime):
        return normalize_rfc3339(value, what=what)
    if isinstance(value, Mapping):
        return {k: wire(v, k if isinstance(k, str) else what) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [wire(v, what) for v in value]
    return value


def _path_part(name: str, arg: str, value: Any) -> str:
    """An argument in the path: checked here, since a bad one would name another route."""
    if typing.get_type_hints(getattr(Surface, name))[arg] is int:
        if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= MAX_ID:
            return str(value)
        raise ValidationError(f"{arg} must be a positive integer, got {shown(value):.60}")
    if isinstance(value, str) and value and "/" not in value and value not in (".", ".."):
        return quote(value, safe="")
    raise ValidationError(f"{arg} must be an id (no '/'), got {shown(value):.60}")


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        else 0.0


# -- the answer ------------------------------------------------------------------------------


def _answer(op: Operation, decode: Callable[[Any], Any]) -> Callable[[Any], Any]:
    if op.answer is None or op.done is not None:
        return _nothing
    key = op.answer
    return lambda body: decode(body[key])


@functools.cache
def decoder(name: str) -> Callable[[Any], Any]:
    """How to read the result of ``name`` from JSON, from its declared return type."""
    result = typing.get_type_hints(getattr(Surface, name))["return"]
    return _decoder(result)


def _decoder(tp: Any) -> Callable[[Any], Any]:
    special = _SPECIAL.get(tp)
    if special is not None:
        return special
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (types.UnionType, typing.Union):
        inner = _decoder(next(a for a in args if a is not type(None)))
        return lambda v: None if v is None else inner(v)
    if origin is list:
        item = _decoder(args[0])
        return lambda v: [item(x) for x in v]
    if origin is tuple:
        return tuple
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return functools.partial(build, tp)
    return lambda v: v  # str, bool, int, a JSON object


def build(cls: type[T], data: Mapping[str, Any]) -> T:
    """A result dataclass from its JSON, ignoring fields a newer server may add."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in data.items() if k in names})


def context_item(data: Mapping[str, Any]) -> ContextItem:
    item = build(ContextItem, data)
    return dataclasses.replace(item, branches=tuple(item.branches),
                               scores=types.MappingProxyType(dict(item.scores)))


def document(data: Mapping[str, Any]) -> Document:
    return dataclasses.replace(build(Document, data), namespace=tuple(data["namespace"]))


def found_document(data: Mapping[str, Any]) -> FoundDocument:
    return FoundDocument(document(data["document"]), data["score"])


def api_key(data: Mapping[str, Any]) -> ApiKey:
    key = build(ApiKey, data)
    return dataclasses.replace(key, rights=tuple(key.rights), users=_tuple(key.users),
                               agents=_tuple(key.agents))


def _tuple(value: Any) -> Any:
    return None if value is None else tuple(value)


def webhook(data: Mapping[str, Any]) -> Webhook:
    return dataclasses.replace(build(Webhook, data), types=tuple(data["types"]))


def changes_page(data: Mapping[str, Any]) -> ChangesPage:
    return ChangesPage([build(Change, c) for c in data["changes"]], data["position"],
                       data["newest"])


_SPECIAL: dict[Any, Callable[[Any], Any]] = {
    ContextItem: context_item, Document: document, FoundDocument: found_document,
    ApiKey: api_key, ChangesPage: changes_page, Webhook: webhook,
}


def delegate(users: Sequence[str] | None, agents: Sequence[str] | None,
             can: Sequence[str] | None, minutes: float) -> Call:
    body = {"users": wire(users, "users"), "agents": wire(agents, "agents"),
            "can": wire(can, "can"), "minutes": minutes}
    return Call("POST", "/v1/keys/delegate", body,
                decode=lambda b: DelegatedToken(b["token"], b["expires_at"]))


def whoami() -> Call:
    return Call("GET", "/v1/whoami", decode=lambda body: body["role"])


__all__ = ["CLIENT_ID_HEADER", "DEFAULT_TIMEOUT_S", "Call", "Sent", "call"]
