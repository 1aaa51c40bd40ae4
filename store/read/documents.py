"""Reading documents: one by its key, those under a namespace prefix, the namespaces.

Every read is one user's (or the global documents', for no user) and skips documents that
have expired, by the reader's clock, before the writer has deleted them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import apsw
import orjson


@dataclass(frozen=True)
class Document:
    namespace: tuple[str, ...]
    key: str
    value: dict[str, Any]
    created_at: str
    updated_at: str
    expires_at: str | None = None
    user_id: str | None = None
    embedding: bytes | None = None
    embedding_model: str | None = None


_FIELDS = ("namespace", "key", "value", "created_at", "updated_at", "expires_at", "user_id",
           "embedding", "embedding_model")
_COLUMNS = ", ".join(_FIELDS)
_LIVE = ("ifnull(user_id, '') = ifnull(:user, '') "
         "AND (expires_at IS NULL OR expires_at > :now)")
_ONE = f"SELECT {_COLUMNS} FROM documents WHERE {_LIVE} AND namespace = :namespace AND key = :key"
# A namespace is its labels as a JSON array: under ("a", "b") is '["a","b"]' itself and
# every namespace whose text starts with '["a","b",'.
_VECTORS_ONLY = ", ".join("'{}'" if field == "value" else field for field in _FIELDS)
"""The columns with an empty value in place of the document's: to rank by vector."""
_UNDER = f"""SELECT {{columns}} FROM documents WHERE {_LIVE}
    AND (:namespace IS NULL OR namespace = :namespace
         OR substr(namespace, 1, length(:open)) = :open)
    ORDER BY updated_at DESC, seq DESC
    LIMIT :limit OFFSET :offset"""
_NAMESPACES = f"SELECT DISTINCT namespace FROM documents WHERE {_LIVE} ORDER BY namespace"


def get_document(conn: apsw.Connection, namespace: tuple[str, ...], key: str, *,
                 user_id: str | None, now: str) -> Document | None:
    row = conn.execute(_ONE, {"user": user_id, "now": now, "namespace": _text(namespace),
                              "key": key}).fetchone()
    return None if row is None else _document(row)


def documents_under(conn: apsw.Connection, prefix: tuple[str, ...], *, user_id: str | None,
                    now: str, limit: int = -1, offset: int = 0, values: bool = True
                    ) -> list[Document]:
    """The live documents whose namespace starts with ``prefix``, newest change first;
    ``limit`` of them after ``offset`` (-1: all). A page is cut here, not after reading:
    a page of one document read every document under the prefix, each up to 1 MiB.
    Without ``values``, each value is ``{}``: enough to rank them by vector, and then
    read the page's alone."""
    text = _text(prefix) if prefix else None
    query = _UNDER.format(columns=_COLUMNS if values else _VECTORS_ONLY)
    return [_document(row) for row in conn.execute(
        query, {"user": user_id, "now": now, "namespace": text,
                 "open": None if text is None else text[:-1] + ",",
                 "limit": limit, "offset": offset})]


def namespaces(conn: apsw.Connection, *, user_id: str | None, now: str) -> list[tuple[str, ...]]:
    return [tuple(orjson.loads(row[0])) for row in conn.execute(
        _NAMESPACES, {"user": user_id, "now": now})]


def _text(namespace: tuple[str, ...]) -> str:
    # The writer's form (store/projections/documents.py: namespace_text), byte for byte.
    return orjson.dumps(list(namespace)).decode()


def _document(row: tuple[Any, ...]) -> Document:
    namespace, key, value, created, updated, expires, user, blob, model = row
    return Document(tuple(orjson.loads(namespace)), key, orjson.loads(value), created, updated,
                    expires, user, blob, model)
