"""One surface: the table of operations, the methods written once, and every client and the
server exposing exactly that table."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from memq import AsyncMemoryClient, AsyncRemoteMemoryClient, MemoryClient, RemoteMemoryClient
from memq.errors import ValidationError
from memq.producers import remote_calls, unasync
from memq.producers.operations import BUILT_ON, OPERATIONS, Kind
from memq.producers.surface import Surface
from memq.producers.surface_async import AsyncSurface
from memq.server import bodies, feed
from memq.server.routes import router

LIFECYCLE = {"close", "aclose", "batched", "from_env", "role", "with_own_outbox"}
"""What each client class has of its own: opening, closing, its credentials."""
SERVERS_OWN = {"delegate"}
"""What only a server does (a remote client's alone): minting a key's delegated token."""


def methods(cls: type) -> set[str]:
    return {name for name, member in inspect.getmembers(cls)
            if not name.startswith("_") and (callable(member) or isinstance(member, property))}


def test_the_async_surface_is_the_sync_one_generated() -> None:
    assert unasync.TARGET.read_text() == unasync.render(unasync.SOURCE.read_text()), \
        "run python -m memq.producers.unasync"
    assert unasync.main(["--check"]) == 0


def test_the_surface_is_exactly_the_table() -> None:
    assert methods(Surface) == set(OPERATIONS) | set(BUILT_ON) == methods(AsyncSurface)
    for name in OPERATIONS:
        source = inspect.getsource(getattr(Surface, name))
        assert f'return self._call("{name}", locals())' in source, name
        assert inspect.iscoroutinefunction(getattr(AsyncSurface, name)), name
    for name, operation in BUILT_ON.items():  # no transport of its own: through the table
        source = inspect.getsource(getattr(Surface, name))
        assert "_call" not in source
        assert f"self.{operation}(" in source, name
        assert inspect.isasyncgenfunction(getattr(AsyncSurface, name)), name


@pytest.mark.parametrize("cls", [MemoryClient, AsyncMemoryClient, RemoteMemoryClient,
                                 AsyncRemoteMemoryClient])
def test_every_client_offers_the_table_and_its_lifecycle_alone(cls: type) -> None:
    surface = AsyncSurface if "Async" in cls.__name__ else Surface
    assert methods(cls) - LIFECYCLE - SERVERS_OWN == set(OPERATIONS) | set(BUILT_ON)
    assert ("delegate" in methods(cls)) == ("Remote" in cls.__name__)
    for name in OPERATIONS:
        assert getattr(cls, name) is getattr(surface, name), f"{cls.__name__}.{name}"
    assert cls._call is not surface._call  # a transport of its own


def test_each_local_operation_takes_the_methods_arguments() -> None:
    for name in OPERATIONS:
        method = inspect.signature(getattr(Surface, name)).parameters
        op = inspect.signature(getattr(MemoryClient, f"_{name}_op")).parameters
        assert list(op) == list(method), name


def test_the_server_serves_exactly_the_table() -> None:
    routes = {(method, route.path) for route in [*router.routes, *feed.router.routes]
              for method in route.methods}
    wanted = {(op.method, f"/v1{op.path}") for op in OPERATIONS.values()}
    wanted |= {("GET", f"/v1{op.query_path}") for op in OPERATIONS.values()
               if op.query_path is not None}
    assert routes == wanted | {("GET", "/v1/whoami"), ("POST", "/v1/keys/delegate"),
                               ("GET", "/v1/changes")}


def test_each_body_holds_the_arguments_a_caller_sends() -> None:
    for op in OPERATIONS.values():
        model = bodies.body_model(op)
        sent = {op.renamed.get(p.name, p.name) for p, _ in bodies.arguments(op)
                if p.name not in op.path_args}
        if op.kind is Kind.WAIT:
            sent.add("sent")
        assert set(model.model_fields if model else ()) == sent, op.name
    assert "trusted" not in bodies.body_model(OPERATIONS["is_command_allowed"]).model_fields


def test_a_remote_call_is_the_rows_request() -> None:
    sent = remote_calls.Sent()
    call = remote_calls.call("pause_task", {"self": None, "task_id": "a b"}, sent)
    assert (call.method, call.path, call.body) == ("POST", "/v1/tasks/a%20b/pause", None)
    call = remote_calls.call("append_many", {"turns": [{"session_id": "s"}]}, sent)
    assert call.body == {"messages": [{"session_id": "s"}]}
    call = remote_calls.call("is_command_allowed", {"command": "ls", "trusted": False}, sent)
    assert call.body == {"command": "ls"}
    call = remote_calls.call("flush", {"timeout": 5}, sent)
    assert (call.body, call.waits_s) == ({"timeout": 5, "sent": None}, 10.0)


@pytest.mark.parametrize(("name", "arguments", "message"), [
    ("task", {"task_id": "a/b"}, "task_id must be an id"),
    ("task", {"task_id": ".."}, "task_id must be an id"),
    ("pause_task", {"task_id": 5}, "task_id must be an id"),
    ("use_macro", {"macro_id": True}, "macro_id must be a positive integer, got True"),
    ("use_macro", {"macro_id": "1"}, "macro_id must be a positive integer, got '1'"),
])
def test_an_argument_that_would_name_another_route_is_refused_before_sending(
    name: str, arguments: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError, match=message):
        remote_calls.call(name, arguments, remote_calls.Sent())


def test_every_result_type_has_a_reader() -> None:
    for name in OPERATIONS:
        assert callable(remote_calls.decoder(name)), name
