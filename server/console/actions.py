"""The console's actions: every change is a POST of a form that carries the session's
CSRF token, runs one call of the person's client (so the writer judges it by the same
authority table as the CLI's calls), waits for the writer to commit it, and leads back to
the page it came from, which then shows the change.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from urllib.parse import parse_qs, quote

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response

from memq import tenants
from memq.errors import FlushTimeout, NotFound, PermissionDenied, ValidationError
from memq.producers.keys import NewKey
from memq.rejections import replay
from memq.server.console.logins import COOKIE, LIFETIME_S, Login, csrf_ok
from memq.server.console.pages import LISTED, SAID_COOKIE, signed_page
from memq.server.console.render import page
from memq.server.console.state import Console, console_of, signed_in, the_persons, told
from memq.store.read import rejected

router = APIRouter(prefix="/ui", include_in_schema=False)

FORM = "application/x-www-form-urlencoded"
WAIT_S = 5.0
"""How long an action waits for the writer before its page says it is still on its way."""
MAX_BACK_CHARS = 2000
MAX_FIELDS = 200
REJECTED_ID = re.compile(r"[0-9]{1,18}")


class Form:
    """A posted form's fields, each read as the action needs it: as sent, never trimmed
    (ids may hold spaces, and U+001F, which Python counts as one, makes a tenant's form:
    a trimmed ``"trip "`` or ``"acme\x1f"`` would name another session or user)."""

    def __init__(self, fields: dict[str, list[str]]) -> None:
        self.fields = fields

    def one(self, name: str) -> str:
        value = self.optional(name)
        if value is None:
            raise ValidationError(f"the form's {name} is empty")
        return value

    def optional(self, name: str) -> str | None:
        value = (self.fields.get(name) or [""])[0]
        return value or None

    def listed(self, name: str) -> list[str] | None:
        """A comma-separated field as names (None: left empty)."""
        value = self.optional(name)
        return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


async def form_of(request: Request) -> Form:
    if request.headers.get("content-type", "").split(";")[0].strip() != FORM:
        raise ValidationError(f"the console's forms are sent as {FORM}")
    body = (await request.body()).decode("utf-8", "replace")
    try:
        return Form(parse_qs(body, keep_blank_values=True, max_num_fields=MAX_FIELDS))
    except ValueError:
        raise ValidationError(f"a console form has at most {MAX_FIELDS} fields") from None


@router.get("/login")
def login_form() -> Response:
    return page("login.html", said=None)


@router.post("/login")
async def login(request: Request) -> Response:
    cookie = console_of(request).logins.start((await form_of(request)).optional("token") or "")
    if cookie is None:
        return page("login.html", 401, said="that is neither the admin token (admin.token "
                                            "beside the database) nor an API key")
    response = RedirectResponse("/ui/memory", 303)
    response.set_cookie(COOKIE, cookie, max_age=int(LIFETIME_S), path="/ui", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


@router.post("/logout")
async def logout(request: Request) -> Response:
    login, _ = await _checked_form(request)
    await run_in_threadpool(console_of(request).end, login)
    response = RedirectResponse("/ui/login", 303)
    response.delete_cookie(COOKIE, path="/ui")
    return response


@router.post("/act/create_key")
async def create_key(request: Request) -> Response:
    """Its answer is the keys' page itself: the secret is shown there once."""
    login, form = await _checked_form(request, acting=True)
    console = console_of(request)
    made, committed = await run_in_threadpool(_make_key, console, form)
    said = f"created key {made.id}: copy its secret now, it is not shown again"
    if not committed:
        said += "; sent, but the writer has not committed it yet: it works once it has"
    return signed_page(request, login, "keys.html", keys=console.reader.api_keys()[:LISTED],
                       secret=made, said=said)


@router.post("/act/{name}")
async def act(request: Request, name: str) -> Response:
    _, form = await _checked_form(request, acting=True)
    action = ACTIONS.get(name)
    if action is None:
        raise NotFound(f"no console action {name!r}")
    said = await run_in_threadpool(_run, console_of(request), action, form)
    response = RedirectResponse(_back(form), 303)
    # Percent-encoded: a cookie carries latin-1 alone, and what was said may quote
    # anything (a fact's value in any script).
    response.set_cookie(SAID_COOKIE, quote(said[:500]), max_age=60, path="/ui", httponly=True,
                        samesite="strict", secure=request.url.scheme == "https")
    return response


async def _checked_form(request: Request, *, acting: bool = False) -> tuple[Login, Form]:
    """The session and its form, with its CSRF token; ``acting``: the person's."""
    login = await run_in_threadpool(signed_in, request)
    if acting:
        the_persons(login)
    form = await form_of(request)
    if not csrf_ok(login, form.optional("csrf")):
        raise PermissionDenied("this form's CSRF token is missing or not this session's: "
                               "reload the page and send it again")
    return login, form


def _run(console: Console, action: Action, form: Form) -> str:
    with console.acting:
        said = action(console, form)
        try:
            console.actor.flush(timeout=WAIT_S)
        except FlushTimeout:
            return f"{said}; sent, but the writer has not committed it yet (is it running?)"
    return said


def _back(form: Form) -> str:
    """The page the form came from: one of the console's, never another site."""
    back = form.optional("back") or "/ui/memory"
    if not back.startswith("/ui/") or "\\" in back or "//" in back or len(back) > MAX_BACK_CHARS:
        return "/ui/memory"
    return back


def _make_key(console: Console, form: Form) -> tuple[NewKey, bool]:
    """The key sent, and whether the writer committed it in time. Its secret is shown
    either way: the key is on its way, and its secret is nowhere else."""
    with console.acting:
        made = console.actor.create_key(
            form.one("name"), tenant=form.optional("tenant") or "default",
            users=form.listed("users"), agents=form.listed("agents"),
            can=form.fields.get("can") or ["read"], expires_at=form.optional("expires_at"))
        try:
            console.actor.flush(timeout=WAIT_S)
        except FlushTimeout:
            return made, False
    return made, True


Action = Callable[[Console, Form], str]


def _approve(console: Console, form: Form) -> str:
    stored = console.actor.allow_prefix(form.one("command"), tenant=form.optional("tenant"))
    return f"approved {stored!r}"


def _revoke_prefix(console: Console, form: Form) -> str:
    stored = console.actor.revoke_prefix(form.one("prefix"), tenant=form.optional("tenant"))
    return f"revoked {stored!r}"


def _set_fact(console: Console, form: Form) -> str:
    category, key, value = form.one("category"), form.one("key"), form.one("value")
    # The person's word: protected from agents, and it replaces theirs.
    console.actor.set_fact(category, key, value, source="user", force=True,
                           user_id=form.optional("user"))
    return f"set {category}/{key} = {value!r}"


def _delete_fact(console: Console, form: Form) -> str:
    category, key = form.one("category"), form.one("key")
    console.actor.delete_fact(category, key, source="user", user_id=form.optional("user"))
    return f"deleted {category}/{key}"


def _task(method: str, done: str) -> Action:
    def change(console: Console, form: Form) -> str:
        task_id = form.one("task_id")
        getattr(console.actor, method)(task_id)
        return f"{done} task {task_id}"
    return change


def _replay(console: Console, form: Form) -> str:
    ids = _rejected_ids(form, "replay")
    with console.reader.readers.connection() as conn:
        rows = [rejected.get(conn, i) for i in ids]
    with told(console, "replaying rejected events"):
        count = replay(console.actor.redis, rows)
    return f"replayed {count} event(s): the writer judges them again"


def _drop(console: Console, form: Form) -> str:
    ids = _rejected_ids(form, "drop")
    console.actor.drop_rejected(ids)
    return f"dropped {len(ids)} rejected event(s)"


def _rejected_ids(form: Form, doing: str) -> list[int]:
    ids = form.fields.get("id") or []
    if not ids or not all(REJECTED_ID.fullmatch(i) for i in ids):
        raise ValidationError(f"name the rejected events to {doing} by their ids (numbers)")
    return [int(i) for i in ids]


def _forget(what: str) -> Action:
    def erase(console: Console, form: Form) -> str:
        named = form.one(what)
        if form.optional("confirm") != tenants.split(named)[1]:
            raise ValidationError(f"type the {what}'s id exactly to confirm the forget")
        if what == "session":
            console.actor.forget_session(named)
        else:
            console.actor.forget_user(named)
        return f"forgot the {what} {named!r}: its memory is being erased"
    return erase


def _revoke_key(console: Console, form: Form) -> str:
    key_id = console.actor.revoke_key(form.one("key_id"))
    return f"revoked key {key_id}"


ACTIONS: dict[str, Action] = {
    "approve": _approve, "revoke_prefix": _revoke_prefix,
    "set_fact": _set_fact, "delete_fact": _delete_fact,
    "pause_task": _task("pause_task", "paused"), "resume_task": _task("resume_task", "resumed"),
    "delete_task": _task("delete_task", "deleted"),
    "replay": _replay, "drop": _drop,
    "forget_session": _forget("session"), "forget_user": _forget("user"),
    "revoke_key": _revoke_key,
}
