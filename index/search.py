"""What every backend's search shares: the result type, argument checks, candidate depth, the mode/fusion dispatch
and the final selection.

Both :class:`~citerag.index.retrieve.Retriever` (the embedded backend) and :class:`~citerag.index.milvus.MilvusBackend` run a search
the same way, only the candidate lists come from different engines:

1. :func:`check_search` (mode and ``k``) and :func:`check_fusion`;
2. :func:`candidate_depth` candidates from BM25 and/or the dense index (as :class:`~citerag.index.types.Hit` lists whose
   ``row`` indexes a passage list);
3. :func:`rank_hits`: one retriever's list as it is, or the two fused;
4. :func:`select_hits` (``k``, one passage per document) and :func:`search_results`.

Steps 3 and 4 also come over :class:`~citerag.index.types.Ranking` arrays (:func:`rank_rankings`,
:func:`select_ranking`, :func:`ranking_results`), which the embedded backend runs so that only the ``k`` results
returned become Python objects; the ``Hit`` forms convert and call them, so both give the same results.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import get_args

import numpy as np

from citerag.index.fusion import (
    bounded_score_fusion_rankings, reciprocal_rank_fusion_rankings, weighted_score_fusion_rankings,
)
from citerag.index.types import Document, FusionMethod, Hit, Passage, Ranking, RetrievalMode

#: Every search mode and every hybrid fusion method, in the order messages list them.
RETRIEVAL_MODES: tuple[str, ...] = get_args(RetrievalMode)
FUSION_METHODS: tuple[str, ...] = get_args(FusionMethod)

PASSAGES_PER_DOC = 3  # candidate-depth multiplier for one-passage-per-document searches


@dataclass(frozen=True, slots=True)
class SearchResult:
    """One ranked passage with its provenance.

    Attributes:
        rank: 1-based rank in the final list.
        score: the final score: BM25 score, cosine similarity, or fused score, by mode.
        bm25_rank, dense_rank: 1-based rank of this passage in the BM25 / dense candidate lists, ``None`` when it
            was not among that retriever's candidates (or the mode did not run it).
        bm25_score, dense_score: the passage's BM25 score / cosine similarity when it was a candidate, else ``None``.
    """

    rank: int
    passage: Passage
    document: Document
    score: float
    bm25_rank: int | None
    dense_rank: int | None
    bm25_score: float | None = None
    dense_score: float | None = None


def _listed(values: Sequence[str]) -> str:
    quoted = [repr(v) for v in values]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]


def check_search(mode: str, k: int) -> None:
    """Validate a search's mode and size (every backend gives the same messages).

    Raises:
        ValueError: ``mode`` not in :data:`RETRIEVAL_MODES`, or ``k < 1``.
    """
    if mode not in RETRIEVAL_MODES:
        raise ValueError(f"mode must be {_listed(RETRIEVAL_MODES)}, got {mode!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def check_fusion(fusion: str, unsupported: Mapping[str, str] | None = None) -> FusionMethod:
    """``fusion`` if it is a fusion method this backend can run; the one check of fusion names.

    Args:
        fusion: the method asked for (a setting, a constructor argument or a per-query override).
        unsupported: methods of :data:`FUSION_METHODS` the caller's backend cannot run, each with the reason (a
            phrase that follows the method's name in the message, e.g. ``"needs BM25 document frequencies"``).

    Returns:
        ``fusion``, typed as :data:`~citerag.index.types.FusionMethod`.

    Raises:
        ValueError: an unknown method, or one of ``unsupported`` (the message gives its reason).
    """
    if fusion not in FUSION_METHODS:
        supported = [m for m in FUSION_METHODS if m not in (unsupported or {})]
        raise ValueError(f"fusion must be {_listed(supported)}, got {fusion!r}")
    if unsupported and fusion in unsupported:
        raise ValueError(f"fusion {fusion!r} {unsupported[fusion]}")
    return fusion  # type: ignore[return-value] - checked against the Literal's values above


def candidate_depth(candidates: int, k: int, one_per_doc: bool, mode: RetrievalMode) -> int:
    """How many candidates to take from each retriever (the same rule for every backend).

    Fusion takes at least ``candidates``; one passage per document needs deeper lists (documents average a few
    passages each: ``k * PASSAGES_PER_DOC``); a single retriever's own top-``k`` (``mode`` bm25 or dense, every
    passage wanted) is already the answer, so it is asked for ``k`` rows only.
    """
    if mode != "hybrid" and not one_per_doc:
        return k
    return max(candidates, k * PASSAGES_PER_DOC if one_per_doc else k)


def fusion_depth(k: int, depth: int, one_per_doc: bool) -> int:
    """How many fused hits to keep: ``k`` when every passage is wanted, ``2 * depth`` when passages of one document
    are then dropped (:func:`select_hits` needs spares)."""
    return 2 * depth if one_per_doc else k


def rank_hits(
    mode: RetrievalMode,
    bm25: list[Hit],
    dense: list[Hit],
    fusion: FusionMethod,
    top_k: int,
    *,
    rrf_k: int,
    weights: tuple[float, float],
    bm25_bound: Callable[[], float] | None = None,
) -> list[Hit]:
    """The ranked candidates of a search: ``bm25`` or ``dense`` as they are for those modes, else the two lists fused
    with ``fusion`` (``top_k`` fused hits at most, :func:`fusion_depth`).

    Args:
        rrf_k: the RRF constant.
        weights: ``(bm25, dense)`` weights of the bounded and the weighted fusion.
        bm25_bound: the query's largest possible BM25 score (bounded fusion only; called only when it runs).

    Raises:
        ValueError: ``fusion`` is ``"bounded"`` and no ``bm25_bound`` is given.
    """
    if mode == "bm25":
        return bm25
    if mode == "dense":
        return dense
    ranked = rank_rankings(mode, Ranking.of(bm25), Ranking.of(dense), fusion, top_k, rrf_k=rrf_k, weights=weights,
                           bm25_bound=bm25_bound)
    return ranked.hits()


def rank_rankings(
    mode: RetrievalMode,
    bm25: Ranking,
    dense: Ranking,
    fusion: FusionMethod,
    top_k: int,
    *,
    rrf_k: int,
    weights: tuple[float, float],
    bm25_bound: Callable[[], float] | None = None,
) -> Ranking:
    """:func:`rank_hits` over arrays.

    Raises:
        ValueError: ``fusion`` is ``"bounded"`` and no ``bm25_bound`` is given.
    """
    if mode == "bm25":
        return bm25
    if mode == "dense":
        return dense
    if fusion == "bounded":
        if bm25_bound is None:
            raise ValueError("bounded fusion needs the query's BM25 upper bound")
        return bounded_score_fusion_rankings(bm25, dense, bm25_bound(), weights, top_k=top_k)
    if fusion == "weighted":
        return weighted_score_fusion_rankings([bm25, dense], weights, top_k=top_k)
    return reciprocal_rank_fusion_rankings([bm25, dense], k=rrf_k, top_k=top_k)


def select_hits(ranked: Sequence[Hit], passages: Sequence[Passage], k: int, one_per_doc: bool) -> list[Hit]:
    """The first ``k`` of ``ranked`` (rows into ``passages``), only each document's best passage when
    ``one_per_doc``."""
    chosen: list[Hit] = []
    seen_docs: set[str] = set()
    for hit in ranked:
        if one_per_doc:
            doc_id = passages[hit.row].doc_id
            if doc_id in seen_docs:
                continue
            seen_docs.add(doc_id)
        chosen.append(hit)
        if len(chosen) == k:
            break
    return chosen


def select_ranking(ranked: Ranking, passages: Sequence[Passage], k: int, one_per_doc: bool) -> Ranking:
    """:func:`select_hits` over arrays."""
    if not one_per_doc:
        return ranked if len(ranked) <= k else Ranking(ranked.rows[:k], ranked.scores[:k])
    kept: list[int] = []
    seen_docs: set[object] = set()
    doc_rows = getattr(passages, "doc_rows", None)  # a PassageTable's row -> document row, no passage built
    keys = doc_rows[ranked.rows].tolist() if doc_rows is not None else [passages[r].doc_id for r in ranked.rows.tolist()]
    for at, doc_id in enumerate(keys):
        if doc_id in seen_docs:
            continue
        seen_docs.add(doc_id)
        kept.append(at)
        if len(kept) == k:
            break
    return Ranking(ranked.rows[kept], ranked.scores[kept])


def search_results(
    chosen: Sequence[Hit],
    bm25: Sequence[Hit],
    dense: Sequence[Hit],
    passages: Sequence[Passage],
    documents: Mapping[str, Document],
) -> list[SearchResult]:
    """``chosen`` as ranked results (rank 1 first), each with its rank and score in the BM25 and dense candidate
    lists when it was among them."""
    return ranking_results(Ranking.of(chosen), Ranking.of(bm25), Ranking.of(dense), passages, documents)


def ranking_results(
    chosen: Ranking,
    bm25: Ranking,
    dense: Ranking,
    passages: Sequence[Passage],
    documents: Mapping[str, Document],
) -> list[SearchResult]:
    """:func:`search_results` over arrays: only the ``len(chosen)`` results are made as objects. A row listed twice
    in a candidate list takes its rank and score from the later place."""
    rows = chosen.rows.tolist()
    bm25_rank, bm25_score = _places(bm25, chosen.rows)
    dense_rank, dense_score = _places(dense, chosen.rows)
    results: list[SearchResult] = []
    doc_rows, at_row = getattr(passages, "doc_rows", None), getattr(documents, "at", None)
    decoded: dict[int, Document] = {}  # a document with several passages in the results is decoded once
    for at, (row, score) in enumerate(zip(rows, chosen.scores.tolist(), strict=True)):
        passage = passages[row]
        # a DocumentTable is read by row (no doc_id -> row map needed); a plain mapping by id
        if doc_rows is not None and at_row is not None:
            doc_row = int(doc_rows[row])
            doc = decoded.get(doc_row) or decoded.setdefault(doc_row, at_row(doc_row))
        else:
            doc = documents[passage.doc_id]
        results.append(
            SearchResult(at + 1, passage, doc, score, bm25_rank[at], dense_rank[at], bm25_score[at], dense_score[at])
        )
    return results


def _places(run: Ranking, rows: np.ndarray) -> tuple[list[int | None], list[float | None]]:
    """For each of ``rows``: its 1-based rank and score in ``run`` (its last place there), or ``None`` twice."""
    if len(run) == 0:
        return [None] * len(rows), [None] * len(rows)
    # (len(rows), len(run)) comparisons: ten results against a few hundred candidates
    equal = rows[:, None] == run.rows[None, :]
    found = equal.any(axis=1)
    last = len(run) - 1 - np.argmax(equal[:, ::-1], axis=1)
    scores = run.scores[last].tolist()
    ranks = (last + 1).tolist()
    return ([r if f else None for r, f in zip(ranks, found.tolist(), strict=True)],
            [v if f else None for v, f in zip(scores, found.tolist(), strict=True)])