"""The macro learning rule's pure parts: patterns, templates, confidence."""

from __future__ import annotations

import pytest

from memq.toolcalls import (
    LONG_TEXT,
    args_pattern,
    confidence,
    fill_template,
    generalise_text,
    next_args_template,
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
