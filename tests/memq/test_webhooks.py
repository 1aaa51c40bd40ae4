"""Signing and checking a delivery, and what a webhook's URL may be."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memq import webhooks
from memq.workers.webhooks import deliver


@given(body=st.binary(max_size=200), tamper=st.binary(min_size=1, max_size=8))
def test_a_signature_holds_for_its_body_alone(body: bytes, tamper: bytes) -> None:
    secret = webhooks.new_secret()
    header = webhooks.sign(secret, body)
    assert webhooks.verify(secret, body, header)
    assert not webhooks.verify(secret, body + tamper, header)
    assert not webhooks.verify(webhooks.new_secret(), body, header)


def test_an_old_or_future_signature_is_refused() -> None:
    secret, body = webhooks.new_secret(), b"{}"
    old = webhooks.sign(secret, body, int(time.time()) - webhooks.TOLERANCE_S - 5)
    assert not webhooks.verify(secret, body, old)
    assert webhooks.verify(secret, body, old, tolerance_s=webhooks.TOLERANCE_S + 60)


@given(header=st.text(max_size=80))
def test_any_header_is_an_answer_never_an_exception(header: str) -> None:
    assert webhooks.verify(webhooks.new_secret(), b"{}", header) is False


def test_no_header_is_false() -> None:
    assert webhooks.verify(webhooks.new_secret(), b"{}", None) is False


def test_verify_answers_false_not_an_exception_for_a_forged_non_ascii_header() -> None:
    secret = webhooks.new_secret()
    header = f"t={int(time.time())},v1=\u00e9"
    assert webhooks.verify(secret, b"{}", header) is False


def test_verify_refuses_an_empty_secret() -> None:
    # A receiver whose secret is unset (os.environ.get(..., "")) must not accept a
    # signature anyone can compute.
    forged = webhooks.sign("", b'{"type": "fact.set"}')
    assert webhooks.verify("", b'{"type": "fact.set"}', forged) is False


@pytest.mark.parametrize("url", ["http://example.com:abc/hook", "http://exa\x7fmple.com/",
                                 "http://[::1/hook"])
def test_a_url_accepted_at_registration_is_one_a_delivery_can_be_sent_to(url: str) -> None:
    """Refused at registration, naming the problem (not raised as another error); and
    were one registered, its delivery is a result, never an exception of the job."""
    assert webhooks.url_problem(url) is not None
    result = deliver(url, webhooks.new_secret(), [["h:1", "fact.set", "{}"]], 1.0)
    assert result["outcomes"][0]["ok"] is False


