"""The console over plain HTTP: who gets in, which forms are refused, and that each
action changes what the API then reads."""

from __future__ import annotations

import re
import socket
from collections.abc import Iterator

import httpx
import pytest
from markupsafe import escape

from memq import RemoteMemoryClient, names
from memq.authority import Role
from memq.config import Config
from memq.errors import AuthenticationFailed
from memq.testing import WriterThread
from tests.faults.procs import wait_until
from tests.producers.serving import Served

pytestmark = [pytest.mark.redis]


def signed_in(served: Served) -> httpx.Client:
    browser = httpx.Client(base_url=served.url, follow_redirects=False)
    answer = browser.post("/ui/login", data={"token": served.token(Role.ADMIN)})
    assert answer.status_code == 303, answer.text
    return browser


@pytest.fixture
def person(served: Served) -> Iterator[httpx.Client]:
    browser = signed_in(served)
    yield browser
    browser.close()


def csrf_of(page: httpx.Response) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert found, page.text[:500]
    return found.group(1)


def post(browser: httpx.Client, path: str, **fields: str) -> httpx.Response:
    token = csrf_of(browser.get("/ui/approvals"))
    return browser.post(path, data={"csrf": token, **fields})


def test_pages_need_a_session(served: Served) -> None:
    with httpx.Client(base_url=served.url) as stranger:
        for page in ("/ui", "/ui/memory", "/ui/approvals", "/ui/keys", "/ui/health"):
            answer = stranger.get(page, follow_redirects=True)
            assert answer.url.path == "/ui/login", page
            assert 'name="token"' in answer.text


def test_the_session_cookie_is_http_only_strict_and_names_no_token(served: Served) -> None:
    with httpx.Client(base_url=served.url) as browser:
        answer = browser.post("/ui/login", data={"token": served.token(Role.ADMIN)})
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert "Path=/ui" in cookie
    assert served.token(Role.ADMIN) not in cookie


@pytest.mark.parametrize("token", ["agent", "", "x" * 43, "admin-but-wrong"])
def test_only_the_admin_token_or_a_key_signs_in(served: Served, token: str) -> None:
    presented = served.token(Role.AGENT) if token == "agent" else token
    with httpx.Client(base_url=served.url) as browser:
        answer = browser.post("/ui/login", data={"token": presented})
    assert answer.status_code == 401
    assert "set-cookie" not in answer.headers
    assert "neither the admin token" in answer.text


def test_an_agent_token_reaches_no_page_and_no_action(served: Served) -> None:
    bearer = {"Authorization": f"Bearer {served.token(Role.AGENT)}"}
    with httpx.Client(base_url=served.url, headers=bearer) as agent:
        assert agent.get("/ui/keys", follow_redirects=False).status_code == 303
        for action in ("approve", "revoke_key", "set_fact", "forget_user", "create_key"):
            answer = agent.post(f"/ui/act/{action}", data={"command": "rm -rf /"})
            assert answer.status_code == 401, action
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        assert admin.allowed_prefixes() == []


def test_a_form_without_its_csrf_token_is_refused(served: Served,
                                                  person: httpx.Client) -> None:
    for fields in ({}, {"csrf": ""}, {"csrf": "forged"}):
        answer = person.post("/ui/act/approve", data={"command": "git status", **fields})
        assert answer.status_code == 403, fields
        assert "CSRF token" in answer.text
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        assert admin.allowed_prefixes() == []


def test_another_sessions_csrf_token_is_refused(served: Served, person: httpx.Client) -> None:
    other = signed_in(served)
    theirs = csrf_of(other.get("/ui/approvals"))
    other.close()
    answer = person.post("/ui/act/approve", data={"command": "git status", "csrf": theirs})
    assert answer.status_code == 403


def test_a_cross_origin_form_post_is_refused(served: Served, person: httpx.Client) -> None:
    token = csrf_of(person.get("/ui/approvals"))
    answer = person.post("/ui/act/approve", data={"command": "git status", "csrf": token},
                         headers={"Origin": "https://evil.example"})
    assert answer.status_code == 403
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        assert admin.allowed_prefixes() == []


def test_no_get_changes_anything(served: Served, person: httpx.Client) -> None:
    for path in ("/ui/act/approve?command=ls", "/ui/logout", "/ui/act/create_key?name=k"):
        assert person.get(path).status_code in (404, 405), path
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        assert admin.allowed_prefixes() == []
        assert admin.api_keys() == []


def test_approving_and_revoking_change_what_the_matcher_allows(
        served: Served, person: httpx.Client) -> None:
    page = person.get("/ui/approvals", params={"command": "git status --short"})
    assert "an agent must ask first" in page.text
    assert "<code>git status --short</code>" in page.text
    done = post(person, "/ui/act/approve", command="git status --short",
                back="/ui/approvals?command=git%20status%20--short")
    assert done.status_code == 303
    with RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as agent:
        assert agent.is_command_allowed("git status --short")
        page = person.get(done.headers["location"])
        assert "approved" in page.text
        assert "allowed without asking" in page.text
        post(person, "/ui/act/revoke_prefix", prefix="git status --short")
        assert not agent.is_command_allowed("git status --short")


def test_a_forget_needs_the_id_typed(served: Served, person: httpx.Client) -> None:
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        admin.append("trip", "user", "a window seat", user_id="alice")
        admin.flush()
        refused = post(person, "/ui/act/forget_session", session="trip", confirm="tri")
        assert refused.status_code == 422
        assert [m.content for m in admin.history("trip")] == ["a window seat"]
        post(person, "/ui/act/forget_session", session="trip", confirm="trip")
        assert admin.history("trip") == []


def test_a_key_made_here_shows_its_secret_once_and_works(served: Served,
                                                         person: httpx.Client) -> None:
    token = csrf_of(person.get("/ui/keys"))
    made = person.post("/ui/act/create_key", data={"csrf": token, "name": "assistant",
                                                   "users": "alice", "can": "read"})
    assert made.status_code == 200
    secret = re.search(r'class="secret">([^<]+)<', made.text)
    assert secret
    with RemoteMemoryClient(served.url, token=secret.group(1)) as key:
        assert key.sessions() == []
    assert secret.group(1) not in person.get("/ui/keys").text


def test_errors_are_pages_that_name_no_insides(served: Served, person: httpx.Client) -> None:
    missing = person.get("/ui/session", params={"id": "nope"})
    assert missing.status_code == 404
    assert "text/html" in missing.headers["content-type"]
    assert "no session" in missing.text
    assert person.get("/ui/session").status_code == 422
    assert person.get("/ui/nowhere").status_code == 404


def test_pages_run_no_script_and_load_nothing_from_elsewhere(person: httpx.Client) -> None:
    for path in ("/ui/memory", "/ui/approvals", "/ui/tasks", "/ui/rejected", "/ui/keys",
                 "/ui/health"):
        page = person.get(path)
        assert page.status_code == 200, (path, page.text[:300])
        assert "<script" not in page.text
        assert "http://" not in page.text
        assert "https://" not in page.text
        assert "script-src" not in page.headers["content-security-policy"]
        assert "default-src 'none'" in page.headers["content-security-policy"]


def test_a_value_an_agent_wrote_is_shown_never_run(served: Served,
                                                   person: httpx.Client) -> None:
    hostile = '<script>alert(1)</script><img src=x onerror=alert(2)>'
    with RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as agent:
        agent.append("trip", "user", hostile, user_id="alice")
        agent.set_fact("notes", "x", hostile, user_id="alice")
        agent.flush()
    for page in (person.get("/ui/session", params={"id": "trip", "query": "alert"}),
                 person.get("/ui/memory", params={"user": "alice"})):
        assert "<script>alert" not in page.text
        assert "<img src=x" not in page.text
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text


# -- what an attack on the console found ------------------------------------------------------


def test_ids_are_taken_as_sent_never_trimmed(served: Served, person: httpx.Client) -> None:
    """A trimmed "trip " would forget "trip", and a trimmed "acme\\x1f" (a tenant's
    everyone) would delete the default tenant's user acme's fact."""
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        admin.append("trip", "user", "the real one", user_id="alice")
        admin.append("trip ", "user", "a lookalike", user_id="mallory")
        admin.set_fact("prefs", "lang", "acme user's own", user_id="acme")
        admin.set_fact("prefs", "lang", "everyone in acme", user_id="acme\x1f")
        admin.set_fact("prefs", "tz", "Europe/Lisbon", user_id="acme\x1f")
        admin.flush()
        post(person, "/ui/act/forget_session", session="trip ", confirm="trip ")
        post(person, "/ui/act/delete_fact", category="prefs", key="lang", user="acme\x1f")
        assert [m.content for m in admin.history("trip")] == ["the real one"]
        assert admin.history("trip ") == []
        assert [f.value for f in admin.facts("prefs", user_id="acme")] == ["acme user's own"]
    page = person.get("/ui/memory", params={"user": "acme\x1fbob"})
    assert "<td>Europe/Lisbon</td>" in page.text
    assert "<td>everyone</td>" in page.text
    assert "<td>this user</td>" not in page.text


@pytest.mark.parametrize("value", ["東京", "Zürich ✓", "a\nb"])
def test_what_an_action_says_may_be_in_any_script(served: Served, person: httpx.Client,
                                                  value: str) -> None:
    done = post(person, "/ui/act/set_fact", category="home", key="city", value=value,
                user="alice", back="/ui/memory?user=alice")
    assert done.status_code == 303
    said = person.get(done.headers["location"]).text
    assert str(escape(f"set home/city = {value!r}")) in said


@pytest.mark.parametrize(("path", "fields"), [
    ("/ui/act/replay", {"id": "²"}),
    ("/ui/act/replay", {"id": "9" * 30}),
    ("/ui/act/approve", {f"f{i}": "x" for i in range(300)}),
])
def test_bad_forms_get_a_page_that_says_why(person: httpx.Client, path: str,
                                            fields: dict[str, str]) -> None:
    answer = post(person, path, **fields)
    assert answer.status_code == 422, answer.text[:300]
    assert "text/html" in answer.headers["content-type"]


def test_too_many_fields_at_the_login_is_a_clear_refusal(served: Served) -> None:
    with httpx.Client(base_url=served.url) as stranger:
        answer = stranger.post("/ui/login", content="a=1&" * 201,
                               headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert answer.status_code == 422


@pytest.mark.parametrize("params", [{"at": "x", "seq": "9" * 30}, {"at": "x" * 100, "seq": "1"},
                                    {"at": "x", "seq": "-1"}])
def test_a_timeline_page_past_any_bound_is_refused(served: Served, person: httpx.Client,
                                                   params: dict[str, str]) -> None:
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        admin.append("trip", "user", "hello", user_id="alice")
        admin.flush()
    assert person.get("/ui/session", params={"id": "trip", **params}).status_code == 422


def test_signing_out_ends_the_session_on_every_copy_of_its_cookie(
        served: Served, person: httpx.Client) -> None:
    copied = person.cookies.get("memq_console")
    post(person, "/ui/logout")
    with httpx.Client(base_url=served.url) as thief:
        answer = thief.get("/ui/keys", headers={"cookie": f"memq_console={copied}"})
    assert answer.status_code == 303


def test_a_cookie_signature_has_one_spelling(served: Served, person: httpx.Client) -> None:
    body, signature = str(person.cookies.get("memq_console")).split(".")
    for spelling in (signature + "=", signature[:10] + "!!" + signature[10:]):
        with httpx.Client(base_url=served.url) as other:
            answer = other.get("/ui/keys",
                               headers={"cookie": f"memq_console={body}.{spelling}"})
        assert answer.status_code == 303, spelling


@pytest.mark.parametrize("other", ['prefs={"a":1}', "a=b c", 'x="\\"', "a=b;c", "$Version=1",
                                   'q="' + "\\" * 16000])
def test_other_cookies_of_the_host_neither_lock_out_nor_stall(
        served: Served, person: httpx.Client, other: str) -> None:
    mine = person.cookies.get("memq_console")
    with httpx.Client(base_url=served.url) as browser:
        answer = browser.get("/ui/keys", headers={"cookie": f"{other}; memq_console={mine}"})
    assert answer.status_code == 200


def test_login_bodies_never_take_the_apis_places(served: Served) -> None:
    host, port = served.url.removeprefix("http://").split(":")
    trickles = []
    try:
        for _ in range(70):  # more than the guard's places for every body (64)
            sock = socket.create_connection((host, int(port)))
            sock.sendall(b"POST /ui/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                         b"application/x-www-form-urlencoded\r\nContent-Length: 4000\r\n\r\nt")
            trickles.append(sock)
        answer = httpx.post(f"{served.url}/v1/facts", json={"category": "a", "key": "b",
                                                             "value": "c"},
                            headers={"Authorization": f"Bearer {served.token(Role.AGENT)}"})
        assert answer.status_code == 200, answer.text
    finally:
        for sock in trickles:
            sock.close()


def test_a_facts_history_and_the_users_documents(served: Served, person: httpx.Client) -> None:
    with RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as agent:
        agent.set_fact("seat", "side", "aisle", user_id="alice")
        agent.put_document(("trips", "2027"), "lisbon", {"hotel": "Alfama"}, user_id="alice")
        agent.flush()
    post(person, "/ui/act/set_fact", category="seat", key="side", value="window", user="alice")
    with RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as agent:
        agent.set_fact("seat", "side", "middle", user_id="alice")  # protected: not applied
        agent.flush()
    memory = person.get("/ui/memory", params={"user": "alice"}).text
    assert "Alfama" in memory
    assert "trips / 2027" in memory
    history = person.get("/ui/fact", params={"category": "seat", "key": "side",
                                             "user": "alice"}).text
    for value in ("aisle", "window", "middle", "no: the user&#39;s value is protected"):
        assert value in history


def test_a_rejected_event_is_replayed_or_dropped(served: Served, person: httpx.Client,
                                                 config: Config) -> None:
    served.bases[Role.ADMIN].redis.xadd(names.ADMIN_INBOX_STREAM,
                                        {names.EVENT_FIELD: b"not an event"})
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        admin.append("s", "user", "behind it")
        admin.flush()
    page = person.get("/ui/rejected").text
    (row_id,) = re.findall(r'name="id" value="(\d+)"', page)[:1]
    assert post(person, "/ui/act/drop", id=row_id).status_code == 303
    assert "Nothing was rejected." in person.get("/ui/rejected").text


def test_a_key_made_while_the_writer_is_away_still_shows_its_secret(
        served: Served, person: httpx.Client, writer: WriterThread,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from memq.server.console import actions

    monkeypatch.setattr(actions, "WAIT_S", 0.1)
    token = csrf_of(person.get("/ui/keys"))
    writer.stop()
    made = person.post("/ui/act/create_key", data={"csrf": token, "name": "late"})
    assert made.status_code == 200
    assert "writer has not committed it yet" in made.text
    secret = re.search(r'class="secret">([^<]+)<', made.text)
    assert secret
    writer.start()
    # The console sent the key's event, not a client of this test: no flush waits for it.
    with RemoteMemoryClient(served.url, token=secret.group(1)) as key:
        wait_until(lambda: _known(key), "the late key to be committed and accepted")
        assert key.sessions() == []


def _known(key: RemoteMemoryClient) -> bool:
    try:
        key.sessions()
    except AuthenticationFailed:
        return False
    return True
