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
        with (version / "passages.arrow").open("a") as handle:
            handle.write("\n")
        with pytest.raises(IndexMismatch, match="passages.arrow: checksum differs"):
            stand_in.store.load()

    def test_a_flipped_byte_with_its_mtime_restored_is_found_by_the_full_check(self, stand_in) -> None:
        import os

        from citerag.index.store import verify_files

        version = _build(stand_in, [SEEDS])
        target = version / "passages.arrow"
        info = target.stat()
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0x01
        target.write_bytes(bytes(data))
        os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))  # as bit rot would: size and mtime unchanged
        assert len(stand_in.store.load().documents) == 38  # the start-up check trusts the write-time hash...
        with pytest.raises(IndexMismatch, match="passages.arrow: checksum differs"):
            stand_in.store.load(verify="full")  # ...the full one (doctor --verify, the background check) refuses
        with pytest.raises(IndexMismatch, match="passages.arrow"):
            verify_files(version)

    def test_loading_hashes_no_file_whose_size_and_mtime_are_as_written(self, stand_in, monkeypatch) -> None:
        from citerag.index import store as store_module

        version = _build(stand_in, [SEEDS])
        hashed: list[str] = []
        real = store_module.sha256_file
        monkeypatch.setattr(store_module, "sha256_file", lambda path: hashed.append(path.name) or real(path))
        stand_in.store.load()
        assert hashed == []
        (version / "dense.faiss").touch()  # same bytes, new mtime: hashed, and accepted
        stand_in.store.load()
        assert hashed == ["dense.faiss"]

    def test_a_version_written_as_jsonl_still_loads(self, stand_in) -> None:
        from citerag.index.files import record_fields
        from citerag.index.store import _file_records, _write_manifest

        version = _build(stand_in, [SEEDS])
        index = stand_in.store.load()
        documents, passages = list(index.documents.values()), list(index.passages)
        for name, rows in (("documents", documents), ("passages", passages)):
            (version / f"{name}.arrow").unlink()
            with (version / f"{name}.jsonl").open("w") as handle:
                for row in rows:
                    handle.write(json.dumps(record_fields(row), ensure_ascii=False) + "\n")
        manifest = json.loads((version / "manifest.json").read_text())
        manifest.pop("file_stats")  # as written before the stats existed
        (version / "manifest.json").unlink()
        (version / "manifest.sha256").unlink()
        manifest["checksums"] = _file_records(version)["checksums"]
        _write_manifest(version, manifest)
        old = stand_in.store.load()
        assert list(old.documents.values()) == documents and list(old.passages) == passages
        assert [p.doc_id for p in old.passages_of(EDEN)] == [EDEN] * len(index.passages_of(EDEN))

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
