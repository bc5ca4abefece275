"""Corpus edge cases at the retriever: empty and one-document corpora, a term in every document, every script,
a 50,000-character document, k beyond the corpus. Real chunker, BM25 and FAISS; the HashEmbedder stand-in encodes
(retrieval logic, not the model, is the subject; tests/service/test_api_edge_cases.py runs the real model)."""

from __future__ import annotations

import math

import pytest

from citerag.index.chunking import model_text
from citerag.index.ingest import text_doc_id
from citerag.index.tokenize import tokenize
from citerag.index.types import Document
from tests.conftest import SCRIPTS, StandInIndex

MODES = ("hybrid", "bm25", "dense")


def doc(text: str, doc_id: str | None = None, **meta) -> Document:
    return Document(doc_id or text_doc_id(text), "", text, text[:40], dict(meta))


class TestEmptyCorpus:
    def test_every_mode_returns_nothing(self, stand_in: StandInIndex) -> None:
        retriever = stand_in.retriever([])
        assert len(retriever.index.documents) == 0 and len(retriever.index.passages) == 0
        assert retriever.index.bm25.size == retriever.index.dense.size == 0
        for mode in MODES:
            assert retriever.search("model", k=100, mode=mode) == []
            assert retriever.search("model", k=5, mode=mode, one_per_doc=True, filters={"year": {"gte": 2000}}) == []

    def test_documents_without_text_are_not_indexed(self, stand_in: StandInIndex) -> None:
        retriever = stand_in.retriever([doc("   \n\t "), doc("A real abstract about retrieval.")])
        assert [d.text for d in retriever.index.documents.values()] == ["A real abstract about retrieval."]
        assert len(retriever.index.passages) == 1


class TestOneDocument:
    @pytest.mark.parametrize("method", ["lucene", "bm25l", "bm25+"])
    def test_bm25_with_n_1_finds_the_document_with_a_finite_positive_score(self, tokenizer, tmp_path, method) -> None:
        only = doc("A transformer model for retrieval of scientific abstracts.")
        retriever = StandInIndex(tmp_path / method, tokenizer, bm25_method=method).retriever([only])
        for mode in MODES:
            (hit,) = retriever.search("transformer model", k=10, mode=mode)
            assert hit.document.doc_id == only.doc_id and hit.rank == 1
            assert math.isfinite(hit.score) and hit.score > 0, (mode, hit.score)
        (hit,) = retriever.search("transformer model", k=10, mode="bm25")
        # Lucene's IDF with N = 1, df = 1: log(1 + 0.5 / 1.5) = 0.2877 per term, never negative
        assert hit.bm25_score == hit.score and math.isfinite(retriever.index.bm25.upper_bound(["transform", "model"]))
        if method == "lucene":
            assert retriever.index.bm25.upper_bound(["transform", "model"]) == pytest.approx(2 * math.log(4 / 3))

    @pytest.mark.parametrize("method", ["robertson", "atire"])
    def test_variants_whose_idf_is_not_positive_leave_it_to_dense(self, tokenizer, tmp_path, method) -> None:
        """Robertson's IDF log((N - df + 0.5) / (df + 0.5)) is negative for a term in over half the passages, ATIRE's
        log(N / df) is 0 for a term in all of them: BM25 alone returns nothing then (documented), hybrid still
        finds the document through the dense side."""
        only = doc("A transformer model for retrieval of scientific abstracts.")
        retriever = StandInIndex(tmp_path / method, tokenizer, bm25_method=method).retriever([only])
        assert retriever.search("transformer model", k=10, mode="bm25") == []
        (hit,) = retriever.search("transformer model", k=10, mode="hybrid")
        assert hit.document.doc_id == only.doc_id and hit.bm25_rank is None and math.isfinite(hit.score)


class TestTermInEveryDocument:
    DOCS = [
        doc("A model for passage retrieval with citations and long contexts in many fields."),
        doc("A model."),
        doc("A model of proteins."),
    ]

    def test_bm25_ranks_by_length_and_the_rarer_term_decides(self, stand_in: StandInIndex) -> None:
        retriever = stand_in.retriever(self.DOCS)
        hits = retriever.search("model", k=10, mode="bm25")
        # same tf everywhere, so the shortest passage scores highest (b = 0.75 length normalisation)
        assert [h.document.text for h in hits] == ["A model.", "A model of proteins.", self.DOCS[0].text]
        assert all(math.isfinite(h.score) and h.score > 0 for h in hits)
        assert hits[0].score > hits[1].score > hits[2].score
        top = retriever.search("model proteins", k=10, mode="bm25")[0]
        assert top.document.text == "A model of proteins."  # the term in one document outweighs the common one

    def test_hybrid_returns_all_three_with_both_ranks(self, stand_in: StandInIndex) -> None:
        retriever = stand_in.retriever(self.DOCS)
        hits = retriever.search("model proteins", k=10)
        assert len(hits) == 3 and hits[0].document.text == "A model of proteins."
        assert all(h.bm25_rank is not None and h.dense_rank is not None and 0 < h.score < 1 for h in hits)


class TestScripts:
    """A BM25 query in each script finds its document (regression: Chinese sentences were one token, "naïve" never
    met "naive")."""

    DOCS = {lang: doc(text) for lang, (text, _) in SCRIPTS.items()}

    @pytest.mark.parametrize(
        ("lang", "query"),
        [*((lang, query) for lang, (_, query) in SCRIPTS.items()), ("zh", "语言模型"), ("fr", "déjà")],
    )
    def test_a_query_in_the_script_finds_its_document_first(self, stand_in: StandInIndex, lang: str, query: str) -> None:
        retriever = stand_in.retriever(list(self.DOCS.values()))
        hits = retriever.search(query, k=3, mode="bm25")
        assert [h.document.doc_id for h in hits] == [self.DOCS[lang].doc_id]
        fused = {h.document.doc_id: h for h in retriever.search(query, k=7, mode="hybrid")}
        assert fused[self.DOCS[lang].doc_id].bm25_rank == 1  # the stand-in's dense side is noise; the real one is
        # tested in tests/service/test_api_edge_cases.py


class TestLongDocument:
    SENTENCES = [f"Sentence {i} reports that method m{i:04d} improves retrieval by {i % 97} points." for i in range(700)]
    TEXT = " ".join(SENTENCES)

    def test_50k_characters_are_chunked_within_the_limit_and_cover_the_text(self, stand_in: StandInIndex) -> None:
        assert len(self.TEXT) > 50_000
        retriever = stand_in.retriever([doc(self.TEXT, "long")])
        passages = retriever.index.passages_of("long")
        assert len(passages) > 100
        assert passages[0].start == 0 and passages[-1].end == len(self.TEXT)
        for a, b in zip(passages, passages[1:]):
            assert b.start <= a.end + 1  # overlap or adjacency: no text lost
        assert all(p.text == self.TEXT[p.start : p.end] and p.n_tokens <= 256 for p in passages)

    @pytest.mark.parametrize("i", [0, 350, 699])
    def test_every_part_is_searchable(self, stand_in: StandInIndex, i: int) -> None:
        retriever = stand_in.retriever([doc(self.TEXT, "long")])
        top = retriever.search(f"m{i:04d}", k=1, mode="bm25")[0]
        assert f"method m{i:04d} improves" in top.passage.text
        assert self.TEXT[top.passage.start : top.passage.end] == top.passage.text

    @pytest.mark.parametrize("text", ["word " * 10_000, "x9" * 25_000], ids=["no-sentence-end", "one-long-token"])
    def test_unbroken_50k_characters_are_cut_within_the_limit(self, stand_in: StandInIndex, text: str) -> None:
        retriever = stand_in.retriever([doc(text, "long")])
        passages = retriever.index.passages
        assert passages[0].start == 0 and passages[-1].end == len(text.rstrip())
        assert all(p.n_tokens <= 256 and p.text == text[p.start : p.end] for p in passages)


class TestMorePassagesThanExist:
    def test_k_beyond_the_matches_returns_exactly_the_matches(self, stand_in: StandInIndex) -> None:
        docs = [doc(f"Abstract {i}: a method for topic {i}. It uses kernels." if i % 3 else f"Abstract {i} on graphs.",
                    f"d{i}", year=2000 + i) for i in range(12)]
        retriever = stand_in.retriever(docs)
        n = len(retriever.index.passages)
        matching = sum("kernel" in tokenize(model_text(p.text)) for p in retriever.index.passages)
        assert 0 < matching < n
        assert len(retriever.search("kernels", k=100, mode="bm25")) == matching
        for mode in ("dense", "hybrid"):
            hits = retriever.search("kernels", k=100, mode=mode)
            assert len(hits) == len({h.passage.chunk_id for h in hits}) == n  # every passage once, no FAISS -1
            assert [h.rank for h in hits] == list(range(1, n + 1))

    def test_a_filter_to_one_document_never_pads_with_other_rows(self, stand_in: StandInIndex) -> None:
        """FAISS pads a filtered search with row -1; mapped to a passage it would be the last row's (regression
        guard for index/dense.py dropping the padding)."""
        docs = [doc(f"Abstract {i}: kernels for topic {i}.", f"d{i}", year=2000 + i) for i in range(12)]
        retriever = stand_in.retriever(docs)
        for mode in MODES:
            hits = retriever.search("kernels", k=100, mode=mode, filters={"year": 2003})
            assert [h.document.doc_id for h in hits] == ["d3"], mode


def test_the_filter_mask_cache_survives_a_concurrent_clear(stand_in: StandInIndex) -> None:
    """Regression: Retriever.mask() wrote the cache, then read it back; a thread clearing the full cache in between
    (64 distinct filters) made the read raise KeyError, a 500. The clear is simulated right after the write."""
    retriever = stand_in.retriever([doc("Kernels.", "a", year=2020), doc("Graphs.", "b", year=2021)])

    class ClearedAfterWrite(dict):
        def __setitem__(self, key, value) -> None:
            super().__setitem__(key, value)
            self.clear()  # what another request's clear() does when it runs between the write and the read

    retriever._masks = ClearedAfterWrite()
    mask = retriever.mask({"year": 2021})
    assert mask is not None and mask.tolist() == [False, True]
