"""``memq backup`` and ``memq restore``: a round trip, and every refusal in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from memq.cli import main
from memq.store import schema
from memq.store.backup import check_copy


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "data" / "memq.db"
    schema.open_migrated(path)[0].close()
    return path


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_backup_then_restore_round_trip(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "backups" / "monday.db"
    code, _, err = run(capsys, "backup", "--db", str(db), str(copy))
    assert (code, err.strip()) == (1, f"memq: error: {copy.parent} is not a directory: "
                                      "create it first")
    copy.parent.mkdir()
    code, out, _ = run(capsys, "backup", "--db", str(db), str(copy))
    assert code == 0
    assert "backed up" in out
    target = tmp_path / "elsewhere" / "memq.db"
    code, out, _ = run(capsys, "restore", "--db", str(target), "--from", str(copy))
    assert code == 0, out
    assert check_copy(target) == 0
    assert copy.is_file()  # the backup itself stays as it was
    # Nothing left beside it: no scratch copy, no WAL or shared memory under its name.
    assert sorted(p.name for p in target.parent.iterdir()) == ["memq.db", "memq.db.writer.lock"]


def test_restore_refuses_to_replace_a_database_without_force(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy = tmp_path / "copy.db"
    assert run(capsys, "backup", "--db", str(db), str(copy))[0] == 0
    before = db.read_bytes()
    code, _, err = run(capsys, "restore", "--db", str(db), "--from", str(copy))
    assert code == 1
    assert "already exists" in err
    assert "--force" in err
    assert db.read_bytes() == before
    code, out, _ = run(capsys, "restore", "--db", str(db), "--from", str(copy), "--force")
    assert code == 0
    assert "replaced is in" in out
    assert list(db.parent.glob("memq.db.replaced-*/memq.db"))


def test_restore_refuses_a_lone_wal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A WAL left without its database would be applied to the restored file."""
    target = tmp_path / "memq.db"
    Path(f"{target}-wal").write_bytes(b"old pages")
    code, _, err = run(capsys, "restore", "--db", str(target), "--from", str(tmp_path / "x.db"))
    assert code == 1
    assert "already exists" in err


@pytest.mark.parametrize(("source", "message"), [
    (None, "restore from where"),
    ("http://example.invalid/db", "not a replica URL"),
    ("file://host/dir", "file:///absolute/dir"),
])
def test_restore_names_what_is_wrong_with_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: str | None, message: str
) -> None:
    args = ["restore", "--db", str(tmp_path / "memq.db")]
    code, _, err = run(capsys, *args, *(["--from", source] if source else []))
    assert code == 1
    assert message in err
    assert err.count("\n") == 1
    assert not (tmp_path / "memq.db").exists()


def test_restore_from_an_empty_replica_or_a_bad_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "memq.db"
    code, _, err = run(capsys, "restore", "--db", str(target),
                       "--from", (tmp_path / "no-replica").as_uri())
    assert code == 1
    assert "no matching backup files" in err
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database at all" * 100)
    code, _, err = run(capsys, "restore", "--db", str(target), "--from", str(junk))
    assert code == 1
    assert str(junk) in err
    assert not target.exists()
    assert [p.name for p in tmp_path.iterdir() if "partial" in p.name] == []


def test_backup_refuses_an_existing_file(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "backup", "--db", str(db), str(db))
    assert code == 1
    assert "already exists" in err


def test_replicate_needs_a_replica(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "replicate", "--db", str(tmp_path / "memq.db"))
    assert code == 1
    assert "[replication] url" in err


def test_the_procfiles_replicate_waits_quietly_without_a_replica(tmp_path: Path) -> None:
    import signal
    import subprocess

    from tests.conftest import ROOT, memq_command

    proc = subprocess.Popen(
        memq_command("replicate", "--if-configured", "--db", str(tmp_path / "memq.db")),
        cwd=ROOT, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    assert "nothing to replicate" in proc.stderr.readline()
    assert proc.poll() is None  # still there: a Procfile supervisor keeps the stack up
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 0
