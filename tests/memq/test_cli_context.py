"""``memq context``: the command prints what get_context returns, with branches and scores."""

from __future__ import annotations

import subprocess

import orjson
import pytest

from memq.config import Config
from producers import MemoryClient
from tests.conftest import ROOT, memq_command
from tests.embedding_events import send_embeddings

pytestmark = pytest.mark.redis


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(memq_command(*args), capture_output=True, text=True, cwd=ROOT,
                          timeout=120, check=False)


@pytest.mark.model
def test_json_lines_carry_branches_and_scores(client: MemoryClient, config: Config) -> None:
    from memq.embedding import Embedder

    texts = ["My sister Ana lives in Lisbon."] + [f"Filler {i} about parsers." for i in range(12)]
    ids = [client.append("s1", "user", text) for text in texts]
    client.flush()
    send_embeddings(client, ids[:1], Embedder(config.embed).embed(texts[:1]))
    done = run("context", "s1", "--query", "Where does my sister Ana live?", "--json",
               "--db", config.db_path, "--model-dir", config.embed.model_dir)
    assert done.returncode == 0, done.stderr
    items = [orjson.loads(line) for line in done.stdout.splitlines()]
    assert [item["id"] for item in items] == [ids[0], *ids[-10:]]
    assert items[0]["branches"] == ["semantic"]
    assert items[0]["scores"]["semantic"] > 0.65
    assert items[0]["similarity"] == items[0]["scores"]["semantic"]
    assert items[-1]["scores"] == {"recency": 1.0}


def test_text_output_names_each_branch(client: MemoryClient, config: Config) -> None:
    client.append("s1", "user", "remember this", importance=0.9)
    client.append("s1", "assistant", "noted")
    client.flush()
    done = run("context", "s1", "--db", config.db_path)
    assert done.returncode == 0, done.stderr
    assert "[recency,importance] recency=2 importance=0.9" in done.stdout
    assert "remember this" in done.stdout
    assert "assistant" in done.stdout


def test_an_empty_session_says_so(client: MemoryClient, config: Config) -> None:
    client.append("s1", "user", "x")
    client.flush()
    done = run("context", "nobody", "--db", config.db_path)
    assert done.returncode == 0
    assert "no messages in session 'nobody'" in done.stdout


@pytest.mark.parametrize(("args", "code", "fragment"), [
    ((), 2, "the following arguments are required: SESSION"),
    (("s1", "--query", "  "), 1, "memq: error: query must not be blank"),
    (("", ), 1, "memq: error: session_id must not be empty"),
])
def test_bad_usage_and_bad_arguments(
    client: MemoryClient, config: Config, args: tuple[str, ...], code: int, fragment: str
) -> None:
    client.append("s1", "user", "x")
    client.flush()
    done = run("context", *args, "--db", config.db_path)
    assert done.returncode == code
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_database_is_an_error(tmp_path: object) -> None:
    done = run("context", "s1", "--db", "/nonexistent/memq.db")
    assert done.returncode == 1
    assert "memq: error: database not found: /nonexistent/memq.db" in done.stderr
