"""The JSON bodies of the API, as pydantic models: they make the OpenAPI schema and say
which fields a body has (an unknown one or a missing one is refused here).

What a value may hold is left to :class:`~memq.producers.client.MemoryClient`, which
checks every argument it is given: a field is declared with its type for the schema but
passed on as sent (``Any``), so a remote caller gets the local client's own messages
("limit must be an integer from 1 to 10000, got 2.5"), not a second, different set. Only
what the server itself must bound (how long a request may wait) is checked here.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

# Documented with their JSON type, passed on as sent (see the module).
Str = Annotated[Any, WithJsonSchema({"type": "string"})]
OptStr = Annotated[Any, WithJsonSchema({"type": ["string", "null"]})]
OptNum = Annotated[Any, WithJsonSchema({"type": ["number", "null"]})]
Int = Annotated[Any, WithJsonSchema({"type": "integer"})]
Bool = Annotated[Any, WithJsonSchema({"type": "boolean"})]
OptList = Annotated[Any, WithJsonSchema({"type": ["array", "null"]})]
OptObject = Annotated[Any, WithJsonSchema({"type": ["object", "null"]})]
Labels = Annotated[Any, WithJsonSchema({"type": "array", "items": {"type": "string"}})]
Object = Annotated[Any, WithJsonSchema({"type": "object"})]

MAX_BATCH = 1000
"""Most turns one ``POST /v1/messages/batch`` carries."""

MAX_WAIT_S = 300.0
"""Longest a request may wait for the writer (flush, forget)."""


class Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Turn(Body):
    """One conversation turn: :meth:`MemoryClient.append`'s arguments."""

    session_id: Str
    role: Str
    content: Str
    importance: OptNum = None
    tool_call_id: OptStr = None
    tool_name: OptStr = None
    tool_calls: OptList = None
    created_at: OptStr = None
    user_id: OptStr = None
    agent_id: OptStr = None


class Turns(Body):
    messages: list[Turn] = Field(max_length=MAX_BATCH)


POSITION = r"^[0-9]{1,20}-[0-9]{1,20}$"
"""An inbox position as ``Memq-Sent`` gives it."""


class Wait(Body):
    timeout: float = Field(default=10.0, gt=0, le=MAX_WAIT_S, strict=True)
    sent: str | None = Field(default=None, pattern=POSITION, strict=True,
                             description="the highest Memq-Sent this client was given")


class ContextQuery(Body):
    session_id: Str
    query: OptStr = None
    scope: Str = "session"


class HistoryQuery(Body):
    session_id: Str
    limit: Int = 50
    before: OptStr = None
    after: OptStr = None
    summaries: Bool = True


class SessionsQuery(Body):
    user_id: OptStr = None
    agent_id: OptStr = None
    limit: Int = 50
    before: OptStr = None


class FactsQuery(Body):
    category: OptStr = None
    user_id: OptStr = None


class FactHistoryQuery(Body):
    category: Str
    key: Str
    user_id: OptStr = None


class ForgetSession(Body):
    session_id: Str


class ForgetMessage(Body):
    session_id: Str
    message_id: Str


class ForgetUser(Body):
    user_id: Str


class WaitForgotten(Body):
    event_id: Str
    timeout: float = Field(default=30.0, gt=0, le=MAX_WAIT_S, strict=True)
    sent: str | None = Field(default=None, pattern=POSITION, strict=True)


class FactSet(Body):
    category: Str
    key: Str
    value: Str
    source: Str = "agent"
    force: Bool = False
    user_id: OptStr = None


class FactDelete(Body):
    category: Str
    key: Str
    source: Str = "agent"
    force: Bool = False
    user_id: OptStr = None


class DocumentPut(Body):
    namespace: Labels
    key: Str
    value: Object
    text: OptStr = None
    ttl_minutes: OptNum = None
    user_id: OptStr = None


class DocumentName(Body):
    namespace: Labels
    key: Str
    user_id: OptStr = None


class DocumentSearch(Body):
    prefix: Labels = Field(default_factory=list)
    query: OptStr = None
    filter: OptObject = None
    limit: Int = 10
    offset: Int = 0
    user_id: OptStr = None


class DocumentNamespaces(Body):
    user_id: OptStr = None


class TaskNew(Body):
    name: Str
    schedule: Str
    prompt: Str
    oneshot: Bool = False
    trusted: Bool = False
    tz: OptStr = None


class Command(Body):
    command: Str


class CommandCheck(Body):
    command: Str


class Prefix(Body):
    prefix: Str


class ToolCall(Body):
    session_id: Str
    tool: Str
    args: OptObject = None


class ToolSuggest(Body):
    tool: Str
    args: OptObject = None


# -- answers (for the schema; the server writes them with orjson) ----------------------------


class MessageId(BaseModel):
    id: str


class MessageIds(BaseModel):
    ids: list[str]


class EventId(BaseModel):
    event_id: str


class Flushed(BaseModel):
    flushed: bool


class Role(BaseModel):
    role: str


class Allowed(BaseModel):
    allowed: bool


class PrefixAnswer(BaseModel):
    prefix: str
