"""A full disk under the index: every writer's error is recognised, nothing half-written is left or served, the
write log stays parseable and holds no unacknowledged write, and the next write after space returns succeeds.

Real files on a real 8 MiB tmpfs filled to the brim (``small_disk``; skipped where mounting is refused), the real
chunker, BM25 and FAISS, and the stand-in embedder (the model is not the subject).
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from citerag.index.build import write_index
from citerag.index.dense import DenseIndex
from citerag.index.diskspace import WATCH, DiskFull, is_disk_full
from citerag.index.embed_cache import CachedEmbedder, cache_usage
from citerag.index.store import IndexStore
from citerag.index.tables import write_table
from citerag.index.types import Document
from citerag.index.wal import WriteLog
from tests.conftest import HashEmbedder, SmallDisk, StandInIndex
from tests.index.test_recovery import doc, restart


@pytest.fixture(autouse=True)
def no_conditions() -> Iterator[None]:
    WATCH.reset()
    yield
    WATCH.reset()


def long_doc(i: int, words: int = 900) -> Document:
    """A document of ``words`` distinct words (several KiB: a write of a few of them needs new pages)."""
    body = " ".join(f"w{i}x{j}" for j in range(words))
    return Document(f"long{i}", "", body, body[:20])


def dense(n: int) -> DenseIndex:
    """A flat FAISS index of ``n`` random 32-d vectors."""
    index = DenseIndex(32)
    index.add(np.random.default_rng(0).random((n, 32), dtype=np.float32))
    return index


def tmp_versions(store: IndexStore) -> list[Path]:
    return list(store.versions.glob(".tmp-*"))


# --- recognising it ------------------------------------------------------------------------------------------


def test_the_error_of_each_writer_on_a_full_disk_is_recognised(small_disk: SmallDisk) -> None:
    assert small_disk.fill() == 0
    errors: list[BaseException] = []
    for write in (
        lambda: (small_disk.root / "a.txt").write_text("x" * 10_000),
        lambda: np.save(small_disk.root / "a.npy", np.zeros(10_000)),
        lambda: write_table(small_disk.root / "a.arrow", pa.table({"x": list(range(10_000))})),
        lambda: dense(200).save(small_disk.root),
    ):
        with pytest.raises((OSError, RuntimeError)) as caught:
            write()
        errors.append(caught.value)
    assert [type(e).__name__ for e in errors] == ["OSError", "OSError", "OSError", "OSError"]
    assert all(e.errno == errno.ENOSPC for e in errors if isinstance(e, OSError))
    assert all(is_disk_full(e) for e in errors)
    # FAISS writing a file itself raises a RuntimeError naming strerror(ENOSPC)
    faiss_error = RuntimeError("Error in faiss::write_index: write error in x.faiss: 8147 != 25600 "
                               "(No space left on device)")
    quota = OSError(errno.EDQUOT, "Disk quota exceeded")
    wrapped = RuntimeError("saving the prompt state failed")
    wrapped.__cause__ = OSError(errno.ENOSPC, "No space left on device")
    assert is_disk_full(faiss_error) and is_disk_full(quota) and is_disk_full(wrapped)
    assert not is_disk_full(PermissionError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(RuntimeError("write error in x.faiss: 1 != 2 (Input/output error)"))
    full = DiskFull.of(quota, "index", small_disk.root / "idx")
    assert full.quota and full.errno == errno.EDQUOT and "the disk quota is used up" in str(full)


def test_a_small_faiss_index_on_a_full_disk_fails_instead_of_saving_an_empty_file(small_disk: SmallDisk) -> None:
    """FAISS's own fopen/fwrite ignores fclose's error: an index that fits in the C buffer came out empty with no
    error. DenseIndex.save writes through Python, so the write fails."""
    small_disk.fill()
    small = dense(20)  # 2.6 KB
    with pytest.raises(OSError) as caught:
        small.save(small_disk.root)
    assert caught.value.errno == errno.ENOSPC
    small_disk.empty()
    small.save(small_disk.root)
    assert DenseIndex.load(small_disk.root, mmap=False).size == 20


def test_the_message_names_the_file_system_the_bytes_free_and_what_to_free(small_disk: SmallDisk) -> None:
    small_disk.fill()
    full = DiskFull.of(OSError(errno.ENOSPC, "No space left on device"), "index", small_disk.root / "idx")
    assert (full.part, full.path, full.filesystem, full.free_bytes) == ("index", str(small_disk.root / "idx"),
                                                                         str(small_disk.root), 0)
    assert str(full) == (
        f"index write to {small_disk.root / 'idx'} failed, no space left on device: free space on {small_disk.root} "
        "(0 B free): remove damaged versions (versions/damaged/), versions a restore replaced (versions/replaced/), "
        "other files or old cache entries there, or raise the disk quota, then retry; nothing was written and the "
        "live version goes on serving"
    )
    assert isinstance(full, OSError) and full.errno == errno.ENOSPC


# --- the write-ahead log -------------------------------------------------------------------------------------


def test_a_log_append_that_fails_for_space_leaves_the_log_as_it_was(small_disk: SmallDisk) -> None:
    wal = WriteLog(small_disk.root / "wal.jsonl")
    assert wal.append("write", documents=[doc(1)]) == 1
    before = wal.path.read_bytes()
    small_disk.fill()
    with pytest.raises(OSError) as caught:
        wal.append("write", documents=[long_doc(i) for i in range(3)])  # ~20 KiB: needs pages there are not
    assert caught.value.errno == errno.ENOSPC
    assert wal.path.read_bytes() == before  # no torn line: nothing of the refused entry
    assert [(e.seq, e.documents[0].doc_id) for e in wal.read().entries] == [(1, "d1")]
    small_disk.empty()
    assert wal.append("write", documents=[doc(2)]) == 2


def test_a_write_whose_abort_cannot_be_logged_is_cut_off_the_log(
    stand_in: StandInIndex, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version failed for space after the log took the write, and the abort found no room either: the entry
    is cut off the log instead, so no start replays a write that was never acknowledged."""
    import citerag.index.store as store_module

    stand_in.build([doc(i) for i in range(3)])
    version, _ = write_index(stand_in.store, stand_in.embedder, stand_in.chunker, stand_in.config, [doc(3)])
    logged = stand_in.store.log.path.read_bytes()

    def full(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    real_append = WriteLog.append

    def append(self: WriteLog, op: str, **kwargs: object) -> int:
        if op == "abort":
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_append(self, op, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store_module, "_write_manifest", full)
    monkeypatch.setattr(WriteLog, "append", append)
    with pytest.raises(DiskFull):
        write_index(stand_in.store, stand_in.embedder, stand_in.chunker, stand_in.config, [doc(4)])
    monkeypatch.undo()
    assert stand_in.store.log.path.read_bytes() == logged  # the write entry is gone with its failed abort
    assert stand_in.store.current() == version and tmp_versions(stand_in.store) == []
    assert sorted(restart(stand_in).documents) == ["d0", "d1", "d2", "d3"]


# --- a whole write on a full disk ----------------------------------------------------------------------------


@pytest.mark.parametrize("leave", [0, 48 * 1024], ids=["log-refused", "version-refused"])
def test_a_write_on_a_full_disk_changes_nothing_and_the_next_one_after_space_returns_succeeds(
    small_disk: SmallDisk, tokenizer, leave: int
) -> None:
    """``leave=0``: the log append itself is refused; 48 KiB: the log takes the entry, the version's files do not
    fit (each file takes at least a 4 KiB page). Either way: DiskFull naming the tmpfs, the live version
    unchanged and still loading, no temporary version, a log that parses and replays nothing."""
    s = StandInIndex(small_disk.root / "idx", tokenizer)
    s.build([doc(i) for i in range(3)])
    live, _ = write_index(s.store, s.embedder, s.chunker, s.config, [doc(3)])  # acknowledged
    logged = s.store.log.path.read_bytes()
    small_disk.fill(leave)
    with pytest.raises(DiskFull) as caught:
        write_index(s.store, s.embedder, s.chunker, s.config, [long_doc(i) for i in range(4)], ["d0"])
    full = caught.value
    assert (full.part, full.path, full.filesystem) == ("index", str(s.store.root), str(small_disk.root))
    assert 0 <= full.free_bytes <= leave + 8192 and is_disk_full(full.__cause__)  # type: ignore[arg-type]
    assert [(c.error.part, c.error.path, c.failures) for c in WATCH.conditions()] == [("index", str(s.store.root), 1)]

    assert s.store.current() == live and tmp_versions(s.store) == []
    assert [p.name for p in s.store.version_dirs()] == sorted((p.name for p in s.store.version_dirs()), reverse=True)
    assert sorted(s.store.load().documents) == ["d0", "d1", "d2", "d3"]
    entries = s.store.log.read().entries  # parses; the refused write is absent, or logged and aborted
    if leave == 0:
        assert s.store.log.path.read_bytes() == logged
    else:
        assert [(e.op, e.doc_ids, e.target) for e in entries[-2:]] == [("write", ("d0",), 0),
                                                                       ("abort", (), entries[-2].seq)]
    assert sorted(restart(s).documents) == ["d0", "d1", "d2", "d3"]  # a restart on the full disk replays nothing

    small_disk.empty()
    version, report = write_index(s.store, s.embedder, s.chunker, s.config, [long_doc(i) for i in range(4)], ["d0"])
    assert report.added == ["long0", "long1", "long2", "long3"] and report.deleted == ["d0"]
    assert s.store.current() == version and WATCH.conditions() == []
    assert sorted(restart(s).documents) == ["d1", "d2", "d3", "long0", "long1", "long2", "long3"]


# --- the embedding cache -------------------------------------------------------------------------------------


def test_the_embedding_cache_skips_a_shard_on_a_full_disk_and_writes_again_once_there_is_room(
    small_disk: SmallDisk
) -> None:
    root = small_disk.root / "embeddings"
    texts = [f"passage {i} about topic{i}" for i in range(300)]
    expected = HashEmbedder().encode(texts)
    small_disk.fill()
    with CachedEmbedder(HashEmbedder(), root) as cached:
        vectors = cached.encode(texts)  # the shard is written at close: refused, skipped with a warning
    assert np.array_equal(vectors, expected)
    assert cache_usage(root) == (0, 0) and not list(root.rglob(".*.npy.*"))  # no temporary file left
    [condition] = WATCH.conditions()
    assert (condition.error.part, condition.error.path, condition.error.free_bytes) == ("embedding cache", str(root), 0)

    small_disk.empty()
    with CachedEmbedder(HashEmbedder(), root) as cached:
        cached.encode(texts)
    assert cache_usage(root)[0] == 1 and WATCH.conditions() == []
    with CachedEmbedder(HashEmbedder(), root) as cached:
        assert np.array_equal(cached.encode(texts), expected) and cached.hits == 300
