from __future__ import annotations

import numpy as np
import pytest

from citerag.index.fusion import (
    min_max, reciprocal_rank_fusion, reciprocal_rank_fusion_rankings, weighted_score_fusion,
)
from citerag.index.types import Hit, Ranking


def _run(rows: list[int], scores: list[float] | None = None) -> list[Hit]:
    return [Hit(r, s) for r, s in zip(rows, scores or [10.0 - i for i in range(len(rows))])]


class TestReciprocalRankFusion:
    def test_hand_computed_example(self) -> None:
        # bm25: a=1, b=2, c=3 ; dense: c=1, a=2  (k = 60, ranks 1-based)
        fused = reciprocal_rank_fusion([_run([1, 2, 3]), _run([3, 1])], k=60)
        expected = {1: 1 / 61 + 1 / 62, 3: 1 / 63 + 1 / 61, 2: 1 / 62}
        assert [h.row for h in fused] == [1, 3, 2]
        for hit in fused:
            assert hit.score == pytest.approx(expected[hit.row], abs=1e-12)

    def test_ties_break_on_lower_row_and_top_k_cuts(self) -> None:
        fused = reciprocal_rank_fusion([_run([5]), _run([4])], k=60, top_k=1)
        assert [h.row for h in fused] == [4]

    def test_empty_runs(self) -> None:
        assert reciprocal_rank_fusion([[], []]) == []

    def test_negative_k_is_rejected(self) -> None:
        with pytest.raises(ValueError, match="RRF k must be >= 0"):
            reciprocal_rank_fusion([], k=-1)


class TestWeightedFusion:
    def test_min_max_weighted_sum(self) -> None:
        bm25 = _run([1, 2, 3], [9.0, 5.0, 1.0])  # normalised 1.0, 0.5, 0.0
        dense = _run([3, 1], [0.8, 0.4])  # normalised 1.0, 0.0
        fused = weighted_score_fusion([bm25, dense], [0.3, 0.7])
        assert [(h.row, round(h.score, 6)) for h in fused] == [(3, 0.7), (1, 0.3), (2, 0.15)]

    def test_min_max_of_constant_scores(self) -> None:
        assert min_max([2.0, 2.0]).tolist() == [1.0, 1.0]

    def test_weights_must_match_runs(self) -> None:
        with pytest.raises(ValueError, match="one weight per run"):
            weighted_score_fusion([[], []], [1.0])


class TestBoundedFusion:
    def test_bm25_divided_by_its_bound_plus_cosine(self) -> None:
        from citerag.index.fusion import bounded_score_fusion

        bm25 = _run([1, 2], [6.0, 3.0])
        dense = _run([2, 3], [0.8, 0.5])
        fused = bounded_score_fusion(bm25, dense, bm25_bound=12.0, weights=(0.5, 0.5))
        # row 2: 0.5*3/12 + 0.5*0.8 = 0.525 ; row 3: 0.5*0.5 = 0.25 ; row 1: 0.5*6/12 = 0.25 -> tie, lower row first
        assert [(h.row, round(h.score, 6)) for h in fused] == [(2, 0.525), (1, 0.25), (3, 0.25)]

    def test_bound_must_be_positive(self) -> None:
        from citerag.index.fusion import bounded_score_fusion

        with pytest.raises(ValueError, match="bm25_bound must be > 0"):
            bounded_score_fusion([], [], 0.0)


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
    fused = reciprocal_rank_fusion_rankings([bm25, dense], k=60, top_k=10)
    assert fused.runs[0] is bm25 and fused.runs[1] is dense and fused.rows.tolist() == [9, 3, 7, 5]
    assert fused.places.tolist() == [[2, 3, 0, -1], [0, -1, -1, 1]]
    assert fused.scores.tolist() == [1 / 63 + 1 / 61, 1 / 62 + 1 / 64, 1 / 61, 1 / 62]
    assert fused.take(slice(2)).places.tolist() == [[2, 3], [0, -1]]
