"""The versioned index directory, with a deterministic stand-in embedder (storage is the subject, not the model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from index.build import build_index
from index.chunking import Chunker
from index.errors import IndexMismatch, IndexNotFound, IngestError
from index.ingest import load_documents
from index.retrieve import Retriever
from index.store import IndexConfig, IndexStore, corpus_fingerprint
from tests.conftest import EDEN, SEEDS, HashEmbedder


@pytest.fixture()
def setup(tokenizer, tmp_path: Path):
    embedder = HashEmbedder()
    chunker = Chunker(tokenizer, 256, 128, 64)
    config = IndexConfig(embedder.name, embedder.dim, 256, 128, 64)
    store = IndexStore(tmp_path / "idx")
    return store, embedder, chunker, config


def _build(setup, paths) -> Path:
    store, embedder, chunker, config = setup
    return build_index(load_documents(paths), store, embedder, chunker, config, show_progress=False)


class TestIndexStore:
    def test_build_then_load_round_trips_and_verifies(self, setup) -> None:
        store = setup[0]
        version = _build(setup, [SEEDS])
        index = store.load()
        assert index.path == version == store.current()
        assert len(index.documents) == 38
        assert len(index.passages) == index.dense.size == index.bm25.size
        manifest = json.loads((version / "manifest.json").read_text())
        assert manifest["counts"] == {"documents": 38, "passages": len(index.passages)}
        assert manifest["config"]["embedding_model"] == "hash-embedder"
        assert manifest["corpus_fingerprint"] == corpus_fingerprint(load_documents([SEEDS]))
        assert {"faiss-cpu", "bm25s", "sentence-transformers"} <= set(manifest["libraries"])
        assert [p.ordinal for p in index.passages_of(EDEN)] == list(range(len(index.passages_of(EDEN))))

    def test_missing_index(self, setup) -> None:
        with pytest.raises(IndexNotFound, match="run `citerag index`"):
            setup[0].load()

    def test_corrupted_file_is_refused(self, setup) -> None:
        version = _build(setup, [SEEDS])
        with (version / "passages.jsonl").open("a") as handle:
            handle.write("\n")
        with pytest.raises(IndexMismatch, match="passages.jsonl: checksum differs"):
            setup[0].load()

    def test_failed_ingest_leaves_the_live_index_untouched(self, setup, tmp_path: Path) -> None:
        store = setup[0]
        version = _build(setup, [SEEDS])
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"text": "fine"}\n"not an object"\n')
        with pytest.raises(IngestError, match="bad.jsonl:2"):
            _build(setup, [SEEDS, bad])
        assert store.current() == version and len(store.load().documents) == 38

    def test_a_rebuild_switches_versions_and_keeps_two(self, setup) -> None:
        store = setup[0]
        first = _build(setup, [SEEDS])
        seeds = sorted(SEEDS.glob("*.txt"))
        second = _build(setup, seeds[:1])
        third = _build(setup, seeds[1:])
        assert store.current() == third and len(store.load().documents) == 19
        assert not first.exists() and second.exists()
        assert not list(store.versions.glob(".tmp-*"))


class TestRetrieverOnStandIn:
    def test_modes_ranks_and_one_per_doc(self, setup) -> None:
        store, embedder = setup[0], setup[1]
        _build(setup, [SEEDS])
        retriever = Retriever(store.load(), embedder)
        bm25 = retriever.search("LU-KV head-level budget allocation", k=3, mode="bm25")
        assert bm25[0].document.doc_id == "f5bdc4c41e222197" and bm25[0].bm25_rank == 1 and bm25[0].dense_rank is None
        hybrid = retriever.search("LU-KV head-level budget allocation", k=10, one_per_doc=True)
        assert len({r.document.doc_id for r in hybrid}) == len(hybrid) == 10
        assert [r.rank for r in hybrid] == list(range(1, 11))
        assert retriever.search("zzzz qqqq", k=5, mode="bm25") == []

    def test_k_larger_than_the_corpus(self, setup) -> None:
        store, embedder = setup[0], setup[1]
        _build(setup, sorted(SEEDS.glob("*.txt"))[:1])
        retriever = Retriever(store.load(), embedder)
        n = len(retriever.index.passages)
        assert len(retriever.search("model", k=n + 50, mode="dense")) == n

    def test_embedder_must_match_the_index(self, setup) -> None:
        store, embedder = setup[0], setup[1]
        _build(setup, [SEEDS])
        embedder.name = "other"
        with pytest.raises(ValueError, match="rebuild the index"):
            Retriever(store.load(), embedder)
