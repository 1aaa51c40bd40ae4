"""How recorded tool calls become macros: the learning rule, pure, shared by client and writer.

The learning rule. Within one session every recorded call B is a transition from the call
A recorded just before it. The writer counts it twice: under A's tool and *argument
pattern* (A's arguments with the values that vary from call to call replaced by
placeholders — ``<path>``, ``<num>``, ``<str>`` for quoted text, ``<uuid>``, ``<url>``,
``<email>``, ``<hex>`` for hashes, ``<text>`` for long text — while flags, sub-commands and
other bare words stay literal, so ``git commit -m "fix"`` is ``git commit -m <str>``), and under A's
tool alone (pattern ``*``), so a tool whose arguments never repeat still learns. For each
(A tool, pattern, B tool) it keeps n(A→B) and n(A), the transitions out of A under that
pattern, and sets confidence = (n(A→B) + 1) / (n(A) + 4): additive smoothing with alpha = 1
and k = 4, i.e. the posterior mean of P(B follows A) under a Beta(1, 3) prior. One
observation gives 0.40, two consistent ones 0.50, ten 0.79, and the estimate tends to the
observed frequency as evidence grows, so a single accident is never suggested at the
default threshold (0.5). k is fixed rather than the number of successors seen, so each
row is an independent yes/no estimate that does not jump when a new successor first
appears. B's arguments are kept as a template: a string equal to one of A's string
values becomes a reference ``${key}`` to it (``read_file(path)`` → ``edit_file(path)``
suggests the path just read), and every other value is kept only by its shape, as in a
pattern (``x = 1`` is ``x = <num>``, a path ``<path>``, long text ``<text>``);
``next_args`` is the template seen most often after A (ties: the latest).

Macros are shared by every session, so a template holds only references (filled from the
caller's own arguments when suggested), placeholders and bare words: command words, and
also the words of short unquoted text, which nothing here tells from a command line (a
ticket's title). So the writer learns each transition twice, into the tenant's aggregate
and into rows of the session's user: a key limited to some users reads only its users'
rows, never another user's words; a credential of every user reads the aggregate
(docs/security.md).
Secret-looking values (:mod:`memq.sensitive`: by the argument's name or by the value's
shape) become ``<secret>`` in patterns and templates alike, and :func:`shrink_args`
replaces them before a call is even recorded.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

import orjson

from memq.sensitive import SECRET, looks_secret, secret_name, secret_text, secret_word

ANY_ARGS = "*"
"""The pattern of the tool-level row, which matches a call whatever its arguments."""

PRIOR_HITS = 1.0
"""alpha: pseudo-observations of "B followed A" added to every estimate."""

PRIOR_TOTAL = 4.0
"""alpha*k with k = 4: pseudo-observations of transitions out of A (prior mean 0.25)."""

LONG_TEXT = 200
"""Strings longer than this are free text, never literal: they become ``<text>``."""
TEXT_CACHE = 8192
"""Patterns of strings remembered (each at most LONG_TEXT characters: ~4 MB at most)."""

MAX_DEPTH = 32
"""Nesting deeper than this is summarised as ``<deep>`` instead of walked."""

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://\S*")
_NUMBER = re.compile(r"\d+(?:[.:]\d+)*")
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_HEX = re.compile(r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,64}")
_FILE_NAME = re.compile(r"[\w.-]*\w\.[A-Za-z][A-Za-z0-9]{0,7}|\.[A-Za-z][\w.-]*")
_TOKEN = re.compile(r"""(?:[^\s'"]+|'[^']*'|"(?:[^"\\]|\\.)*")+""")
_REFERENCE = re.compile(r"\$\{([^{}]+)\}")
_AUTH_SCHEMES = frozenset({"bearer", "basic", "token", "digest"})
_USER_FLAGS = frozenset({"-u", "--user", "--proxy-user"})
"""curl and alike take ``user:password`` after these."""


def confidence(transitions: int, trigger_transitions: int) -> float:
    """Smoothed P(B follows A) from n(A→B) and n(A)."""
    return (transitions + PRIOR_HITS) / (trigger_transitions + PRIOR_TOTAL)


def args_pattern(args: Mapping[str, Any]) -> str:
    """The canonical pattern of a call's arguments (JSON, keys sorted)."""
    return _canonical(_generalise(dict(args), 0, None))


@functools.lru_cache(maxsize=TEXT_CACHE)
def generalise_text(text: str) -> str:
    """A string argument with its varying parts replaced by placeholders (remembered for
    the last TEXT_CACHE strings: agents repeat their commands and paths, and this is most
    of what learning from a call costs)."""
    if len(text) > LONG_TEXT:
        return "<text>"
    tokens = _tokens(text)
    if tokens is None:
        return SECRET if secret_text(text) else "<text>"  # free text, not a command line
    befores = ["", *tokens][: len(tokens)]
    pattern = " ".join(_token_pattern(t, b) for b, t in zip(befores, tokens, strict=True))
    # A credential spread over the words in a way the rules above did not see.
    return SECRET if secret_text(pattern) else pattern


def shrink_args(args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` as learning needs them: long strings as ``<text>``, secret-looking values
    as ``<secret>`` (so a credential is never recorded)."""
    return dict(_shrink(dict(args), 0, None))


def scrub_template(template: str) -> str:
    """A template from elsewhere (the legacy upgrade) with its secret-looking values
    replaced by ``<secret>``; the rest as it was."""
    try:
        value = orjson.loads(template)
    except orjson.JSONDecodeError:
        return SECRET if secret_text(template) else template
    scrubbed = _scrub(value, 0, None)
    return template if scrubbed == value else _canonical(scrubbed)


def next_args_template(next_args: Mapping[str, Any], trigger_args: Mapping[str, Any]) -> str:
    """B's arguments as a template relative to A's (canonical JSON)."""
    references: dict[str, str] = {}
    _collect_strings(dict(trigger_args), "", references, 0)
    return _canonical(_template(dict(next_args), references, 0, None))


def fill_template(template: str, args: Mapping[str, Any]) -> Any:
    """Resolve a template's ``${key}`` references against ``args``; unknown ones stay."""
    return _fill(orjson.loads(template), args, 0)


# -- patterns -----------------------------------------------------------------------------


def _generalise(value: Any, depth: int, name: str | None) -> Any:
    """``value`` by its shape; ``name`` is the argument it sits under (a list's, inside one)."""
    if depth > MAX_DEPTH:
        return "<deep>"
    if isinstance(value, dict):
        return {str(k): _generalise(v, depth + 1, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        items = [SECRET if secret else _generalise(v, depth + 1, name)
                 for v, secret in _list_items(value)]
        # Lists of like things (file names, ids) match whatever their length.
        return items[:1] if items and all(i == items[0] for i in items) else items
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and len(value) > LONG_TEXT:
        return "<text>"  # kept by its length only, so what it holds does not matter
    if looks_secret(value, name):
        return SECRET
    if isinstance(value, (int, float)):
        return "<num>"
    if isinstance(value, str):
        return generalise_text(value)
    return "<value>"


def _tokens(text: str) -> list[str] | None:
    tokens, end = [], 0
    for match in _TOKEN.finditer(text):
        if text[end : match.start()].strip():
            return None
        tokens.append(match.group())
        end = match.end()
    return None if text[end:].strip() else tokens


def _token_pattern(token: str, before: str) -> str:
    """One word's shape; ``before`` is the word before it (``--password x``, ``Bearer x``)."""
    if _secret_after(before, token):
        return SECRET
    if token.startswith("-") and "=" in token:
        name, value = token.split("=", 1)
        if not value:
            return token
        return f"{name}={SECRET if secret_name(name) else _token_pattern(value, '')}"
    if "'" in token or '"' in token:
        return "<str>"
    return _classify(token)


def _secret_after(before: str, word: str) -> bool:
    """Whether ``word`` is a secret because of the word before it: an auth scheme
    (``Bearer x``), a secret-named flag (``--token x``), a user flag (``-u me:pw``)."""
    if before.lower() in _AUTH_SCHEMES or (before.startswith("-") and secret_name(before)):
        return True
    return before in _USER_FLAGS and ":" in word


def _classify(token: str) -> str:
    if secret_word(token) or secret_text(token):
        return SECRET
    if _UUID.fullmatch(token):
        return "<uuid>"
    if _URL.fullmatch(token):
        return "<url>"
    if _EMAIL.fullmatch(token):  # someone's address, never a command word
        return "<email>"
    if _NUMBER.fullmatch(token):
        return "<num>"
    if _HEX.fullmatch(token):
        return "<hex>"
    if token not in {".", ".."} and (
        "/" in token or "\\" in token or token.startswith("~") or _FILE_NAME.fullmatch(token)
    ):
        return "<path>"
    return token


def _list_items(items: list[Any]) -> list[tuple[Any, bool]]:
    """Each item, and whether the item before it makes it a secret (``["--token", x]``)."""
    befores = ["", *items][: len(items)]
    return [(item, isinstance(before, str) and isinstance(item, str)
             and _secret_after(before, item)) for before, item in zip(befores, items, strict=True)]


def _canonical(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()


# -- next-argument templates -------------------------------------------------------------


def _shrink(value: Any, depth: int, name: str | None) -> Any:
    if depth > MAX_DEPTH:
        return "<deep>"
    if isinstance(value, dict):
        return {k: _shrink(v, depth + 1, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [SECRET if secret else _shrink(v, depth + 1, name)
                for v, secret in _list_items(value)]
    if isinstance(value, str) and len(value) > LONG_TEXT:
        return "<text>"  # kept by its length only, so what it holds does not matter
    if _holds_secret(value, name):
        return SECRET
    return value


def _scrub(value: Any, depth: int, name: str | None) -> Any:
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, depth + 1, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [SECRET if secret else _scrub(v, depth + 1, name)
                for v, secret in _list_items(value)]
    return SECRET if _holds_secret(value, name) else value


def _holds_secret(value: Any, name: str | None) -> bool:
    """A value kept whole must hold no secret: by itself, or in one of its words (the
    pattern of ``curl -u me:pw url`` knows that ``me:pw`` is one)."""
    if looks_secret(value, name):
        return True
    return isinstance(value, str) and SECRET in generalise_text(value)


def _collect_strings(value: Any, path: str, out: dict[str, str], depth: int) -> None:
    if depth > MAX_DEPTH:
        return
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            _collect_strings(value[key], f"{path}.{key}" if path else str(key), out, depth + 1)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _collect_strings(item, f"{path}.{index}" if path else str(index), out, depth + 1)
    elif isinstance(value, str) and len(value) >= 2:
        out.setdefault(value, path)  # the first path in key order, for determinism


def _template(value: Any, references: Mapping[str, str], depth: int, name: str | None) -> Any:
    """B's ``value``: a reference to A's equal string, else its shape (never the value)."""
    if depth > MAX_DEPTH:
        return "<deep>"
    if isinstance(value, dict):
        return {k: _template(v, references, depth + 1, str(k)) for k, v in value.items()}
    if isinstance(value, list):
        return [SECRET if secret and v not in references else _template(v, references,
                                                                         depth + 1, name)
                for v, secret in _list_items(value)]
    if isinstance(value, str) and value in references:
        return "${" + references[value] + "}"
    return _generalise(value, depth, name)


def _fill(value: Any, args: Mapping[str, Any], depth: int) -> Any:
    if depth > MAX_DEPTH:
        return value
    if isinstance(value, dict):
        return {k: _fill(v, args, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, args, depth + 1) for v in value]
    if isinstance(value, str):
        match = _REFERENCE.fullmatch(value)
        if match is not None:
            return _resolve(args, match.group(1), value)
    return value


def _resolve(args: Any, path: str, missing: str) -> Any:
    current = args
    for part in path.split("."):
        if isinstance(current, Mapping) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            return missing
    return current
