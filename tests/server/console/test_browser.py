"""The console in a real browser (Selenium, Debian's chromium and chromedriver): the
person's tour, and what a page of another site cannot make that browser do.

The tour saves its screenshots in docs/images/console/, which the documentation shows: they
are taken by this run, so they stay true.
"""

from __future__ import annotations

import http.server
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import apsw
import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException, WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.remote.webelement import WebElement
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.wait import WebDriverWait

from memq import RemoteMemoryClient, names
from memq.authority import Role
from memq.config import Config
from tests.conftest import ROOT
from tests.producers.serving import Served

pytestmark = [pytest.mark.redis, pytest.mark.slow]

SHOTS = ROOT / "docs" / "images" / "console"
LONG_TOOL_OUTPUT = "\n".join(f"drwxr-xr-x  2 agent agent 4096 Dec  5 12:{i:02d} build-{i}"
                             for i in range(60))


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    binary, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if binary is None or driver is None:
        pytest.fail("chromium and chromedriver are not installed: run `make test`, whose "
                    "bootstrap installs them")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1360,900",
                 "--disable-dev-shm-usage", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    chrome = webdriver.Chrome(service=Service(driver), options=options)
    chrome.implicitly_wait(5)
    try:
        yield chrome
    finally:
        chrome.quit()


def seed(served: Served) -> None:
    """Alice's trip, a fact, a task, and an entry the writer sets aside."""
    with RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as agent:
        agent.append("trip", "user", "Book me a flight to Lisbon in May", user_id="alice")
        agent.append("trip", "assistant", "Window or aisle?")
        agent.append("trip", "user", "A window seat, and no red-eye flights")
        agent.append("trip", "tool", LONG_TOOL_OUTPUT)
        for i in range(10):
            agent.append("trip", "user", f"and another thing about the hotel, number {i}")
        agent.set_fact("preferences", "seat", "window", user_id="alice")
        agent.schedule_task("check fares", "every Monday at 9am", "look for cheaper fares")
        agent.flush()
    served.bases[Role.ADMIN].redis.xadd(names.ADMIN_INBOX_STREAM,
                                        {names.EVENT_FIELD: b"not an event"})
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        admin.append("other", "user", "flush behind the set-aside entry")
        admin.flush()


def sign_in(chrome: WebDriver, served: Served, token: str) -> None:
    chrome.get(f"{served.url}/ui")
    assert chrome.current_url.endswith("/ui/login")
    chrome.find_element(By.ID, "token").send_keys(token)
    submit(chrome, chrome.find_element(By.ID, "sign-in"))


def submit(chrome: WebDriver, element: WebElement) -> None:
    """Click, and wait for the page it leads to (a click returns before it loads)."""
    element.click()
    WebDriverWait(chrome, 30).until(lambda _: gone(element))


def gone(element: WebElement) -> bool:
    """Whether the page that held ``element`` was replaced. chromedriver says so either as
    a stale element or, while the new page loads, as a node of no document."""
    try:
        element.is_enabled()
    except StaleElementReferenceException:
        return True
    except WebDriverException as exc:
        if "does not belong to the document" in str(exc):
            return True
        raise
    return False


def shot(chrome: WebDriver, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    chrome.save_screenshot(str(SHOTS / f"{name}.png"))


def said(chrome: WebDriver) -> str:
    return str(chrome.find_element(By.ID, "said").text)


def test_the_persons_tour(browser: WebDriver, served: Served, config: Config) -> None:
    seed(served)
    sign_in(browser, served, served.token(Role.ADMIN))
    assert browser.current_url.endswith("/ui/memory"), browser.page_source[:2000]
    submit(browser, browser.find_element(By.LINK_TEXT, "alice"))
    assert "window" in browser.find_element(By.ID, "facts").text
    shot(browser, "memory")

    submit(browser, browser.find_element(By.LINK_TEXT, "trip"))
    assert "more characters" in browser.find_element(By.ID, "timeline").text
    browser.find_element(By.ID, "query").send_keys("which seat does alice want?")
    submit(browser, browser.find_element(By.CSS_SELECTOR, "#explain button"))
    rows = browser.find_elements(By.CSS_SELECTOR, "#context tbody tr")
    recent = browser.find_elements(By.CSS_SELECTOR, "#context tbody tr.recent")
    assert len(recent) == 10
    assert any("A window seat" in row.text and "recent" not in str(row.get_attribute("class"))
               for row in rows)
    shot(browser, "context")

    _approve_and_revoke(browser, served)
    _replay(browser, config)
    submit(browser, browser.find_element(By.LINK_TEXT, "Health"))
    assert "running" in browser.find_element(By.ID, "writer").text
    shot(browser, "health")


def _approve_and_revoke(browser: WebDriver, served: Served) -> None:
    submit(browser, browser.find_element(By.LINK_TEXT, "Approvals"))
    browser.find_element(By.ID, "command").send_keys("git status --short")
    submit(browser, browser.find_element(By.CSS_SELECTOR, "#check button"))
    assert "must ask first" in browser.find_element(By.ID, "verdict").text
    with RemoteMemoryClient(served.url, token=served.token(Role.AGENT)) as agent:
        assert not agent.is_command_allowed("git status --short")
        submit(browser, browser.find_element(By.CSS_SELECTOR, "#approve button"))
        assert "approved" in said(browser)
        assert "allowed without asking" in browser.find_element(By.ID, "verdict").text
        assert agent.is_command_allowed("git status --short")
        shot(browser, "approvals")
        submit(browser, browser.find_element(By.CSS_SELECTOR, "#prefixes button"))
        assert "revoked" in said(browser)
        assert not agent.is_command_allowed("git status --short")


def _replay(browser: WebDriver, config: Config) -> None:
    submit(browser, browser.find_element(By.LINK_TEXT, "Rejected"))
    assert "not an event" in browser.find_element(By.ID, "rejected").text or (
        "JSON" in browser.find_element(By.ID, "rejected").text)
    submit(browser, browser.find_element(By.CSS_SELECTOR, "#rejected button"))
    assert "replayed 1 event" in said(browser)
    # Judged again by the writer: still not an event, so set aside a second time.
    conn = apsw.Connection(config.db_path, flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert conn.execute("SELECT attempts FROM rejected_events").fetchall() in (
            [(1,)], [(2,)])
    finally:
        conn.close()


def test_what_the_browser_is_refused(browser: WebDriver, served: Served,
                                    tmp_path: Path) -> None:
    """An agent's token does not sign in; signed in as the person, a form whose CSRF token
    was taken out, and a form another site's page posts, change nothing."""
    sign_in(browser, served, served.token(Role.AGENT))
    assert "neither the admin token" in said(browser)
    browser.get(f"{served.url}/ui/keys")
    assert browser.current_url.endswith("/ui/login")

    sign_in(browser, served, served.token(Role.ADMIN))
    browser.get(f"{served.url}/ui/approvals?command=git%20log")
    browser.execute_script("document.querySelector('#approve [name=csrf]').remove()")
    submit(browser, browser.find_element(By.CSS_SELECTOR, "#approve button"))
    assert "CSRF token" in browser.find_element(By.ID, "error").text

    (tmp_path / "evil.html").write_text(
        f'<form id="f" method="post" action="{served.url}/ui/act/approve">'
        '<input name="command" value="rm -rf /"><input name="csrf" value="guess"></form>'
        '<script>document.getElementById("f").submit()</script>')
    with elsewhere(tmp_path) as evil:
        browser.get(f"{evil}/evil.html")
        WebDriverWait(browser, 30).until(expected_conditions.url_contains("/ui/act/approve"))
        assert "PermissionDenied" in browser.page_source
    with RemoteMemoryClient(served.url, token=served.token(Role.ADMIN)) as admin:
        assert admin.allowed_prefixes() == []


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


class elsewhere:  # noqa: N801 (a context manager, used like a function)
    """Another origin: a plain HTTP server of ``directory`` on 127.0.0.2."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def __enter__(self) -> str:
        handler = lambda *a: _Quiet(*a, directory=str(self.directory))  # noqa: E731
        self.server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), handler)
        port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.2:{port}"

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
