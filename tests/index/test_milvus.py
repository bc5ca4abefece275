"""The Milvus backend against Milvus Lite (in-process, a file URI in a temporary directory).

Storage and update tests use the deterministic HashEmbedder (the model is not their subject); ranking, filtered
hybrid search, first-run ingest and the /ask path use the real MiniLM (and the real generator for /ask).
"""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from citerag.index.backend import SearchBackend
from citerag.index.chunking import Chunker
from citerag.index.errors import BackendUnavailable, DocumentNotFound, IndexMismatch, IngestError
from citerag.index.filters import compile_filters
from citerag.index.ingest import load_documents
from citerag.index.milvus import MilvusBackend
from citerag.index.milvus_filters import Unsatisfiable, milvus_expression
from citerag.index.types import Document
from tests.conftest import EDEN, SEEDS, HashEmbedder

EDEN_QUESTION = "How many parameters does the largest metagenomic foundation model have?"
EDEN_FILE = "000_2a406afafc6bd565.txt"  # the seed file holding the EDEN abstract


@pytest.fixture(scope="module")
def seeds() -> list[Document]:
    return load_documents([SEEDS])


@pytest.fixture(scope="module")
def chunker(tokenizer) -> Chunker:
    return Chunker(tokenizer, 256, 128, 64)


@pytest.fixture
def backend(tmp_path: Path, chunker: Chunker, seeds: list[Document]):
    """A Milvus Lite backend in ``tmp_path`` holding the 38 seed abstracts (HashEmbedder vectors)."""
    milvus = MilvusBackend(str(tmp_path / "milvus.db"), HashEmbedder(), chunker)
    milvus.write(seeds)
    yield milvus
    milvus.close()


def _with_venues(seeds: list[Document]) -> list[Document]:
    """The seeds with metadata to filter on: venue alternating ICML / NeurIPS, years 2015..2022."""
    return [
        dataclasses.replace(doc, meta={**doc.meta, "venue": "ICML" if i % 2 else "NeurIPS", "year": 2015 + i % 8})
        for i, doc in enumerate(seeds)
    ]


class TestFilterExpressions:
    def test_typed_columns_for_positive_comparisons_json_paths_otherwise(self) -> None:
        assert milvus_expression({"venue": "ICML", "year": {"gte": 2018, "lt": 2020}}) == (
            '(venue is not null and venue == "icml") and (year is not null and year >= 2018) '
            "and (year is not null and year < 2020)"
        )
        assert milvus_expression({"venue": {"ne": "ICML"}}) == (
            '(exists meta_folded["venue"] and meta_folded["venue"] != "icml")'
        )
        assert milvus_expression({"doc_id": {"in": ["A", 'b"c']}}) == (
            '(exists meta_folded["doc_id"] and (meta_folded["doc_id"] == "a" or meta_folded["doc_id"] == "b\\"c"))'
        )

    def test_same_validation_messages_as_the_embedded_backend(self) -> None:
        with pytest.raises(ValueError, match=r"filters.year: unknown operator 'after'"):
            milvus_expression({"year": {"after": 2018}})
        with pytest.raises(ValueError, match=r"filters.venue.in: expected a list"):
            milvus_expression({"venue": {"in": "icml"}})
        with pytest.raises(ValueError, match="filters must be a JSON object"):
            milvus_expression(["venue"])  # type: ignore[arg-type]

    def test_unsatisfiable_filters_are_recognised(self) -> None:
        with pytest.raises(Unsatisfiable):
            milvus_expression({"venue": {"in": []}})
        with pytest.raises(Unsatisfiable):
            milvus_expression({"venue": None})

    def test_no_filter_is_no_expression(self) -> None:
        assert milvus_expression(None) == "" and milvus_expression({}) == ""


class TestWrites:
    def test_ingest_stores_every_passage_of_the_chunker(self, backend, chunker, seeds) -> None:
        assert isinstance(backend, SearchBackend) and backend.name == "milvus"
        expected = [p for doc in seeds for p in chunker.chunk(doc)]
        stats = backend.stats()
        assert (stats["documents"], stats["passages"]) == (38, len(expected))
        eden = next(doc for doc in seeds if doc.doc_id == EDEN)
        assert backend.get(EDEN) == eden
        assert backend.passages_of(EDEN) == chunker.chunk(eden)
        assert backend.passages_of("no-such-id") == [] and backend.get("no-such-id") is None
        assert [d.doc_id for d in backend.documents(30, 5)] == [d.doc_id for d in seeds[30:35]]

    def test_first_write_report(self, tmp_path, chunker, seeds) -> None:
        milvus = MilvusBackend(str(tmp_path / "m.db"), HashEmbedder(), chunker)
        report = milvus.write(seeds + [Document("blank", "", "   ", "blank")])
        n_passages = sum(len(chunker.chunk(doc)) for doc in seeds)
        assert report.added == [d.doc_id for d in seeds] and report.replaced == report.unchanged == []
        assert report.skipped == [("blank", "no text")]
        assert report.passages_embedded == n_passages and report.version == "milvus-38-38"
        milvus.close()

    def test_identical_documents_are_left_alone(self, backend, seeds) -> None:
        report = backend.write(seeds[:3])
        assert report.unchanged == [d.doc_id for d in seeds[:3]] and report.passages_embedded == 0
        assert report.version == "milvus-38-38"

    def test_changed_text_replaces_all_passages(self, backend, seeds) -> None:
        eden = next(doc for doc in seeds if doc.doc_id == EDEN)
        assert len(backend.passages_of(EDEN)) > 1
        new = dataclasses.replace(eden, text="EDEN is now described by one short sentence about zebrafish.")
        report = backend.write([new])
        assert report.replaced == [EDEN] and report.passages_embedded == 1
        passages = backend.passages_of(EDEN)
        assert [(p.chunk_id, p.text) for p in passages] == [(f"{EDEN}#0", new.text)]  # no stale passage left
        assert backend.stats()["passages"] == sum(len(backend.passages_of(d.doc_id)) for d in seeds)
        top = backend.search("zebrafish", k=3, mode="bm25")
        assert [r.passage.chunk_id for r in top] == [f"{EDEN}#0"] and top[0].bm25_rank == 1
        assert all(r.document.doc_id != EDEN for r in backend.search("metagenomic", k=10, mode="bm25"))
        assert backend.get(EDEN) == new
        assert [d.doc_id for d in backend.documents(37, 5)] == [EDEN]  # a replaced document moves to the end

    def test_metadata_change_is_an_update_that_reuses_every_vector(self, backend, seeds) -> None:
        doc = dataclasses.replace(seeds[0], meta={**seeds[0].meta, "venue": "ICML"})
        passages = backend.passages_of(doc.doc_id)
        report = backend.write([doc])
        assert report.updated == [doc.doc_id] and report.replaced == [] and report.passages_embedded == 0
        assert report.version == "milvus-38-38"  # no seq taken: the document keeps its place
        assert backend.get(doc.doc_id).meta["venue"] == "ICML" and backend.passages_of(doc.doc_id) == passages
        assert backend.documents(0, 1) == [doc]
        assert [r.document.doc_id for r in backend.search("x", k=5, mode="dense", filters={"venue": "icml"})] == [
            doc.doc_id
        ] * len(backend.passages_of(doc.doc_id))

    def test_delete_removes_the_document_and_its_passages(self, backend) -> None:
        before = backend.stats()["passages"]
        n_eden = len(backend.passages_of(EDEN))
        report = backend.delete([EDEN])
        assert report.deleted == [EDEN] and report.version == "milvus-38-37"
        assert backend.get(EDEN) is None and backend.passages_of(EDEN) == []
        assert backend.stats()["passages"] == before - n_eden
        assert all(r.document.doc_id != EDEN for r in backend.search("EDEN metagenomic", k=50))

    def test_deleting_an_unknown_id_deletes_nothing(self, backend, seeds) -> None:
        with pytest.raises(DocumentNotFound, match="no document with id 'nope'; list ids with GET /documents"):
            backend.delete([EDEN, "nope"])
        assert backend.get(EDEN) is not None and backend.stats()["documents"] == 38

    def test_ids_with_spaces_quotes_and_accents(self, backend) -> None:
        odd = Document("odd 'id' ü", "", "An abstract about zebrafish regeneration.", "odd", {"venue": 'Ven"ue'})
        assert backend.write([odd]).added == [odd.doc_id]
        assert backend.get(odd.doc_id) == odd
        assert [p.chunk_id for p in backend.passages_of(odd.doc_id)] == [f"{odd.doc_id}#0"]
        found = backend.search("zebrafish", k=5, mode="bm25", filters={"doc_id": odd.doc_id, "venue": 'VEN"UE'})
        assert [r.document.doc_id for r in found] == [odd.doc_id]
        assert backend.delete([odd.doc_id]).deleted == [odd.doc_id]
        assert backend.passages_of(odd.doc_id) == [] and backend.get(odd.doc_id) is None

    @pytest.mark.parametrize("doc_id", ['a"b', "a\\b"])
    def test_ids_with_double_quotes_or_backslashes_are_refused(self, backend, doc_id: str) -> None:
        with pytest.raises(IngestError, match=r"documents\[0\]: doc_id may not contain a double quote or a backslash"):
            backend.write([Document(doc_id, "", "text", "text")])

    def test_malformed_batches_write_nothing(self, backend, seeds) -> None:
        twice = [seeds[0], dataclasses.replace(seeds[0], text="other text")]
        with pytest.raises(IngestError, match=r"documents\[1\]: .* appears twice with different content"):
            backend.write(twice)
        with pytest.raises(IngestError, match=r"documents\[0\]: text is longer than 65,535 bytes"):
            backend.write([Document("huge", "", "word " * 14_000, "huge")])
        assert backend.get("huge") is None and backend.stats()["documents"] == 38


class TestSearch:
    def test_modes_fill_the_ranks_they_ran(self, backend) -> None:
        bm25 = backend.search("metagenomic foundation models", k=5, mode="bm25")
        assert bm25[0].document.doc_id == EDEN and bm25[0].bm25_rank == 1 and bm25[0].bm25_score > 0
        assert all(r.dense_rank is None for r in bm25)
        dense = backend.search("metagenomic foundation models", k=5, mode="dense")
        assert [r.dense_rank for r in dense] == [1, 2, 3, 4, 5] and all(r.bm25_rank is None for r in dense)
        hybrid = backend.search("metagenomic foundation models", k=5, one_per_doc=True)
        assert hybrid[0].document.doc_id == EDEN and len({r.document.doc_id for r in hybrid}) == 5
        assert [r.rank for r in hybrid] == [1, 2, 3, 4, 5]

    def test_filters_apply_inside_the_search(self, tmp_path, chunker, seeds) -> None:
        docs = _with_venues(seeds)
        milvus = MilvusBackend(str(tmp_path / "f.db"), HashEmbedder(), chunker)
        milvus.write(docs)
        all_passages = {p.chunk_id: p for d in docs for p in chunker.chunk(d)}
        for filters in ({"venue": "neurips"}, {"year": {"gte": 2018, "lt": 2020}}, {"venue": {"nin": ["NeurIPS"]}},
                        {"doc_id": {"in": [EDEN.upper()]}}, {"year": {"ne": 2015}, "venue": {"in": ["icml"]}}):
            matches = compile_filters(filters)
            wanted = {cid for cid, p in all_passages.items() if matches(next(d for d in docs if d.doc_id == p.doc_id))}
            found = milvus.search("anything", k=1000, mode="dense", filters=filters)
            assert {r.passage.chunk_id for r in found} == wanted, filters  # every allowed passage, no other
        assert milvus.search("model", filters={"venue": {"in": []}}) == []
        assert milvus.search("model", filters={"source": "nowhere.txt"}) == []
        milvus.close()

    def test_rrf_in_the_engine_matches_client_side_rrf(self, backend) -> None:
        client = backend.search("metagenomic foundation models", k=10)
        backend.rrf_in_engine = True
        engine = backend.search("metagenomic foundation models", k=10)
        assert [r.passage.chunk_id for r in engine[:3]] == [r.passage.chunk_id for r in client[:3]]
        assert engine[0].score == pytest.approx(client[0].score, rel=1e-5)
        assert all(r.bm25_rank is None and r.dense_rank is None for r in engine)  # the engine returns no ranks

    def test_bad_arguments(self, backend) -> None:
        with pytest.raises(ValueError, match="fusion 'bounded' needs BM25 document frequencies"):
            backend.search("x", fusion="bounded")
        with pytest.raises(ValueError, match="mode must be 'hybrid', 'bm25' or 'dense'"):
            backend.search("x", mode="sparse")  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="k must be >= 1"):
            backend.search("x", k=0)
        assert backend.search("the of and", mode="bm25") == []  # stop words only: no BM25 term

    def test_bounded_fusion_asked_at_start_falls_back_to_rrf_with_a_warning(self, tmp_path, chunker, caplog) -> None:
        with caplog.at_level(logging.WARNING, logger="citerag.index.milvus"):
            milvus = MilvusBackend(str(tmp_path / "b.db"), HashEmbedder(), chunker, fusion="bounded")
        reason = "bounded -> rrf: bounded needs BM25 document frequencies, which Milvus does not expose"
        assert [r.levelname for r in caplog.records if reason in r.getMessage()] == ["WARNING"]
        stats = milvus.stats()
        assert milvus.fusion == stats["fusion"] == "rrf" and str(stats["fusion_fallback"]).startswith(reason)
        milvus.close()
        with pytest.raises(ValueError, match=r"fusion must be 'rrf' or 'weighted', got 'sum'"):
            MilvusBackend(str(tmp_path / "c.db"), HashEmbedder(), chunker, fusion="sum")  # type: ignore[arg-type]


class TestPersistence:
    def test_reopening_the_file_sees_the_data(self, tmp_path, chunker, seeds) -> None:
        uri = str(tmp_path / "p.db")
        first = MilvusBackend(uri, HashEmbedder(), chunker)
        first.write(seeds)
        first.delete([EDEN])
        before = [(r.passage.chunk_id, r.score) for r in first.search("language model", k=10)]
        stats = first.stats()
        first.close()  # stops the in-process Milvus Lite server: the reopen below reads the files

        second = MilvusBackend(uri, HashEmbedder(), chunker)
        assert second.stats() == stats
        assert [(r.passage.chunk_id, r.score) for r in second.search("language model", k=10)] == before
        assert second.get(EDEN) is None
        report = second.write([Document("new", "", "A new abstract about retrieval.", "new")])
        assert report.added == ["new"] and report.version == "milvus-39-38"  # the sequence continues
        second.close()

    def test_a_different_layout_is_refused(self, tmp_path, chunker) -> None:
        uri = str(tmp_path / "l.db")
        MilvusBackend(uri, HashEmbedder(), chunker).close()
        with pytest.raises(IndexMismatch, match=r"citerag_passages.*\"analyzer\": \"citerag\".*drop it"):
            MilvusBackend(uri, HashEmbedder(), chunker, analyzer="milvus")

    def test_an_unreachable_server_is_named(self, tmp_path, chunker) -> None:
        with pytest.raises(BackendUnavailable, match=r"Milvus at http://127.0.0.1:1 failed: Fail connecting"):
            MilvusBackend("http://127.0.0.1:1", HashEmbedder(), chunker, wal_dir=tmp_path / "wal")  # nothing listens

    def test_a_server_needs_a_directory_for_its_write_log(self, chunker) -> None:
        with pytest.raises(ValueError, match=r"Milvus server http://127.0.0.1:1: give wal_dir"):
            MilvusBackend("http://127.0.0.1:1", HashEmbedder(), chunker)

    def test_a_file_uri_must_end_in_db(self, tmp_path, chunker) -> None:
        with pytest.raises(ValueError, match=r"give a file path ending in \.db"):
            MilvusBackend(str(tmp_path / "milvus"), HashEmbedder(), chunker)


WRITES: list[tuple[list[Document], list[str]]] = [  # every kind of change, each write logged and applied
    ([Document("a", "", "Zebrafish regenerate heart muscle.", "a"), Document("b", "", "Quasars emit radio jets.", "b"),
      Document("c", "", "Soil microbes fix nitrogen.", "c", {"year": 2018}),
      Document("d", "", "Protein folding by attention.", "d")], []),
    ([Document("b", "", "Quasars are bright galactic nuclei.", "b"),  # replaced
      Document("c", "", "Soil microbes fix nitrogen.", "c", {"year": 2019})], []),  # metadata only
    ([], ["d"]),
    ([Document("a", "", "Zebrafish fins regrow in days.", "a")], ["a"]),  # deleted and added again in one write
    ([Document("e", "", "Coral reefs bleach in warm water.", "e", {"venue": "ICML"})], []),
]


def _collections(milvus: MilvusBackend) -> tuple:
    """What the collections hold, as the API reads it: documents in order, their passages, counts, and the passages
    that match a few queries (filtered too), in BM25 and in dense order (dense: those sharing a word with the query,
    the others tie at 0)."""
    documents = milvus.documents()
    stats = milvus.stats()
    searches = [
        [r.passage.chunk_id for r in milvus.search(query, k=3, mode=mode, filters=filters)
         if mode == "bm25" or r.score > 1e-6]
        for query in ("zebrafish fins", "galactic nuclei", "nitrogen", "coral reefs", "radio jets", "protein")
        for mode in ("bm25", "dense")
        for filters in (None, {"year": 2019})
    ]
    assert any(searches) and not all(searches)  # the queries match some passages, and some nothing
    return (documents, [milvus.passages_of(doc.doc_id) for doc in documents], stats["documents"], stats["passages"],
            searches)


class TestWriteLog:
    def test_replaying_the_log_gives_the_written_collections_and_replaying_it_again_changes_nothing(
        self, tmp_path, chunker
    ) -> None:
        """The log of five writes replayed into empty collections gives what the writes gave; replayed again (at
        the next open, as after a crash between a replay and its checkpoint, and in-process) it changes nothing."""
        live = MilvusBackend(str(tmp_path / "live.db"), HashEmbedder(), chunker)
        for upserts, deletes in WRITES:
            live.write(upserts, deletes)
        logged = live.log.read()
        assert [e.seq for e in logged.entries] == [1, 2, 3, 4, 5] and logged.base == 0  # no checkpoint yet
        written = _collections(live)
        assert [doc.doc_id for doc in written[0]] == ["c", "b", "a", "e"]
        log_file = live.log.path.read_bytes()
        live.close()

        uri = str(tmp_path / "replayed.db")
        MilvusBackend(uri, HashEmbedder(), chunker).close()  # empty collections and their held.json (held 0)
        wal_dir = Path(f"{uri}.wal")
        held_file = (wal_dir / "held.json").read_bytes()
        (wal_dir / "wal.jsonl").write_bytes(log_file)
        first = MilvusBackend(uri, HashEmbedder(), chunker)
        assert first.replayed == 5
        replayed = _collections(first)
        assert replayed == written  # the same documents in the same order, passages, counts and search results
        assert first.recover() == 0 and _collections(first) == replayed  # checkpointed: nothing left to replay
        first.close()

        for _ in range(2):  # the log and held.json as they were before the replay's checkpoint: replayed again
            (wal_dir / "wal.jsonl").write_bytes(log_file)
            (wal_dir / "held.json").write_bytes(held_file)
            again = MilvusBackend(uri, HashEmbedder(), chunker)
            assert again.replayed == 5 and _collections(again) == replayed
            assert again.log.read().entries == [] and again.log.read().base == 5
            again.close()

    def test_a_checkpoint_flushes_and_cuts_the_log(self, tmp_path, chunker, monkeypatch) -> None:
        import citerag.index.milvus as milvus_module

        monkeypatch.setattr(milvus_module, "CHECKPOINT_ENTRIES", 3)
        milvus = MilvusBackend(str(tmp_path / "c.db"), HashEmbedder(), chunker)
        for upserts, deletes in WRITES[:2]:
            milvus.write(upserts, deletes)
        assert milvus.write(WRITES[1][0][:1]).unchanged == ["b"]
        assert [e.seq for e in milvus.log.read().entries] == [1, 2]  # a write that changes nothing is not logged
        milvus.write(*WRITES[2])  # the third logged write: a checkpoint
        state = milvus.log.read()
        assert (state.base, state.entries) == (3, [])
        milvus.write(*WRITES[3])
        assert [e.seq for e in milvus.log.read().entries] == [4]  # sequence numbers go on after a cut
        milvus.checkpoint()
        assert milvus.log.read().base == 4 and milvus.recover() == 0
        milvus.close()

    def test_a_log_kept_for_other_collections_is_set_aside(self, tmp_path, chunker, caplog) -> None:
        uri = str(tmp_path / "o.db")
        milvus = MilvusBackend(uri, HashEmbedder(), chunker)
        milvus.write(*WRITES[0])
        log_file = milvus.log.path.read_bytes()
        milvus.close()
        from milvus_lite import server_manager_instance
        from pymilvus import MilvusClient

        client = MilvusClient(uri=uri)
        for name in ("citerag_passages", "citerag_documents"):  # dropped, as a layout change asks
            client.drop_collection(name)
        client.close()
        server_manager_instance.release_server(uri)
        wal_dir = Path(f"{uri}.wal")
        (wal_dir / "wal.jsonl").write_bytes(log_file)  # as if the writes were never checkpointed
        with caplog.at_level(logging.WARNING, logger="citerag.index.milvus"):
            fresh = MilvusBackend(uri, HashEmbedder(), chunker)
        assert fresh.replayed == 0 and fresh.count() == 0  # the old collections' writes are not replayed
        assert "kept for other Milvus collections" in caplog.text
        (aside,) = (wal_dir / "set-aside").iterdir()
        assert (aside / "wal.jsonl").read_bytes() == log_file and not fresh.log.path.exists()
        fresh.close()


@pytest.fixture(scope="module")
def real_settings(settings_factory):
    """Settings for the seed corpus on the Milvus backend (Milvus Lite file in a temporary index directory)."""
    return settings_factory(corpus=[SEEDS], backend="milvus")


@pytest.fixture(scope="module")
def real_milvus(real_settings):
    """The seed corpus ingested on first run by ``open_milvus_backend`` with the packaged MiniLM."""
    from citerag.service.pipeline import open_milvus_backend

    backend = open_milvus_backend(real_settings, show_progress=False)
    yield backend
    backend.close()


@pytest.mark.slow
class TestRealModel:
    """The packaged MiniLM, the first-run ingest of ``open_milvus_backend`` and the real generator."""

    def test_first_run_ingests_the_corpus_once(self, real_settings, real_milvus) -> None:
        from citerag.service.pipeline import open_milvus_backend

        assert real_milvus.stats()["documents"] == 38 and real_milvus.uri == str(real_settings.index_dir / "milvus.db")
        assert open_milvus_backend(real_settings, show_progress=False).stats()["version"] == "milvus-38-38"

    def test_filtered_hybrid_search_ranks_eden_first(self, real_milvus) -> None:
        results = real_milvus.search(EDEN_QUESTION, k=5, one_per_doc=True, filters={"source": EDEN_FILE.upper()})
        assert results[0].document.doc_id == EDEN and results[0].rank == 1
        assert results[0].bm25_rank is not None and results[0].dense_rank == 1 and results[0].dense_score > 0.5
        assert {r.document.meta["source"] for r in results} == {EDEN_FILE}
        other = real_milvus.search(EDEN_QUESTION, k=5, filters={"source": {"ne": EDEN_FILE}})
        assert other and all(r.document.doc_id != EDEN for r in other)

    def test_ask_answers_with_the_eden_citation(self, real_settings, real_milvus) -> None:
        from citerag.service.pipeline import open_answerer

        answer = open_answerer(real_settings, real_milvus).ask(EDEN_QUESTION, k=5)  # type: ignore[arg-type]
        assert answer.abstained is False, answer.reason
        assert "28 billion" in answer.answer
        assert {c.result.document.doc_id for c in answer.citations} == {EDEN}


@pytest.mark.slow
def test_the_api_serves_and_writes_through_the_milvus_backend(client_for, tmp_path) -> None:
    """CITERAG_BACKEND=milvus end to end over the API: /ask cites EDEN, POST/DELETE /documents reach Milvus."""
    from tests.conftest import API_KEY

    client = client_for([SEEDS], backend="milvus", api_key=API_KEY)
    assert client.get("/health").json()["documents"] == 38
    answer = client.post("/ask", json={"question": "How many parameters does EDEN have?"}).json()
    assert not answer["abstained"] and "28" in answer["answer"]
    assert {c["doc_id"] for c in answer["citations"]} == {EDEN}
    auth = {"Authorization": f"Bearer {API_KEY}"}
    doc = {"id": "zx-1", "title": "Zorblax", "text": "Zorblax quantisation halves the memory of sparse transformers."}
    assert client.post("/documents", json=[doc], headers=auth).json()["added"] == ["zx-1"]
    hits = client.post("/search", json={"query": "zorblax", "k": 1, "mode": "bm25"}).json()["results"]
    assert hits[0]["doc_id"] == "zx-1"
    assert client.delete("/documents/zx-1", headers=auth).json()["deleted"] == ["zx-1"]
    assert client.get("/documents/zx-1").status_code == 404
