"""What taking one conversation out of the lexical index costs as the index grows.

Forgetting a session must leave none of its words in ``messages_fts``. The index reads
its text back from ``messages`` (external content), so FTS5 deletes a few messages' words
in place ('secure-delete'): ``store.lexical.unindex``. The baseline, in the same run on a
copy of the same database, is how memq did it before: a contentless index, which can only
drop deleted rows' words by rewriting every segment ('optimize'), whatever was deleted.

For each size, a database of that many messages (three users; a third of the messages
2-8 KB tool outputs, as ``bench/forget.py`` builds them) loses ``--forget`` messages of
one session; the figure is the transaction, wall and CPU time.

    .venv/bin/python bench/unindex.py [--sizes 30000,120000] [--forget 20]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path

import apsw
import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import private_redis, scratch_dir
from bench.forget import FORGOTTEN, build
from memq.config import Config
from memq.store import lexical
from memq.store.connection import open_connection
from memq.store.write.service import open_writer

SESSION = "u-other-0-s1"

_CONTENTLESS = """
    DROP TABLE messages_fts;
    CREATE VIRTUAL TABLE messages_fts USING fts5(
        content, session, user, agent, content = '', contentless_delete = 1,
        tokenize = 'porter unicode61 remove_diacritics 2');
    INSERT INTO messages_fts (rowid, content, session, user, agent)
        SELECT seq, content, session, user, agent FROM messages_fts_source"""


def database(directory: Path, messages: int) -> Path:
    path = directory / f"memq-{messages}.db"
    with private_redis() as url:  # a Redis belongs to one database
        writer = open_writer(Config(redis_url=url, db_path=str(path)),
                             redis.Redis.from_url(url))
        try:
            build(writer, [FORGOTTEN, "u-other-0", "u-other-1"], 40, messages // 3)
        finally:
            writer.close()
    return path


def copy(path: Path, name: str) -> apsw.Connection:
    target = path.with_name(name)
    shutil.copyfile(path, target)
    return open_connection(target)


def timed(conn: apsw.Connection, work: Callable[[apsw.Cursor], None]) -> tuple[float, float]:
    cur = conn.cursor()
    began, cpu = time.perf_counter(), time.process_time()
    with conn:
        work(cur)
    return time.perf_counter() - began, time.process_time() - cpu


def seqs(conn: apsw.Connection, count: int) -> list[int]:
    return [int(r[0]) for r in conn.execute(
        "SELECT seq FROM messages WHERE session_id = ? ORDER BY seq LIMIT ?", (SESSION, count))]


def rewritten(doomed: list[int]) -> Callable[[apsw.Cursor], None]:
    def work(cur: apsw.Cursor) -> None:
        cur.execute("DELETE FROM messages_fts WHERE rowid IN (SELECT value FROM json_each(?))",
                    (str(doomed),))
        cur.execute("INSERT INTO messages_fts (messages_fts) VALUES ('optimize')")
    return work


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="30000,120000", help="messages, comma-separated")
    parser.add_argument("--forget", type=int, default=20, help="messages of one session")
    args = parser.parse_args()
    print(f"taking {args.forget} messages of one session out of the lexical index; "
          "wall / CPU ms")
    print(f"{'messages':>9} {'in place (now)':>18} {'rewriting (before)':>20}  ratio (CPU)")
    with scratch_dir() as tmp:
        for size in (int(s) for s in args.sizes.split(",")):
            path = database(tmp, size)
            now = copy(path, "now.db")
            before = copy(path, "before.db")
            before.execute(_CONTENTLESS)
            before.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_TRUNCATE)
            doomed = seqs(now, args.forget)
            new = timed(now, lambda cur: lexical.unindex(cur, doomed))  # noqa: B023
            old = timed(before, rewritten(doomed))
            now.close()
            before.close()
            print(f"{size:>9,} {new[0] * 1e3:8.1f} / {new[1] * 1e3:6.1f} "
                  f"{old[0] * 1e3:10.1f} / {old[1] * 1e3:6.1f}  x{old[1] / new[1]:.1f}")


if __name__ == "__main__":
    main()
