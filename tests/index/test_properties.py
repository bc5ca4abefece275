"""Property-based tests (hypothesis): tokenizer, chunker and fusion hold their contracts for any Unicode input."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from citerag.index.chunking import Chunker
from citerag.index.fusion import bounded_score_fusion, reciprocal_rank_fusion
from citerag.index.tokenize import tokenize
from citerag.index.types import Document, Ranking

TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=600)


@given(TEXT)
def test_tokenize_is_total_lowercase_and_stable(text: str) -> None:
    tokens = tokenize(text)
    assert all(t and " " not in t for t in tokens)
    assert tokenize(text) == tokens


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(TEXT, st.sampled_from(["GP-EquiFlow", "V₁", "$\\mathcal{O}(N)$", "80\\%", "e.g.", "。"])),
                max_size=40).map(" ".join))
def test_chunks_cover_the_text_within_the_limit(tokenizer, text: str) -> None:
    chunker = Chunker(tokenizer, 256, target_tokens=64, overlap_tokens=16)
    doc = Document("d", "", text, "d")
    passages = chunker.chunk(doc)
    if not text.strip():
        assert passages == []
        return
    assert passages[0].start == len(text) - len(text.lstrip())
    assert passages[-1].end == len(text.rstrip())
    for a, b in zip(passages, passages[1:]):
        assert b.start <= a.end + 1 or not text[a.end : b.start].strip()  # no text lost between passages
    for p in passages:
        assert p.text == text[p.start : p.end]
        assert p.n_tokens <= 256


RUN = st.lists(st.integers(0, 50), unique=True, max_size=30).map(
    lambda rows: Ranking(np.array(rows, dtype=np.int64), 1.0 / np.arange(1, len(rows) + 1, dtype=np.float64))
)


@given(RUN, RUN)
def test_rrf_is_symmetric_sorted_and_deduplicated(a: Ranking, b: Ranking) -> None:
    fused = reciprocal_rank_fusion([a, b], top_k=100)
    assert fused.rows.tolist() == reciprocal_rank_fusion([b, a], top_k=100).rows.tolist()
    assert len(set(fused.rows.tolist())) == len(fused) == len(set(a.rows.tolist()) | set(b.rows.tolist()))
    assert all(np.diff(fused.scores) <= 0)


@given(RUN, RUN, st.floats(0.1, 100))
def test_bounded_fusion_scores_stay_in_range(a: Ranking, b: Ranking, bound: float) -> None:
    bm25 = Ranking(a.rows, a.scores * bound)  # scores never exceed the bound
    assert all(0.0 <= score <= 1.0 + 1e-9 for score in bounded_score_fusion(bm25, b, bound, top_k=100).scores.tolist())


@given(st.lists(RUN, min_size=1, max_size=3), st.integers(0, 100))
def test_rrf_scores_are_the_sums_added_in_python(runs: list[Ranking], k: int) -> None:
    """Bit for bit: a row's RRF score is 0.0 plus its ``1 / (k + rank)`` of each run, added in run order; ties
    (equal sums) keep the lower row first."""
    expected: dict[int, float] = {}
    for run in runs:
        for rank, row in enumerate(run.rows.tolist(), start=1):
            expected[row] = expected.get(row, 0.0) + 1.0 / (k + rank)
    fused = reciprocal_rank_fusion(runs, k=k, top_k=1000)
    assert list(zip(fused.rows.tolist(), fused.scores.tolist())) == sorted(
        expected.items(), key=lambda item: (-item[1], item[0]))
