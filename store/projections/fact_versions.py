"""``fact_versions``: every value a fact held, with when it was true and when memq knew.

Two clocks per value. ``valid_from`` / ``valid_to``: when it was true in the world, as the
event says (``fact.set``'s ``valid_from``, ``fact.deleted``'s ``valid_to``) or else when
the event was sent. ``recorded_at`` / ``ended_at``: when memq learned it, and learned it
ended. Setting a new value ends the open one at the new value's ``valid_from`` instead of
erasing it; deleting a fact ends it. A change the user-fact guard refused (the ``facts``
projection decides it) changes nothing here either. An end is never before its start: a
value backdated past the open one's start ends that one where it began.
"""

from __future__ import annotations

import apsw

_KEY = "ifnull(user_id, '') = ifnull(:user, '') AND category = :category AND key = :key"
_OPEN = f"{_KEY} AND valid_to IS NULL"


def begin(cur: apsw.Cursor, seq: int, names: tuple[str, str, str | None], value: str,
          source: str, *, valid_from: str, at: str) -> None:
    """A new value of the fact ``names`` (category, key, user) from ``valid_from``."""
    end(cur, names, valid_to=valid_from, at=at)
    category, key, user = names
    cur.execute("""INSERT INTO fact_versions (seq, user_id, category, key, value, source,
                                              valid_from, recorded_at)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?)""",
                (seq, user, category, key, value, source, valid_from, at))


def end(cur: apsw.Cursor, names: tuple[str, str, str | None], *, valid_to: str,
        at: str) -> None:
    """The fact's open value, if any, stops being true at ``valid_to``."""
    category, key, user = names
    cur.execute(f"""UPDATE fact_versions SET valid_to = max(valid_from, :valid_to),
                        ended_at = :at
                    WHERE {_OPEN}""",
                {"user": user, "category": category, "key": key, "valid_to": valid_to,
                 "at": at})


def forget_user(cur: apsw.Cursor, user_id: str) -> None:
    cur.execute("DELETE FROM fact_versions WHERE user_id = ?", (user_id,))
