"""What the writer applies, every read path can return: generated events of every type,
valid by their schema (and the shapes that once passed the schema but broke a reader:
values nested past what a JSON encoder writes, vectors no search can compare), then every
read of a real ``memq serve`` over them answers.

Before the writer bounded nesting and checked vectors against their model, a
``document.put`` with a one-dimension vector under the configured model broke every
document search of its namespace (HTTP 500), and a document value or ``tool_calls``
nested 251+ levels broke ``/v1/documents/search`` and ``/v1/history``.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memq import RemoteMemoryClient, names
from memq.authority import Role
from memq.clock import now_rfc3339, uuid7
from memq.config import Config, EmbedConfig
from memq.events import MAX_DEPTH, SCHEMAS
from memq.testing import WriterThread, wait_committed
from tests.faults import figures
from tests.faults.test_fuzz_inbox import SESSION, Raw, dumps, setup_events, valid_events
from tests.producers.serving import serving

pytestmark = [pytest.mark.faults, pytest.mark.redis]

NAMESPACE = ["fz", "docs"]


def nested(depth: int) -> Raw:
    """A JSON value ``depth`` levels of lists deep (as text: deeper than orjson writes)."""
    return Raw(b"[" * depth + b'"leaf"' + b"]" * depth)


def document(value: Any, vector: list[float] | None = None, model: str = "m") -> dict[str, Any]:
    payload: dict[str, Any] = {"namespace": NAMESPACE, "key": uuid7(), "value": value}
    if vector is not None:
        payload |= {"model": model, "dim": len(vector), "vector_b64": base64.b64encode(
            struct.pack(f"<{len(vector)}f", *vector)).decode()}
    return {"id": uuid7(), "type": "document.put", "v": 1, "session_id": None,
            "created_at": now_rfc3339(), "payload": payload}


def turn(tool_calls: Any) -> dict[str, Any]:
    return {"id": uuid7(), "type": "message.appended", "v": 1, "session_id": SESSION,
            "created_at": now_rfc3339(),
            "payload": {"message_id": uuid7(), "role": "assistant", "content": "called",
                        "importance": 0.5, "tool_calls": tool_calls}}


@st.composite
def hostile_but_schema_valid(draw: st.DrawFn, model: str) -> dict[str, Any]:
    depth = draw(st.integers(1, MAX_DEPTH + 200))
    dims = draw(st.sampled_from([1, 2, 384]))
    norm = draw(st.sampled_from([1.0, 0.0, 1e30]))
    vector = [norm] + [0.0] * (dims - 1)
    return draw(st.sampled_from([
        document({"deep": nested(depth)}),
        turn([nested(depth)]),
        document({"v": 1}, vector, model),
        document({"v": 1}, vector, "another-model"),
    ]))


def events(model: str) -> st.SearchStrategy[list[dict[str, Any]]]:
    one = st.one_of(st.sampled_from(sorted(SCHEMAS)).flatmap(valid_events),
                    hostile_but_schema_valid(model))
    return st.lists(one, min_size=1, max_size=8)


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, redis_server: Any,
          role_passwords: Any) -> Iterator[tuple[Config, RemoteMemoryClient]]:
    from memq import acl
    from tests.conftest import MODEL_DIR

    directory: Path = tmp_path_factory.mktemp("read-paths")
    redis.Redis.from_url(redis_server.url).flushall()
    config = Config(redis_url=redis_server.url, db_path=str(directory / "memq.db"),
                    embed=EmbedConfig(model_dir=str(MODEL_DIR)))
    role_urls = {role: acl.role_url(redis_server.url, role, role_passwords[role])
                 for role in Role}
    with WriterThread(config), serving(config, role_urls, directory) as served, \
            RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as remote:
        send(config, setup_events())
        yield config, remote


def send(config: Config, batch: list[dict[str, Any]]) -> None:
    connection = redis.Redis.from_url(config.redis_url)
    pipe = connection.pipeline(transaction=False)
    for event in batch:
        pipe.xadd(names.ADMIN_INBOX_STREAM, {names.EVENT_FIELD: dumps(event)})
    pipe.execute()
    wait_committed(connection)


def read_everything(remote: RemoteMemoryClient) -> None:
    """Every read route once; a 4xx or 5xx raises."""
    for session in (SESSION, *[s.session_id for s in remote.sessions()][:3]):
        remote.history(session, limit=500)
        remote.get_context(session)
    remote.get_context(SESSION, query="leaf", scope="session")
    remote.facts()
    for fact in remote.facts()[:3]:
        remote.fact_history(fact.category, fact.key, user_id=fact.user_id)
    for namespace in remote.document_namespaces():
        remote.search_documents(namespace, query="leaf", limit=100)
        remote.search_documents(namespace, limit=100)
    remote.tasks()
    remote.allowed_prefixes()
    remote.suggest_next_tools("read_file", {"path": "a.py"})


@settings(max_examples=15, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture,
                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
@example(data=None)
def test_every_read_answers_over_what_the_writer_applied(
    data: st.DataObject | None, stack: tuple[Config, RemoteMemoryClient]
) -> None:
    config, remote = stack
    if data is None:  # what the review found, each once
        batch = [document({"deep": nested(251)}), turn([nested(252)]),
                 document({"v": 1}, [1.0], config.embed.model_name)]
    else:
        batch = data.draw(events(config.embed.model_name))
    send(config, batch)
    read_everything(remote)
    figures.add("read_paths", len(batch))
