"""Backup and restore of the index (index/backup.py, ``citerag backup`` / ``citerag restore``): a backup restores
every write acknowledged before it, a damaged backup changes nothing, and a backup or restore killed midway leaves
nothing half done.

Real chunker, BM25, FAISS and files; the stand-in embedder (the model is not the subject).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from importlib import metadata
from pathlib import Path

import pytest
from typer.testing import CliRunner

from citerag.index import faults
from citerag.index.backup import (
    MANIFEST,
    RESTORING,
    BadBackup,
    BadDestination,
    IndexBusy,
    backup,
    restore,
    verify_backup,
)
from citerag.index.recovery import IndexUnrecoverable, health, recover
from citerag.index.store import IndexStore, LoadedIndex
from citerag.service.cli import app
from tests.conftest import ROOT, StandInIndex
from tests.index.conftest import write_lock_held_elsewhere
from tests.index.test_recovery import doc, full_build, restart, source_file, write

runner = CliRunner()
# Runs backup() or restore() in a child process: argv = function, index directory, backup directory.
CHILD = ("import sys; from pathlib import Path; from citerag.index import backup; "
         "from citerag.index.store import IndexStore; "
         "getattr(backup, sys.argv[1])(IndexStore(Path(sys.argv[2])), Path(sys.argv[3]))")


def tree(root: Path) -> dict[str, str]:
    """Every path under ``root``: a file's sha256, or ``"dir"``."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


def contents(index: LoadedIndex) -> tuple[dict[str, str], list[tuple[str, str]]]:
    """The documents (id -> text) and the passages (chunk id, text), sorted."""
    return ({doc_id: index.documents[doc_id].text for doc_id in index.documents},
            sorted((p.chunk_id, p.text) for p in index.passages))


def five_documents(s: StandInIndex, tmp_path: Path) -> Path:
    """3 documents built from a file, then 2 written (logged): the live version holds log entries 1-2."""
    path = source_file(tmp_path, [doc(i) for i in range(3)])
    full_build(s, [doc(i) for i in range(3)], [str(path)])
    version, report = write(s, upserts=[doc(3), doc(4)])
    assert report.added == ["d3", "d4"]
    return version


def run_child(function: str, root: Path, target: Path, crash_at: str) -> subprocess.CompletedProcess:
    env = {**os.environ, faults.ENV: crash_at}
    return subprocess.run([sys.executable, "-c", CHILD, function, str(root), str(target)], check=False, cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)


def test_backup_then_restore_gives_back_every_write_acknowledged_before_the_backup(
    stand_in: StandInIndex, tmp_path: Path
) -> None:
    s = stand_in
    version = five_documents(s, tmp_path)
    s.store.log.append("write", after=2, documents=[doc(7)])  # logged by a writer that died before committing it
    at_backup = contents(s.store.load())

    report = backup(s.store, tmp_path / "bk")

    dest = tmp_path / "bk"
    info = json.loads((dest / MANIFEST).read_text())
    assert (report.version, report.wal_seq, report.wal_last) == (version.name, 2, 3)
    assert (report.documents, info["documents"], info["passages"]) == (5, 5, len(at_backup[1]))
    assert info["version"] == version.name and info["wal_seq"] == 2 and info["wal_last"] == 3
    assert info["citerag_version"] == metadata.version("citerag") and info["created_at"][:2] == "20"
    version_files = sorted(str(p.relative_to(version)) for p in version.rglob("*") if p.is_file())
    assert sorted(info["files"]) == sorted([f"version/{rel}" for rel in version_files] + ["wal.jsonl", "sources.json"])
    for rel, record in info["files"].items():
        file = dest / rel
        assert record["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
        assert record["size"] == file.stat().st_size
    for rel in version_files:  # the version's files as they are, mtimes included (a start checks sizes and mtimes)
        assert (dest / "version" / rel).read_bytes() == (version / rel).read_bytes()
        assert (dest / "version" / rel).stat().st_mtime_ns == (version / rel).stat().st_mtime_ns
    assert (dest / "wal.jsonl").read_bytes() == s.store.log.path.read_bytes()
    assert json.loads((dest / "sources.json").read_text())["sources"] == [str(tmp_path / "corpus.jsonl")]
    assert [p.name for p in tmp_path.glob(".bk.tmp-*")] == []

    write(s, upserts=[doc(8)])  # after the backup: not in the restored index
    write(s, deletes=["d0"])
    replaced_versions = sorted(p.name for p in s.store.version_dirs())
    restored = restore(s.store, dest)

    assert restored.version.parent == s.store.versions and restored.version.name.startswith("v000005-")
    assert (s.store.root / "CURRENT").read_text().strip() == restored.version.name
    assert (restored.backup_of, restored.documents, restored.wal_seq, restored.to_replay) == (version.name, 5, 2, 1)
    assert [p.name for p in s.store.version_dirs()] == [restored.version.name]
    assert restored.replaced is not None and restored.replaced.parent == s.store.versions / "replaced"
    kept = sorted(p.name for p in restored.replaced.iterdir())
    assert kept == sorted([*replaced_versions, "wal.jsonl", "sources.json"])
    assert s.store.log.path.read_bytes() == (dest / "wal.jsonl").read_bytes()
    assert not (s.store.root / RESTORING).exists()
    assert contents(s.store.load()) == at_backup  # files unchanged, and accepted on sizes and mtimes
    assert "1 to replay" in health(s.store)

    served = restart(s)  # the start replays the logged write the version lacked
    documents, passages = contents(served)
    assert documents == {**at_backup[0], "d7": doc(7).text}
    assert [p for p in passages if not p[0].startswith("d7#")] == at_backup[1]
    assert served.wal_seq == 3
    after, _ = write(s, upserts=[doc(9)])  # and writes go on from there
    assert sorted(s.store.load().documents) == ["d0", "d1", "d2", "d3", "d4", "d7", "d9"]
    assert after.name.startswith("v000007-")


@pytest.mark.parametrize(
    ("damage", "named"),
    [
        ("flip", "version/documents.arrow"),
        ("truncate", "wal.jsonl"),
        ("remove", "version/dense.faiss"),
        ("hash", "version/passages.arrow"),  # BACKUP.json itself altered: its hash of passages.arrow
    ],
)
def test_a_damaged_backup_is_refused_naming_the_file_and_the_index_is_unchanged(
    stand_in: StandInIndex, tmp_path: Path, damage: str, named: str
) -> None:
    s = stand_in
    five_documents(s, tmp_path)
    dest = tmp_path / "bk"
    backup(s.store, dest)
    write(s, upserts=[doc(8)])
    if damage == "flip":
        data = bytearray((dest / named).read_bytes())
        data[len(data) // 2] ^= 0x01
        (dest / named).write_bytes(bytes(data))
    elif damage == "truncate":
        (dest / named).write_bytes((dest / named).read_bytes()[:-10])
    elif damage == "remove":
        (dest / named).unlink()
    else:
        info = json.loads((dest / MANIFEST).read_text())
        info["files"][named]["sha256"] = "0" * 64
        (dest / MANIFEST).write_text(json.dumps(info))
    before = tree(s.store.root)

    with pytest.raises(BadBackup, match=re.escape(f"{dest / named}: ")):
        restore(s.store, dest)
    result = runner.invoke(app, ["restore", str(dest), "--index-dir", str(s.store.root)])

    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {dest / named}: ")
    assert ("missing" if damage == "remove" else "sha256 differs from BACKUP.json") in lines[0]
    assert tree(s.store.root) == before
    assert sorted(s.store.load().documents) == ["d0", "d1", "d2", "d3", "d4", "d8"]


@pytest.mark.parametrize("crash_at", ["backup-mid-copy", "backup-before-rename"])
def test_a_backup_killed_midway_leaves_no_backup_and_the_index_unchanged(
    stand_in: StandInIndex, tmp_path: Path, crash_at: str
) -> None:
    s = stand_in
    five_documents(s, tmp_path)
    dest = tmp_path / "backups" / "bk"
    before = tree(s.store.root)

    killed = run_child("backup", s.store.root, dest, crash_at)

    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not dest.exists()
    assert tree(s.store.root) == before
    [left] = list(dest.parent.glob(".bk.tmp-*"))  # its temporary directory, never read as a backup
    copied = [p for p in (left / "version").rglob("*") if p.is_file()]
    if crash_at == "backup-mid-copy":
        assert len(copied) == 1 and not (left / MANIFEST).exists()
    else:
        assert len(copied) > 1 and (left / MANIFEST).is_file()

    report = backup(s.store, dest)  # the next backup removes what the dead one left

    assert sorted(p.name for p in dest.parent.iterdir()) == ["bk"]
    assert verify_backup(dest)["version"] == report.version == s.store.current().name
    assert tree(s.store.root) == before


def test_backup_holds_the_write_lock_only_to_pick_the_version_and_log(
    stand_in: StandInIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writes commit while the backup copies (the second prunes the version being copied); the backup is still
    the version and the log as they were when it began."""
    s = stand_in
    version = five_documents(s, tmp_path)
    at_backup = contents(s.store.load())
    writer = threading.Thread(target=lambda: (write(s, upserts=[doc(8)]), write(s, deletes=["d0"])))
    point = faults.point

    def writes_meanwhile(name: str) -> None:
        if name == "backup-mid-copy":
            writer.start()
            writer.join(timeout=120)
            assert not writer.is_alive(), "the writer waited for the backup's lock"
        point(name)

    monkeypatch.setattr(faults, "point", writes_meanwhile)
    report = backup(s.store, tmp_path / "bk")
    monkeypatch.setattr(faults, "point", point)

    assert report.version == version.name and not version.exists()  # pruned while it was copied
    assert sorted(s.store.load().documents) == ["d1", "d2", "d3", "d4", "d8"]
    fresh = IndexStore(tmp_path / "fresh")  # a lost index directory, restored
    restored = restore(fresh, tmp_path / "bk")
    assert restored.replaced is None and restored.to_replay == 0
    assert contents(fresh.load()) == at_backup
    state = fresh.log.read()  # the log as the backup began: cut through entry 1 (the build), not through 5
    assert (state.base, [e.seq for e in state.entries]) == (1, [2])


def test_restore_refuses_while_another_writer_holds_the_lock(stand_in: StandInIndex, tmp_path: Path) -> None:
    s = stand_in
    five_documents(s, tmp_path)
    backup(s.store, tmp_path / "bk")
    write(s, upserts=[doc(8)])
    before = tree(s.store.root)
    with write_lock_held_elsewhere(s.store.root):
        with pytest.raises(IndexBusy, match="another writer holds .*write.lock"):
            restore(s.store, tmp_path / "bk")
        result = runner.invoke(app, ["restore", str(tmp_path / "bk"), "--index-dir", str(s.store.root)])

    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("error: another writer holds ")
    assert tree(s.store.root) == before
    assert restore(s.store, tmp_path / "bk").documents == 5  # once the writer is done


def test_a_restore_killed_midway_is_refused_at_start_until_run_again(stand_in: StandInIndex, tmp_path: Path) -> None:
    s = stand_in
    five_documents(s, tmp_path)
    at_backup = contents(s.store.load())
    dest = tmp_path / "bk"
    backup(s.store, dest)
    write(s, upserts=[doc(8)])

    killed = run_child("restore", s.store.root, dest, "restore-mid-install")

    assert killed.returncode == -9, killed.stderr[-2000:]
    assert (s.store.root / RESTORING).is_file()
    again = f"run `citerag restore {dest} --index-dir {s.store.root}` again"
    with pytest.raises(IndexUnrecoverable, match="did not finish") as refused, s.store.writing():
        recover(s.store)
    assert str(refused.value).endswith(again)
    with pytest.raises(IndexUnrecoverable, match="did not finish"):
        health(s.store)

    restored = restore(s.store, dest)

    assert not (s.store.root / RESTORING).exists()
    assert [p.name for p in s.store.version_dirs()] == [restored.version.name]
    assert contents(restart(s)) == at_backup


def test_backup_refuses_a_destination_that_exists_or_lies_in_the_index(stand_in: StandInIndex, tmp_path: Path) -> None:
    s = stand_in
    five_documents(s, tmp_path)
    before = tree(s.store.root)
    taken = tmp_path / "taken"
    taken.mkdir()

    with pytest.raises(BadDestination, match="already exists"):
        backup(s.store, taken)
    with pytest.raises(BadDestination, match="inside the index directory"):
        backup(s.store, s.store.root / "versions" / "bk")
    result = runner.invoke(app, ["backup", str(taken), "--index-dir", str(s.store.root)])

    assert result.exit_code == 2
    assert result.stderr == (f"error: {taken}: already exists; choose a new directory (a backup never overwrites "
                             "one)\n")
    assert list(taken.iterdir()) == [] and tree(s.store.root) == before
    empty = runner.invoke(app, ["backup", str(tmp_path / "bk"), "--index-dir", str(tmp_path / "none")])
    assert empty.exit_code == 2 and empty.stderr.startswith("error: no index in ")
    assert not (tmp_path / "bk").exists()


def test_the_commands_back_up_and_restore(stand_in: StandInIndex, tmp_path: Path) -> None:
    s = stand_in
    version = five_documents(s, tmp_path)
    at_backup = contents(s.store.load())
    dest = tmp_path / "bk"

    taken = runner.invoke(app, ["backup", str(dest), "--index-dir", str(s.store.root)])
    assert taken.exit_code == 0, taken.output
    assert taken.stdout.startswith(f"backed up {version.name} (5 documents, {len(at_backup[1])} passages, write log "
                                   f"through entry 2) to {dest} (")
    restored = runner.invoke(app, ["restore", str(dest), "--index-dir", str(tmp_path / "other")])
    assert restored.exit_code == 0, restored.output
    live = IndexStore(tmp_path / "other").current()
    assert live is not None
    assert restored.stdout == f"restored {version.name} (5 documents, {len(at_backup[1])} passages) as {live}\n"
    assert contents(IndexStore(tmp_path / "other").load()) == at_backup
