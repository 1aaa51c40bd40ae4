"""Approvals never start with a program that runs other commands (memq.approvals.RUNNERS)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq.approvals import RUNNERS, normalize_prefix
from memq.clock import uuid7
from memq.errors import ValidationError
from memq.events import EventType, rules
from memq.producers.terminal import is_command_allowed
from tests.producers.terminal_corpus import CASES, PREFIXES, Case
from tests.store.eventlog import EventLog, at, event

WORD = st.from_regex(r"[A-Za-z0-9_./:@+,-]{1,12}", fullmatch=True)
PLAIN_RUNNERS = sorted(r for r in RUNNERS if "[" not in r)


@given(st.sampled_from(PLAIN_RUNNERS), st.sampled_from(["", "/usr/bin/", "/bin/", "./"]),
       st.lists(WORD, max_size=4))
@settings(max_examples=400, derandomize=True, database=None)
def test_a_runner_first_is_refused(runner: str, path: str, rest: list[str]) -> None:
    """However long the approval: the words after a runner are its options and the start
    of what it runs (`nice -n 5 git` approves `nice -n 5 git` plus anything), and the
    matcher checks approvals word for word, never the command a runner wraps."""
    prefix = " ".join([path + runner, *rest])
    with pytest.raises(ValidationError, match="can run other commands"):
        normalize_prefix(prefix)
    assert rules.prefix(prefix) is not None  # the writer refuses the event too


@given(st.lists(WORD, min_size=1, max_size=4))
@settings(max_examples=400, derandomize=True, database=None)
def test_other_words_are_accepted(words: list[str]) -> None:
    program = words[0].rsplit("/", 1)[-1] or words[0]
    if program in RUNNERS or words[0] in RUNNERS:
        return
    assert normalize_prefix(" ".join(words)) == " ".join(words)


def test_the_corpus_prefixes_are_usable() -> None:
    for prefix in PREFIXES:
        assert normalize_prefix(prefix) == prefix


WRAPPED = [case for case in CASES if case.group == "assignments_and_wrappers"
           and case.command.split()[0].isalpha()]


@pytest.mark.parametrize("case", WRAPPED, ids=lambda c: c.id)
def test_the_corpus_wrappers_cannot_be_approved(case: Case) -> None:
    """Each wrapper the corpus shows to run something cannot become an approval, alone or
    with the words that follow it; so the corpus's bypass stays denied."""
    words = case.command.split()
    for length in range(1, min(len(words), 3) + 1):
        with pytest.raises(ValidationError):
            normalize_prefix(" ".join(words[:length]))
    assert not is_command_allowed(case.command, [*PREFIXES, words[0]])


def test_wrappers_in_the_corpus_are_covered() -> None:
    assert {"env", "sudo", "exec", "eval", "xargs", "sh", "bash", "time", "command",
            "builtin", "nohup", "trap", "source"} <= {c.command.split()[0] for c in WRAPPED}


def test_a_stored_runner_approval_approves_nothing() -> None:
    """An approval stored before this check (an old database) is unusable, not a bypass."""
    assert not is_command_allowed("sudo rm -rf /", ["sudo"])
    assert not is_command_allowed("printf -v 'a[$(id)]' x", ["printf"])


def test_an_approval_logged_before_the_rule_replays_and_can_be_revoked(tmp_path: Path) -> None:
    """A database where `sudo` was approved before RUNNERS existed: the log still rebuilds,
    the approval approves nothing, and the person can revoke it."""
    log = EventLog(tmp_path)
    try:
        log.conn.execute(
            """INSERT INTO events (event_id, type, version, session_id, created_at, payload,
                   recorded_at) VALUES (?, 'prefix.allowed', 1, NULL, ?, '{"prefix":"sudo"}', ?)""",
            (uuid7(), at(0), at(0)))
        log.conn.execute("INSERT INTO terminal_allowed_prefixes (prefix, created_at) "
                         "VALUES ('sudo', ?)", (at(0),))
        log.assert_rebuild_equal()
        assert not is_command_allowed("sudo rm -rf /", ["sudo"])
        with pytest.raises(ValidationError):
            normalize_prefix("sudo")  # never approved again
        assert normalize_prefix("sudo", runners_ok=True) == "sudo"
        log.send(event(EventType.PREFIX_REVOKED, {"prefix": "sudo"}))
        assert log.rejections() == []
        assert log.rows("SELECT * FROM terminal_allowed_prefixes") == []
        log.send(event(EventType.PREFIX_ALLOWED, {"prefix": "sudo"}))
        assert "can run other commands" in log.rejections()[0]
    finally:
        log.close()


@pytest.mark.parametrize("command", [
    "compgen -C 'rm -rf /' x", "setpriv --reuid=0 sh", "prlimit --nofile=1 rm x",
    "tmux new-session -d rm x", "screen -dm rm x", "gdb -batch -ex 'shell rm x'",
    "expect -c 'spawn rm x'", "at now", "bwrap --bind / / rm x", "docker run alpine rm x",
    "perf record rm x", "watchexec rm x", "sg root -c 'rm x'", "busybox rm x",
])
def test_wrappers_named_by_the_principle_cannot_be_approved(command: str) -> None:
    """Programs whose arguments name a program to start (the principle in RUNNERS): the
    ones an outside review found, and their families."""
    first = command.split()[0]
    with pytest.raises(ValidationError, match="which can run other commands"):
        normalize_prefix(first)
    assert not is_command_allowed(command, [*PREFIXES, first])


def test_an_approval_is_one_tenants_and_rebuilds_so(tmp_path: Path) -> None:
    log = EventLog(tmp_path)
    try:
        log.send(event(EventType.PREFIX_ALLOWED, {"prefix": "git status"}),
                 event(EventType.PREFIX_ALLOWED, {"prefix": "git status", "tenant": "acme"}),
                 event(EventType.PREFIX_ALLOWED, {"prefix": "ls", "tenant": "acme"}))
        log.send(event(EventType.PREFIX_REVOKED, {"prefix": "git status", "tenant": "acme"}))
        assert log.rows("SELECT tenant, prefix FROM terminal_allowed_prefixes "
                        "ORDER BY 1, 2") == [("acme", "ls"), ("default", "git status")]
        log.assert_rebuild_equal()
        log.send(event(EventType.PREFIX_ALLOWED, {"prefix": "ls", "tenant": "Not Acme"}))
        assert "tenant" in log.rejections()[-1]
    finally:
        log.close()
