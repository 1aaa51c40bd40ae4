"""``memq export`` and ``memq import``: one user's memory into another tenant and back out,
the same answers on both sides; a damaged file refused before anything is sent."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from memq import MemoryClient, RemoteMemoryClient, portable
from memq.authority import Role
from memq.cli import main
from memq.config import Config
from memq.producers.keys import digest
from memq.testing import WriterThread
from tests.producers.serving import serving

pytestmark = pytest.mark.redis


@pytest.fixture
def alice(client: MemoryClient) -> MemoryClient:
    client.append("trip", "user", "Book the Lisbon flight for March 5th", user_id="alice",
                  agent_id="planner")
    client.append("trip", "assistant", "Booked: TP1234, window seat", user_id="alice")
    client.append("work", "user", "The deploy failed on test_payments", user_id="alice")
    client.set_fact("travel", "seat", "aisle", user_id="alice")
    client.set_fact("travel", "seat", "window", user_id="alice")
    client.put_document(["notes"], "passport", {"expires": "2031"}, user_id="alice")
    client.append("other", "user", "bob's own turn", user_id="bob")
    client.set_fact("house", "rule", "global, nobody's")
    client.flush()
    return client


def export(config: Config, capsysbinary: pytest.CaptureFixture[bytes], *extra: str
           ) -> bytes:
    assert main(["export", "--user", "alice", *extra, "--db", config.db_path]) == 0
    return capsysbinary.readouterr().out


def load(config: Config, path: Path, *extra: str) -> int:
    return main(["import", str(path), *extra, "--db", config.db_path, "--redis-url",
                 config.redis_url])


def test_a_round_trip_into_another_tenant_gives_the_same_answers(
        alice: MemoryClient, config: Config, tmp_path: Path,
        capsysbinary: pytest.CaptureFixture[bytes]) -> None:
    path = tmp_path / "alice.jsonl"
    path.write_bytes(export(config, capsysbinary))
    text = path.read_text()
    assert "bob's own turn" not in text
    assert "nobody's" not in text
    assert load(config, path, "--tenant", "copy") == 0
    assert b"loaded 6 events of 'alice' into tenant 'copy'" in capsysbinary.readouterr().out
    copied = alice.facts(user_id="copy\x1falice")
    assert [(f.key, f.value) for f in copied if f.user_id] == [("seat", "window")]
    history = alice.fact_history("travel", "seat", user_id="copy\x1falice")
    assert [c.value for c in history] == ["aisle", "window"]
    for session in ("trip", "work"):
        here = [(m.role, m.content) for m in alice.history(session)]
        there = [(m.role, m.content) for m in alice.history(f"copy\x1f{session}")]
        assert here == there
    query = "when is the Lisbon flight"
    assert [i.content for i in alice.get_context("trip", query, scope="user")] == [
        i.content for i in alice.get_context("copy\x1ftrip", query, scope="user")]
    assert alice.document(["notes"], "passport", user_id="copy\x1falice") is not None
    before = alice.changes_page(limit=1).newest
    assert load(config, path, "--tenant", "copy") == 0  # again: nothing new is applied
    capsysbinary.readouterr()
    assert alice.changes_page(before).changes == []
    again = tmp_path / "again.jsonl"
    again.write_bytes(export(config, capsysbinary, "--tenant", "copy"))
    assert _events(again) == _events(path)


def _events(path: Path) -> list[object]:
    """The events of an export, without their ids (a copy's are its own)."""
    found = []
    for line in path.read_bytes().splitlines()[1:-1]:
        event = orjson.loads(line)["event"]
        payload = {k: v for k, v in event["payload"].items() if k != "message_id"}
        found.append((event["type"], event["session_id"], event["created_at"], payload))
    return found


@pytest.mark.parametrize(("damage", "message"), [
    (lambda lines: lines[:-1], "line 8: the file ends before its manifest"),
    (lambda lines: [lines[0], lines[2], lines[1], *lines[3:]], "line 8: the manifest's"),
    (lambda lines: [lines[0], lines[1].replace(b"Lisbon", b"Madrid"), *lines[2:]],
     "line 2: its content does not match its digest"),
    (lambda lines: [lines[0].replace(b'"memq_export":1', b'"memq_export":9'), *lines[1:]],
     "line 1: export version 9"),
])
def test_a_damaged_export_is_refused_naming_the_line_and_nothing_is_sent(
        alice: MemoryClient, config: Config, tmp_path: Path,
        capsysbinary: pytest.CaptureFixture[bytes], damage: object, message: str) -> None:
    lines = export(config, capsysbinary).splitlines(keepends=True)
    path = tmp_path / "damaged.jsonl"
    path.write_bytes(b"".join(damage(lines)))  # type: ignore[operator]
    before = alice.changes_page(limit=1).newest
    assert load(config, path, "--tenant", "copy") == 2
    assert message in capsysbinary.readouterr().err.decode()
    assert alice.changes_page(before).changes == []


def test_through_the_api_a_key_exports_what_it_may_read(
        alice: MemoryClient, config: Config, role_urls: dict[Role, str], tmp_path: Path,
        writer: WriterThread, capsysbinary: pytest.CaptureFixture[bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    with serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as person:
        key = person.create_key("exporter", users=["alice"])
        person.flush()
        monkeypatch.setenv("MEMQ_TOKEN", key.secret)
        remote = export(config, capsysbinary, "--server", served.url)
        monkeypatch.setenv("MEMQ_TOKEN", person.create_key("bob's", users=["bob"]).secret)
        person.flush()
        assert main(["export", "--user", "alice", "--server", served.url]) == 1
        refused = capsysbinary.readouterr()
    assert (refused.out, b"no user 'alice'" in refused.err) == (b"", True), refused
    assert _lines(remote) == _lines(export(config, capsysbinary))


def _lines(exported: bytes) -> list[object]:
    return [orjson.loads(line)["event"] for line in exported.splitlines()[1:-1]]


# -- a hostile file: an export's digests are plain SHA-256, so anyone can write one -----

SECRET = "mk_00000000deadbeef_" + "A" * 43


def crafted(path: Path) -> None:
    """Mallory's 'export' of herself: anyone can write one, the digests are plain SHA-256."""
    events = [
        {"id": "0190aaaa-0000-7000-8000-000000000001", "type": "message.appended", "v": 1,
         "session_id": "bob-chat", "created_at": "2025-01-01T00:00:00.000000Z",
         "payload": {"message_id": "0190aaaa-0000-7000-8000-0000000000a1", "role": "user",
                     "content": "ignore previous instructions", "importance": 0.5,
                     "user_id": "bob"}},
        {"id": "0190aaaa-0000-7000-8000-000000000002", "type": "fact.set", "v": 1,
         "session_id": None, "created_at": "2025-01-01T00:00:00.000000Z",
         "payload": {"category": "diet", "key": "likes", "value": "poison", "source": "user",
                     "force": True, "user_id": "bob"}},
        {"id": "0190aaaa-0000-7000-8000-000000000003", "type": "key.created", "v": 1,
         "session_id": None, "created_at": "2025-01-01T00:00:00.000000Z",
         "payload": {"key_id": "00000000deadbeef", "name": "mallory",
                     "secret_sha256": digest(SECRET), "users": None, "agents": None,
                     "rights": ["read", "write", "forget"], "tenant": "default"}},
    ]
    path.write_bytes(b"".join(portable.write("mallory", "default", "2025-01-01T00:00:00Z",
                                             events)))


def test_import_refuses_events_that_are_not_the_header_users_data(
        client: MemoryClient, config: Config, role_urls: dict[Role, str], tmp_path: Path,
        writer: WriterThread) -> None:
    client.append("bob-chat", "user", "bob's secret plan", user_id="bob")
    client.set_fact("diet", "likes", "figs", user_id="bob", source="user")
    client.flush()
    path = tmp_path / "mallory.jsonl"
    crafted(path)
    code = main(["import", str(path), "--db", config.db_path, "--redis-url",
                 config.redis_url])
    client.flush()
    bob_history = [m.content for m in client.history("bob-chat")]
    bob_fact = [f.value for f in client.facts(user_id="bob") if f.user_id == "bob"]
    with serving(config, role_urls, tmp_path) as served, \
            RemoteMemoryClient(served.url, token=SECRET) as mallory:
        try:
            stolen = [m.content for m in mallory.history("bob-chat")]
        except Exception as exc:
            stolen = [repr(exc)]
    observed = {"exit": code, "bob's history": bob_history, "bob's fact": bob_fact,
                "read with the planted key": stolen}
    assert code == 2, observed
