"""What each framework adapter adds to the memq call it makes, measured in one run.

Each pair runs the adapter's call and the client call underneath it, interleaved call by
call on one real writer, Redis and database, and prints the medians and their ratio (the
goal: at most x1.10). The conversation adapters write chat turns and 2-8 KB tool outputs
(an agent's stream) and read back a session of ``--turns`` such turns; the LangGraph store
puts, gets and searches documents (without embedding: the model's cost is the same on
both sides); the MCP server's tool runs in process, without a transport, once without
a query (the bare read) and once with a new question each call, as a model asks (the
question's embedding included, as in every get_context with a query).

Where the framework itself costs something whatever the backend, a third column measures
that *floor* in the same run: building LangChain's message objects for the same turns
(any history must return them), LangGraph's own in-memory store answering the same get,
and the MCP SDK calling a tool that returns the same items without asking memq. The last
column is what the adapter adds beyond the framework's floor: (adapter - floor) / client.

Then the OpenAI Agents session's ``pop_item``, which forgets the newest turn alone
(``forget_message``), against what it did before (forget the session, send every other
turn again: the baseline), on twin sessions of each length in ``--pop-turns``, ``--pops``
pops per side, one side after the other (a baseline pop writes the whole session again,
and the next forget would pay for merging those writes into the lexical index): median ms
until the forget is committed, and how many other turns kept their ids. No embedding
worker runs, so the jobs of every turn sent (the baseline's re-sends included) stay in
Redis, where the writer's after-commit sweep of a forget reads them all.

    .venv/bin/python bench/adapters.py [--calls 300] [--turns 60] [--pop-turns 10,100,1000]
                                       [--pops 5]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import chat_text, private_redis, scratch_dir
from memq import MemoryClient
from memq.config import Config
from memq.testing import WriterThread

Call = Callable[[int], Any]
Pair = tuple[Call, Call] | tuple[Call, Call, Call]
"""(adapter, client) or (adapter, client, framework floor)."""


def tool_output(i: int) -> str:
    return (f"$ pytest -q tests/test_{i}.py\n" + "FAILED test_case - AssertionError\n" * 60)[
        : 2048 + (i * 997) % 6144]


def turn(i: int) -> tuple[str, str]:
    return ("tool", tool_output(i)) if i % 3 == 2 else ("user", chat_text(i))


def timed(pairs: dict[str, Pair], calls: int) -> list[tuple[str, list[float]]]:
    """Median µs of (adapter, client[, floor]) per pair, interleaved call by call (the
    order rotating, so that none always runs first)."""
    rows = []
    for name, sides in pairs.items():
        spent: list[list[float]] = [[] for _ in sides]
        for i in range(calls):
            for k in range(len(sides)):
                side = (i + k) % len(sides)
                start = time.perf_counter()
                sides[side](i)
                spent[side].append(time.perf_counter() - start)
        rows.append((name, [statistics.median(s) * 1e6 for s in spent]))
    return rows


def conversation_pairs(client: MemoryClient, turns: int, calls: int) -> dict[str, Pair]:
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage

    from memq.integrations.langchain import MemqChatMessageHistory
    from memq.integrations.openai_agents import MemqSession

    for i in range(turns):
        client.append("read", *turn(i))
    client.flush()
    history = MemqChatMessageHistory("lc", client=client)
    session = MemqSession("oa", client=client)
    loop = asyncio.new_event_loop()
    # The framework's own objects are the caller's to make: made before the clock starts.
    texts = [chat_text(i) for i in range(calls)]
    messages = [[HumanMessage(text)] for text in texts]
    items: list[Any] = [[{"role": "user", "content": text}] for text in texts]

    reader = MemqChatMessageHistory("read", client=client)
    read_session = MemqSession("read", client=client)
    kinds = {"user": HumanMessage, "assistant": AIMessage}
    # The client call the adapters make: the turns alone, without consolidation summaries.
    read = client.history("read", limit=10_000, summaries=False)

    def langchain_objects(i: int) -> list[Any]:  # what any history must build to return
        return [ToolMessage(content=m.content, tool_call_id="") if m.role == "tool"
                else kinds[m.role](content=m.content) for m in read]

    async def append(i: int) -> None:  # the client calls, from the same event loop
        client.append("oa-base", "user", texts[i])

    async def read_history(i: int) -> Any:
        return client.history("read", limit=10_000, summaries=False)

    return {
        "langchain add_messages": (
            lambda i: history.add_messages(messages[i]),
            lambda i: client.append("lc-base", "user", texts[i])),
        "langchain messages": (
            lambda i: reader.messages,
            lambda i: client.history("read", limit=10_000, summaries=False),
            langchain_objects),
        "openai-agents add_items": (
            lambda i: loop.run_until_complete(session.add_items(items[i])),
            lambda i: loop.run_until_complete(append(i))),
        "openai-agents get_items": (
            lambda i: loop.run_until_complete(read_session.get_items()),
            lambda i: loop.run_until_complete(read_history(i))),
    }


def store_pairs(client: MemoryClient) -> dict[str, Pair]:
    from langgraph.store.memory import InMemoryStore

    from memq.integrations.langgraph import MemqStore

    store = MemqStore(client=client, index_fields=[])
    own = InMemoryStore()
    for i in range(200):
        client.put_document(("bench", f"u{i % 10}"), f"k{i}", {"text": chat_text(i), "n": i})
        own.put(("bench", f"u{i % 10}"), f"k{i}", {"text": chat_text(i), "n": i})
    client.flush()

    def put_and_flush(i: int) -> None:
        client.put_document(("base",), f"k{i}", {"text": chat_text(i)})
        client.flush()

    return {
        "langgraph put": (lambda i: store.put(("lg",), f"k{i}", {"text": chat_text(i)}),
                          put_and_flush),
        "langgraph get": (lambda i: store.get(("bench", f"u{i % 10}"), f"k{i % 200}"),
                          lambda i: client.document(("bench", f"u{i % 10}"), f"k{i % 200}"),
                          lambda i: own.get(("bench", f"u{i % 10}"), f"k{i % 200}")),
        "langgraph search": (lambda i: store.search(("bench",), filter={"n": {"$gte": 100}}),
                             lambda i: client.search_documents(("bench",),
                                                               filter={"n": {"$gte": 100}})),
    }


def mcp_pairs(client: MemoryClient) -> dict[str, Pair]:
    from mcp.server.mcpserver import MCPServer

    from memq.integrations.mcp import build_server

    server = build_server(client)
    loop = asyncio.new_event_loop()
    answer = [item.to_dict() for item in client.get_context("read")]
    bare = MCPServer("floor")

    @bare.tool()
    def recall(session_id: str, query: str | None = None,  # memq's signature, no memq
               scope: Literal["session", "user", "agent"] = "session") -> list[dict[str, Any]]:
        return answer

    async def recall_items(query: str | None = None) -> list[dict[str, Any]]:
        # The client call, from the same event loop.
        return [item.to_dict() for item in client.get_context("read", query)]

    def asked(i: int, side: str) -> dict[str, Any]:
        # A new question each call and each side, as a model asks: every one is embedded
        # (the client keeps recent queries' vectors, so a repeated one would not be).
        return {"session_id": "read", "query": f"{question(i)} ({side} {i})"}

    client.get_context("read", "a first question loads the model")
    return {
        "mcp recall (in process)": (
            lambda i: loop.run_until_complete(server.call_tool("recall",
                                                               {"session_id": "read"})),
            lambda i: loop.run_until_complete(recall_items()),
            lambda i: loop.run_until_complete(bare.call_tool("recall", {"session_id": "read"}))),
        "mcp recall, a new question": (
            lambda i: loop.run_until_complete(server.call_tool("recall", asked(i, "a"))),
            lambda i: loop.run_until_complete(recall_items(asked(i, "c")["query"])),
            lambda i: loop.run_until_complete(bare.call_tool("recall", asked(i, "f")))),
    }


def question(i: int) -> str:
    """What a model asks memory before answering: about something said earlier."""
    return f"What did we say earlier about this: {chat_text(i * 7 % 97)}?"


def fill(client: MemoryClient, session: str, turns: int) -> None:
    for i in range(turns):
        client.append(session, *turn(i))
    client.flush()


def resend_pop(client: MemoryClient, session: str) -> None:
    """The former pop_item: forget the session, send its other turns again."""
    turns = client.history(session, limit=10_000)
    client.forget_session(session)
    client.flush()
    for t in turns[:-1]:
        client.append(session, t.role, t.content, importance=t.importance,
                      tool_call_id=t.tool_call_id, tool_name=t.tool_name,
                      tool_calls=t.tool_calls, created_at=t.created_at)
    client.flush()


def pop_row(client: MemoryClient, turns: int, pops: int) -> tuple[int, float, float, int, int]:
    """(turns, median ms of pop_item, of the baseline, ids kept by each)."""
    from memq.integrations.openai_agents import MemqSession

    mine, theirs = f"pop-{turns}", f"resend-{turns}"
    fill(client, mine, turns)
    fill(client, theirs, turns)
    ids = {s: {m.id for m in client.history(s, limit=10_000)} for s in (mine, theirs)}
    session, loop = MemqSession(mine, client=client), asyncio.new_event_loop()
    spent = [median_ms(lambda: loop.run_until_complete(session.pop_item()), pops),
             median_ms(lambda: resend_pop(client, theirs), pops)]
    loop.close()
    kept = [len(ids[s] & {m.id for m in client.history(s, limit=10_000)}) for s in (mine, theirs)]
    return turns, spent[0], spent[1], kept[0], kept[1]


def median_ms(call: Callable[[], object], times: int) -> float:
    spent = []
    for _ in range(times):
        start = time.perf_counter()
        call()
        spent.append(time.perf_counter() - start)
    return statistics.median(spent) * 1000


def print_pops(rows: list[tuple[int, float, float, int, int]], pops: int) -> None:
    print(f"openai-agents pop_item: {pops} pops per side; median ms until committed")
    print(f"{'turns':>6} {'pop_item ms':>12} {'baseline ms':>12}  ratio  other turns' ids kept "
          "(pop_item / baseline)")
    for n, mine, theirs, kept_mine, kept_theirs in rows:
        print(f"{n:6d} {mine:12.1f} {theirs:12.1f}  x{theirs / mine:.1f}  "
              f"{kept_mine}/{n - pops} / {kept_theirs}/{n - pops}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--pop-turns", default="10,100,1000",
                        help="session lengths for pop_item, comma-separated")
    parser.add_argument("--pops", type=int, default=5)
    args = parser.parse_args(argv)
    pop_lengths = [int(n) for n in args.pop_turns.split(",")]
    if args.pops < 1 or any(n <= args.pops for n in pop_lengths):
        parser.error("--pops must be at least 1 and below every --pop-turns length")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    logging.disable(logging.INFO)  # the writer's line per batch would drown the table
    with private_redis() as url, scratch_dir() as tmp:
        config = Config(redis_url=url, db_path=str(tmp / "memq.db"))
        with WriterThread(config), MemoryClient(config=config) as client:
            pairs = {**conversation_pairs(client, args.turns, args.calls), **store_pairs(client),
                     **mcp_pairs(client)}
            rows = timed(pairs, args.calls)
            pops = [pop_row(client, n, args.pops) for n in pop_lengths]
    print(f"adapters: {args.calls} calls per side, interleaved; session of {args.turns} turns "
          "(a third 2-8 KB tool outputs); median µs")
    print(f"{'call':28} {'adapter µs':>11} {'client µs':>10} {'floor µs':>9}  ratio  "
          "beyond the floor")
    for name, (adapter, base, *floor) in rows:
        own = f"x{1 + (adapter - floor[0] - base) / base:.2f}" if floor else ""
        shown = f"{floor[0]:9.1f}" if floor else f"{'':9}"
        print(f"{name:28} {adapter:11.1f} {base:10.1f} {shown}  x{adapter / base:.2f}  {own}")
    print()
    print_pops(pops, args.pops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
