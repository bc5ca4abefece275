"""Incremental updates: only new and changed passages are embedded; replaced and deleted documents leave no stale
passage in BM25 or FAISS. A counting stand-in embedder (storage is the subject, not the model)."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from citerag.index.build import WriteOptions, build_index, write_index
from citerag.index.chunking import Chunker
from citerag.index.dense import choose_kind
from citerag.index.embedded import EmbeddedBackend
from citerag.index.errors import DocumentNotFound
from citerag.index.ingest import load_documents, make_document
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexConfig, IndexStore
from tests.conftest import EDEN, SEEDS, CountingEmbedder


@pytest.fixture()
def built(tokenizer, tmp_path: Path):
    embedder = CountingEmbedder()
    chunker = Chunker(tokenizer, 256, 128, 64)
    config = IndexConfig(embedder.name, embedder.dim, 256, 128, 64)
    store = IndexStore(tmp_path / "idx")
    build_index(load_documents([SEEDS]), store, embedder, chunker, config, show_progress=False)
    embedder.embedded = 0
    return store, embedder, chunker, config


def _update(built, upserts=(), deletes=()):
    store, embedder, chunker, config = built
    return write_index(store, embedder, chunker, config, upserts, deletes)


NEW = make_document("Zorblax quantisation halves the memory of sparse transformers.", "Zorblax", "new-1")


def test_adding_embeds_only_the_new_passages_and_keeps_every_old_one(built) -> None:
    store = built[0]
    before = store.load()
    path, report = _update(built, [NEW])
    after = store.load()
    assert report.added == ["new-1"] and report.passages_embedded == 1 and built[1].embedded == 1
    assert path == after.path != before.path
    assert len(after.documents) == 39 and len(after.passages) == len(before.passages) + 1
    # the kept passages keep their exact vectors (read back from FAISS, not re-embedded)
    np.testing.assert_array_equal(after.dense.vectors()[: len(before.passages)], before.dense.vectors())
    retriever = Retriever(after, built[1])
    assert retriever.search("zorblax", k=1, mode="bm25")[0].passage.doc_id == "new-1"
    assert retriever.search("EDEN parameters", k=1, mode="bm25")[0].passage.doc_id == EDEN


def test_replacing_a_document_leaves_no_stale_passage(built) -> None:
    _update(built, [NEW])
    changed = make_document("Quuxify lowers the latency of retrieval.", "Quuxify", "new-1")
    _, report = _update(built, [changed])
    index = built[0].load()
    assert report.replaced == ["new-1"] and report.passages_embedded == 1
    assert [p.text for p in index.passages_of("new-1")] == ["Quuxify lowers the latency of retrieval."]
    retriever = Retriever(index, built[1])
    assert retriever.search("zorblax", k=5, mode="bm25") == []
    assert all(r.passage.doc_id != "new-1" or "Quuxify" in r.passage.text for r in retriever.search("zorblax", k=50, mode="dense"))
    assert index.dense.size == len(index.passages)


def test_deleting_removes_the_document_from_both_retrievers(built) -> None:
    _, report = _update(built, deletes=[EDEN])
    index = built[0].load()
    assert report.deleted == [EDEN] and report.passages_embedded == 0
    assert EDEN not in index.documents and index.passages_of(EDEN) == []
    retriever = Retriever(index, built[1])
    hits = retriever.search("EDEN 28 billion parameters", k=100, mode="hybrid")
    assert hits and all(r.passage.doc_id != EDEN for r in hits)
    assert index.dense.size == len(index.passages) == index.bm25.size


def test_an_unknown_id_to_delete_writes_nothing(built) -> None:
    store = built[0]
    before = store.current()
    with pytest.raises(DocumentNotFound, match="no document with id 'nope'"):
        _update(built, deletes=["nope"])
    assert store.current() == before


def test_unchanged_documents_write_no_version_and_metadata_changes_keep_vectors(built) -> None:
    store = built[0]
    doc = store.load().documents[EDEN]
    before = store.current()
    path, report = _update(built, [doc])
    assert report.unchanged == [EDEN] and path == before == store.current()

    retagged = make_document(doc.text, doc.title, doc.doc_id, {**doc.meta, "venue": "icml"})
    _, report = _update(built, [retagged])
    assert report.updated == [EDEN] and report.passages_embedded == 0 and built[1].embedded == 0
    assert store.load().documents[EDEN].meta["venue"] == "icml"


def test_searches_during_writes_see_the_old_or_the_new_corpus_never_a_mix(built) -> None:
    store, embedder, chunker, config = built
    backend = EmbeddedBackend(store, store.load(), lambda i: Retriever(i, embedder), embedder, chunker, config)
    seen: set[tuple[int, bool]] = set()
    stop = threading.Event()

    def search() -> None:
        while not stop.is_set():
            snapshot = backend.snapshot
            n = len(snapshot.index.passages)
            found = any(r.passage.doc_id == "new-1" for r in snapshot.retriever.search("zorblax", k=3, mode="bm25"))
            seen.add((n, found))

    reader = threading.Thread(target=search)
    reader.start()
    try:
        backend.write([NEW])
        backend.delete(["new-1"])
    finally:
        stop.set()
        reader.join()
    base = len(store.load().passages)
    assert seen <= {(base, False), (base + 1, True)}
    assert backend.stats()["documents"] == 38


def test_the_dense_index_kind_follows_the_size_threshold(built) -> None:
    assert choose_kind(49_999) == "flat" and choose_kind(50_000) == "hnsw"
    assert choose_kind(10, "hnsw") == "hnsw" and choose_kind(10**7, "flat") == "flat"
    with pytest.raises(ValueError, match="'auto', 'flat', 'hnsw' or 'ivf-sq8'"):
        choose_kind(10, "ivf")
    store, embedder, chunker, config = built
    write_index(store, embedder, chunker, config, [NEW], options=WriteOptions(dense_kind="hnsw"))
    index = store.load()
    assert index.dense.kind == "hnsw"
    query = embedder.encode(["sparse transformers memory"])[0]
    exact = np.argsort(-(index.dense.vectors() @ query), kind="stable")[:5]
    assert [hit.row for hit in index.dense.search(query, 5)] == exact.tolist()  # 1k vectors: HNSW finds all


def _fresh_bm25_scores(index, query_tokens):
    """BM25 scores of a from-scratch index over ``index``'s passages (tokenised again from their texts)."""
    from citerag.index.bm25 import BM25Index
    from citerag.index.build import passage_texts
    from citerag.index.tokenize import tokenize_many

    fresh = BM25Index(index.config.bm25_k1, index.config.bm25_b, index.config.bm25_method)
    fresh.build(tokenize_many(passage_texts(index.passages, index.documents)))
    return fresh.scores(query_tokens)


@pytest.mark.parametrize("query", ["zorblax memory", "EDEN parameters", "KV cache eviction", "conformal prediction"])
def test_updates_reuse_kept_tokens_and_score_as_a_fresh_bm25_build(built, query: str) -> None:
    from citerag.index.tokenize import tokenize

    store = built[0]
    _update(built, [NEW])  # adds only: tokens of the 38 abstracts are read back, not tokenised again
    after_add = store.load()
    assert after_add.bm25.tokens is not None and after_add.bm25.tokens.size == len(after_add.passages)
    _update(built, deletes=[EDEN])  # removes: the table drops EDEN's rows and the terms only EDEN used
    after_delete = store.load()
    tokens = after_delete.bm25.tokens
    assert tokens is not None and tokens.size == len(after_delete.passages)
    assert "eden" not in tokens.vocab and "zorblax" in tokens.vocab
    for index in (after_add, after_delete):
        q = tokenize(query)
        np.testing.assert_allclose(index.bm25.scores(q), _fresh_bm25_scores(index, q), rtol=1e-6)


def test_an_update_that_only_adds_inserts_into_a_copy_of_the_live_hnsw_graph(built) -> None:
    store, embedder, chunker, config = built
    write_index(store, embedder, chunker, config, deletes=[EDEN], options=WriteOptions(dense_kind="hnsw"))  # rebuilt as HNSW
    before = store.load()
    assert before.dense.kind == "hnsw"
    write_index(store, embedder, chunker, config, [NEW], options=WriteOptions(dense_kind="hnsw"))
    after = store.load()
    assert after.dense.kind == "hnsw" and after.dense.size == before.dense.size + 1
    np.testing.assert_array_equal(after.dense.vectors()[: before.dense.size], before.dense.vectors())
    assert before.dense.size == len(before.passages)  # the live version was left as it was


def test_ivf_sq8_updates_copy_the_kept_codes_whether_rows_are_added_or_removed(built) -> None:
    store, embedder, chunker, config = built
    ivf = WriteOptions(dense_kind="ivf-sq8")
    write_index(store, embedder, chunker, config, [NEW], options=ivf)  # the kind changes: built (trained) afresh
    first = store.load()
    assert first.dense.kind == "ivf-sq8" and first.dense.nlist >= 1 and first.dense.size == len(first.passages)
    other = make_document("Blorp sampling speeds up diffusion models.", "Blorp", "new-2")
    write_index(store, embedder, chunker, config, [other], options=ivf)  # adds only: codes copied, one vector added
    added = store.load()
    assert added.dense.kind == "ivf-sq8" and added.dense.size == first.dense.size + 1 == len(added.passages)
    assert added.dense.nlist == first.dense.nlist
    np.testing.assert_array_equal(added.dense.vectors()[: first.dense.size], first.dense.vectors())
    write_index(store, embedder, chunker, config, deletes=[EDEN], options=ivf)  # removes: the kept rows' codes copied
    removed = store.load()
    kept = [row for row, p in enumerate(added.passages) if p.doc_id != EDEN]
    assert removed.dense.size == len(kept) == len(removed.passages) < len(added.passages)
    assert removed.dense.nlist == added.dense.nlist
    np.testing.assert_array_equal(removed.dense.vectors(), added.dense.vectors(np.array(kept)))
    hits = Retriever(removed, embedder).search("Zorblax quantisation halves the memory", k=3, mode="dense")
    assert "new-1" in [hit.passage.doc_id for hit in hits]


def test_corpus_tokens_select_and_extend_round_trip(tmp_path: Path) -> None:
    from citerag.index.bm25 import CorpusTokens

    table = CorpusTokens.from_tokens([["a", "b"], [], ["b", "c", "c"]]).extend([["d", "a"]])
    assert table.size == 4 and table.vocab == ["a", "b", "c", "d"]
    picked = table.select([3, 0])
    assert picked.vocab == ["a", "b", "d"]
    assert [[picked.vocab[i] for i in picked.ids[a:b]] for a, b in zip(picked.offsets[:-1], picked.offsets[1:])] == [
        ["d", "a"], ["a", "b"]
    ]
    assert table.select(range(4)) is table
    table.save(tmp_path)
    loaded = CorpusTokens.load(tmp_path)
    assert loaded is not None and loaded.vocab == table.vocab
    np.testing.assert_array_equal(loaded.ids, table.ids)
    np.testing.assert_array_equal(loaded.offsets, table.offsets)
    assert CorpusTokens.load(tmp_path / "missing") is None


class _BlockingEmbedder(CountingEmbedder):
    """Holds its first ``encode`` until released: a writer caught in the middle of its update."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.release = threading.Event(), threading.Event()

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        self.entered.set()
        assert self.release.wait(timeout=60)
        return super().encode(texts)


def test_a_second_writer_waits_and_builds_on_the_first_writers_version(built) -> None:
    # Two stores on one directory stand for two processes (a service and `citerag index --add`): without the
    # write lock the second would commit first and the first would then commit over it from the older version.
    store, _, chunker, config = built
    slow = _BlockingEmbedder()
    other = make_document("Blorptastic sampling speeds up diffusion models.", "Blorp", "new-2")
    first = threading.Thread(target=write_index, args=(IndexStore(store.root), slow, chunker, config, [NEW]))
    first.start()
    assert slow.entered.wait(timeout=60)
    second = threading.Thread(
        target=write_index, args=(IndexStore(store.root), CountingEmbedder(), chunker, config, [other])
    )
    second.start()
    second.join(timeout=0.5)
    assert second.is_alive()  # waiting for the lock, nothing committed
    assert "new-1" not in store.load().documents and "new-2" not in store.load().documents
    slow.release.set()
    first.join(timeout=60)
    second.join(timeout=60)
    final = store.load()
    assert {"new-1", "new-2"} <= set(final.documents) and len(final.documents) == 40


def test_results_read_after_their_version_is_replaced_and_pruned(built) -> None:
    """A result decodes its passage and document from the tables of the version it was found in when first read:
    later writes (which prune that version's directory) leave what it reads unchanged (the mapped files stay mapped)."""
    from citerag.index.store import KEEP_VERSIONS

    store, embedder = built[0], built[1]
    first = store.load()
    results = Retriever(first, embedder).search("EDEN parameters", k=3, mode="bm25")
    expected = [(r.passage, r.document) for r in Retriever(store.load(), embedder).search("EDEN parameters", k=3,
                                                                                           mode="bm25")]
    for i in range(KEEP_VERSIONS + 1):
        _update(built, [make_document(f"Version {i} of a note on zorblax.", f"Note {i}", "note")])
    assert not first.path.exists()
    assert [(r.passage, r.document) for r in results] == expected and results[0].passage.doc_id == EDEN
