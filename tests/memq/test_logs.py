"""Credentials never reach a log line: :func:`memq.logs.redact_url`."""

from __future__ import annotations

import io
import logging
import sys

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memq import logs
from memq.logs import redact_url
from memq.printable import printable

REDACTED = {
    # what the outside probe found: an upper-case scheme, an unencoded "/" in the password
    "REDIS://:pw@h:1/0": "REDIS://:***@h:1/0",
    "Rediss://user:pw@h:1/0": "Rediss://user:***@h:1/0",
    "redis://:pa/ss@h:1/0": "redis://:***@h:1/0",
    "redis://:a/b/c@h": "redis://:***@h",
    # and their neighbours
    "redis://:pa?ss@h/0": "redis://:***@h/0",
    "redis://user:p/a@s:s?x@h:1/0?db=1&password=pw": "redis://user:***@h:1/0?db=1&password=***",
    "redis://me@corp:pw@[::1]:6379/0": "redis://me@corp:***@[::1]:6379/0",
    "unix://:pw@/run/redis.sock?db=0": "unix://:***@/run/redis.sock?db=0",
    "redis://h:1/0?Password=pw": "redis://h:1/0?Password=***",
    # nothing to hide
    "redis://user@h/0": "redis://user@h/0",
    "redis://h:1/0": "redis://h:1/0",
    "not a url": "not a url",
}


@pytest.mark.parametrize("url", sorted(REDACTED))
def test_redact_url(url: str) -> None:
    assert redact_url(url) == REDACTED[url]


SCHEMES = st.sampled_from(["redis", "rediss", "REDIS", "Rediss", "unix", "redis+sentinel"])
HOSTS = st.sampled_from(["h", "127.0.0.1", "redis.example.com", "[::1]", ""])
USERS = st.text(st.characters(blacklist_characters=":/?#\n", codec="ascii"), max_size=8)
PASSWORDS = st.text(st.characters(codec="utf-8", blacklist_categories=["Cs"]), min_size=4,
                    max_size=24)
TAILS = st.sampled_from(["", ":6379", ":6379/0", "/0", "/run/redis.sock", "/0?db=1",
                         "/0?ssl_ca_certs=/a/ca.pem&socket_timeout=5", "?db=0#frag"])


@settings(max_examples=300, derandomize=True, database=None)
@given(scheme=SCHEMES, user=USERS, password=PASSWORDS, host=HOSTS, tail=TAILS)
@example(scheme="REDIS", user="", password="secret", host="h", tail="/0")
@example(scheme="redis", user="", password="se/cr@et", host="h", tail=":1/0")
def test_a_password_never_shows_whatever_it_holds(
    scheme: str, user: str, password: str, host: str, tail: str
) -> None:
    url = f"{scheme}://{user}:{password}@{host}{tail}"
    # All of the password goes, the rest stays: host, database and options still show.
    assert redact_url(url) == f"{scheme}://{user}:***@{host}{tail}"


def test_lines_go_to_the_stderr_of_the_moment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream swapped and closed after setup (a test runner's capture) is never written."""
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    logs.setup(json_lines=False)
    first.close()
    now = io.StringIO()
    monkeypatch.setattr(sys, "stderr", now)
    logging.getLogger("memq.test").warning("still heard")
    assert now.getvalue() == "warning memq.test: still heard\n"


@given(text=st.text(alphabet=st.characters(exclude_categories=()), max_size=20))
def test_a_json_line_is_written_whatever_text_a_caller_sent(text: str) -> None:
    """A lone surrogate (no UTF-8) in a message or a field once left Python's "Logging
    error" dump in place of the line; the line now shows it escaped."""
    record = logging.LogRecord("memq.test", logging.WARNING, __file__, 1, "refused %s",
                               (text,), None)
    record.fields = {"detail": text}
    line = orjson.loads(logs._JsonFormatter().format(record))
    assert line["level"] == "warning"
    assert line["detail"] in (text, printable(text))
