"""A client reading another database than the writer's is told so, on its first read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from memq.config import Config
from memq.errors import DatabaseMismatch
from memq.producers import identity as client_identity
from memq.store import schema
from memq.testing import WriterThread

pytestmark = pytest.mark.redis


def elsewhere(config: Config, tmp_path: Path, *, create: bool) -> Config:
    path = tmp_path / "elsewhere" / "memq.db"
    if create:
        schema.open_migrated(path)[0].close()
    return config.replace(db_path=str(path))


@pytest.mark.parametrize("create", [True, False], ids=["another database", "no database"])
def test_a_client_of_another_database_is_told_on_its_first_read(
    make_client: Any, config: Config, writer: WriterThread, tmp_path: Path, create: bool
) -> None:
    assert writer.writer is not None
    theirs = writer.writer.claim.database_id
    with make_client(config=elsewhere(config, tmp_path, create=create)) as client:
        client.append("s", "user", "sent to the writer's database")  # sending reads nothing
        with pytest.raises(DatabaseMismatch) as caught:
            client.get_context("s")
        message = str(caught.value)
        assert f"writes database {theirs} ({Path(config.db_path).resolve()}" in message
        assert str(tmp_path / "elsewhere" / "memq.db") in message
        assert ("which does not exist" in message) != create
        for read in (lambda: client.history("s"), client.facts, client.tasks):
            with pytest.raises(DatabaseMismatch):
                read()


def test_the_right_database_is_checked_once(
    make_client: Any, config: Config, writer: WriterThread, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = []
    real = client_identity.DatabaseVet._decide
    monkeypatch.setattr(client_identity.DatabaseVet, "_decide",
                        lambda check, claim, conn: asked.append(1) or real(check, claim, conn))
    with make_client(config=config) as client:
        client.append("s", "user", "hello")
        client.flush()
        for _ in range(5):
            client.get_context("s")
            client.facts()
    assert asked == [1]


def test_reads_go_on_while_nothing_can_be_told(
    make_client: Any, config: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # No writer has claimed this Redis yet, and then no Redis at all: reads still answer.
    local = elsewhere(config, tmp_path, create=True)
    with make_client(config=local) as client:
        assert client.history("s") == []
        assert client.history("s") == []
    warned = [r for r in caplog.records if "no memq writer has claimed" in r.getMessage()]
    assert len(warned) == 1  # said once, not on every read
    gone = local.replace(redis_url="redis://127.0.0.1:9/0")
    with make_client(config=gone) as client:
        assert client.get_context("s") == []
        assert client.facts() == []
