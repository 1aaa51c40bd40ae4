"""The async clients' methods, generated from ``surface.py`` by
``python -m memq.producers.unasync``: edit that file and run it again (a test fails
while the two differ)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from memq.producers.changes import ChangesPage
from memq.producers.context import ContextItem
from memq.producers.documents import FoundDocument
from memq.producers.keys import NewKey
from memq.producers.macros import MacroSuggestion
from memq.producers.mixin import check_flag
from memq.producers.prefixes import AllowedPrefix
from memq.producers.webhooks import NewWebhook
from memq.store.read.changes import Change
from memq.store.read.documents import Document
from memq.store.read.facts import Fact, FactChange
from memq.store.read.keys import ApiKey
from memq.store.read.messages import Message
from memq.store.read.sessions import SessionInfo
from memq.store.read.tasks import Task
from memq.store.read.webhooks import Webhook

Namespace = tuple[str, ...] | list[str]


class AsyncSurface:
    """Every method of the table; a client class supplies ``_call``."""

    async def _call(self, name: str, arguments: dict[str, Any]) -> Any:
        raise NotImplementedError

    # -- turns and context ------------------------------------------------------------

    async def append(
        self, session_id: str, role: str, content: str, *, importance: float | None = None,
        tool_call_id: str | None = None, tool_name: str | None = None,
        tool_calls: list[Any] | None = None, created_at: datetime | str | None = None,
        user_id: str | None = None, agent_id: str | None = None,
    ) -> str:
        """Record one conversation turn; returns its message id without waiting.

        ``user_id`` / ``agent_id`` say whose session it is: the first message of a
        session fixes them, later ones may leave them out, and naming anyone else raises
        :class:`ValidationError` (a session never moves to another user).
        """
        return await self._call("append", locals())

    async def append_many(self, turns: Sequence[Mapping[str, Any]]) -> list[str]:
        """Record many turns in few round trips; returns their message ids, in order.

        Each turn is a mapping of :meth:`append`'s arguments (``session_id``, ``role``,
        ``content`` and any keyword). All are checked before any is sent: one bad turn
        raises :class:`ValidationError` naming its index, and nothing is sent.
        """
        return await self._call("append_many", locals())

    async def flush(self, timeout: float = 10.0) -> None:
        """Return once everything this client sent is committed.

        :class:`~memq.errors.EventsRejected` (with each event id and reason) if the writer
        rejected any of it; :class:`~memq.errors.FlushTimeout` if it has not committed in
        ``timeout`` seconds. Cancelling an async flush loses nothing that was sent.
        """
        return await self._call("flush", locals())

    async def get_context(
        self, session_id: str, query: str | None = None, scope: str = "session"
    ) -> list[ContextItem]:
        """The session's context: every branch of the profile, deduplicated, oldest first;
        each item names the session it comes from.

        Without a query the semantic branch is skipped. ``scope``: ``"session"``, or every
        session of the session's user (``"user"``) or of its agent (``"agent"``).
        """
        return await self._call("get_context", locals())

    async def history(
        self, session_id: str, limit: int = 50, *,
        before: str | None = None, after: str | None = None, summaries: bool = True,
    ) -> list[Message]:
        """A page of a session's messages, oldest first: every committed one, whoever wrote
        it, and this client's own turns not committed yet.

        Without ``before`` / ``after``: the last ``limit``. With ``before=message_id``: the
        ``limit`` messages just older than that one, so ``history(s, before=page[0].id)``
        is the previous page; with ``after=message_id``, the ``limit`` just newer (what
        came since). Raises :class:`~memq.errors.NotFound` if that message is not a
        committed message of the session.

        Consolidation adds summaries (``system`` messages, each where the stretch it
        summarises begins, beside its sources while they are kept); ``summaries=False``
        leaves them out: the turns as they were appended, as a framework's session shows
        them.
        """
        return await self._call("history", locals())

    # -- sessions and forgetting ------------------------------------------------------

    async def sessions(
        self, user_id: str | None = None, agent_id: str | None = None, *, limit: int = 50,
        before: datetime | str | None = None, tenant: str | None = None,
    ) -> list[SessionInfo]:
        """Committed sessions, most recently active first, with their owner, first and last
        message times and message count; only ``user_id``'s and/or ``agent_id``'s when
        given, and only ``tenant``'s when given (:mod:`memq.tenants`; a key's always
        are its own tenant's). For the next page, pass the last one's ``last_active_at``
        as ``before``."""
        return await self._call("sessions", locals())

    async def forget_session(self, session_id: str) -> str:
        """Forget one session: its messages, summaries, vectors, index entries and the
        payloads of its events. Returns the event id (``wait_forgotten`` takes it)."""
        return await self._call("forget_session", locals())

    async def forget_message(self, session_id: str, message_id: str) -> str:
        """Forget one message of a session: its text, vector, index entry and the payloads
        of its events, and the summary built from it (whose other sources may then be
        summarised again). A message of another session is left alone. Returns the event
        id (``wait_forgotten`` takes it)."""
        return await self._call("forget_message", locals())

    async def forget_user(self, user_id: str) -> str:
        """Forget a user: every session of theirs (as :meth:`forget_session`) and their
        facts. Admin credentials only. Returns the event id."""
        return await self._call("forget_user", locals())

    async def wait_forgotten(self, event_id: str, timeout: float = 30.0) -> dict[str, Any]:
        """Wait until the writer has finished the forget ``event_id`` (committed, WAL
        truncated, RQ jobs deleted); returns what it erased: ``messages``, ``events``,
        ``jobs``. Raises :class:`FlushTimeout` if that takes longer than ``timeout``."""
        return await self._call("wait_forgotten", locals())

    # -- facts ------------------------------------------------------------------------

    async def set_fact(
        self, category: str, key: str, value: str, source: str = "agent", *,
        force: bool = False, user_id: str | None = None,
        valid_from: datetime | str | None = None,
    ) -> str:
        """Set a fact (upsert), ``user_id``'s or global; returns the event id. A value
        the person set (``source="user"``) changes only with ``force=True``. The value is
        true from ``valid_from`` (default: now); the one it replaces stops being true
        then, and stays in :meth:`fact_history` and :meth:`facts` ``as_of``."""
        return await self._call("set_fact", locals())

    async def delete_fact(
        self, category: str, key: str, source: str = "agent", *, force: bool = False,
        user_id: str | None = None, valid_to: datetime | str | None = None,
    ) -> str:
        """End a fact's current value, true until ``valid_to`` (default: now); its
        history stays. Returns the event id."""
        return await self._call("delete_fact", locals())

    async def facts(self, category: str | None = None, *, user_id: str | None = None,
              as_of: datetime | str | None = None) -> list[Fact]:
        """The global facts, and ``user_id``'s when given, by category then key; only
        ``category``'s when given. With ``as_of``: the values that were true then (as
        committed; this client's own unsent changes are not guessed into the past)."""
        return await self._call("facts", locals())

    async def fact_history(
        self, category: str, key: str, *, user_id: str | None = None
    ) -> list[FactChange]:
        """Every committed change of one fact (global, or ``user_id``'s), oldest first, with
        who made it, when memq learned it (``created_at``) and when each value was true
        in the world (``valid_from`` to ``valid_to``)."""
        return await self._call("fact_history", locals())

    # -- documents (the key-value store of agent frameworks) --------------------------

    async def put_document(
        self, namespace: Namespace, key: str, value: dict[str, Any], *,
        text: str | None = None, ttl_minutes: float | None = None, user_id: str | None = None,
    ) -> str:
        """Set a document (upsert); ``text``: what a search by meaning compares the query
        with. Returns the event id."""
        return await self._call("put_document", locals())

    async def delete_document(self, namespace: Namespace, key: str, *,
                        user_id: str | None = None) -> str:
        """Delete a document (nothing happens for one that does not exist)."""
        return await self._call("delete_document", locals())

    async def touch_document(self, namespace: Namespace, key: str, *,
                       user_id: str | None = None) -> str:
        """Restart a document's time to live (nothing for one without)."""
        return await self._call("touch_document", locals())

    async def document(self, namespace: Namespace, key: str, *,
                 user_id: str | None = None) -> Document | None:
        """One live document, or None."""
        return await self._call("document", locals())

    async def search_documents(
        self, prefix: Namespace = (), *, query: str | None = None,
        filter: dict[str, Any] | None = None, limit: int = 10, offset: int = 0,
        user_id: str | None = None,
    ) -> list[FoundDocument]:
        """Documents under ``prefix`` whose value matches ``filter`` (field: value, or
        field: {"$eq"/"$ne"/"$gt"/"$gte"/"$lt"/"$lte": value}); with ``query``, the closest
        in meaning first (then those without a vector), else the newest change first."""
        return await self._call("search_documents", locals())

    async def document_namespaces(self, *, user_id: str | None = None) -> list[tuple[str, ...]]:
        """Every namespace that holds a live document, in order."""
        return await self._call("document_namespaces", locals())

    # -- scheduled tasks --------------------------------------------------------------

    async def schedule_task(self, name: str, schedule: str, prompt: str, *, oneshot: bool = False,
                      trusted: bool = False, tz: str | None = None) -> str:
        """Schedule ``prompt`` to reach the agents on ``schedule``; returns the task id.

        ``schedule`` is cron or plain English ("weekdays at 8:30am", "in 2 hours"); it is
        read in ``tz`` (default: ``[scheduler] tz``). A one-time schedule makes a one-shot
        whatever ``oneshot`` says; ``oneshot=True`` with a repeating one is an error.
        ``trusted`` tasks' commands skip terminal approval: only admin may schedule one
        (:class:`PermissionDenied` for an agent, before anything else is looked at).
        """
        return await self._call("schedule_task", locals())

    async def pause_task(self, task_id: str) -> None:
        """Stop a task from firing until resumed; :class:`NotFound` for an unknown id.

        A trusted task, or one from the configuration, is the person's: only admin may
        pause, resume or delete it (:class:`PermissionDenied`).
        """
        return await self._call("pause_task", locals())

    async def resume_task(self, task_id: str) -> None:
        """Let a paused task fire again; its next run is computed from now."""
        return await self._call("resume_task", locals())

    async def delete_task(self, task_id: str) -> None:
        """Delete a task and its pending run; :class:`NotFound` for an unknown id."""
        return await self._call("delete_task", locals())

    async def task(self, task_id: str) -> Task:
        """One task, with this client's own changes; :class:`NotFound` if there is none."""
        return await self._call("task", locals())

    async def tasks(self) -> list[Task]:
        """Every task, with this client's own changes, by next run (paused ones last),
        then name."""
        return await self._call("tasks", locals())

    # -- terminal approvals -----------------------------------------------------------

    async def allow_prefix(self, command: str, *, tenant: str | None = None) -> str:
        """Approve ``command`` as an always-allowed prefix in ``tenant``; returns its stored
        form."""
        return await self._call("allow_prefix", locals())

    async def revoke_prefix(self, prefix: str, *, tenant: str | None = None) -> str:
        """Withdraw an approval of ``tenant``; returns the stored form that was revoked."""
        return await self._call("revoke_prefix", locals())

    async def allowed_prefixes(self, *, tenant: str | None = None) -> list[AllowedPrefix]:
        """Every prefix in force in ``tenant`` (None: the default tenant, or a key's own),
        sorted, with where it comes from (the configuration's are the default tenant's)."""
        return await self._call("allowed_prefixes", locals())

    async def is_command_allowed(self, command: str, *, trusted: bool = False,
                           tenant: str | None = None) -> bool:
        """True if ``command`` may run without asking in ``tenant`` (a key: its own). A
        trusted task's commands always may: whether a command comes from one is the
        runner's to know, so a server is never told (it answers for the approvals alone)."""
        if check_flag("trusted", trusted):
            return True
        return await self._call("is_command_allowed", locals())

    # -- tool macros ------------------------------------------------------------------

    async def record_tool_call(
        self, session_id: str, tool: str, args: Mapping[str, Any] | None = None
    ) -> str:
        """Record one tool call of a session, for learning; returns the event id."""
        return await self._call("record_tool_call", locals())

    async def suggest_next_tools(
        self, tool: str, args: Mapping[str, Any] | None = None
    ) -> list[MacroSuggestion]:
        """Likely next calls after ``tool(args)``, best first (committed macros only)."""
        return await self._call("suggest_next_tools", locals())

    async def use_macro(self, macro_id: int) -> str:
        """Count one use of a suggested macro; returns the event id."""
        return await self._call("use_macro", locals())

    # -- the change feed ----------------------------------------------------------------

    async def changes_page(
        self, after: int | None = None, *, types: list[str] | None = None,
        user_id: str | None = None, limit: int = 100, wait: float = 0.0,
    ) -> ChangesPage:
        """Up to ``limit`` committed changes after position ``after`` (None: the start of
        the feed) that the caller may read, in commit order; only ``types``' (event types
        or patterns such as ``"fact.*"``) and ``user_id``'s when given. With nothing new,
        waits up to ``wait`` seconds (at most 30) for a commit. A forgotten event shows
        with ``data=None``. :class:`~memq.errors.FeedExpired` if retention has deleted
        changes after ``after``: its ``horizon`` names where to start again."""
        return await self._call("changes_page", locals())

    async def changes(
        self, after: int | None = None, *, types: list[str] | None = None,
        user_id: str | None = None, follow: bool = True, wait: float = 10.0,
    ) -> AsyncIterator[Change]:
        """Every committed change after ``after`` the caller may read, in commit order,
        each once: page after page of :meth:`changes_page`. With ``follow`` it waits for
        new commits for ever (stop by leaving the loop); without, it ends once it has
        caught up. Keep the ``position`` of the last change handled: ``changes(after=
        position)`` goes on from there after a restart."""
        position, wait_s = after, wait if check_flag("follow", follow) else 0.0
        while True:
            page = await self.changes_page(
                position, types=types, user_id=user_id, limit=500, wait=wait_s)
            for change in page.changes:
                yield change
            if not follow and page.position >= page.newest:
                return
            position = page.position

    # -- API keys (the person's) -----------------------------------------------------

    async def create_key(
        self, name: str, *, users: Sequence[str] | None = None,
        agents: Sequence[str] | None = None, can: Sequence[str] = ("read", "write"),
        expires_at: datetime | str | None = None, units_per_s: int | None = None,
        concurrent: int | None = None, tenant: str = "default",
    ) -> NewKey:
        """Mint a key for ``memq serve``: its bearer reaches only ``tenant``'s ids (another
        tenant's ``alice`` is not its ``alice``), there only ``users`` (None: every user)
        and ``agents`` (None: every agent), and may do only what ``can`` lists (``read``,
        ``write``, ``forget``, ``delegate``). ``units_per_s`` / ``concurrent``: its own
        budget (default ``[limits]``). The secret is in the answer, and nowhere else. Admin
        credentials only."""
        return await self._call("create_key", locals())

    async def api_keys(self) -> list[ApiKey]:
        """Every key, newest first, revoked ones too (never a secret). Admin only."""
        return await self._call("api_keys", locals())

    async def revoke_key(self, key_id: str) -> str:
        """Revoke a key: every server refuses it within a second. Admin only."""
        return await self._call("revoke_key", locals())

    # -- webhooks (the person's) -------------------------------------------------------

    async def add_webhook(self, url: str, *, types: Sequence[str], user_id: str | None = None,
                    tenant: str | None = None) -> NewWebhook:
        """Send ``url`` every change committed from now on whose type is one of ``types``
        (types or patterns such as ``"fact.*"``); only ``tenant``'s when given, in its own
        names (``user_id`` is one of them), and only ``user_id``'s when given; signed with
        the secret in the answer, which is shown this once. Admin only."""
        return await self._call("add_webhook", locals())

    async def webhooks(self) -> list[Webhook]:
        """Every webhook, removed ones too (never a secret). Admin only."""
        return await self._call("webhooks", locals())

    async def remove_webhook(self, webhook_id: str) -> str:
        """Stop a webhook's deliveries. Admin only."""
        return await self._call("remove_webhook", locals())

    # -- what the writer set aside (the person's) --------------------------------------

    async def drop_rejected(self, rejected_ids: Sequence[int]) -> str:
        """Drop rejected events (``memq rejected list`` shows them) instead of replaying
        them; :class:`NotFound` names one that is not there. Admin only. Returns the event
        id."""
        return await self._call("drop_rejected", locals())


__all__ = ["AsyncSurface"]
