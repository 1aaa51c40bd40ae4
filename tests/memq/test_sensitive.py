"""What looks like a credential (memq.sensitive): hidden from learned macros."""

from __future__ import annotations

import pytest

from memq.sensitive import looks_secret, secret_name, secret_text

SECRET_TEXTS = [
    "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "Authorization: Bearer abc123def456ghi",
    "Basic dXNlcjpodW50ZXIy",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl",
    "-----BEGIN OPENSSH PRIVATE KEY-----",
    "https://deploy:hunter2@git.example.com/repo.git",
    "redis://:s3cret@localhost:6379/0",
    "DB_PASSWORD=hunter2", "export API_KEY=abc", '{"api_key": "x1"}', "token: 5",
    "sk-proj-abcdefghijklmnopqrstuvwx", "sk_live_abcdefgh1234",
    "ghp_abcdefghijklmnopqrstuvwxyz0123", "github_pat_11ABCDEFG0abcdefghijklmnop",
    "glpat-abcdefghij0123456789", "xoxb-1234567890-abcdef",
    "AKIAIOSFODNN7EXAMPLE", "AIzaSyA1b2C3d4E5f6G7h8I9j0KlMnOpQrStUv",
    "hf_abcdefghijklmnopqrstuvwxyzABCDEF", "aB3dE5gH7jK9mN1pQ3sT5vX7zA9",
]
PLAIN_TEXTS = [
    "git status", "git commit -m 'fix the parser'", "src/components/App.tsx", "x = 1",
    "550e8400-e29b-41d4-a716-446655440000", "3f2a9c1e5b7d9f0a1c3e5b7d9f0a1c3e5b7d9f0a",
    "basic configuration", "bypass=1", "tokenizer=bpe", "passage: chapter one",
    "The author wrote about tokens.", "https://example.org/a?b=1", "pytest tests/test_mod1.py -q",
    "", "Europe/Lisbon",
]


@pytest.mark.parametrize("text", SECRET_TEXTS)
def test_credentials_are_seen_by_their_shape(text: str) -> None:
    assert secret_text(text)
    assert looks_secret(text)


@pytest.mark.parametrize("text", PLAIN_TEXTS)
def test_ordinary_arguments_are_not(text: str) -> None:
    assert not secret_text(text)


@pytest.mark.parametrize("name", ["password", "db_password", "PASSWD", "pwd", "secret",
                                  "client_secret", "token", "access_token", "api_key",
                                  "X-Api-Key", "apikey", "Authorization", "auth", "cookie",
                                  "Set-Cookie", "session_id", "private_key", "credentials",
                                  "otp", "pin"])
def test_credentials_are_seen_by_their_name(name: str) -> None:
    assert secret_name(name)
    assert looks_secret("anything", name)
    assert looks_secret(1234, name)


@pytest.mark.parametrize("name", ["path", "author", "max_tokens", "spinner", "keyword",
                                  "passage", "mode", "command"])
def test_ordinary_names_are_not(name: str) -> None:
    assert not secret_name(name)
    assert not looks_secret("a.py", name)


def test_flags_and_empty_values_are_never_secrets() -> None:
    assert not looks_secret(True, "auth")
    assert not looks_secret(None, "password")


def test_a_long_text_is_searched_in_one_pass() -> None:
    # An unbounded URL scheme made this quadratic: 10 MB of letters took minutes.
    assert not secret_text("x" * 2_000_000)
    assert not secret_text("ab1" * 700_000)
