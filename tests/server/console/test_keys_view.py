"""A key's console: a read-only view of its own grant, every read admitted as the API
admits it; what lies outside is 404, what is the person's is refused."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from memq import RemoteMemoryClient
from memq.authority import Role
from tests.producers.serving import Served
from tests.server.console.test_actions import csrf_of

pytestmark = [pytest.mark.redis]


@pytest.fixture
def admin(served: Served) -> Iterator[RemoteMemoryClient]:
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as client:
        client.append("alice-trip", "user", "a window seat to Lisbon", user_id="alice")
        client.append("bob-chat", "user", "bob's secret plan", user_id="bob")
        client.set_fact("diet", "likes", "figs", user_id="bob")
        client.set_fact("seat", "side", "window", user_id="alice")
        client.flush()
        yield client


@contextmanager
def key_session(served: Served, admin: RemoteMemoryClient,
                **grant: object) -> Iterator[httpx.Client]:
    made = admin.create_key("console", **grant)  # type: ignore[arg-type]
    admin.flush()
    browser = httpx.Client(base_url=served.url)
    try:
        assert browser.post("/ui/login", data={"token": made.secret}).status_code == 303
        browser.key_id = made.id  # type: ignore[attr-defined]
        yield browser
    finally:
        browser.close()


@contextmanager
def acme_session(served: Served, admin: RemoteMemoryClient, session: str, content: str,
                 user: str) -> Iterator[httpx.Client]:
    """The console of a key of tenant acme, whose key first appended one turn there."""
    made = admin.create_key("acme", tenant="acme", users=None, can=["read", "write"])
    admin.flush()
    with RemoteMemoryClient(served.url, token=made.secret) as acme:
        acme.append(session, "user", content, user_id=user)
        acme.flush()
    with httpx.Client(base_url=served.url) as key:
        key.post("/ui/login", data={"token": made.secret})
        yield key


def test_a_key_reads_only_its_users(served: Served, admin: RemoteMemoryClient) -> None:
    with key_session(served, admin, users=["alice"], can=["read"]) as key:
        memory = key.get("/ui/memory").text
        assert "alice" in memory
        assert "bob" not in memory
        assert "read-only" in memory
        assert "figs" not in key.get("/ui/memory", params={"user": "bob"}).text
        assert key.get("/ui/session", params={"id": "bob-chat"}).status_code == 404
        page = key.get("/ui/session", params={"id": "alice-trip", "query": "Lisbon"})
        assert page.status_code == 200
        assert "a window seat to Lisbon" in page.text
        assert "Forget this session" not in page.text


def test_a_keys_pages_spend_its_budget(served: Served, admin: RemoteMemoryClient) -> None:
    """A key signed in to the console read without limit while its API calls were
    refused past its budget: its pages now spend the same budget."""
    with key_session(served, admin, users=["alice"], can=["read"], units_per_s=2) as key:
        answers = [key.get("/ui/session", params={"id": "alice-trip"}) for _ in range(30)]
    assert answers[0].status_code == 200
    refused = [a for a in answers if a.status_code == 429]
    assert refused, [a.status_code for a in answers]
    assert "over its budget" in refused[0].text


@pytest.mark.parametrize("page", ["/ui/keys", "/ui/rejected", "/ui/health",
                                  "/ui/forget?session=alice-trip"])
def test_the_persons_pages_are_refused_to_a_key(served: Served, admin: RemoteMemoryClient,
                                                page: str) -> None:
    with key_session(served, admin) as key:
        assert key.get(page).status_code == 403


@pytest.mark.parametrize(("action", "fields"), [
    ("approve", {"command": "git status"}),
    ("set_fact", {"category": "a", "key": "b", "value": "c", "user": "alice"}),
    ("forget_session", {"session": "alice-trip", "confirm": "alice-trip"}),
    ("create_key", {"name": "more"}),
])
def test_a_key_changes_nothing(served: Served, admin: RemoteMemoryClient, action: str,
                               fields: dict[str, str]) -> None:
    with key_session(served, admin, can=["read", "write", "forget"]) as key:
        token = csrf_of(key.get("/ui/approvals"))
        assert "Approve" not in key.get("/ui/approvals?command=ls").text
        answer = key.post(f"/ui/act/{action}", data={"csrf": token, **fields})
        assert answer.status_code == 403
    assert admin.allowed_prefixes() == []
    assert [m.content for m in admin.history("alice-trip")] == ["a window seat to Lisbon"]
    assert len(admin.api_keys()) == 1


def test_a_tenants_key_sees_its_tenant_alone(served: Served, admin: RemoteMemoryClient
                                            ) -> None:
    with acme_session(served, admin, "alice-trip", "acme's alice, acme's trip",
                      "alice") as key:
        page = key.get("/ui/session", params={"id": "alice-trip"})
        assert "acme&#39;s trip" in page.text
        assert "a window seat to Lisbon" not in page.text
        assert "bob" not in key.get("/ui/memory").text


def test_a_revoked_key_is_signed_out(served: Served, admin: RemoteMemoryClient) -> None:
    with key_session(served, admin) as key:
        assert key.get("/ui/memory").status_code == 200
        admin.revoke_key(key.key_id)  # type: ignore[attr-defined]
        admin.flush()
        answer = key.get("/ui/memory", follow_redirects=False)
        assert answer.headers["location"] == "/ui/login"


def test_a_delegated_token_does_not_sign_in(served: Served, admin: RemoteMemoryClient) -> None:
    made = admin.create_key("backend", can=["read", "delegate"])
    admin.flush()
    with RemoteMemoryClient(served.url, token=made.secret) as backend:
        token = backend.delegate(users=["alice"]).token
    with httpx.Client(base_url=served.url) as browser:
        assert browser.post("/ui/login", data={"token": token}).status_code == 401


def users_column(page: str) -> str:
    return page.split('id="users"')[1].split("</section>")[0]


def test_the_users_list_is_the_grants_own(served: Served, admin: RemoteMemoryClient) -> None:
    """A key limited to agents sees only the users of those agents' sessions, counted over
    those sessions alone."""
    admin.append("c-1", "user", "carol talks to bot2", user_id="carol", agent_id="bot2")
    for i in range(3):
        admin.append(f"a-bot2-{i}", "user", "elsewhere", user_id="alice", agent_id="bot2")
    admin.append("a-bot1", "user", "hi", user_id="alice", agent_id="bot1")
    admin.flush()
    with key_session(served, admin, agents=["bot1"], can=["read"]) as key:
        users = users_column(key.get("/ui/memory").text)
        assert "carol" not in users
        assert "1 session, 1 turns" in users
        assert key.get("/ui/session", params={"id": "c-1"}).status_code == 404


def test_a_key_of_several_users_and_agents_lands_on_its_memory(
        served: Served, admin: RemoteMemoryClient) -> None:
    admin.append("a-1", "user", "with bot1", user_id="alice", agent_id="bot1")
    admin.append("a-2", "user", "with bot2", user_id="alice", agent_id="bot2")
    admin.flush()
    with key_session(served, admin, users=["alice", "bob"], agents=["bot1", "bot2"]) as key:
        landing = key.get("/ui/memory")
        assert landing.status_code == 200
        assert "choose a user" in landing.text
        alice = key.get("/ui/memory", params={"user": "alice"}).text
        assert "a-1" in alice
        assert "a-2" in alice


def test_a_tenants_owner_link_names_the_user_in_the_keys_terms(
        served: Served, admin: RemoteMemoryClient) -> None:
    with acme_session(served, admin, "zed-trip", "hello", "zed") as key:
        page = key.get("/ui/session", params={"id": "zed-trip"}).text
        assert 'href="/ui/memory?user=zed"' in page
        assert key.get("/ui/memory", params={"user": "zed"}).status_code == 200
