"""``memq context``: the command prints what get_context returns, with branches and scores."""

from __future__ import annotations

import orjson
import pytest

from memq import MemoryClient
from memq.config import Config
from tests.conftest import run_memq, store_args
from tests.embedding_events import send_embeddings

pytestmark = pytest.mark.redis


@pytest.mark.model
def test_json_carries_branches_and_scores(client: MemoryClient, config: Config) -> None:
    from memq.embedding import Embedder

    texts = ["My sister Ana lives in Lisbon."] + [f"Filler {i} about parsers." for i in range(12)]
    ids = [client.append("s1", "user", text) for text in texts]
    client.flush()
    send_embeddings(client, ids[:1], Embedder(config.embed).embed(texts[:1]))
    done = run_memq("context", "s1", "--query", "Where does my sister Ana live?", "--json",
               "--profile", "tri-hybrid", *store_args(config), "--model-dir",
               config.embed.model_dir)
    assert done.returncode == 0, done.stderr
    shown = orjson.loads(done.stdout)  # one object, as `memq status --json` prints
    assert (shown["session_id"], shown["query"], shown["profile"]) == (
        "s1", "Where does my sister Ana live?", "tri-hybrid")
    items = shown["items"]
    assert [item["id"] for item in items] == [ids[0], *ids[-10:]]
    assert items[0]["branches"] == ["semantic"]
    assert items[0]["scores"]["semantic"] > 0.65
    assert items[0]["similarity"] == items[0]["scores"]["semantic"]
    assert items[-1]["scores"] == {"recency": 1.0}
    assert all(item["semantic_partial"] for item in items)  # the fillers have no vector
    text = run_memq("context", "s1", "--query", "Where does my sister Ana live?",
               "--profile", "tri-hybrid", *store_args(config), "--model-dir",
               config.embed.model_dir)
    assert "semantic search was partial: some turns have no vector yet" in text.stdout


def test_text_output_names_each_branch(client: MemoryClient, config: Config) -> None:
    client.append("s1", "user", "remember this", importance=0.9)
    client.append("s1", "assistant", "noted")
    client.flush()
    done = run_memq("context", "s1", *store_args(config))
    assert done.returncode == 0, done.stderr
    assert "[recency,importance] recency=2 importance=0.9" in done.stdout
    assert "remember this" in done.stdout
    assert "assistant" in done.stdout


def test_an_empty_session_says_so(client: MemoryClient, config: Config) -> None:
    client.append("s1", "user", "x")
    client.flush()
    done = run_memq("context", "nobody", *store_args(config))
    assert done.returncode == 0
    assert "no messages in session 'nobody'" in done.stdout


@pytest.mark.parametrize(("args", "code", "fragment"), [
    ((), 2, "the following arguments are required: SESSION"),
    (("s1", "--query", "  "), 2, "memq: error: query must not be blank"),
    (("", ), 2, "memq: error: session_id must not be empty"),
])
def test_bad_usage_and_bad_arguments(
    client: MemoryClient, config: Config, args: tuple[str, ...], code: int, fragment: str
) -> None:
    client.append("s1", "user", "x")
    client.flush()
    done = run_memq("context", *args, *store_args(config))
    assert done.returncode == code
    assert fragment in done.stderr
    assert "Traceback" not in done.stderr


def test_a_missing_database_is_an_error(tmp_path: object) -> None:
    done = run_memq("context", "s1", "--db", "/nonexistent/memq.db")
    assert done.returncode == 1
    assert "memq: error: database not found: /nonexistent/memq.db" in done.stderr


ESCAPES = "\x1b[2J\x1b]0;owned\x07\x9b31m\u202eevil\r"
"""Clear the screen, set the window title, a C1 CSI, a bidirectional override, a CR."""


def test_text_output_shows_escape_sequences_instead_of_running_them(
    client: MemoryClient, config: Config
) -> None:
    client.append("s1", "user", f"before {ESCAPES} after")
    client.flush()
    done = run_memq("context", "s1", *store_args(config))
    assert done.returncode == 0, done.stderr
    assert not any(ch in done.stdout for ch in "\x1b\x07\x9b\u202e\r")
    assert r"before \x1b[2J\x1b]0;owned\x07\x9b31m\u202eevil after" in done.stdout  # \r: a space
    as_json = run_memq("context", "s1", "--json", *store_args(config))
    [item] = orjson.loads(as_json.stdout)["items"]
    assert item["content"] == f"before {ESCAPES} after"  # --json keeps the text exact


@pytest.mark.model
def test_user_scope_shows_the_users_other_sessions_and_nobody_elses(
    client: MemoryClient, config: Config
) -> None:
    from memq.embedding import Embedder

    turns = [("a1", "alice", "My dog is called Biscuit."), ("b1", "bob", "My dog is called Max."),
             ("a2", "alice", "Hello again.")]
    ids = [client.append(s, "user", text, user_id=user) for s, user, text in turns]
    client.flush()
    send_embeddings(client, ids, Embedder(config.embed).embed([t for _, _, t in turns]))
    done = run_memq("context", "a2", "--query", "What is my dog called?", "--scope", "user",
               "--profile", "recall", "--json", *store_args(config),
               "--model-dir", config.embed.model_dir)
    assert done.returncode == 0, done.stderr
    shown = orjson.loads(done.stdout)
    assert shown["scope"] == "user"
    assert {item["session_id"] for item in shown["items"]} == {"a1", "a2"}
    assert "Max" not in done.stdout
    text = run_memq("context", "a2", "--query", "What is my dog called?", "--scope", "user",
               "--profile", "recall", *store_args(config), "--model-dir",
               config.embed.model_dir)
    assert f"a1/{ids[0]}" in text.stdout  # each item names its session
    bad = run_memq("context", "a2", "--scope", "everyone", *store_args(config))
    assert bad.returncode == 2
    assert "invalid choice: 'everyone'" in bad.stderr
