"""A summariser behind an OpenAI-compatible chat-completions endpoint (the fast model).

One ``POST {base_url}/chat/completions`` per chunk, through the standard library (no
extra dependency), with the API key read from the environment variable the config names.
The model is asked for one JSON object: ``{"summary": "...", "facts": [...]}``.

What comes back decides what happens:

- not a chat completion at all (not JSON, no ``choices[0].message.content``), an HTTP
  error, a refused connection or no answer within ``timeout_s``: :class:`SummariserError`
  naming the endpoint and the cause; the job fails and the messages stay unconsolidated
  until a later pass;
- a completion whose content is not valid JSON: the content is the summary, and no facts
  are proposed (a summary is still useful; facts must be exact or absent);
- valid JSON without a ``summary`` text: :class:`SummariserError`;
- facts that are not a list, or entries that are not ``{category, key, value}`` text: left
  out, the summary stands.
"""

from __future__ import annotations

import http.client
import os
import re
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson

from memq.config import LLMConfig
from memq.errors import ConfigError, SummariserError, ValidationError
from memq.events import check_proposed_fact
from memq.logs import redact_url
from memq.workers.summarise import ChunkMessage, Fact, Summary, stamp

MAX_RESPONSE_BYTES = 1024 * 1024
"""A larger answer is not a summary of one chunk."""

MAX_FACTS = 20
"""Most facts one summary may propose; more is a model listing everything."""

SYSTEM_PROMPT = """\
You compress a stretch of a conversation into a summary that will replace it in a \
long-term memory. Keep every name, place, date, time, number and decision; keep who said \
or did what; drop greetings and small talk. Write plain sentences in the conversation's \
language, at most {words} words.
Also list durable facts worth remembering beyond this conversation (preferences, people, \
plans, settings), each as {{"category": "...", "key": "...", "value": "..."}}; none is fine.
Answer with one JSON object and nothing else:
{{"summary": "...", "facts": [...]}}"""

_FENCE = re.compile(r"^```(?:json)?\s*(?P<body>.*?)\s*```$", re.DOTALL)


class LLMSummariser:
    name = "llm"

    def __init__(self, config: LLMConfig, env: Mapping[str, str] | None = None) -> None:
        if urlsplit(config.base_url).scheme not in {"http", "https"}:
            raise ConfigError(f"[llm] base_url must be an http(s) URL, got {config.base_url!r}")
        self.config = config
        self.url = config.base_url.rstrip("/") + "/chat/completions"
        self.where = f"the model endpoint {redact_url(self.url)}"
        self.api_key = (os.environ if env is None else env).get(config.api_key_env, "")

    def summarise(self, messages: Sequence[ChunkMessage]) -> Summary:
        body = self._post(self.request_body(messages))
        return parse_reply(reply_content(body, self.where))

    def request_body(self, messages: Sequence[ChunkMessage]) -> dict[str, Any]:
        words = max(30, sum(len(m.content) for m in messages) // 20)  # ~30% at ~6 chars a word
        return {
            "model": self.config.model,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT.format(words=words)},
                {"role": "user", "content": transcript(messages)},
            ],
            "temperature": 0,
            "max_tokens": self.config.max_tokens,
        }

    def _post(self, payload: dict[str, Any]) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(
            self.url, data=orjson.dumps(payload), headers=headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.config.timeout_s) as response:
                body: bytes = response.read(MAX_RESPONSE_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise SummariserError(f"{self.where} answered {_http_error(exc)}") from exc
        except urllib.error.URLError as exc:
            raise self._unreachable(exc.reason) from exc
        except (OSError, http.client.HTTPException) as exc:
            raise self._unreachable(exc) from exc
        if len(body) > MAX_RESPONSE_BYTES:
            raise SummariserError(f"{self.where} answered more than {MAX_RESPONSE_BYTES} bytes")
        return body

    def _unreachable(self, reason: object) -> SummariserError:
        if isinstance(reason, TimeoutError):
            return SummariserError(
                f"{self.where} did not answer within {self.config.timeout_s:g} s"
            )
        return SummariserError(f"cannot reach {self.where}: {reason}")


def transcript(messages: Sequence[ChunkMessage]) -> str:
    """``[2023-05-25 13:14] user: text``, one message per line block."""
    return "\n".join(f"[{stamp(m)}] {m.role}: {m.content}" for m in messages)


def reply_content(body: bytes, where: str) -> str:
    """``choices[0].message.content`` of a chat completion, else :class:`SummariserError`."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise SummariserError(
            f"{where} answered something that is not JSON: {_snippet(body)}"
        ) from exc
    try:
        content = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError) as exc:
        raise SummariserError(
            f"{where} answered JSON that is not a chat completion "
            f"(no choices[0].message.content): {_snippet(body)}"
        ) from exc
    if not isinstance(content, str):
        raise SummariserError(f"{where} answered a completion without text content")
    return content


def parse_reply(content: str) -> Summary:
    """The model's content as a :class:`Summary`; see the module docstring for the rules."""
    text = content.strip()
    fenced = _FENCE.match(text)
    try:
        data = orjson.loads(fenced["body"] if fenced else text)
    except orjson.JSONDecodeError:
        return Summary(text)  # not JSON: a summary without facts
    if not isinstance(data, dict) or not isinstance(data.get("summary"), str):
        raise SummariserError('the model answered JSON without a "summary" text')
    return Summary(data["summary"].strip(), _facts(data.get("facts")))


def _facts(value: Any) -> tuple[Fact, ...]:
    if not isinstance(value, list):
        return ()
    facts: dict[tuple[str, str], Fact] = {}
    for item in value[:MAX_FACTS]:
        try:
            fact = check_proposed_fact(item)
        except ValidationError:
            continue  # one malformed entry does not spoil the others
        facts.setdefault((fact["category"], fact["key"]), Fact(**fact))
    return tuple(facts.values())


def _http_error(exc: urllib.error.HTTPError) -> str:
    try:
        detail = _snippet(exc.read(300))
    except OSError:
        detail = ""
    return f"HTTP {exc.code} {exc.reason}: {detail}".rstrip(": ")


def _snippet(body: bytes, limit: int = 120) -> str:
    text = body[:limit].decode("utf-8", "replace")
    return repr(text + ("…" if len(body) > limit else ""))
