"""Structured logging: one line per job and per writer batch.

On a terminal the lines are ``key=value`` for people; elsewhere they are JSON objects,
one per line, for log shippers; ``MEMQ_LOG_FORMAT=text|json`` overrides that choice
(``memq up`` passes its own choice to its children, whose output is a pipe). Credentials
never reach a log line: Redis URLs are passed through :func:`redact_url` first.

Routine lines -- one per job or per writer batch, at INFO -- go to JSON logs only: a
person at a terminal would see a demo's result drown in them. They are the lines logged
with :func:`log_routine`, those logged while a job runs (inside :func:`routine`), and RQ's
own worker chatter at INFO. Warnings and errors always show.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TextIO

import orjson

from memq.printable import printable

LOG_FORMAT_ENV = "MEMQ_LOG_FORMAT"
"""``text`` or ``json``: overrides the choice made from whether stderr is a terminal."""

_CREDENTIALS = re.compile(
    r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#]*:)"  # any scheme, any case; the user
    r".*"  # the password: greedy, so a "/", "@", ":" or "?" in it does not end it early
    r"(?P<tail>@(?:[A-Za-z0-9._~%-]+|\[[0-9A-Fa-f:.%]+\])?(?::\d*)?(?:[/?#].*)?)",  # host on
    re.DOTALL,
)

ROUTINE_LOGGERS = frozenset({"rq.worker"})
"""Loggers whose INFO lines are all routine (RQ logs several lines for every job)."""

_in_routine: ContextVar[bool] = ContextVar("memq_log_routine", default=False)

_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``redis://user:secret@host`` -> ``redis://user:***@host``; ``?password=`` too.

    People paste passwords into URLs unencoded, so the password runs to the *last* ``@``
    that is followed by a host: a ``/``, ``@`` or ``?`` in it does not end the redaction.
    A URL without credentials but with an ``@`` in its query may lose a little more than
    its password; a password is never shown.
    """
    url = _CREDENTIALS.sub(lambda m: f"{m['head']}***{m['tail']}", url, count=1)
    return _QUERY_PASSWORD.sub(lambda m: f"{m['key']}***", url)


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        line.update(getattr(record, "fields", {}))
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        try:
            return orjson.dumps(line, default=str).decode()
        except TypeError:  # a lone surrogate a caller sent, which is no UTF-8: shown escaped
            return orjson.dumps({k: printable(str(v)) for k, v in line.items()}).decode()


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {})
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        text = f"{record.levelname.lower():7} {record.name}: {record.getMessage()} {extra}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text.rstrip()


def _quiet_routine(record: logging.LogRecord) -> bool:
    """The text handler's filter: False (drop) for a routine INFO line."""
    if record.levelno > logging.INFO:
        return True
    routine = getattr(record, "routine", False) or _in_routine.get()
    return not (routine or record.name in ROUTINE_LOGGERS)


class _StderrHandler(logging.StreamHandler[TextIO]):
    """Writes to whatever ``sys.stderr`` is when a line is logged, not what it was at setup:
    a process that swaps it (a test runner capturing output, a daemon redirecting it) must
    not leave a writer thread logging into a closed stream."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _value: Any) -> None:
        pass


def setup(level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Configure the root logger once per process."""
    if json_lines is None:
        chosen = os.environ.get(LOG_FORMAT_ENV, "").lower()
        json_lines = chosen == "json" if chosen in ("json", "text") else not sys.stderr.isatty()
    handler = _StderrHandler()
    handler.setFormatter(_JsonFormatter() if json_lines else _TextFormatter())
    if not json_lines:
        handler.addFilter(_quiet_routine)
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


@contextmanager
def routine() -> Iterator[None]:
    """Every line logged inside (in this thread or task) is routine: a job's own lines."""
    token = _in_routine.set(True)
    try:
        yield
    finally:
        _in_routine.reset(token)


def log(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``msg`` with structured ``fields``."""
    logger.log(level, msg, extra={"fields": fields})


def log_routine(logger: logging.Logger, msg: str, level: int = logging.INFO,
                **fields: Any) -> None:
    """Like :func:`log`, for a line of every job or batch: at INFO, for JSON logs only."""
    logger.log(level, msg, extra={"fields": fields, "routine": True})
