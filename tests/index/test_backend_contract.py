"""The backend contract: the same cases, with the same expected values, on the embedded backend (FAISS + bm25s in a
temporary index directory) and on Milvus Lite (a ``*.db`` file in a temporary directory).

The deterministic stand-in encoder (:class:`~tests.conftest.HashEmbedder`, counting its calls) gives both backends
the same vectors: the model is not the subject here, the interface is (:class:`citerag.index.backend.SearchBackend`).
What the two may differ in, and so is not asserted: ``version`` labels, BM25 score magnitudes (Milvus multiplies by
``k1 + 1`` and computes IDF per segment), the default hybrid fusion (embedded: bounded, Milvus: RRF) and the ids
Milvus cannot store (``"`` and ``\\``: tests/index/test_milvus.py).

Durability (:class:`TestDurability`) is asserted on both through the same crash: a child process writes, is killed
(``CITERAG_CRASH_AT``, :mod:`citerag.index.faults`, or SIGKILL right after an acknowledgement), and the backend is
opened again as a start opens it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np
import pytest

from citerag.index.backend import SearchBackend
from citerag.index.build import build_index
from citerag.index.chunking import Chunker, model_text
from citerag.index.embedded import EmbeddedBackend
from citerag.index.errors import DocumentNotFound, IngestError
from citerag.index.faults import ENV
from citerag.index.filters import compile_filters
from citerag.index.ingest import load_documents, make_document
from citerag.index.milvus import HELD_FILE, MilvusBackend
from citerag.index.recovery import recover, replay
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexConfig, IndexStore
from citerag.index.types import Document
from citerag.index.writes import WriteReport
from tests.conftest import EDEN, ROOT, SEEDS, CountingEmbedder, HashEmbedder

BACKENDS = ["embedded", "milvus"]
QUERY = "metagenomic foundation models"  # the EDEN abstract is the best BM25 and hybrid match among the seeds

A = make_document("Zebrafish regenerate heart muscle after an injury.", "Zebrafish hearts", "a", {"venue": "ICML"})
B = make_document("Quasars emit radio jets seen by large telescopes.", "", "b", {"venue": "NeurIPS", "year": 2020})
C = make_document("Soil microbes fix nitrogen for crops in dry climates.", "Soil", "c", {"year": 2018})
D = make_document("Protein folding is predicted by attention networks.", "", "d")
BLANK = Document("blank", "", "   ", "blank")


def open_backend(kind: str, root: Path, chunker: Chunker, embedder: HashEmbedder, documents: Sequence[Document] = ()):
    """A backend of ``kind`` in ``root`` holding ``documents`` (written as one first write)."""
    if kind == "embedded":
        config = IndexConfig(embedder.name, embedder.dim, 256, 128, 64)
        store = IndexStore(root / "idx")
        build_index([], store, embedder, chunker, config, show_progress=False)  # an empty live version
    backend = reopen_backend(kind, root, chunker, embedder)
    if documents:
        backend.write(documents)
    return backend


def reopen_backend(kind: str, root: Path, chunker: Chunker, embedder: HashEmbedder) -> SearchBackend:
    """The backend of ``kind`` already in ``root``, opened as a start opens it: the embedded index recovered
    (:func:`citerag.index.recovery.recover`, the log replayed), Milvus replaying its own log
    (:meth:`citerag.index.milvus.MilvusBackend.recover`)."""
    if kind == "milvus":
        return MilvusBackend(str(root / "milvus.db"), embedder, chunker)
    config = IndexConfig(embedder.name, embedder.dim, 256, 128, 64)
    store = IndexStore(root / "idx")
    with store.writing():
        replay(store, recover(store), embedder, chunker, rebuild=_no_rebuild)
    return EmbeddedBackend(store, store.load(), lambda index: Retriever(index, embedder), embedder, chunker, config)


def _no_rebuild(sources: list[str], seq: int) -> None:
    raise AssertionError(f"these tests log no full build, yet entry {seq} rebuilds from {sources}")


def close(backend: SearchBackend) -> None:
    if isinstance(backend, MilvusBackend):
        backend.close()


def _with_venues(seeds: list[Document]) -> list[Document]:
    """The seeds with metadata to filter on: venue alternating ICML / NeurIPS, years 2015..2022."""
    return [
        dataclasses.replace(doc, meta={**doc.meta, "venue": "ICML" if i % 2 else "NeurIPS", "year": 2015 + i % 8})
        for i, doc in enumerate(seeds)
    ]


def without_version(report: WriteReport) -> WriteReport:
    """``report`` but its version label (each backend's own)."""
    return dataclasses.replace(report, version="")


@pytest.fixture(scope="module")
def chunker(tokenizer) -> Chunker:
    return Chunker(tokenizer, 256, 128, 64)


@pytest.fixture(scope="module")
def seeds() -> list[Document]:
    return _with_venues(load_documents([SEEDS]))


@pytest.fixture(scope="module", params=BACKENDS)
def seeded(request, tmp_path_factory, chunker, seeds) -> Iterator[SearchBackend]:
    """A backend holding the 38 seed abstracts with venues and years; read-only tests share it."""
    backend = open_backend(request.param, tmp_path_factory.mktemp(request.param), chunker, HashEmbedder(), seeds)
    yield backend
    close(backend)


@pytest.fixture
def make(tmp_path: Path, chunker: Chunker) -> Iterator[Callable[..., SearchBackend]]:
    """Factory: ``make(kind, documents=(), embedder=None)``, a fresh backend (closed at teardown)."""
    opened: list[SearchBackend] = []

    def factory(kind: str, documents: Sequence[Document] = (), embedder: HashEmbedder | None = None) -> SearchBackend:
        backend = open_backend(kind, tmp_path / f"{kind}-{len(opened)}", chunker, embedder or HashEmbedder(), documents)
        opened.append(backend)
        return backend

    yield factory
    for backend in opened:
        close(backend)


@pytest.fixture(params=BACKENDS)
def kind(request) -> str:
    return request.param


def ids(documents: Sequence[Document]) -> list[str]:
    return [doc.doc_id for doc in documents]


# -- writes -------------------------------------------------------------------------------------------------------


class TestWriteReports:
    def test_first_write_adds_and_skips_what_has_no_text(self, make, kind) -> None:
        embedder = CountingEmbedder()
        backend = make(kind, embedder=embedder)
        report = backend.write([A, B, C, BLANK])
        assert without_version(report) == WriteReport(
            added=["a", "b", "c"], skipped=[("blank", "no text")], passages_embedded=3
        )
        assert embedder.embedded == 3 and backend.count() == 3 and backend.get("blank") is None

    def test_unchanged_replaced_updated_and_added_in_one_write(self, make, kind) -> None:
        embedder = CountingEmbedder()
        backend = make(kind, [A, B, C], embedder)
        embedder.embedded = 0
        new_b = make_document("Quasars are bright galactic nuclei.", "", "b", B.meta)
        new_c = dataclasses.replace(C, meta={"year": 2019, "venue": "COLT"})
        report = backend.write([A, new_b, new_c, D])
        assert without_version(report) == WriteReport(
            added=["d"], replaced=["b"], updated=["c"], unchanged=["a"], passages_embedded=2
        )
        assert embedder.embedded == 2  # b's and d's passages; c's metadata change embedded nothing
        assert [backend.get(i) for i in "abcd"] == [A, new_b, new_c, D]
        assert [p.text for p in backend.passages_of("b")] == [new_b.text]  # no stale passage
        assert ids(backend.documents()) == ["a", "c", "b", "d"]  # replaced moves to the end, updated keeps its place

    def test_a_metadata_only_change_keeps_the_passages_and_moves_the_filters(self, make, kind) -> None:
        embedder = CountingEmbedder()
        backend = make(kind, [A, B, C], embedder)
        before = backend.passages_of("a")
        embedder.embedded = 0
        report = backend.write([dataclasses.replace(A, meta={"venue": "COLT"})])
        assert report.updated == ["a"] and report.passages_embedded == 0 and embedder.embedded == 0
        assert backend.passages_of("a") == before
        assert [r.document.doc_id for r in backend.search("zebrafish", mode="bm25", filters={"venue": "colt"})] == ["a"]
        assert backend.search("zebrafish", mode="bm25", filters={"venue": "icml"}) == []

    def test_a_replaced_document_keeps_the_vectors_of_its_unchanged_passages(self, make, kind, chunker) -> None:
        eden = next(doc for doc in load_documents([SEEDS]) if doc.doc_id == EDEN)
        embedder = CountingEmbedder()
        backend = make(kind, [eden], embedder)
        embedder.embedded = 0
        longer = make_document(eden.text + " Zebrafish were not studied.", "", EDEN, eden.meta)
        old = {model_text(p.text) for p in chunker.chunk(eden)}
        new = [model_text(p.text) for p in chunker.chunk(longer)]
        fresh = [text for text in new if text not in old]
        assert 0 < len(fresh) < len(new)  # the case is meaningful: some passages change, some do not
        report = backend.write([longer])
        assert report.replaced == [EDEN] and report.passages_embedded == len(fresh) == embedder.embedded
        assert backend.passages_of(EDEN) == chunker.chunk(longer)

    def test_a_document_with_no_text_leaves_the_stored_one_as_it_was(self, make, kind) -> None:
        backend = make(kind, [A, B])
        report = backend.write([dataclasses.replace(A, text="   ")])
        assert without_version(report) == WriteReport(skipped=[("a", "no text")])
        assert backend.get("a") == A and [p.text for p in backend.passages_of("a")] == [A.text]

    def test_deletes(self, make, kind) -> None:
        backend = make(kind, [A, B, C])
        report = backend.delete(["b", "b"])
        assert without_version(report) == WriteReport(deleted=["b"])
        assert backend.get("b") is None and backend.passages_of("b") == [] and backend.count() == 2
        assert backend.search("quasars radio jets", mode="bm25") == []
        assert backend.delete(["c"]).deleted == ["c"]  # the older name
        assert ids(backend.documents()) == ["a"]

    def test_deleting_an_unknown_id_fails_and_writes_nothing(self, make, kind) -> None:
        backend = make(kind, [A, B])
        version = backend.stats()["version"]
        with pytest.raises(DocumentNotFound, match=r"^no document with id 'nope'; list ids with GET /documents$"):
            backend.delete(["a", "nope"])
        with pytest.raises(DocumentNotFound, match="'nope'"):
            backend.write([D], deletes=["nope"])
        assert backend.get("a") == A and backend.get("d") is None and backend.count() == 2
        assert backend.stats()["version"] == version

    def test_delete_and_add_of_one_id_in_one_write(self, make, kind) -> None:
        backend = make(kind, [A, B])
        again = make_document("Zebrafish fins regrow in days.", "", "a")
        report = backend.write([again], deletes=["a"])
        assert without_version(report) == WriteReport(added=["a"], deleted=["a"], passages_embedded=1)
        assert backend.get("a") == again and ids(backend.documents()) == ["b", "a"]

    def test_identical_writes_give_identical_reports_on_both_backends(self, make) -> None:
        embedded, milvus = make("embedded"), make("milvus")
        writes: list[tuple[list[Document], list[str]]] = [
            ([A, B, C, BLANK], []),
            ([A, make_document("New text for b.", "", "b"), dataclasses.replace(C, meta={}), D], []),
            ([dataclasses.replace(D, meta={"venue": "ICML"}), dataclasses.replace(A, text="")], ["c"]),
            ([make_document("Other text for d.", "Title", "d")], ["d", "b"]),
            ([A], []),
        ]
        for upserts, deletes in writes:
            first, second = embedded.write(upserts, deletes), milvus.write(upserts, deletes)
            assert without_version(first) == without_version(second), (upserts, deletes)
        assert embedded.documents() == milvus.documents() and ids(embedded.documents()) == ["a", "d"]
        for doc_id in "ad":
            assert embedded.passages_of(doc_id) == milvus.passages_of(doc_id)

    def test_malformed_documents_write_nothing(self, make, kind) -> None:
        backend = make(kind, [A])
        cases = [
            ([Document("x" * 201, "", "text", "text")], r"documents\[0\]: doc_id must be at most 200 characters, got 201"),
            ([A, Document("a\tb", "", "text", "text")], r"documents\[1\]: doc_id must not contain control characters"),
            ([Document("  ", "", "text", "text")], r"documents\[0\]: doc_id must hold non-space text"),
            ([D, dataclasses.replace(D, text="other")], r"documents\[1\]: document id 'd' appears twice with different"),
        ]
        for documents, message in cases:
            with pytest.raises(IngestError, match=message):
                backend.write(documents)
        assert backend.count() == 1 and backend.get("d") is None
        assert backend.write([D, D]).added == ["d"]  # an exact repeat is one document


# -- search -------------------------------------------------------------------------------------------------------


class TestSearch:
    def test_bm25_ranks_eden_first_and_runs_only_bm25(self, seeded) -> None:
        results = seeded.search(QUERY, k=5, mode="bm25")
        assert results[0].document.doc_id == EDEN and results[0].bm25_rank == 1 and results[0].bm25_score > 0
        assert [r.rank for r in results] == [1, 2, 3, 4, 5] == [r.bm25_rank for r in results]
        assert all(r.dense_rank is None and r.dense_score is None for r in results)

    def test_dense_finds_a_passage_from_its_own_text(self, seeded, chunker, seeds) -> None:
        passage = chunker.chunk(next(doc for doc in seeds if doc.doc_id == EDEN))[2]
        results = seeded.search(passage.text, k=3, mode="dense")
        assert results[0].passage == passage and results[0].dense_rank == 1
        assert results[0].score == pytest.approx(1.0, abs=1e-5) and results[0].dense_score == results[0].score
        assert [r.dense_rank for r in results] == [1, 2, 3] and all(r.bm25_rank is None for r in results)

    @pytest.mark.parametrize("fusion", [None, "rrf", "weighted"])
    def test_hybrid_ranks_eden_first_with_one_passage_per_document(self, seeded, fusion) -> None:
        results = seeded.search(QUERY, k=5, one_per_doc=True, fusion=fusion)
        assert results[0].document.doc_id == EDEN and results[0].bm25_rank == 1
        assert [r.rank for r in results] == [1, 2, 3, 4, 5] and len({r.document.doc_id for r in results}) == 5

    def test_k_beyond_the_corpus_returns_everything_once(self, seeded, seeds) -> None:
        n_passages = int(seeded.stats()["passages"])
        dense = seeded.search("language models", k=1000, mode="dense")
        assert len(dense) == len({r.passage.chunk_id for r in dense}) == n_passages
        assert [r.rank for r in dense] == list(range(1, n_passages + 1))
        hybrid = seeded.search(QUERY, k=1000, one_per_doc=True)
        assert sorted(r.document.doc_id for r in hybrid) == sorted(ids(seeds))

    @pytest.mark.parametrize(
        "filters",
        [{"venue": "icml"}, {"year": {"gte": 2018, "lt": 2020}}, {"venue": {"nin": ["NeurIPS"]}, "year": {"ne": 2016}},
         {"doc_id": {"in": [EDEN.upper()]}}],
    )
    def test_filters_apply_inside_the_search(self, seeded, chunker, seeds, filters) -> None:
        matches = compile_filters(filters)
        wanted = {p.chunk_id for doc in seeds if matches(doc) for p in chunker.chunk(doc)}
        assert wanted  # every case selects something
        found = seeded.search("anything", k=1000, mode="dense", filters=filters)
        assert {r.passage.chunk_id for r in found} == wanted

    def test_filters_that_match_nothing_and_malformed_ones(self, seeded) -> None:
        assert seeded.search(QUERY, filters={"venue": {"in": []}}) == []
        assert seeded.search(QUERY, filters={"source": "nowhere.txt"}) == []
        with pytest.raises(ValueError, match=r"filters.year: unknown operator 'after'"):
            seeded.search(QUERY, filters={"year": {"after": 2018}})

    def test_bad_arguments_give_the_same_errors(self, seeded) -> None:
        with pytest.raises(ValueError, match=r"^mode must be 'hybrid', 'bm25' or 'dense', got 'sparse'$"):
            seeded.search(QUERY, mode="sparse")
        with pytest.raises(ValueError, match=r"^k must be >= 1, got 0$"):
            seeded.search(QUERY, k=0)
        with pytest.raises(ValueError, match=r"^fusion must be .*'rrf' or 'weighted', got 'sum'$"):
            seeded.search(QUERY, fusion="sum")  # type: ignore[arg-type]

    def test_an_empty_corpus(self, make, kind) -> None:
        backend = make(kind)
        for mode in ("bm25", "dense", "hybrid"):
            assert backend.search(QUERY, k=5, mode=mode) == []
        assert backend.count() == 0 and backend.documents() == [] and backend.get(EDEN) is None
        stats = backend.stats()
        assert (stats["documents"], stats["passages"]) == (0, 0)
        with pytest.raises(DocumentNotFound):
            backend.delete([EDEN])


# -- reads --------------------------------------------------------------------------------------------------------


class TestReads:
    def test_the_interface(self, seeded) -> None:
        assert isinstance(seeded, SearchBackend) and seeded.name in BACKENDS

    def test_get_count_and_passages(self, seeded, chunker, seeds) -> None:
        eden = next(doc for doc in seeds if doc.doc_id == EDEN)
        assert seeded.get(EDEN) == eden and seeded.get("no-such-id") is None
        assert seeded.count() == seeded.stats()["documents"] == 38
        assert seeded.passages_of(EDEN) == chunker.chunk(eden) and seeded.passages_of("no-such-id") == []
        assert seeded.stats()["passages"] == sum(len(chunker.chunk(doc)) for doc in seeds)

    def test_documents_are_paged_in_insertion_order(self, seeded, seeds) -> None:
        assert seeded.documents() == seeds  # the default page (100) holds all 38
        assert ids(seeded.documents(30, 5)) == ids(seeds[30:35])
        assert ids(seeded.documents(36, 10)) == ids(seeds[36:])
        assert seeded.documents(38, 5) == [] and seeded.documents(0, 0) == []
        with pytest.raises(ValueError, match=r"need offset >= 0 and limit >= 0, got -1, 5"):
            seeded.documents(-1, 5)


# -- durability ---------------------------------------------------------------------------------------------------

NEW_B = make_document("Quasars are bright galactic nuclei.", "", "b", B.meta)
FAILS = make_document("Kaboom: this document fails while it is embedded.", "", "e")
CRASH_POINTS = ["before-log-append", "after-log-append", "after-ack"]


class FailingEmbedder(HashEmbedder):
    """:class:`HashEmbedder` that raises on a text holding "Kaboom" (a write that fails after its log append)."""

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        if any("Kaboom" in text for text in texts):
            raise RuntimeError("the encoder failed")
        return super().encode(texts)


def crashing_writer() -> None:
    """A child process (``python -c``, arguments ``KIND ROOT POINT``): two acknowledged writes (``a``, ``b``, ``c``;
    then ``b`` replaced and ``c`` deleted), a write that fails after its log append (``e``: aborted), then a write of
    ``d`` that dies at ``POINT``: ``CITERAG_CRASH_AT=POINT`` for it, or ``after-ack``: SIGKILL as soon as it is
    acknowledged. The backend is never closed (nothing is flushed at exit). Prints one line per outcome."""
    from transformers import AutoTokenizer

    from citerag.service.model_files import embedding_model_dir

    kind, root, point = sys.argv[1:4]
    chunker = Chunker(AutoTokenizer.from_pretrained(str(embedding_model_dir())), 256, 128, 64)
    backend = open_backend(kind, Path(root), chunker, FailingEmbedder())
    backend.write([A, B, C])
    print("acknowledged abc", flush=True)
    backend.write([NEW_B], deletes=["c"])
    print("acknowledged b-c", flush=True)
    try:
        backend.write([FAILS])
    except RuntimeError:
        print("failed e", flush=True)
    if point != "after-ack":
        os.environ[ENV] = point
    backend.write([D])
    print("acknowledged d", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


def lose_what_milvus_lite_did_not_flush(db: Path) -> None:
    """A power cut's effect on Milvus Lite: it fsyncs its own write-ahead log (``<db>/collections/*/wal/``) only when
    it flushes, so what it wrote since its last flush is gone; its flushed segments and manifest stay."""
    lost = list(db.glob("collections/*/wal/*"))
    assert lost, "the child wrote nothing Milvus Lite had not flushed: the case would test nothing"
    for path in lost:
        path.unlink()


class TestDurability:
    @pytest.mark.parametrize("point", CRASH_POINTS)
    def test_every_acknowledged_write_survives_a_crash_before_the_flush(self, kind, tmp_path, chunker, point) -> None:
        """The child dies after its acknowledgements and before any flush (and, on Milvus Lite, everything it had
        not flushed is then lost, as in a power cut): the reopened backend holds exactly the acknowledged writes,
        the logged write of ``d`` when the crash came after its log append (replayed, as documented: its client saw
        no answer, and a retry by id changes nothing), and never the failed write of ``e``."""
        env = {key: value for key, value in os.environ.items() if key != ENV} | {"HF_HUB_OFFLINE": "1"}
        child = subprocess.run(
            [sys.executable, "-c", "from tests.index.test_backend_contract import crashing_writer; crashing_writer()",
             kind, str(tmp_path), point], check=False, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
        )
        assert child.returncode == -signal.SIGKILL, child.stderr[-3000:]
        outcomes = ["acknowledged abc", "acknowledged b-c", "failed e"]
        assert child.stdout.splitlines() == outcomes + (["acknowledged d"] if point == "after-ack" else [])
        if kind == "milvus":
            lose_what_milvus_lite_did_not_flush(tmp_path / "milvus.db")
            assert _lite_documents(tmp_path / "milvus.db") == 0  # Milvus itself kept none of the writes

        logged_d = point != "before-log-append"
        expected = [A, NEW_B, D] if logged_d else [A, NEW_B]
        backend = reopen_backend(kind, tmp_path, chunker, HashEmbedder())
        try:
            if isinstance(backend, MilvusBackend):
                assert backend.replayed == 2 + logged_d  # the aborted write of e is not replayed
            assert backend.documents() == expected
            assert [backend.get(doc_id) for doc_id in "ce"] == [None, None]
            for doc in expected:
                assert backend.passages_of(doc.doc_id) == chunker.chunk(doc)
            stats = backend.stats()
            n_passages = sum(len(chunker.chunk(doc)) for doc in expected)
            assert (stats["documents"], stats["passages"]) == (len(expected), n_passages)
            assert _top(backend, "zebrafish heart") == "a"
            assert _top(backend, "bright galactic nuclei") == "b"
            assert _top(backend, "protein folding attention") == ("d" if logged_d else None)
            for gone in ("radio jets telescopes", "nitrogen crops", "kaboom"):  # b's old text, c, e
                assert backend.search(gone, mode="bm25") == [], gone
        finally:
            close(backend)

        again = reopen_backend(kind, tmp_path, chunker, HashEmbedder())  # nothing left to replay: the same corpus
        try:
            assert again.documents() == expected
            if isinstance(again, MilvusBackend):
                assert again.replayed == 0
                held = json.loads((again.wal_dir / HELD_FILE).read_text())["held"]
                assert again.log.read().entries == [] and again.log.read().base == held
        finally:
            close(again)


def _top(backend: SearchBackend, query: str) -> str | None:
    """The document of the best BM25 passage for ``query`` (``None`` when nothing matches)."""
    results = backend.search(query, k=1, mode="bm25")
    return results[0].document.doc_id if results else None


def _lite_documents(db: Path) -> int:
    """How many rows the documents collection of the Milvus Lite file ``db`` holds, read by a bare client."""
    from milvus_lite import server_manager_instance
    from pymilvus import MilvusClient

    client = MilvusClient(uri=str(db))
    try:
        client.load_collection("citerag_documents")
        return int(client.query("citerag_documents", filter="", output_fields=["count(*)"])[0]["count(*)"])
    finally:
        client.close()
        server_manager_instance.release_server(str(db))
