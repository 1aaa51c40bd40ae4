"""Structured logging: one line per job and per writer batch.

On a terminal the lines are ``key=value`` for people; elsewhere they are JSON objects,
one per line, for log shippers; ``MEMQ_LOG_FORMAT=text|json`` overrides that choice
(``memq up`` passes its own choice to its children, whose output is a pipe). Credentials
never reach a log line: Redis URLs are passed through :func:`redact_url` first.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from typing import Any

import orjson

LOG_FORMAT_ENV = "MEMQ_LOG_FORMAT"
"""``text`` or ``json``: overrides the choice made from whether stderr is a terminal."""

# Greedy up to the last "@" before the path: an unescaped "@" in a password stays hidden.
_URL_PASSWORD = re.compile(r"(?P<scheme>[a-z]+://)(?P<user>[^:@/]*):(?P<pw>[^/]*)@")
_QUERY_PASSWORD = re.compile(r"(?P<key>[?&]password=)[^&#]*", re.IGNORECASE)


def redact_url(url: str) -> str:
    """``redis://user:secret@host`` -> ``redis://user:***@host``; ``?password=`` too."""
    url = _URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:***@", url)
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
        return orjson.dumps(line, default=str).decode()


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "fields", {})
        extra = " ".join(f"{k}={v}" for k, v in fields.items())
        text = f"{record.levelname.lower():7} {record.name}: {record.getMessage()} {extra}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text.rstrip()


def setup(level: str = "INFO", *, json_lines: bool | None = None) -> None:
    """Configure the root logger once per process."""
    if json_lines is None:
        chosen = os.environ.get(LOG_FORMAT_ENV, "").lower()
        json_lines = chosen == "json" if chosen in ("json", "text") else not sys.stderr.isatty()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if json_lines else _TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)


def log(logger: logging.Logger, msg: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log ``msg`` with structured ``fields``."""
    logger.log(level, msg, extra={"fields": fields})
