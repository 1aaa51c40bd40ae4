"""Generated forms and queries against every console action and page: whatever is sent,
the answer is a page that says what happened, never a server fault."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memq import RemoteMemoryClient
from memq.authority import Role
from memq.server.console.actions import ACTIONS
from tests.producers.serving import Served
from tests.server.console.test_actions import csrf_of, signed_in

pytestmark = [pytest.mark.redis, pytest.mark.slow]

FIELDS = ("command", "prefix", "tenant", "category", "key", "value", "user", "task_id", "id",
          "session", "confirm", "key_id", "name", "users", "agents", "can", "expires_at",
          "back")
TEXT = st.text(max_size=60) | st.sampled_from(
    ["", " ", "trip", "alice", "acme\x1f", "default", "9" * 30, "²", "-1", "/ui/../x", "%00"])
GENERATED = settings(max_examples=200, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


def seeded(served: Served) -> httpx.Client:
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        admin.append("trip", "user", "a window seat", user_id="alice")
        admin.flush()
    return signed_in(served)


def test_any_form_gets_a_page_never_a_fault(served: Served) -> None:
    person = seeded(served)
    token = csrf_of(person.get("/ui/approvals"))

    @GENERATED
    @given(st.sampled_from([*sorted(ACTIONS), "create_key"]),
           st.dictionaries(st.sampled_from(FIELDS), TEXT, max_size=6))
    def sent(action: str, fields: dict[str, str]) -> None:
        answer = person.post(f"/ui/act/{action}", data={**fields, "csrf": token})
        assert answer.status_code < 500, (action, fields, answer.text[:300])
        assert answer.status_code in (200, 303) or "text/html" in answer.headers[
            "content-type"]

    try:
        sent()
    finally:
        person.close()


def test_any_query_gets_a_page_never_a_fault(served: Served) -> None:
    person = seeded(served)

    @GENERATED
    @given(st.sampled_from(["memory", "session", "forget", "approvals", "fact"]),
           st.dictionaries(st.sampled_from(["id", "user", "session", "tenant", "command",
                                            "query", "scope", "at", "seq", "category",
                                            "key"]), TEXT, max_size=5))
    def asked(page: str, params: dict[str, str]) -> None:
        answer = person.get(f"/ui/{page}", params=params)
        assert answer.status_code < 500, (page, params, answer.text[:300])
        assert "text/html" in answer.headers["content-type"]

    try:
        asked()
    finally:
        person.close()
