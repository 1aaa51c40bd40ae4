"""The endpoints: one per row of :data:`~memq.producers.operations.OPERATIONS`, each the
:class:`~memq.producers.client.MemoryClient` method of the same name.

Writes return as soon as the event is in Redis, as the client's do, with the caller's
inbox position; waits (``flush``, ``forget/wait``) wait for what this caller sent. Reads
run on the role's shared client (its read pool).
"""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from datetime import datetime
from typing import Any, cast

import orjson
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from memq.errors import PermissionDenied
from memq.producers.documents import FoundDocument
from memq.producers.operations import OPERATIONS, Kind, Operation
from memq.producers.surface import Surface
from memq.server import bodies as b
from memq.server import grants
from memq.server.budgets import cost
from memq.server.guard import PAID
from memq.server.principals import Principals
from memq.server.remotes import Remote, caller
from memq.store.read.documents import Document

router = APIRouter(prefix="/v1")
Caller = Depends(caller)


def paid_at_the_door(request: Request) -> int:
    """The units of the call the guard paid before its body was read (``guard.PAID``)."""
    return 1 if request.scope.get("state", {}).get(PAID) else 0


PaidAtTheDoor = Depends(paid_at_the_door)
PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"description": "problem details (RFC 9457), `title` names the memq error",
           "content": {"application/problem+json": {}}}
    for code in (401, 403, 404, 409, 413, 421, 422, 503, 504)
}
SENT_HEADER = "Memq-Sent"
"""On every write's answer: the inbox position this caller's events reached (``ms-seq``);
a client sends the highest back with its waits (see ``remotes.py``)."""


def answer(value: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(value, default=_plain), status_code=status,
                    media_type="application/json")


def written(remote: Remote, value: Any, status: int = 200) -> Response:
    """The answer to a write, with the caller's inbox position."""
    position = remote.client.outbox.last_sent
    response = Response(status_code=status) if value is None else answer(value, status)
    if position is not None:
        response.headers[SENT_HEADER] = f"{position[0]}-{position[1]}"
    return response


def _plain(value: Any) -> Any:
    if hasattr(value, "keys"):  # the read-only mappings of ContextItem.scores
        return dict(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def on_the_wire(value: Any) -> Any:
    """A result as JSON carries it: a document without its vector (bytes, and of no use
    to a caller)."""
    if isinstance(value, list):
        return [on_the_wire(v) for v in value]
    if isinstance(value, FoundDocument):
        return {"document": on_the_wire(value.document), "score": value.score}
    if isinstance(value, Document):
        return {"namespace": list(value.namespace), "key": value.key, "value": value.value,
                "created_at": value.created_at, "updated_at": value.updated_at,
                "expires_at": value.expires_at, "user_id": value.user_id}
    return value


# -- running a call, by kind -----------------------------------------------------------------


def _read(op: Operation, remote: Remote, given: dict[str, Any]) -> Response:
    result = grants.shown_to(remote.grant, op, getattr(remote.client, op.name)(**given))
    return answer({op.answer: on_the_wire(result)})


def _write(op: Operation, remote: Remote, given: dict[str, Any]) -> Response:
    with remote.lock:
        result = getattr(remote.client, op.name)(**given)
        return written(remote, None if op.answer is None else {op.answer: result},
                       op.status)


def _wait(op: Operation, remote: Remote, given: dict[str, Any]) -> Response:
    timeout, sent = given.pop("timeout"), given.pop("sent")
    with remote.waiting(timeout, sent) as left:
        result = getattr(remote.waiter, op.name)(**given, timeout=left)
    return answer({op.answer: True if op.done else result})


RUN: Mapping[Kind, Callable[[Operation, Remote, dict[str, Any]], Response]] = {
    Kind.READ: _read, Kind.WRITE: _write, Kind.WAIT: _wait}


# -- the routes ------------------------------------------------------------------------------


def endpoint(op: Operation, parameters: list[inspect.Parameter]) -> Callable[..., Response]:
    """A function FastAPI reads ``parameters`` from (path, query or one body model) that
    runs ``op`` with them under the method's own argument names."""
    renamed = {wire: name for name, wire in op.renamed.items()}
    names = {p.name for p in parameters}

    model = b.body_model(op)

    def call(**given: Any) -> Response:
        remote: Remote = given.pop("remote")
        paid: int = given.pop("paid")
        asked = given.pop("asked", None)
        if asked is None and model is not None and "asked" in names:
            asked = model()  # a body of defaults alone may be left out (curl's flush)
        if asked is not None:
            given.update({renamed.get(k, k): v for k, v in _fields(asked).items()})
        units = cost(op.name, given, writes=op.kind is Kind.WRITE)
        # Spent before the grant is checked: a refused call costs its caller too, or
        # probing for what lies outside the grant would be free.
        spending = remote.budgets.spend(remote.grant, units, paid=paid,
                                        writes=op.kind is Kind.WRITE) \
            if remote.budgets else nullcontext()
        with spending:
            stored = grants.admit(remote.grant, op, given, remote.client, remote.claimed)
            answered = RUN[op.kind](op, remote, stored)
            if remote.grant is not None and op.name in grants.APPENDS:
                remote.claim(grants.sessions_named(op, given))
            return answered

    call.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [*parameters, inspect.Parameter("remote", inspect.Parameter.KEYWORD_ONLY,
                                        default=Caller, annotation=Remote),
         inspect.Parameter("paid", inspect.Parameter.KEYWORD_ONLY, default=PaidAtTheDoor,
                           annotation=int)])
    call.__name__ = call.__qualname__ = op.name
    call.__doc__ = inspect.getdoc(getattr(Surface, op.name))
    return call


def _fields(asked: b.Body) -> dict[str, Any]:
    # Each field as sent (a list of turns stays a list of mappings).
    return {name: _fields(v) if isinstance(v, b.Body) else
            [_fields(x) if isinstance(x, b.Body) else x for x in v] if isinstance(v, list)
            else v for name, v in asked}


def _path_parameters(op: Operation) -> list[inspect.Parameter]:
    return [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, annotation=hint)
            for p, hint in b.arguments(op) if p.name in op.path_args]


def _body_parameters(op: Operation) -> list[inspect.Parameter]:
    model = b.body_model(op)
    if model is None:
        return []
    optional = all(not f.is_required() for f in model.model_fields.values())
    return [inspect.Parameter("asked", inspect.Parameter.KEYWORD_ONLY,
                              default=None if optional else inspect.Parameter.empty,
                              annotation=model | None if optional else model)]


def _query_parameters(op: Operation) -> list[inspect.Parameter]:
    """The ``GET`` form's query parameters, typed as a query string can carry them."""
    return [inspect.Parameter(
        p.name, inspect.Parameter.KEYWORD_ONLY, annotation=_plain_type(hint),
        default=Query() if p.default is inspect.Parameter.empty else Query(p.default))
        for p, hint in b.arguments(op)]


def _plain_type(hint: Any) -> Any:
    """A datetime comes as text; the rest as declared."""
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (types.UnionType, typing.Union) and datetime in args:
        return typing.Union[tuple(a for a in args if a is not datetime)]  # noqa: UP007
    return hint


def _answer_model(op: Operation) -> Any:
    if op.answer is None:
        return None
    if op.done is not None:
        return dict[str, bool]
    result = typing.get_type_hints(getattr(Surface, op.name))["return"]
    if _has(result, Document, FoundDocument):
        return dict[str, Any]  # as on_the_wire writes them, without the vector
    return cast(Any, dict)[str, result]


def _has(hint: Any, *kinds: type) -> bool:
    return hint in kinds or any(_has(a, *kinds) for a in typing.get_args(hint))


SERVED_ELSEWHERE = frozenset({"changes_page"})
"""Rows another module of the server answers: a feed page waits for a commit without
holding a thread (``server/feed.py``)."""


def add(op: Operation) -> None:
    if op.name in SERVED_ELSEWHERE:
        return
    parameters = _path_parameters(op) + _body_parameters(op)
    router.api_route(op.path, methods=[op.method], response_model=_answer_model(op),
                     status_code=op.status, responses=PROBLEMS,
                     name=op.name)(endpoint(op, parameters))
    if op.query_path is not None:
        router.api_route(op.query_path, methods=["GET"], response_model=_answer_model(op),
                         responses=PROBLEMS, name=f"{op.name} (query)")(
            endpoint(op, _query_parameters(op)))


@router.get("/whoami", response_model=b.Role, responses=PROBLEMS)
def whoami(remote: Remote = Caller) -> Response:
    return answer({"role": remote.client.role.value})


@router.post("/keys/delegate", response_model=dict[str, str], status_code=201,
             responses=PROBLEMS)
def delegate(asked: b.Delegate, request: Request, remote: Remote = Caller) -> Response:
    """A narrower, short-lived token for the caller's key (``server/delegation.py``)."""
    grant = remote.grant
    if grant is None or grant.delegated or "delegate" not in grant.rights:
        raise PermissionDenied("delegated tokens are minted by a key that may delegate")
    principals: Principals = request.app.state.principals
    key = principals.keys.live(grant.key_id)
    token, expires_at = principals.delegations.mint(
        grant, None if key is None else key.expires_at, users=asked.users,
        agents=asked.agents, can=asked.can, minutes=asked.minutes)
    return answer({"token": token, "expires_at": expires_at}, 201)


for _op in OPERATIONS.values():
    add(_op)

__all__ = ["router"]
