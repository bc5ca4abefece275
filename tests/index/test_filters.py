from __future__ import annotations

import pytest

from citerag.index.filters import compile_filters
from citerag.index.types import Document
from tests.conftest import ROOT

ML_ABSTRACTS = ROOT.parent / "shared" / "corpora" / "ml_abstracts.jsonl.gz"


def _doc(**meta) -> Document:
    return Document(doc_id="d1", title="", text="t", label="t", meta=meta)


class TestCompileFilters:
    def test_equality_is_case_insensitive(self) -> None:
        assert compile_filters({"venue": "ICML"})(_doc(venue="icml"))
        assert not compile_filters({"venue": "icml"})(_doc(venue="nips"))

    def test_ranges_membership_and_missing_fields(self) -> None:
        f = compile_filters({"year": {"gte": 2018, "lt": 2020}, "venue": {"in": ["icml", "nips"]}})
        assert f(_doc(venue="nips", year=2019))
        assert not f(_doc(venue="nips", year=2020))
        assert not f(_doc(venue="colt", year=2019))
        assert not f(_doc(venue="nips"))  # no year: fails
        assert not compile_filters({"year": {"gt": 2000}})(_doc(year="n/a"))  # incomparable: fails

    def test_doc_id_field(self) -> None:
        assert compile_filters({"doc_id": {"in": ["d1", "d2"]}})(_doc())

    @pytest.mark.parametrize(
        ("filters", "message"),
        [({"year": {"after": 2018}}, "filters.year: unknown operator 'after'"), ({"venue": {"in": "icml"}}, "expected a list")],
    )
    def test_malformed_filters(self, filters, message: str) -> None:
        with pytest.raises(ValueError, match=message):
            compile_filters(filters)


@pytest.mark.slow
@pytest.mark.skipif(not ML_ABSTRACTS.is_file(), reason=f"{ML_ABSTRACTS} not present (shared corpora)")
def test_filters_apply_inside_retrieval_on_the_ml_corpus(stand_in) -> None:
    """On 22,981 real abstracts: a filtered top-k is full (a post-filter of the unfiltered top-k would not be) and
    every hit matches. The stand-in embedder is enough: the filter, not the model, is under test."""
    from citerag.index.ingest import load_documents

    documents = load_documents([ML_ABSTRACTS])
    assert len(documents) == 22981
    retriever = stand_in.retriever(documents)
    filters = {"venue": "icml", "year": {"gte": 2018}}
    query = "graph neural networks for molecules"
    for mode in ("bm25", "dense", "hybrid"):
        hits = retriever.search(query, k=50, mode=mode, filters=filters)
        assert len(hits) == 50, mode
        assert all(h.document.meta["venue"] == "icml" and h.document.meta["year"] >= 2018 for h in hits)
    unfiltered = retriever.search(query, k=50, mode="bm25")
    assert sum(h.document.meta["venue"] == "icml" and h.document.meta["year"] >= 2018 for h in unfiltered) < 50


def test_a_deeply_nested_filter_target_is_a_value_error_naming_the_field() -> None:
    """A 478-deep list (a 1 KB body) raised RecursionError and answered 500 (issue 16)."""
    import pytest

    from citerag.index.filters import compile_filters

    deep: list = ["icml"]
    for _ in range(478):
        deep = [deep]
    for filters in ({"venue": {"in": deep}}, {"venue": {"eq": deep}}, {"venue": deep}, {"venue": {"nin": [["a"]]}}):
        with pytest.raises(ValueError, match=r"filters\.venue\.(in|nin|eq): expected"):
            compile_filters(filters)
    assert compile_filters({"venue": {"in": ["icml", None, 2019]}, "year": {"gte": 2018}})
