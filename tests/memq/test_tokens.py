"""The bearer tokens: made once, private, and matched in constant time."""

from __future__ import annotations

from pathlib import Path

import pytest

from memq.authority import Role
from memq.errors import ConfigError
from memq.tokens import Tokens, ensure_token, token_path


def test_tokens_are_made_once_and_private(tmp_path: Path) -> None:
    first = Tokens.in_directory(tmp_path)
    assert Tokens.in_directory(tmp_path) == first
    assert first.by_role[Role.AGENT] != first.by_role[Role.ADMIN]
    for role in (Role.AGENT, Role.ADMIN):
        assert token_path(tmp_path, role).stat().st_mode & 0o777 == 0o600


def test_a_token_is_matched_to_its_role_only(tmp_path: Path) -> None:
    tokens = Tokens.in_directory(tmp_path)
    assert tokens.role_of(tokens.by_role[Role.ADMIN]) == Role.ADMIN
    assert tokens.role_of(tokens.by_role[Role.AGENT]) == Role.AGENT
    assert tokens.role_of("") is None
    assert tokens.role_of(tokens.by_role[Role.AGENT][:-1]) is None
    assert tokens.role_of("\udcff") is None  # not even valid UTF-8


def test_an_empty_token_file_is_refused_with_its_path(tmp_path: Path) -> None:
    token_path(tmp_path, Role.AGENT).write_text("\n")
    with pytest.raises(ConfigError, match=r"agent\.token holds no usable token"):
        ensure_token(tmp_path, Role.AGENT)
