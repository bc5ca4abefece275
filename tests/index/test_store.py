"""The versioned index directory, with a deterministic stand-in embedder (storage is the subject, not the model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citerag.index.errors import IndexMismatch, IndexNotFound, IngestError
from citerag.index.ingest import load_documents
from citerag.index.retrieve import Retriever
from citerag.index.store import corpus_fingerprint
from tests.conftest import EDEN, SEEDS, StandInIndex


def _build(stand_in: StandInIndex, paths) -> Path:
    return stand_in.build(load_documents(paths))


class TestIndexStore:
    def test_build_then_load_round_trips_and_verifies(self, stand_in) -> None:
        store = stand_in.store
        version = _build(stand_in, [SEEDS])
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

    def test_an_index_from_before_tokenizer_versions_reads_as_version_1(self, stand_in) -> None:
        from citerag.index.tokenize import TOKENIZER_VERSION

        version = _build(stand_in, sorted(SEEDS.glob("*.txt"))[:1])
        assert stand_in.store.load().config.tokenizer_version == TOKENIZER_VERSION == 2
        manifest = json.loads((version / "manifest.json").read_text())
        del manifest["config"]["tokenizer_version"]  # as written before the field existed
        (version / "manifest.json").write_text(json.dumps(manifest))
        (version / "manifest.sha256").unlink()  # neither was the manifest's seal
        old = stand_in.store.load()
        assert old.config.tokenizer_version == 1 and old.config != stand_in.config  # so ensure_index rebuilds it

    def test_missing_index(self, stand_in) -> None:
        with pytest.raises(IndexNotFound, match="run `citerag index`"):
            stand_in.store.load()

    def test_corrupted_file_is_refused(self, stand_in) -> None:
        version = _build(stand_in, [SEEDS])
        with (version / "passages.jsonl").open("a") as handle:
            handle.write("\n")
        with pytest.raises(IndexMismatch, match="passages.jsonl: checksum differs"):
            stand_in.store.load()

    def test_failed_ingest_leaves_the_live_index_untouched(self, stand_in, tmp_path: Path) -> None:
        store = stand_in.store
        version = _build(stand_in, [SEEDS])
        bad = tmp_path / "bad.jsonl"
        bad.write_text('{"text": "fine"}\n"not an object"\n')
        with pytest.raises(IngestError, match="bad.jsonl:2"):
            _build(stand_in, [SEEDS, bad])
        assert store.current() == version and len(store.load().documents) == 38

    def test_a_rebuild_switches_versions_and_keeps_two(self, stand_in) -> None:
        store = stand_in.store
        first = _build(stand_in, [SEEDS])
        seeds = sorted(SEEDS.glob("*.txt"))
        second = _build(stand_in, seeds[:1])
        third = _build(stand_in, seeds[1:])
        assert store.current() == third and len(store.load().documents) == 19
        assert not first.exists() and second.exists()
        assert not list(store.versions.glob(".tmp-*"))


class TestRetrieverOnStandIn:
    def test_modes_ranks_and_one_per_doc(self, stand_in) -> None:
        store, embedder = stand_in.store, stand_in.embedder
        _build(stand_in, [SEEDS])
        retriever = Retriever(store.load(), embedder)
        bm25 = retriever.search("LU-KV head-level budget allocation", k=3, mode="bm25")
        assert bm25[0].document.doc_id == "f5bdc4c41e222197" and bm25[0].bm25_rank == 1 and bm25[0].dense_rank is None
        hybrid = retriever.search("LU-KV head-level budget allocation", k=10, one_per_doc=True)
        assert len({r.document.doc_id for r in hybrid}) == len(hybrid) == 10
        assert [r.rank for r in hybrid] == list(range(1, 11))
        assert retriever.search("zzzz qqqq", k=5, mode="bm25") == []

    def test_k_larger_than_the_corpus(self, stand_in) -> None:
        store, embedder = stand_in.store, stand_in.embedder
        _build(stand_in, sorted(SEEDS.glob("*.txt"))[:1])
        retriever = Retriever(store.load(), embedder)
        n = len(retriever.index.passages)
        assert len(retriever.search("model", k=n + 50, mode="dense")) == n

    def test_embedder_must_match_the_index(self, stand_in) -> None:
        store, embedder = stand_in.store, stand_in.embedder
        _build(stand_in, [SEEDS])
        embedder.name = "other"
        with pytest.raises(ValueError, match="rebuild the index"):
            Retriever(store.load(), embedder)
