"""Bounded disk use of the index and the embedding cache (issue 54): versions beyond ``keep_versions`` go while the
write log still restores every acknowledged write from any kept version, the embedding cache stays within its bound
evicting the least recently used shards first, and what killed writers left is removed at the next start.

Real chunker, BM25, FAISS and files; the stand-in embedder (the model is not the subject).
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from typing import NoReturn

import pytest
from pydantic import ValidationError

from citerag.index.build import write_index
from citerag.index.embed_cache import (
    DEFAULT_MAX_MB,
    STALE_SECONDS,
    CachedEmbedder,
    _shard_dtype,
    cache_usage,
    prune_cache,
)
from citerag.index.lifecycle import IndexSetup, recover_index
from citerag.index.recovery import recover, replay
from citerag.index.store import DAMAGED, KEEP_VERSIONS, IndexStore, LoadedIndex, wal_seq
from citerag.index.types import Document
from tests.conftest import CountingEmbedder, HashEmbedder, StandInIndex
from tests.index.conftest import write_lock_held_elsewhere


def doc(i: int, text: str | None = None) -> Document:
    body = text or f"Abstract {i} studies topic{i} with method{i} and reports result{i} on dataset{i}."
    return Document(f"d{i}", "", body, body[:20])


def write(s: StandInIndex, upserts=(), deletes=()) -> Path:
    return write_index(s.store, s.embedder, s.chunker, s.config, upserts, deletes)[0]


def restart(s: StandInIndex) -> LoadedIndex | None:
    """What a start does: recover (damaged versions aside), replay the log on the newest verified version."""

    def rebuild(paths: list[str], seq: int) -> None:  # no reset is left in a cut log here
        raise AssertionError(f"a full build from {paths} (log entry {seq}) was not expected")

    with s.store.writing():
        return replay(s.store, recover(s.store), s.embedder, s.chunker, rebuild)


def contents(index: LoadedIndex | None) -> dict[str, str]:
    assert index is not None
    return {doc_id: index.documents[doc_id].text for doc_id in index.documents}


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


# --- index versions ------------------------------------------------------------------------------------------------


def test_keep_versions_below_two_is_refused_by_the_store_and_the_settings(tmp_path: Path) -> None:
    from citerag.service.settings import Settings

    with pytest.raises(ValueError, match="keep_versions is 1; it must be at least 2"):
        IndexStore(tmp_path, keep_versions=1)
    with pytest.raises(ValidationError, match="keep_versions"):
        Settings(keep_versions=1)
    assert Settings().keep_versions == KEEP_VERSIONS == 2


def test_versions_beyond_keep_versions_are_pruned_and_every_kept_version_plus_the_log_restores_every_write(
    tokenizer, tmp_path: Path
) -> None:
    s = StandInIndex(tmp_path / "idx", tokenizer)
    s.store = IndexStore(tmp_path / "idx", keep_versions=3)
    write(s, [doc(i) for i in range(3)])  # v1: log entry 1
    expected = {f"d{i}": doc(i).text for i in range(3)}
    steps: list[tuple[list[Document], list[str]]] = [
        ([doc(3)], []), ([doc(4)], ["d0"]), ([doc(1, "Abstract 1 was revised: topic1 now uses method9.")], []),
        ([doc(5), doc(6)], ["d2"]),
    ]
    versions = []
    for upserts, deletes in steps:  # v2..v5: log entries 2..5
        versions.append(write(s, upserts, deletes))
        expected.update({d.doc_id: d.text for d in upserts})
        for doc_id in deletes:
            expected.pop(doc_id)
    kept = s.store.version_dirs()
    assert [p.name for p in kept] == [p.name for p in reversed(versions[-3:])]  # v5, v4, v3: the rest are gone
    assert [wal_seq(p) for p in kept] == [5, 4, 3]
    state = s.store.log.read()
    assert state.base == 3 and [e.seq for e in state.entries] == [4, 5]  # cut through the oldest kept version
    assert contents(s.store.load()) == expected

    # Whichever kept version is the newest that verifies, it plus the log restores every write.
    for survivor in kept:
        copy = tmp_path / f"copy-{survivor.name}"
        shutil.copytree(s.store.root, copy)
        damaged = [p.name for p in kept if p.name > survivor.name]
        for name in damaged:  # a truncated table: the version fails verification at the start
            table = copy / "versions" / name / "documents.arrow"
            table.write_bytes(table.read_bytes()[:100])
        other = StandInIndex(copy, tokenizer)
        other.store = IndexStore(copy, keep_versions=3)
        restored = restart(other)
        assert contents(restored) == expected, survivor.name
        aside = copy / "versions" / DAMAGED
        assert sorted(p.name for p in aside.glob("v*")) == sorted(damaged)  # none for the newest


def test_the_default_keeps_two_versions_and_cuts_the_log_to_the_older(tokenizer, tmp_path: Path) -> None:
    s = StandInIndex(tmp_path / "idx", tokenizer)
    assert s.store.keep_versions == 2
    for i in range(4):
        write(s, [doc(i)])
    kept = s.store.version_dirs()
    assert [wal_seq(p) for p in kept] == [4, 3]
    assert s.store.log.read().base == 3


# --- temporary version directories ---------------------------------------------------------------------------------


def _setup(root: Path) -> IndexSetup:
    def no_model() -> NoReturn:  # nothing is replayed, so no encoder is needed
        raise AssertionError("the start loaded an encoder")

    return IndexSetup(root, (), no_model, 128, 64, 1.5, 0.75, "lucene", "auto")


def test_a_killed_writes_temporary_version_is_removed_at_the_next_start_unless_a_writer_holds_the_lock(
    tokenizer, tmp_path: Path
) -> None:
    s = StandInIndex(tmp_path / "idx", tokenizer)
    live = s.build([doc(i) for i in range(3)])
    stale = s.store.versions / ".tmp-v000002-20260101T000000-abcdef"
    (stale / "bm25").mkdir(parents=True)
    (stale / "documents.arrow").write_bytes(b"x" * 5000)  # fresh: the hourly rule of a write would keep it

    with write_lock_held_elsewhere(s.store.root):
        assert IndexStore(s.store.root).remove_temporaries() == []  # what a start does first, beside a writer...
        assert stale.is_dir()  # ...leaves the directory, which may be the writer's
        assert s.store.disk_usage().temporary_versions == 1 and s.store.disk_usage().temporary == 5000

    index = recover_index(_setup(s.store.root))  # the next start, no writer running
    assert not stale.exists() and index is not None and index.path == live
    assert [p.name for p in s.store.versions.iterdir()] == [live.name]


def test_disk_usage_sums_each_part(tokenizer, tmp_path: Path) -> None:
    s = StandInIndex(tmp_path / "idx", tokenizer)
    first = s.build([doc(i) for i in range(3)])
    live = write(s, [doc(3)])
    aside = s.store.quarantine(first, "test: set aside")
    use = s.store.disk_usage()
    assert (use.live, use.old_versions, use.old) == (tree_size(live), 0, 0)
    assert (use.damaged_versions, use.damaged) == (1, tree_size(aside))
    assert use.wal == (s.store.root / "wal.jsonl").stat().st_size > 0
    assert use.total == tree_size(s.store.root) and use.temporary_versions == use.temporary == 0


# --- the embedding cache -------------------------------------------------------------------------------------------


class OtherModel(CountingEmbedder):
    name = "other-model"


def texts(tag: str, n: int = 10) -> list[str]:
    return [f"{tag} passage number {i} about topic {tag}{i}" for i in range(n)]


def test_the_embedding_cache_stays_within_its_bound_evicting_the_least_recently_used_shards_first(
    tmp_path: Path,
) -> None:
    root = tmp_path / "embeddings"
    written = {}
    for tag, embedder in (("a", CountingEmbedder()), ("b", CountingEmbedder()), ("c", OtherModel())):
        with CachedEmbedder(embedder, root) as cached:  # unbounded: one shard each
            cached.encode(texts(tag))
        (written[tag],) = set(root.glob("*/*.npy")) - set(written.values())
    shard_bytes = written["a"].stat().st_size
    assert {p.stat().st_size for p in written.values()} == {shard_bytes}  # 10 rows of 160 bytes each
    assert shard_bytes == 10 * _shard_dtype(32).itemsize + 192  # the .npy header of the structured dtype
    past = time.time() - 1000
    for age, tag in enumerate("abc"):  # a, then b, then c: a is the least recently used
        os.utime(written[tag], (past + 10 * age, past + 10 * age))

    inner = CountingEmbedder()
    with CachedEmbedder(inner, root, max_bytes=3 * shard_bytes) as cached:
        cached.encode(texts("a"))  # a hit: a becomes the most recently used
        assert inner.embedded == 0
        cached.encode(texts("d"))  # 10 misses, written as a fourth shard at close
    assert not written["b"].exists()  # b was the least recently used once a was read
    assert written["a"].exists() and written["c"].exists()  # c is another model's: the bound counts every model
    assert cache_usage(root) == (3, 3 * shard_bytes)

    again = CountingEmbedder()
    with CachedEmbedder(again, root) as cached:
        cached.encode(texts("a") + texts("d"))
        assert again.embedded == 0
        cached.encode(texts("b"))
        assert again.embedded == 10  # evicted: embedded again

    by_use = sorted(root.glob("*/*.npy"), key=lambda p: p.stat().st_mtime)
    assert len(by_use) == 4  # a, c, d and b written again (unbounded)
    assert set(prune_cache(root, shard_bytes)) == set(by_use[:-1])  # all but the most recently used
    assert cache_usage(root) == (1, shard_bytes) and by_use[-1].exists()


def test_the_default_bound_holds_the_ml_corpus_under_both_backends() -> None:
    from citerag.service.settings import Settings

    passage_bytes = _shard_dtype(384).itemsize
    assert passage_bytes == 1568  # 32-byte key + 384 float32
    assert Settings().embedding_cache_mb == DEFAULT_MAX_MB == 1024
    # the 22,981 ML abstracts (60,681 passages) under both backends, torch and onnx-int8, fit five times over
    assert 5 * 2 * 60_681 * passage_bytes < DEFAULT_MAX_MB * 1024**2


def test_temporary_shards_of_killed_writers_are_removed_when_the_cache_is_next_used(tmp_path: Path) -> None:
    model = tmp_path / "hash-embedder"
    model.mkdir()
    old = model / f".{'0' * 64}.npy.1a2b3c4d"
    old.write_bytes(b"x" * 100)
    os.utime(old, (time.time() - STALE_SECONDS - 60,) * 2)
    fresh = model / f".{'1' * 64}.npy.5e6f7a8b"  # maybe another process's shard being written
    fresh.write_bytes(b"y" * 100)
    with CachedEmbedder(HashEmbedder(), tmp_path) as cached:
        cached.encode(["one text"])
    assert not old.exists() and fresh.exists()


def test_the_settings_reach_the_store_and_the_cache(tmp_path: Path) -> None:
    from citerag.service.pipeline import index_setup
    from citerag.service.settings import Settings

    setup = index_setup(Settings(index_dir=tmp_path / "idx", cache_dir=tmp_path / "cache", keep_versions=4,
                                 embedding_cache=True, embedding_cache_mb=7))
    assert setup.store().keep_versions == 4 and setup.keep_versions == 4
    with setup.encoder(HashEmbedder()) as encoder:
        assert isinstance(encoder, CachedEmbedder)
        assert encoder.max_bytes == 7 * 1024**2 and encoder.root == tmp_path / "cache" / "embeddings"
