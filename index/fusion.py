"""Rank fusion: pure functions that merge ranked candidate lists of different retrievers into one.

Every method takes and returns :class:`~citerag.index.types.Ranking` arrays (rows int64, scores float), the form
every backend's search passes between its steps (a caller holding ``list[Hit]`` converts with
:meth:`Ranking.of <citerag.index.types.Ranking.of>` and back with :meth:`Ranking.hits
<citerag.index.types.Ranking.hits>`). Every row's share is computed with numpy, and the sum of a row's shares is the
same float64 as adding them one by one in Python, run by run, from 0.0 (:func:`_summed` says how).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from citerag.index.types import Ranking

RRF_K = 60  # Cormack, Clarke & Buettcher (SIGIR 2009), the value used in their experiments.


def reciprocal_rank_fusion(runs: Sequence[Ranking], k: int = RRF_K, top_k: int = 10) -> Ranking:
    """Fuse ranked lists by reciprocal rank fusion.

    ``score(row) = sum over runs of 1 / (k + rank)``, rank 1-based within each run (Cormack, Clarke & Buettcher,
    "Reciprocal Rank Fusion outperforms Condorcet and individual Rank Learning Methods", SIGIR 2009), so with
    ``k=60`` the first hit of a run adds ``1/61``. A row missing from a run adds nothing for it.

    Returns:
        Up to ``top_k`` rows by descending score (float64, shape ``(min(top_k, distinct rows),)``), ties broken on the
        lower row; ``runs`` and each row's place in them kept (:attr:`Ranking.places`).

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


def weighted_score_fusion(runs: Sequence[Ranking], weights: Sequence[float], top_k: int = 10) -> Ranking:
    """Fuse by a weighted sum of min-max normalised scores (convex combination, Fox & Shaw 1994 "CombSUM").

    Each run's scores are normalised to [0, 1] over its own candidates (:func:`min_max`); a row absent from a run
    gets 0 for it.

    Returns:
        As :func:`reciprocal_rank_fusion`.

    Raises:
        ValueError: ``len(weights) != len(runs)`` or a negative weight.
    """
    if len(weights) != len(runs):
        raise ValueError(f"need one weight per run: {len(runs)} runs, {len(weights)} weights")
    if any(w < 0 for w in weights):
        raise ValueError(f"weights must be >= 0, got {list(weights)}")
    return _summed(runs, [weight * min_max(run.scores) for run, weight in zip(runs, weights, strict=True)], top_k)


def bounded_score_fusion(
    bm25: Ranking, dense: Ranking, bm25_bound: float, weights: Sequence[float] = (0.5, 0.5), top_k: int = 10
) -> Ranking:
    """Fuse BM25 and dense candidates by a weighted sum of scores on fixed scales.

    ``score = w_bm25 * bm25 / bm25_bound + w_dense * cosine``: BM25 is divided by the query's upper bound (see
    :meth:`citerag.index.bm25.BM25Index.upper_bound`, the share of the query a passage matches), the cosine similarity
    is used as it is. Unlike per-query min-max normalisation (which maps every run's best hit to 1, however weak), a
    query whose words the corpus barely contains keeps a small BM25 share, so the dense side decides -- and vice
    versa for exact identifiers. This is the convex combination of Bruch, Gai & Ingber ("An Analysis of Fusion
    Functions for Hybrid Retrieval", ACM TOIS 2023) with a query-dependent theoretical bound for BM25. A row missing
    from one run gets 0 for it. Scores are taken as float64 (``float64(score) * w / bound``, as in Python).

    Returns:
        As :func:`reciprocal_rank_fusion` (``runs`` are ``(bm25, dense)``).

    Raises:
        ValueError: ``bm25_bound <= 0``, or not two non-negative weights.
    """
    if bm25_bound <= 0:
        raise ValueError(f"bm25_bound must be > 0, got {bm25_bound}")
    if len(weights) != 2 or any(w < 0 for w in weights):
        raise ValueError(f"need two weights >= 0 (bm25, dense), got {list(weights)}")
    bm25_share = np.multiply(bm25.scores, weights[0], dtype=np.float64)  # float64(score) * w, then / bound
    np.divide(bm25_share, bm25_bound, out=bm25_share)
    shares = [bm25_share, np.multiply(dense.scores, weights[1], dtype=np.float64)]
    return _summed([bm25, dense], shares, top_k)


def _summed(runs: Sequence[Ranking], shares: Sequence[np.ndarray], top_k: int) -> Ranking:
    """The ``top_k`` rows by descending sum of their ``shares`` (one float64 array per run, aligned with its rows),
    as a float64 ranking that keeps each row's place in ``runs``; ties break on the lower row.

    Every score is bit-identical to ``fused[row] += share`` over the runs in Python, from 0.0: the candidates are
    grouped by row with a stable sort (a row's shares stay in run order) and ``np.bincount`` adds each group's
    shares one by one in that order.
    """
    if not any(len(run) for run in runs):
        return Ranking.empty()
    # Few numpy calls on a few hundred values: each costs ~5 us right after a search has evicted the caches (np.unique
    # took ~35 us, np.maximum.at ~30 us a run), so the rows are grouped by one stable sort and nothing more.
    rows = np.concatenate([run.rows for run in runs])
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    first = np.empty(rows.size, dtype=bool)  # where each distinct row's shares begin in ``order``
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    group = first.astype(np.intp).cumsum()  # 1-based group of each candidate (a bool cumsum costs more)
    fused = np.bincount(group, weights=np.concatenate(shares)[order])[1:]
    best = np.argsort(-fused, kind="stable")[:top_k]  # stable over ascending rows: ties keep the lower row first
    starts = first.nonzero()[0]
    return Ranking(ordered[starts[best]], fused[best], tuple(runs), _places_of(runs, order, starts, best))


def _places_of(runs: Sequence[Ranking], order: np.ndarray, starts: np.ndarray, best: np.ndarray) -> np.ndarray:
    """int64 ``(len(runs), len(best))``: the place in each run of the rows of groups ``best`` (-1: absent; its
    later place for a row listed twice). ``order`` lists candidates (run after run) grouped by row, each group in
    run order, from ``starts``."""
    offsets = [0]
    for run in runs:
        offsets.append(offsets[-1] + len(run))
    positions, begins = order.tolist(), starts.tolist()
    ends = [*begins[1:], offsets[-1]]
    places = [[-1] * len(best) for _ in runs]
    for at, group in enumerate(best.tolist()):
        for position in positions[begins[group] : ends[group]]:  # in run order: a later place overwrites
            which = bisect.bisect_right(offsets, position) - 1
            places[which][at] = position - offsets[which]
    return np.array(places, dtype=np.int64).reshape(len(runs), len(best))
