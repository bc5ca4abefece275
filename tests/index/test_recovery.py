"""The write-ahead log and start-up recovery: a damaged version never costs an acknowledged write.

Real chunker, BM25, FAISS and files; the stand-in embedder (the model is not the subject).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from citerag.index.build import write_index
from citerag.index.errors import DocumentNotFound
from citerag.index.recovery import IndexUnrecoverable, fold, recover, replay
from citerag.index.store import DAMAGED, IndexStore, load_version
from citerag.index.types import Document
from citerag.index.wal import LogEntry, WriteLog, WriteLogDamaged
from tests.conftest import StandInIndex


def doc(i: int, text: str | None = None) -> Document:
    body = text or f"Abstract {i} studies topic{i} with method{i} and reports result{i} on dataset{i}."
    return Document(f"d{i}", "", body, body[:20])


def source_file(tmp_path: Path, docs: list[Document]) -> Path:
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": d.doc_id, "text": d.text}) + "\n" for d in docs))
    return path


def write(s: StandInIndex, upserts=(), deletes=()):  # noqa: ANN201 - (Path, WriteReport)
    return write_index(s.store, s.embedder, s.chunker, s.config, upserts, deletes)


def full_build(s: StandInIndex, docs: list[Document], sources: list[str], logged_as: int | None = None) -> Path:
    """A full build from files, as `citerag index PATHS` does it (logged as a reset, or as replayed entry
    ``logged_as``). Returns the version directory."""
    from citerag.index.build import WriteOptions, write_index

    return write_index(s.store, s.embedder, s.chunker, s.config, docs, replace=True, sources={"sources": sources},
                       reset_sources=sources, options=WriteOptions(logged_as=logged_as))[0]


def restart(s: StandInIndex, sources: Path | None = None):  # noqa: ANN201 - LoadedIndex
    """What a start does: recover, replay, serve (a reset step re-reads ``sources``)."""
    from citerag.index.ingest import load_documents

    def rebuild(paths: list[str], seq: int) -> None:
        full_build(s, load_documents([Path(p) for p in paths]), paths, logged_as=seq)

    with s.store.writing():
        return replay(s.store, recover(s.store), s.embedder, s.chunker, rebuild)


def three_then_two(s: StandInIndex, tmp_path: Path) -> Path:
    """The issue's scenario: 3 documents built from a file (v1), 2 more written (v2). Returns v2's directory."""
    path = source_file(tmp_path, [doc(i) for i in range(3)])
    full_build(s, [doc(i) for i in range(3)], [str(path)])
    version, report = write(s, upserts=[doc(3), doc(4)])
    assert report.added == ["d3", "d4"]
    return version


# --- the log -------------------------------------------------------------------------------------------------


def test_log_entries_round_trip_with_increasing_numbers(tmp_path: Path) -> None:
    wal = WriteLog(tmp_path / "wal.jsonl")
    assert wal.append("reset", sources=["a.jsonl"]) == 1
    assert wal.append("write", documents=[doc(1)], doc_ids=["d0"]) == 2
    assert wal.append("abort", target=2) == 3
    assert wal.append("write", after=10, doc_ids=["d1"]) == 11  # never below what a version already holds
    state = wal.read()
    assert [(e.seq, e.op) for e in state.entries] == [(1, "reset"), (2, "write"), (3, "abort"), (11, "write")]
    assert state.entries[1].documents == (doc(1),) and state.entries[1].doc_ids == ("d0",)
    assert state.entries[0].sources == ("a.jsonl",) and state.entries[2].target == 2


def test_a_torn_last_line_is_an_unacknowledged_write_and_is_ignored(tmp_path: Path) -> None:
    wal = WriteLog(tmp_path / "wal.jsonl")
    wal.append("write", documents=[doc(1)])
    wal.append("write", documents=[doc(2)])
    data = wal.path.read_bytes()
    wal.path.write_bytes(data[:-15])  # the second append was cut short
    assert [e.seq for e in wal.read().entries] == [1]
    assert wal.append("write", documents=[doc(3)]) == 2  # the next append replaces the torn line
    assert [e.documents[0].doc_id for e in wal.read().entries] == ["d1", "d3"]


def test_a_damaged_last_complete_line_is_refused_not_taken_for_a_tear(tmp_path: Path) -> None:
    wal = WriteLog(tmp_path / "wal.jsonl")
    wal.append("write", documents=[doc(1)])
    wal.path.write_text(wal.path.read_text().replace("Abstract 1", "Abstract 9"))  # still newline-terminated
    with pytest.raises(WriteLogDamaged, match="wal.jsonl:1"):
        wal.read()


def test_a_damaged_line_before_the_last_is_refused(tmp_path: Path) -> None:
    wal = WriteLog(tmp_path / "wal.jsonl")
    wal.append("write", documents=[doc(1)])
    wal.append("write", documents=[doc(2)])
    lines = wal.path.read_text().splitlines()
    lines[0] = lines[0].replace("Abstract 1", "Abstract 9")  # valid JSON, wrong checksum
    wal.path.write_text("\n".join(lines) + "\n")
    with pytest.raises(WriteLogDamaged, match="wal.jsonl:1: unreadable log entry"):
        wal.read()


def test_cut_keeps_later_entries_and_the_numbering(tmp_path: Path) -> None:
    wal = WriteLog(tmp_path / "wal.jsonl")
    for i in range(4):
        wal.append("write", documents=[doc(i)])
    wal.cut(2)
    state = wal.read()
    assert state.base == 2 and [e.seq for e in state.entries] == [3, 4]
    wal.cut(4)
    assert wal.read().entries == [] and wal.append("write", doc_ids=["x"]) == 5


def test_fold_merges_writes_drops_aborts_and_splits_at_resets() -> None:
    a, b = doc(1), doc(2)
    steps = fold([
        LogEntry(1, "write", (a,)), LogEntry(2, "write", (b,)), LogEntry(3, "abort", target=2),
        LogEntry(4, "reset", sources=("s.jsonl",)), LogEntry(5, "write", (b,)), LogEntry(6, "write", doc_ids=("d2",)),
    ])
    assert [(st.seq, st.sources, st.upserts, st.deletes) for st in steps] == [
        (1, None, (a,), ()), (4, ("s.jsonl",), (), ()), (6, None, (), ("d2",)),
    ]


def test_fold_orders_the_upserts_as_the_writes_left_the_documents() -> None:
    """An added or replaced document after the others, one whose metadata alone changed in its place: a replay into a
    store that lacks them all gives the order the writes gave (tests/index/test_milvus.py replays such a log)."""
    a, b, c = doc(1), doc(2), doc(3)
    steps = fold([
        LogEntry(1, "write", (a, b, c)),
        LogEntry(2, "write", (dataclasses.replace(a, text="new text"), dataclasses.replace(b, meta={"year": 2020}))),
        LogEntry(3, "write", (c,), doc_ids=("d3",)),  # deleted and added again in one write
    ])
    assert [d.doc_id for d in steps[0].upserts] == ["d2", "d1", "d3"] and steps[0].deletes == ()


# --- writes and recovery -------------------------------------------------------------------------------------


def test_each_version_records_the_last_write_it_holds(stand_in: StandInIndex, tmp_path: Path) -> None:
    v2 = three_then_two(stand_in, tmp_path)
    assert load_version(v2).manifest["wal_seq"] == 2
    # v1 (the build, entry 1) and v2 are kept: the log keeps what the older of them does not hold
    state = stand_in.store.log.read()
    assert state.base == 1 and [(e.seq, e.op) for e in state.entries] == [(2, "write")]
    write(stand_in, deletes=["d0"])  # v3; v1 is pruned, so the log keeps only what v2 does not hold
    state = stand_in.store.log.read()
    assert state.base == 2 and [(e.seq, e.doc_ids) for e in state.entries] == [(3, ("d0",))]


def test_a_refused_write_is_not_logged(stand_in: StandInIndex, tmp_path: Path) -> None:
    three_then_two(stand_in, tmp_path)
    with pytest.raises(DocumentNotFound):
        write(stand_in, deletes=["nope"])
    assert [e.seq for e in stand_in.store.log.read().entries] == [2]


DAMAGE = ["documents.arrow", "passages.arrow", "bm25/params.index.json", "dense.faiss", "manifest.json"]


@pytest.mark.parametrize("how", ["truncate", "flip"])
@pytest.mark.parametrize("name", DAMAGE)
def test_a_damaged_live_version_is_set_aside_and_every_write_restored(
    stand_in: StandInIndex, tmp_path: Path, name: str, how: str
) -> None:
    v2 = three_then_two(stand_in, tmp_path)
    target = v2 / name if (v2 / name).exists() else next((v2 / "bm25").glob("*.npy"))
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2] if how == "truncate" else
                       data[:10] + bytes([data[10] ^ 0x01]) + data[11:])
    index = restart(stand_in)
    assert sorted(index.documents) == ["d0", "d1", "d2", "d3", "d4"]
    assert len(index.passages) == index.dense.size == index.bm25.size
    assert (stand_in.store.versions / DAMAGED / v2.name / "REASON.txt").is_file()
    assert stand_in.store.current() == index.path and index.manifest["wal_seq"] == 2
    assert restart(stand_in).path == index.path  # nothing left to replay


def test_a_logged_write_that_changes_nothing_is_replayed_once_and_recorded(
    stand_in: StandInIndex, tmp_path: Path
) -> None:
    path = source_file(tmp_path, [doc(i) for i in range(3)])
    v1 = full_build(stand_in, [doc(i) for i in range(3)], [str(path)])
    # a writer killed after logging, before committing: its write (d0 as it is) is acknowledged, never applied
    stand_in.store.log.append("write", after=1, documents=[doc(0)], doc_ids=[])
    index = restart(stand_in)
    assert sorted(index.documents) == ["d0", "d1", "d2"] and index.path != v1
    assert index.manifest["wal_seq"] == 2  # a version records the entry as held...
    assert not recover(stand_in.store).steps  # ...so the next start replays nothing


def test_with_no_verified_version_the_index_is_rebuilt_from_the_logged_sources(
    stand_in: StandInIndex, tmp_path: Path
) -> None:
    path = source_file(tmp_path, [doc(i) for i in range(3)])
    v1 = full_build(stand_in, [doc(i) for i in range(3)], [str(path)])
    (v1 / "passages.arrow").write_text("")
    index = restart(stand_in)
    assert sorted(index.documents) == ["d0", "d1", "d2"] and index.manifest["wal_seq"] == 1
    assert (stand_in.store.versions / DAMAGED / v1.name).is_dir() and not v1.exists()


def test_a_write_logged_after_the_log_was_cut_past_the_survivor_is_refused(
    stand_in: StandInIndex, tmp_path: Path
) -> None:
    three_then_two(stand_in, tmp_path)
    write(stand_in, upserts=[doc(5)])  # v3 (wal 3); v1 pruned; the log cut through 2
    for version in stand_in.store.version_dirs():  # v3 and v2 both damaged, and entries 1-2 were cut
        (version / "dense.faiss").write_bytes(b"")
    with pytest.raises(IndexUnrecoverable, match="citerag doctor"):
        restart(stand_in)


def test_the_newest_verified_version_wins_over_a_stale_current(stand_in: StandInIndex, tmp_path: Path) -> None:
    """A crash after the version was renamed into place but before CURRENT moved."""
    v2 = three_then_two(stand_in, tmp_path)
    v1 = [p for p in stand_in.store.version_dirs() if p != v2][0]
    stand_in.store.set_current(v1)
    index = restart(stand_in)
    assert index.path == v2 and sorted(index.documents) == ["d0", "d1", "d2", "d3", "d4"]
    assert IndexStore(stand_in.store.root).current() == v2


def test_a_second_start_after_a_refusal_refuses_again(stand_in: StandInIndex, tmp_path: Path) -> None:
    """The damaged versions were moved aside by the first start; the second must not take the directory for new."""
    three_then_two(stand_in, tmp_path)
    write(stand_in, upserts=[doc(5)])
    for version in stand_in.store.version_dirs():
        (version / "dense.faiss").write_bytes(b"")
    for _ in range(2):
        with pytest.raises(IndexUnrecoverable):
            restart(stand_in)
    assert not stand_in.store.version_dirs() and len(list((stand_in.store.versions / DAMAGED).iterdir())) == 2


def test_a_version_that_failed_to_become_live_is_removed(stand_in: StandInIndex, tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """CURRENT could not be written (disk full): the complete version must not be served later as the newest."""
    import citerag.index.store as store_module

    three_then_two(stand_in, tmp_path)
    real = store_module.atomic_write_text

    def full(path: Path, text: str) -> None:
        if path.name == "CURRENT":
            raise OSError(28, "No space left on device")
        real(path, text)

    monkeypatch.setattr(store_module, "atomic_write_text", full)
    with pytest.raises(OSError):
        write(stand_in, deletes=["d0"])
    monkeypatch.undo()
    assert len(stand_in.store.version_dirs()) == 2
    assert "d0" in restart(stand_in).documents  # the failed delete is not applied


def test_an_entry_left_by_a_dead_writer_is_dropped_by_the_next_write(stand_in: StandInIndex, tmp_path: Path) -> None:
    """A writer killed after its append never answered; the next writer must not claim to hold its entry."""
    three_then_two(stand_in, tmp_path)
    stand_in.store.log.append("write", after=2, documents=[doc(7)])  # logged, never applied (the writer died)
    version, _ = write(stand_in, upserts=[doc(8)])
    assert load_version(version).manifest["wal_seq"] == 5  # 3: the dead write, 4: its abort
    (version / "passages.arrow").write_text("")  # the new version is damaged: v2 plus the log must give d8
    index = restart(stand_in)
    assert sorted(index.documents) == ["d0", "d1", "d2", "d3", "d4", "d8"]


def test_a_read_error_of_the_machine_does_not_set_a_version_aside(
    stand_in: StandInIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import citerag.index.recovery as recovery_module

    three_then_two(stand_in, tmp_path)

    def unreadable(path: Path, mmap: bool = True, verify: str = "stat"):  # noqa: ANN202
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(recovery_module, "load_version", unreadable)
    with pytest.raises(IndexUnrecoverable, match="cannot be read"):
        restart(stand_in)
    assert len(stand_in.store.version_dirs()) == 2 and not (stand_in.store.versions / DAMAGED).exists()
