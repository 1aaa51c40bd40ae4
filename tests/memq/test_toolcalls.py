"""The macro learning rule's pure parts: patterns, templates, confidence."""

from __future__ import annotations

import re

import orjson
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memq.toolcalls import (
    LONG_TEXT,
    TEXT_CACHE,
    args_pattern,
    confidence,
    fill_template,
    generalise_text,
    next_args_template,
    scrub_template,
    shrink_args,
)


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("git status", "git status"),
        ("git status -s", "git status -s"),
        ("git diff --stat", "git diff --stat"),
        ('git commit -m "fix the parser"', "git commit -m <str>"),
        ("git commit -m 'wip'", "git commit -m <str>"),
        ("git log --format='%H %s' -n 5", "git log --format=<str> -n <num>"),
        ("git log --max-count=20", "git log --max-count=<num>"),
        ("git show 3f2a9c1", "git show <hex>"),
        ("git checkout main", "git checkout main"),
        ("cat src/app.py", "cat <path>"),
        ("cat README.md", "cat <path>"),
        ("ls -la ~/projects", "ls -la <path>"),
        ("ls .", "ls ."),
        ("ls -1", "ls -1"),
        ("cat .env", "cat <path>"),
        ("head -n 20 notes.txt", "head -n <num> <path>"),
        ("curl -s https://example.org/a?b=1", "curl -s <url>"),
        ("rm 550e8400-e29b-41d4-a716-446655440000", "rm <uuid>"),
        ("sleep 1.5", "sleep <num>"),
        ("python3 -V", "python3 -V"),
        ("bob.private@example.com", "<email>"),
        ("mail -s hello ops+alerts@corp.example.org", "mail -s hello <email>"),
        ("  spaced   out  ", "spaced out"),
        ("it's free text", "<text>"),  # an unbalanced quote is not a command line
        ("x" * (LONG_TEXT + 1), "<text>"),
        ("", ""),
    ],
)
def test_generalise_text(text: str, pattern: str) -> None:
    assert generalise_text(text) == pattern


def test_args_pattern_is_canonical_and_keeps_literals() -> None:
    a = args_pattern({"path": "/a/b.py", "line": 3, "recursive": True, "mode": "w", "x": None})
    b = args_pattern({"x": None, "mode": "w", "recursive": True, "line": 99, "path": "c.txt"})
    assert a == b == '{"line":"<num>","mode":"w","path":"<path>","recursive":true,"x":null}'
    assert args_pattern({"mode": "r"}) != args_pattern({"mode": "w"})
    assert args_pattern({"recursive": False}) != args_pattern({"recursive": True})


def test_args_pattern_lists_of_like_items_match_any_length() -> None:
    assert args_pattern({"files": ["a.py"]}) == args_pattern({"files": ["b.py", "c/d.py"]})
    assert args_pattern({"files": ["a.py", "-v"]}) == '{"files":["<path>","-v"]}'
    assert args_pattern({"files": []}) == '{"files":[]}'


def test_args_pattern_bounds_nesting() -> None:
    deep: dict[str, object] = {"v": 1}
    for _ in range(100):
        deep = {"n": deep}
    assert "<deep>" in args_pattern(deep)


def test_next_args_template_refers_to_the_trigger_arguments() -> None:
    template = next_args_template(
        {"path": "src/app.py", "old": "a", "new": "y" * 500, "files": ["src/app.py"]},
        {"path": "src/app.py", "limit": 10},
    )
    assert template == '{"files":["${path}"],"new":"<text>","old":"a","path":"${path}"}'
    filled = fill_template(template, {"path": "lib/x.py"})
    assert filled == {"files": ["lib/x.py"], "new": "<text>", "old": "a", "path": "lib/x.py"}


def test_template_references_nested_values_and_keeps_unknown_ones() -> None:
    template = next_args_template({"target": "abc"}, {"opts": {"names": ["zz", "abc"]}})
    assert template == '{"target":"${opts.names.1}"}'
    assert fill_template(template, {"opts": {"names": ["q", "r"]}}) == {"target": "r"}
    assert fill_template(template, {"opts": {"names": ["q"]}}) == {"target": "${opts.names.1}"}
    assert fill_template(template, {}) == {"target": "${opts.names.1}"}


def test_single_characters_are_not_references() -> None:
    assert next_args_template({"flag": "a"}, {"other": "a"}) == '{"flag":"a"}'


def test_shrink_args_replaces_only_long_text() -> None:
    args = {"path": "a.py", "content": "x" * 5000, "n": 3, "list": ["y" * 300, "ok"]}
    assert shrink_args(args) == {"path": "a.py", "content": "<text>", "n": 3,
                                 "list": ["<text>", "ok"]}
    assert args_pattern(shrink_args(args)) == args_pattern(args)


@pytest.mark.parametrize(
    ("hits", "total", "expected"),
    [(0, 0, 0.25), (1, 1, 0.4), (2, 2, 0.5), (10, 10, 11 / 14), (5, 10, 6 / 14), (0, 10, 1 / 14)],
)
def test_confidence_is_smoothed(hits: int, total: int, expected: float) -> None:
    assert confidence(hits, total) == pytest.approx(expected)


def test_confidence_grows_with_consistent_evidence_towards_the_frequency() -> None:
    values = [confidence(n, n) for n in range(1, 200)]
    assert values == sorted(values)
    assert values[-1] > 0.98
    assert confidence(500, 1000) == pytest.approx(0.5, abs=0.002)


# -- no value of one session reaches another's suggestion; no secret is kept ---------------

TOKEN = "abc123def456ghi789"
"""The random part of a credential: it must not appear in any pattern or template."""


@pytest.mark.parametrize(
    "args",
    [
        {"headers": {"Authorization": f"Bearer {TOKEN}"}},
        {"command": f"curl -H 'Authorization: Bearer {TOKEN}' https://api.example.org"},
        {"command": f"curl -u admin:{TOKEN} https://api.example.org"},
        {"command": f"deploy --token {TOKEN}"},
        {"command": f"deploy --token={TOKEN}"},
        {"command": f"mysql --password={TOKEN} -u root"},
        {"command": f"Bearer {TOKEN}"},
        {"url": f"https://me:{TOKEN}@git.example.com/repo.git"},
        {"env": {"API_KEY": TOKEN}},
        {"password": TOKEN},
        {"auth": {"user": "me", "pass": TOKEN}},
        {"cmd": f"export OPENAI_API_KEY=sk-{TOKEN}"},
        {"key": f"ghp_{TOKEN}abcdefgh"},
        {"args": ["--api-key", TOKEN]},
        {"pin": 4321},
    ],
)
def test_a_credential_is_never_in_a_pattern_or_a_template(args: dict[str, object]) -> None:
    for kept in (args_pattern(args), next_args_template(args, {}), str(shrink_args(args))):
        assert TOKEN not in kept
        assert "4321" not in kept
        assert "<secret>" in kept


def test_a_reference_to_the_callers_own_secret_is_kept_as_a_reference() -> None:
    token = f"Bearer {TOKEN}"
    template = next_args_template({"auth": token, "q": "x"}, {"auth": token})
    assert template == '{"auth":"${auth}","q":"x"}'
    assert fill_template(template, {"auth": "Bearer mine123456"})["auth"] == "Bearer mine123456"


def test_a_template_keeps_shapes_not_values() -> None:
    template = next_args_template(
        {"old": "x = 1", "new": "total = 42", "limit": 10, "ratio": 0.5, "path": "/home/ann/a.py",
         "msg": "git commit -m 'Ann fixed it'", "flag": True, "none": None, "ids": ["a1", "b2"]},
        {"unrelated": "value"},
    )
    assert orjson.loads(template) == {
        "old": "x = <num>", "new": "total = <num>", "limit": "<num>", "ratio": "<num>",
        "path": "<path>", "msg": "git commit -m <str>", "flag": True, "none": None,
        "ids": ["a1", "b2"],
    }


def test_scrub_template_hides_credentials_and_keeps_the_rest() -> None:
    assert scrub_template('{"path":"$0.path"}') == '{"path":"$0.path"}'
    assert scrub_template("*") == "*"
    scrubbed = scrub_template(f'{{"headers": {{"Authorization": "Bearer {TOKEN}"}}, "n": 1}}')
    assert orjson.loads(scrubbed) == {"headers": {"Authorization": "<secret>"}, "n": 1}
    assert scrub_template(f"not json, but Bearer {TOKEN}") == "<secret>"


CREDENTIALS = st.builds(
    lambda shape, token: shape.format(token),
    st.sampled_from(["Bearer {}", "Basic {}=", "sk-{}", "ghp_{}xxxxxxxx", "xoxb-{}",
                     "https://u:{}@h.example/x", "PASSWORD={}", "--token={}", "token: {}"]),
    st.text("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789", min_size=20,
            max_size=40).filter(lambda t: any(c.isdigit() for c in t)),
)
PLAIN = st.one_of(st.text(max_size=20), st.integers(-(2**63), 2**63 - 1), st.booleans(),
                  st.none(),
                  st.sampled_from(["git status", "a.py", "x = 1", "-v"]))
NAMES = st.sampled_from(["command", "path", "q", "headers", "opts", "args", "env", "body"])


@st.composite
def args_with_a_credential(draw: st.DrawFn) -> tuple[dict[str, object], str]:
    """Arguments with one credential hidden somewhere in them, and its random part."""
    credential = draw(CREDENTIALS)
    token = max(re.findall(r"[A-Za-z0-9]{20,}", credential), key=len)
    inner: object = credential
    if draw(st.booleans()):  # inside a command line
        inner = f"{draw(st.sampled_from(['curl -H', 'echo', 'deploy']))} {credential}"
    for _ in range(draw(st.integers(0, 3))):  # nested
        inner = draw(st.sampled_from([lambda v: [v], lambda v: {draw(NAMES): v}]))(inner)
    args = draw(st.dictionaries(NAMES, PLAIN, max_size=3))
    assume(token not in str(args))  # the credential is the only place the token is
    args[draw(NAMES)] = inner
    return args, token


@settings(max_examples=400, derandomize=True, database=None)
@given(case=args_with_a_credential(), trigger=st.dictionaries(NAMES, PLAIN, max_size=3))
def test_no_generated_credential_survives_learning(
    case: tuple[dict[str, object], str], trigger: dict[str, object]
) -> None:
    args, token = case
    assert token not in args_pattern(args)
    assert token not in next_args_template(args, trigger)
    assert token not in orjson.dumps(shrink_args(args)).decode()


@settings(max_examples=300, derandomize=True, database=None)
@given(args=st.dictionaries(NAMES, st.one_of(st.integers(), st.floats(allow_nan=False),
                                             st.text(min_size=2, max_size=30)), max_size=4),
       trigger=st.dictionaries(NAMES, st.text(max_size=10), max_size=3))
def test_a_template_holds_no_number_and_no_quoted_text_of_its_call(
    args: dict[str, object], trigger: dict[str, object]
) -> None:
    """What another session gets: references, placeholders and bare words only."""
    template = orjson.loads(next_args_template(args, trigger))
    for name, value in args.items():
        shown = template[name]
        if isinstance(value, (int, float)):
            assert shown == "<num>"
        elif isinstance(value, str) and value in trigger.values() and len(value) >= 2:
            assert shown.startswith("${")
        elif isinstance(value, str):
            assert shown == generalise_text(value) or shown == "<secret>"
            assert "'" not in shown
            assert '"' not in shown


@settings(max_examples=300)
@given(st.lists(st.text(max_size=LONG_TEXT + 20), min_size=1, max_size=30))
def test_a_remembered_pattern_is_the_pattern(texts: list[str]) -> None:
    # Remembered or not (the cache holds the last TEXT_CACHE strings), the same answer.
    for text in texts * 2:
        assert generalise_text(text) == generalise_text.__wrapped__(text)
    assert generalise_text.cache_info().maxsize == TEXT_CACHE
