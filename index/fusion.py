"""Rank fusion: pure functions that merge ranked hit lists of different retrievers into one."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import numpy as np

from citerag.index.types import Hit

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
    if k < 0:
        raise ValueError(f"RRF k must be >= 0, got {k}")
    fused: dict[int, float] = defaultdict(float)
    for run in runs:
        for rank, hit in enumerate(run, start=1):
            fused[hit.row] += 1.0 / (k + rank)
    return _ranked(fused, top_k)


def min_max(scores: Sequence[float]) -> np.ndarray:
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
    if len(weights) != len(runs):
        raise ValueError(f"need one weight per run: {len(runs)} runs, {len(weights)} weights")
    if any(w < 0 for w in weights):
        raise ValueError(f"weights must be >= 0, got {list(weights)}")
    fused: dict[int, float] = defaultdict(float)
    for run, weight in zip(runs, weights, strict=True):
        for hit, norm in zip(run, min_max([h.score for h in run]), strict=True):
            fused[hit.row] += weight * float(norm)
    return _ranked(fused, top_k)


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
    if bm25_bound <= 0:
        raise ValueError(f"bm25_bound must be > 0, got {bm25_bound}")
    if len(weights) != 2 or any(w < 0 for w in weights):
        raise ValueError(f"need two weights >= 0 (bm25, dense), got {list(weights)}")
    fused: dict[int, float] = defaultdict(float)
    for hit in bm25:
        fused[hit.row] += weights[0] * hit.score / bm25_bound
    for hit in dense:
        fused[hit.row] += weights[1] * hit.score
    return _ranked(fused, top_k)


def _ranked(fused: dict[int, float], top_k: int) -> list[Hit]:
    """The ``top_k`` rows by descending fused score as ``"fused"`` hits; ties break on the lower row."""
    best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:top_k]
    return [Hit(row, score) for row, score in best]
