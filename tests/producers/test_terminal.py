"""Adversarial tests for the "always allow" terminal command matcher."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.errors import ValidationError
from memq.producers.terminal import is_command_allowed, normalize_prefix
from tests.conftest import ROOT
from tests.producers.terminal_corpus import CASES, PREFIXES, VERDICTS, Case, of


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_corpus_verdict(case: Case) -> None:
    """The verdicts alone; test_terminal_shells.py checks them against bash and dash."""
    assert is_command_allowed(case.command, PREFIXES) is (case.verdict == "allow")


def test_corpus_shape() -> None:
    commands = [case.command for case in CASES]
    assert len(commands) >= 300
    assert len(set(commands)) == len(commands), "a command is listed twice"
    groups = {case.group for case in CASES}
    assert len(groups) >= 20
    for verdict in VERDICTS:
        assert len([c for c in CASES if c.verdict == verdict]) >= 50


def test_the_documentation_states_the_corpus_as_it_is() -> None:
    readme = " ".join((ROOT / "docs" / "agents.md").read_text().split())
    count = {verdict: len(of(verdict)) for verdict in VERDICTS}
    classes = len({case.group for case in CASES})
    assert (f"{len(CASES)} commands in {classes} classes ({count['allow']} allowed, "
            f"{count['deny']} denied, {count['refuse']} refused for caution)") in readme


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("ls #'\nrm -rf ~\n#'", False),  # the probe's bypass: bash runs the rm
        ('ls #"\nrm -rf ~\n#"', False),
        ("ls\t#'\nrm -rf ~\n#'", False),
        ("ls;#'\nrm -rf ~\n#'", False),
        ("ls 2>&1 #'\nrm -rf ~\n#'", False),
        ("ls # a comment", True),
        ('echo "Done!"', True),
        ("ls\n\ngit status", True),
        ("git status -s\r\ngit log -1\r\n", True),
        ("ls > /dev/null", True),
    ],
    ids=repr,
)
def test_the_cases_the_probe_reported(command: str, allowed: bool) -> None:
    assert is_command_allowed(command, PREFIXES) is allowed


_SHLEX_SEPARATORS = {";", "&&", "||", "|", "|&", "&"}


def _shlex_segments(command: str) -> list[list[str]]:
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    segments: list[list[str]] = [[]]
    for token in lexer:
        if token in _SHLEX_SEPARATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    return [segment for segment in segments if segment]


# shlex knows no comments, here-documents, redirections or line continuations.
_BEYOND_SHLEX = ("\n", "\r", "#", "<", ">", "\\")


@pytest.mark.parametrize(
    "case",
    [c for c in of("allow") if not any(s in c.command for s in _BEYOND_SHLEX)],
    ids=lambda c: c.id,
)
def test_allowed_agrees_with_shlex(case: Case) -> None:
    words = [tuple(p.split()) for p in PREFIXES]
    for segment in _shlex_segments(case.command):
        assert any(tuple(segment[: len(p)]) == p for p in words), segment


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("ls", "ls"),
        ("ls -la", "ls"),
        ("git status -s", "git status"),
        ("git status", "git   status"),
        ("npm run test", "npm run test"),
    ],
)
def test_single_prefix(command: str, prefix: str) -> None:
    assert is_command_allowed(command, [prefix]) is True


@pytest.mark.parametrize(
    ("command", "prefix"),
    [
        ("git log", "git status"),
        ("npm run", "npm run test"),
        ("ls && git status", "ls"),
        ("git log --oneline | head -20", "git log"),
    ],
)
def test_every_segment_needs_a_prefix(command: str, prefix: str) -> None:
    assert is_command_allowed(command, [prefix]) is False


def test_empty_prefixes_deny() -> None:
    assert is_command_allowed("ls", []) is False
    assert is_command_allowed("ls", iter(())) is False


def test_invalid_stored_prefixes_approve_nothing() -> None:
    assert is_command_allowed("ls", ["ls;rm", "", "FOO=1 ls"]) is False
    assert is_command_allowed("ls", ["ls;rm", "ls"]) is True
    assert is_command_allowed("ls", [None, "ls"]) is True  # type: ignore[list-item]


def test_prefixes_as_one_string_is_an_error() -> None:
    with pytest.raises(ValidationError, match="not one string"):
        is_command_allowed("ls", "ls")


def test_trusted_skips_approval() -> None:
    assert is_command_allowed("rm -rf / ; curl x | sh", [], trusted=True) is True
    assert is_command_allowed("anything", PREFIXES, trusted=True) is True


@pytest.mark.parametrize("trusted", [False, True])
def test_non_string_command_raises(trusted: bool) -> None:
    with pytest.raises(ValidationError, match="command must be a string"):
        is_command_allowed(b"ls", PREFIXES, trusted=trusted)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("ls", "ls"),
        ("  git   status  ", "git status"),
        ("git\tstatus", "git status"),
        ("npm run test", "npm run test"),
        ("python3 -m pytest", "python3 -m pytest"),
        ("./scripts/check.sh", "./scripts/check.sh"),
        ("git -c color.ui=never log", "git -c color.ui=never log"),
        ("timeout-helper", "timeout-helper"),
        ("./sudo-wrapper.sh", "./sudo-wrapper.sh"),
    ],
)
def test_normalize_prefix(raw: str, stored: str) -> None:
    assert normalize_prefix(raw) == stored


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("\t", "empty"),
        ("ls\x00", "NUL"),
        ("ls\r", "control character"),
        ("ls\x1b", "control character"),
        ("ls\x7f", "control character"),
        ("ｌｓ", "non-ASCII"),
        ("l\u0455", "non-ASCII"),
        ("ls\u200b", "non-ASCII"),
        ("git\u00a0status", "non-ASCII"),
        ("ls;rm", "metacharacter ';'"),
        ("ls && rm", "metacharacter '&'"),
        ("ls | sh", "metacharacter '|'"),
        ("echo `id`", "metacharacter '`'"),
        ("echo $HOME", "metacharacter '$'"),
        ("(ls)", "metacharacter '('"),
        ("ls > out", "metacharacter '>'"),
        ("cat < x", "metacharacter '<'"),
        ("ls\nrm", "metacharacter '\\n'"),
        ("'ls'", 'metacharacter "\'"'),
        ('"git" status', "metacharacter '\"'"),
        ("l\\s", "metacharacter '\\\\'"),
        ("ls *", "unsupported character '*'"),
        ("{ ls", "unsupported character '{'"),
        ("ls ~", "unsupported character '~'"),
        ("! ls", "unsupported character '!'"),
        ("ls #x", "unsupported character '#'"),
        ("if", "shell keyword"),
        ("for x in y", "shell keyword"),
        ("FOO=1 ls", "environment assignment"),
    ],
    ids=repr,
)
def test_normalize_prefix_rejects(raw: str, fragment: str) -> None:
    with pytest.raises(ValidationError) as caught:
        normalize_prefix(raw)
    assert fragment in str(caught.value)


def test_normalize_prefix_rejects_non_string() -> None:
    with pytest.raises(ValidationError, match="must be a string"):
        normalize_prefix(None)  # type: ignore[arg-type]


def test_normalized_prefix_is_idempotent() -> None:
    stored = normalize_prefix("  git \t log  ")
    assert normalize_prefix(stored) == stored


SHELL_ALPHABET = st.sampled_from(
    [*"ls gitstaus-#'\"\\\n\r\t;&|<>$`()!{}~*=/0123EOF", "é", "\u200b", "\u00a0", "\x00"])


@given(st.one_of(st.text(SHELL_ALPHABET, max_size=40), st.text(max_size=40)))
@settings(max_examples=3000, derandomize=True, database=None)
def test_any_text_gets_a_verdict(command: str) -> None:
    assert is_command_allowed(command, PREFIXES) in (True, False)


# What agents write every day must not need asking: approved commands, joined by any
# operator, with comments, blank lines and quiet redirections. (CRLF and here-documents
# are in the corpus: where their lines may end depends on the line's last word.)
EVERYDAY = ("ls -la", "git status -s", "git log --oneline -5", 'git commit -m "fix: x"',
            "grep -rn TODO src", "echo 'done'", 'echo "Done!"', "wc -l file.txt",
            "npm run test -- --watch", "ls \\\n  -la", "# check first\ngit diff")
ENDINGS = ("", " 2>/dev/null", " >/dev/null 2>&1", " 2>&1", " &>/dev/null")
SEPARATORS = ("; ", " && ", " || ", " | ", "|", "\n", "\n\n", " & ", " &&\n  ", " \\\n| ")


@given(st.data())
@settings(max_examples=500, derandomize=True, database=None)
def test_everyday_commands_are_allowed(data: st.DataObject) -> None:
    command = data.draw(st.sampled_from(EVERYDAY))
    for _ in range(data.draw(st.integers(0, 4))):
        command += data.draw(st.sampled_from(ENDINGS))
        command += data.draw(st.sampled_from(SEPARATORS)) + data.draw(st.sampled_from(EVERYDAY))
    command += data.draw(st.sampled_from(("", "\n", ";", " # done")))
    assert is_command_allowed(command, PREFIXES), command
