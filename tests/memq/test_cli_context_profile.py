"""``memq context --profile``: another profile than the configured one, explained."""

from __future__ import annotations

import orjson
import pytest

from memq import MemoryClient
from memq.config import Config
from tests.conftest import run_memq, store_args

pytestmark = [pytest.mark.redis, pytest.mark.model]


def fill(client: MemoryClient) -> list[str]:
    # Sixteen: the ferry turns (3, 4) lie beyond the recent window of 10.
    texts = [f"Filler {i} about the weekly sync." for i in range(16)]
    texts[3] = "Did you book the ferry to Skye?"
    texts[4] = "Yes, for the ninth."
    ids = [client.append("s1", "user", text) for text in texts]
    client.flush()
    return ids


def test_recall_profile_items_explain_themselves(client: MemoryClient, config: Config) -> None:
    ids = fill(client)
    done = run_memq("context", "s1", "--query", "When is the ferry to Skye?", "--profile", "recall",
               "--json", *store_args(config), "--model-dir", config.embed.model_dir)
    assert done.returncode == 0, done.stderr
    items = {item["id"]: item for item in orjson.loads(done.stdout)["items"]}
    assert items[ids[3]]["branches"] == ["lexical"]  # nothing embedded: no semantic evidence
    assert items[ids[3]]["lexical"] == items[ids[3]]["scores"]["lexical"] > 0
    assert items[ids[3]]["fused"] == pytest.approx(0.5)
    assert items[ids[4]]["neighbour_of"] == ids[3]
    text = run_memq("context", "s1", "--query", "ferry", "--profile", "recall",
               *store_args(config), "--model-dir", config.embed.model_dir)
    assert f"after={ids[3]}" in text.stdout
    assert "[lexical] lexical=" in text.stdout


def test_an_unknown_profile_is_a_one_line_error(client: MemoryClient, config: Config) -> None:
    fill(client)
    done = run_memq("context", "s1", "--profile", "best", *store_args(config))
    assert done.returncode == 2  # a usage error, like any other bad option
    assert "argument --profile: unknown profile 'best' (known: recall, tri-hybrid)" \
        in done.stderr
    assert "Traceback" not in done.stderr
