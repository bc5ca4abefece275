"""Fusion (one form, over :class:`~citerag.index.types.Ranking` arrays) against scores computed by hand."""

from __future__ import annotations

import numpy as np
import pytest

from citerag.index.fusion import bounded_score_fusion, min_max, reciprocal_rank_fusion, weighted_score_fusion
from citerag.index.types import Ranking


def _run(rows: list[int], scores: list[float] | None = None) -> Ranking:
    """A retriever's candidate list, best first (default scores 10, 9, 8, ...)."""
    return Ranking(np.array(rows, dtype=np.int64),
                   np.array(scores or [10.0 - i for i in range(len(rows))], dtype=np.float64))


def _pairs(fused: Ranking) -> list[tuple[int, float]]:
    return list(zip(fused.rows.tolist(), fused.scores.tolist(), strict=True))


class TestReciprocalRankFusion:
    def test_hand_computed_example(self) -> None:
        # Cormack, Clarke & Buettcher (SIGIR 2009): score = sum over runs of 1 / (k + rank), rank 1-based, k = 60.
        # bm25: a=1, b=2, c=3 ; dense: c=1, a=2
        fused = reciprocal_rank_fusion([_run([1, 2, 3]), _run([3, 1])], k=60)
        assert _pairs(fused) == [(1, 1 / 61 + 1 / 62), (3, 1 / 63 + 1 / 61), (2, 1 / 62)]
        assert fused.scores.dtype == np.float64 and fused.rows.dtype == np.int64

    def test_rank_not_score_counts_and_k_sets_the_weight_of_the_top(self) -> None:
        # the scores of the runs play no part; with k = 0 the first hit adds 1/1, the second 1/2
        fused = reciprocal_rank_fusion([_run([7, 8], [1e9, -5.0]), _run([8], [0.001])], k=0)
        assert _pairs(fused) == [(8, 1 / 2 + 1 / 1), (7, 1 / 1)]

    def test_ties_break_on_lower_row_and_top_k_cuts(self) -> None:
        fused = reciprocal_rank_fusion([_run([5]), _run([4])], k=60, top_k=1)
        assert _pairs(fused) == [(4, 1 / 61)]

    def test_empty_runs(self) -> None:
        assert len(reciprocal_rank_fusion([Ranking.empty(), Ranking.empty()])) == 0

    def test_negative_k_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="RRF k must be >= 0"):
            reciprocal_rank_fusion([], k=-1)


class TestWeightedFusion:
    def test_min_max_weighted_sum(self) -> None:
        bm25 = _run([1, 2, 3], [9.0, 5.0, 1.0])  # normalised 1.0, 0.5, 0.0
        dense = _run([3, 1], [0.8, 0.4])  # normalised 1.0, 0.0
        fused = weighted_score_fusion([bm25, dense], [0.3, 0.7])
        # row 3: 0.3 * 0.0 + 0.7 * 1.0 ; row 1: 0.3 * 1.0 + 0.7 * 0.0 ; row 2: 0.3 * 0.5 (absent from dense)
        assert _pairs(fused) == [(3, 0.3 * 0.0 + 0.7 * 1.0), (1, 0.3 * 1.0 + 0.7 * 0.0), (2, 0.3 * 0.5)]

    def test_min_max_of_constant_scores(self) -> None:
        assert min_max([2.0, 2.0]).tolist() == [1.0, 1.0]

    def test_weights_must_match_runs(self) -> None:
        with pytest.raises(ValueError, match="one weight per run"):
            weighted_score_fusion([Ranking.empty(), Ranking.empty()], [1.0])

    def test_negative_weights_are_rejected(self) -> None:
        with pytest.raises(ValueError, match="weights must be >= 0"):
            weighted_score_fusion([_run([1])], [-0.5])


class TestBoundedFusion:
    def test_bm25_divided_by_its_bound_plus_cosine(self) -> None:
        bm25 = _run([1, 2], [6.0, 3.0])
        dense = _run([2, 3], [0.8, 0.5])
        fused = bounded_score_fusion(bm25, dense, bm25_bound=12.0, weights=(0.5, 0.5))
        # row 2: 0.5*3/12 + 0.5*0.8 = 0.525 ; row 3: 0.5*0.5 = 0.25 ; row 1: 0.5*6/12 = 0.25 -> tie, lower row first
        assert _pairs(fused) == [(2, 0.5 * 3.0 / 12.0 + 0.5 * 0.8), (1, 0.5 * 6.0 / 12.0), (3, 0.5 * 0.5)]

    def test_float32_scores_are_fused_as_float64(self) -> None:
        # BM25 (bm25s) and FAISS return float32: each is widened before it is weighted and divided
        bm25 = Ranking(np.array([4]), np.array([2.7], dtype=np.float32))
        dense = Ranking(np.array([4]), np.array([0.3], dtype=np.float32))
        fused = bounded_score_fusion(bm25, dense, bm25_bound=7.5, weights=(0.4, 0.6))
        share = float(np.float32(2.7)) * 0.4 / 7.5
        assert _pairs(fused) == [(4, 0.0 + share + float(np.float32(0.3)) * 0.6)]

    def test_bound_must_be_positive(self) -> None:
        with pytest.raises(ValueError, match="bm25_bound must be > 0"):
            bounded_score_fusion(Ranking.empty(), Ranking.empty(), 0.0)

    def test_two_non_negative_weights(self) -> None:
        with pytest.raises(ValueError, match="need two weights"):
            bounded_score_fusion(_run([1]), _run([1]), 1.0, weights=(0.5, 0.3, 0.2))


def test_bm25_upper_bound_is_the_sum_of_lucene_idfs() -> None:
    import math

    from citerag.index.bm25 import BM25Index

    index = BM25Index()
    index.build([["kv", "cache"], ["kv"], ["model"], ["model", "cache"]])
    n = 4

    def idf(df: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    assert index.upper_bound(["kv", "cache", "kv"]) == pytest.approx(idf(2) + idf(2))
    assert index.upper_bound(["unseen"]) == pytest.approx(idf(0))
    # no passage can reach the bound: scores / bound stay below 1
    assert index.scores(["kv", "cache"]).max() < index.upper_bound(["kv", "cache"])


def test_a_fused_list_keeps_each_rows_place_in_its_runs() -> None:
    """``places``: 0-based place per run, -1 where absent, the later place of a row listed twice."""
    bm25 = Ranking(np.array([7, 3, 9, 3]), np.array([4.0, 3.0, 2.0, 1.0]))
    dense = Ranking(np.array([9, 5]), np.array([0.9, 0.8]))
    fused = reciprocal_rank_fusion([bm25, dense], k=60, top_k=10)
    assert fused.runs[0] is bm25 and fused.runs[1] is dense and fused.rows.tolist() == [9, 3, 7, 5]
    assert fused.places.tolist() == [[2, 3, 0, -1], [0, -1, -1, 1]]
    assert fused.scores.tolist() == [1 / 63 + 1 / 61, 1 / 62 + 1 / 64, 1 / 61, 1 / 62]
    assert fused.take(slice(2)).places.tolist() == [[2, 3], [0, -1]]
