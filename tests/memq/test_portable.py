"""The export format: what it writes reads back, and no change to a file goes unnoticed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memq import portable
from memq.errors import ValidationError

EVENTS = [
    {"id": f"e{i}", "type": "message.appended", "v": 1, "session_id": "s1",
     "created_at": "2026-12-05T00:00:00.000000Z",
     "payload": {"message_id": f"m{i}", "role": "user", "content": f"turn {i} ünïcode",
                 "importance": 0.5, "user_id": "alice"}}
    for i in range(4)
]


def exported() -> list[bytes]:
    return list(portable.write("alice", "default", "2026-12-05T00:00:00Z", EVENTS))


def test_an_export_reads_back_as_it_was_written() -> None:
    lines = exported()
    assert len(lines) == len(EVENTS) + 2
    back = portable.read(lines)
    assert (back.user_id, back.tenant, back.events) == ("alice", "default", EVENTS)


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_any_change_to_a_line_is_refused_naming_a_line(data: st.DataObject) -> None:
    lines = exported()
    number = data.draw(st.integers(1, len(lines)))
    line = lines[number - 1]
    at = data.draw(st.integers(0, len(line) - 2))  # not the newline
    byte = data.draw(st.integers(0, 255).filter(lambda b: b != line[at]))
    lines[number - 1] = line[:at] + bytes([byte]) + line[at + 1:]
    with pytest.raises(ValidationError, match=r"^line \d+: "):
        portable.read(lines)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_a_cut_reordered_or_spliced_file_is_refused(data: st.DataObject) -> None:
    lines = exported()
    how = data.draw(st.sampled_from(["cut", "drop", "swap", "twice", "after"]))
    i = data.draw(st.integers(1, len(lines) - 2))  # an event line
    if how == "cut":
        lines = lines[:data.draw(st.integers(0, len(lines) - 1))]
    elif how == "drop":
        del lines[i]
    elif how == "swap":
        lines[i], lines[i + 1] = lines[i + 1], lines[i]
    elif how == "twice":
        lines.insert(i, lines[i])
    else:
        lines.append(lines[i])
    if how == "swap" and lines[i] == lines[i + 1]:
        return
    with pytest.raises(ValidationError, match=r"^line \d+: "):
        portable.read(lines)


def test_a_file_of_another_version_or_kind_is_refused_by_name() -> None:
    with pytest.raises(ValidationError, match="line 1: export version 2; this memq reads"):
        portable.read([b'{"memq_export": 2, "user_id": "a", "tenant": "default"}\n'])
    with pytest.raises(ValidationError, match="line 1: not a memq export"):
        portable.read([b'{"hello": 1}\n'])
    with pytest.raises(ValidationError, match="line 1: not JSON"):
        portable.read([b"\x89PNG\r\n"])


def test_ids_move_into_a_tenant_and_a_copy_gets_ids_of_its_own() -> None:
    event = EVENTS[0]
    moved = portable.renamed(event, lambda name: f"acme\x1f{name}")
    assert (moved["session_id"], moved["payload"]["user_id"]) == ("acme\x1fs1",
                                                                   "acme\x1falice")
    copy = portable.rekeyed(moved, "acme")
    assert copy["id"] != event["id"]
    assert copy["payload"]["message_id"] != event["payload"]["message_id"]
    assert portable.rekeyed(moved, "acme") == copy  # the same every time: loads once
    assert portable.rekeyed(moved, "globex")["id"] != copy["id"]


def event(etype: str, payload: dict[str, object], session: str | None = None
          ) -> dict[str, object]:
    return {"id": "e", "type": etype, "v": 1, "session_id": session,
            "created_at": "2026-12-05T00:00:00.000000Z", "payload": payload}


TURN = {"message_id": "m1", "role": "user", "content": "x", "importance": 0.5}
OWNERS = {"bobs": "bob", "alices": "alice"}


@pytest.mark.parametrize(("hostile", "problem"), [
    (event("key.created", {"key_id": "k"}), "a key.created event is not a user's data"),
    (event("prefix.allowed", {"prefix": "rm"}), "is not a user's data"),
    (event("user.forgotten", {"user_id": "bob"}), "is not a user's data"),
    (event("fact.set", {"category": "c", "key": "k", "value": "v", "source": "user",
                        "user_id": "bob"}), "its user is 'bob', not the file's 'alice'"),
    (event("fact.set", {"category": "c", "key": "k", "value": "v", "source": "agent"}),
     "global data, no user's"),
    (event("message.appended", {**TURN, "user_id": "alice"}, "bobs"),
     "session 'bobs' is not 'alice''s"),
    (event("message.appended", TURN, "new"), "its first turn must name the user"),
    (event("message.appended", {**TURN, "user_id": "alice"}, "acme\x1fs1"),
     "an id holds a control character"),
    (event("message.embedded", {"message_id": "elsewhere", "model": "m", "dim": 1,
                                "vector_b64": "AAAAAA=="}),
     "a vector for a turn the file does not hold"),
])
def test_an_import_holds_the_files_users_data_and_nothing_else(
        hostile: dict[str, object], problem: str) -> None:
    export = portable.Export("alice", "default", [hostile])
    with pytest.raises(ValidationError, match=f"^line 2: .*{problem}"):
        portable.check_owned(export, OWNERS.get)


def test_the_users_own_sessions_turns_and_vectors_load() -> None:
    export = portable.Export("alice", "default", [
        event("message.appended", {**TURN, "user_id": "alice"}, "new"),
        event("message.appended", {**TURN, "message_id": "m2"}, "new"),
        event("message.appended", {**TURN, "message_id": "m3"}, "alices"),
        event("message.embedded", {"message_id": "m2", "model": "m", "dim": 1,
                                   "vector_b64": "AAAAAA=="}),
        event("fact.set", {"category": "c", "key": "k", "value": "v", "source": "user",
                           "user_id": "alice"}),
    ])
    portable.check_owned(export, OWNERS.get)
