"""Rank fusion: pure functions that merge ranked hit lists of different retrievers into one.

Each method comes in two forms with one implementation: over :class:`~citerag.index.types.Ranking` arrays
(``*_rankings``, what the embedded backend's search runs: every row's share computed with numpy, a result object
made only for the rows finally returned) and over ``list[Hit]`` (what the Milvus backend and callers holding hits
pass), which converts to arrays and back. Both give the same rows and the same float64 scores as adding each
row's shares one by one in Python, run by run (the order is kept: ``np.add.at`` adds in array order).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from citerag.index.types import Hit, Ranking

RRF_K = 60  # Cormack, Clarke & Buettcher (SIGIR 2009), the value used in their experiments.


def reciprocal_rank_fusion(runs: Sequence[Sequence[Hit]], k: int = RRF_K, top_k: int = 10) -> list[Hit]:
    """Fuse ranked lists by reciprocal rank fusion.

    ``score(row) = sum over runs of 1 / (k + rank)``, rank 1-based within each run (Cormack, Clarke & Buettcher,
    "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009), so with
    ``k=60`` the first hit of a run adds ``1/61``. A row missing from a run adds nothing for it.

    Returns:
        Up to ``top_k`` hits with ``source="fused"``, by descending score; ties break on the lower row.

    Raises:
        ValueError: ``k < 0``.
    """
    return reciprocal_rank_fusion_rankings([Ranking.of(run) for run in runs], k, top_k).hits()


def reciprocal_rank_fusion_rankings(runs: Sequence[Ranking], k: int = RRF_K, top_k: int = 10) -> Ranking:
    """:func:`reciprocal_rank_fusion` over arrays: a row's ``1 / (k + rank)`` of every run, summed.

    Raises:
        ValueError: ``k < 0``.
    """
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")
    return _summed(runs, [1.0 / (k + np.arange(1, len(run) + 1)) for run in runs], top_k)


def min_max(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """Min-max normalise to [0, 1] (float64, same length); all-equal scores map to 1.0."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    low, high = values.min(), values.max()
    if high - low <= 1e-12:
        return np.ones_like(values)
    return (values - low) / (high - low)


def weighted_score_fusion(
    runs: Sequence[Sequence[Hit]], weights: Sequence[float], top_k: int = 10
) -> list[Hit]:
    """Fuse by a weighted sum of min-max normalised scores (convex combination, Fox & Shaw 1994 "CombSUM").

    Each run's scores are normalised to [0, 1] over its own hits; a row absent from a run gets 0 for it.

    Raises:
        ValueError: ``len(weights) != len(runs)`` or a negative weight.
    """
    return weighted_score_fusion_rankings([Ranking.of(run) for run in runs], weights, top_k).hits()


def weighted_score_fusion_rankings(runs: Sequence[Ranking], weights: Sequence[float], top_k: int = 10) -> Ranking:
    """:func:`weighted_score_fusion` over arrays.

    Raises:
        ValueError: ``len(weights) != len(runs)`` or a negative weight.
    """
    if len(weights) != len(runs):
        raise ValueError(f"need one weight per run: {len(runs)} runs, {len(weights)} weights")
    if any(w < 0 for w in weights):
        raise ValueError(f"weights must be >= 0, got {list(weights)}")
    return _summed(runs, [weight * min_max(run.scores) for run, weight in zip(runs, weights, strict=True)], top_k)


def bounded_score_fusion(
    bm25: Sequence[Hit], dense: Sequence[Hit], bm25_bound: float, weights: Sequence[float] = (0.5, 0.5), top_k: int = 10
) -> list[Hit]:
    """Fuse BM25 and dense hits by a weighted sum of scores on fixed scales.

    ``score = w_bm25 * bm25 / bm25_bound + w_dense * cosine``: BM25 is divided by the query's upper bound (see
    :meth:`citerag.index.bm25.BM25Index.upper_bound`, the share of the query a passage matches), the cosine similarity is
    used as it is. Unlike per-query min-max normalisation (which maps every run's best hit to 1, however weak), a
    query whose words the corpus barely contains keeps a small BM25 share, so the dense side decides -- and vice
    versa for exact identifiers. This is the convex combination of Bruch, Gai & Ingber ("An Analysis of Fusion
    Functions for Hybrid Retrieval", ACM TOIS 2023) with a query-dependent theoretical bound for BM25. A hit missing
    from one run gets 0 for it.

    Raises:
        ValueError: ``bm25_bound <= 0``, or not two non-negative weights.
    """
    return bounded_score_fusion_rankings(Ranking.of(bm25), Ranking.of(dense), bm25_bound, weights, top_k).hits()


def bounded_score_fusion_rankings(
    bm25: Ranking, dense: Ranking, bm25_bound: float, weights: Sequence[float] = (0.5, 0.5), top_k: int = 10
) -> Ranking:
    """:func:`bounded_score_fusion` over arrays (scores taken as float64: ``w * score / bound`` as in Python).

    Raises:
        ValueError: ``bm25_bound <= 0``, or not two non-negative weights.
    """
    if bm25_bound <= 0:
        raise ValueError(f"bm25_bound must be > 0, got {bm25_bound}")
    if len(weights) != 2 or any(w < 0 for w in weights):
        raise ValueError(f"need two weights >= 0 (bm25, dense), got {list(weights)}")
    shares = [weights[0] * bm25.scores.astype(np.float64) / bm25_bound, weights[1] * dense.scores.astype(np.float64)]
    return _summed([bm25, dense], shares, top_k)


def _summed(runs: Sequence[Ranking], shares: Sequence[np.ndarray], top_k: int) -> Ranking:
    """The ``top_k`` rows by descending sum of their ``shares`` (one float64 array per run, aligned with its rows),
    as a float64 ranking; ties break on the lower row.

    A row's sum starts at 0.0 and adds its shares in run order (``np.add.at`` is unbuffered and goes in index
    order), so every score is bit-identical to ``fused[row] += share`` over the runs in Python.
    """
    if not any(len(run) for run in runs):
        return Ranking.empty()
    # Few numpy calls on a few hundred values: each costs several microseconds when a search has just evicted the
    # caches (numpy 2.4's np.unique alone took ~35 us here), so the union is found by one sort and a binary search.
    rows = np.concatenate([run.rows for run in runs]).astype(np.int64, copy=False)
    ordered = np.sort(rows)
    distinct = np.empty(rows.size, dtype=bool)
    distinct[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=distinct[1:])
    union = ordered[distinct]  # ascending
    fused = np.zeros(union.size, dtype=np.float64)
    np.add.at(fused, np.searchsorted(union, rows), np.concatenate(shares))
    best = np.argsort(-fused, kind="stable")[:top_k]  # stable over ascending rows: ties keep the lower row first
    return Ranking(union[best], fused[best])
