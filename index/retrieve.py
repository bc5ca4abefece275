"""The hybrid retriever: BM25 and dense top-N candidates, fused by bounded score fusion (default), RRF, or min-max
weighted fusion. The default was chosen by measurement: see ``eval/results/scifact.md``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from index.embed import Embedder
from index.filters import Filters, filter_key, passage_mask
from index.fusion import RRF_K, bounded_score_fusion, reciprocal_rank_fusion, weighted_score_fusion
from index.store import LoadedIndex
from index.text import fold
from index.tokenize import tokenize
from index.types import Document, FusionMethod, Hit, Passage, RetrievalMode


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


class Retriever:
    """Searches one loaded index.

    Args:
        index: a verified :class:`~index.store.LoadedIndex`.
        embedder: the encoder the index was built with (same name and dimension).
        candidates: top-N taken from each retriever before fusion (default 100).
        rrf_k: the RRF constant (Cormack et al. 2009: 60).
        fusion: ``"bounded"`` (BM25 / its query upper bound + cosine, weighted), ``"rrf"``, or ``"weighted"``
            (min-max normalised weighted sum).
        weights: ``(bm25, dense)`` weights for the two weighted fusions.

    Raises:
        ValueError: the embedder does not match the index, or a setting is out of range.
    """

    def __init__(
        self,
        index: LoadedIndex,
        embedder: Embedder,
        candidates: int = 100,
        rrf_k: int = RRF_K,
        fusion: FusionMethod = "bounded",
        weights: tuple[float, float] = (0.5, 0.5),
    ) -> None:
        if embedder.name != index.config.embedding_model or embedder.dim != index.config.embedding_dim:
            raise ValueError(
                f"index was built with {index.config.embedding_model} ({index.config.embedding_dim}-d), "
                f"embedder is {embedder.name} ({embedder.dim}-d): rebuild the index"
            )
        if candidates < 1:
            raise ValueError(f"candidates must be >= 1, got {candidates}")
        if fusion not in ("bounded", "rrf", "weighted"):
            raise ValueError(f"fusion must be 'bounded', 'rrf' or 'weighted', got {fusion!r}")
        self.index = index
        self.embedder = embedder
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.fusion = fusion
        self.weights = weights
        self._masks: dict[str, np.ndarray] = {}

    def mask(self, filters: Filters | None) -> np.ndarray | None:
        """Boolean passage mask for ``filters`` (``None`` = no filter); cached per distinct filter.

        Raises:
            ValueError: malformed filters (see :mod:`index.filters`).
        """
        if not filters:
            return None
        key = filter_key(filters)
        mask = self._masks.get(key)
        if mask is None:  # never re-read the cache after writing it: another thread may clear it in between
            mask = passage_mask(filters, self.index.documents, self.index.passages)
            if len(self._masks) >= 64:
                self._masks.clear()
            self._masks[key] = mask
        return mask

    def bm25_hits(self, query: str, depth: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """BM25 candidates for ``query`` (at most ``depth``), restricted to ``allowed`` rows when given."""
        return self.index.bm25.search(tokenize(query), depth, allowed)

    def fuse(
        self, query_tokens: list[str], bm25: list[Hit], dense: list[Hit], fusion: FusionMethod, top_k: int
    ) -> list[Hit]:
        """Merge the two candidate lists with ``fusion`` (see the class docstring); ``query_tokens`` are the
        query's BM25 tokens (for the bounded fusion's normaliser)."""
        if fusion == "bounded":
            bound = self.index.bm25.upper_bound(query_tokens)
            return bounded_score_fusion(bm25, dense, bound, self.weights, top_k=top_k)
        if fusion == "weighted":
            return weighted_score_fusion([bm25, dense], self.weights, top_k=top_k)
        return reciprocal_rank_fusion([bm25, dense], k=self.rrf_k, top_k=top_k)

    def dense_hits(self, query: str, depth: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """Dense candidates for ``query`` (at most ``depth``); embeds the folded query."""
        if self.index.dense.size == 0:
            return []
        vector = self.embedder.encode([fold(query)])[0]
        return self.index.dense.search(vector, depth, allowed)

    def search(
        self,
        query: str,
        k: int = 10,
        mode: RetrievalMode = "hybrid",
        one_per_doc: bool = False,
        fusion: FusionMethod | None = None,
        filters: Filters | None = None,
    ) -> list[SearchResult]:
        """Top-``k`` passages for ``query``.

        Args:
            query: free text (LaTeX and Unicode are folded as for the corpus).
            k: results wanted; fewer come back when fewer passages match.
            mode: ``"hybrid"``, ``"bm25"`` or ``"dense"``.
            one_per_doc: keep only the best passage of each document.
            fusion: override the retriever's fusion method for this query.
            filters: metadata conditions (:mod:`index.filters`), applied inside both retrievers before top-k.

        Raises:
            ValueError: unknown mode, ``k < 1`` or malformed filters.
        """
        check_search(mode, k)
        depth = candidate_depth(self.candidates, k, one_per_doc, mode)
        allowed = self.mask(filters)
        tokens = tokenize(query) if mode in ("hybrid", "bm25") else []
        bm25 = self.index.bm25.search(tokens, depth, allowed) if mode in ("hybrid", "bm25") else []
        dense = self.dense_hits(query, depth, allowed) if mode in ("hybrid", "dense") else []
        if mode == "bm25":
            ranked = bm25
        elif mode == "dense":
            ranked = dense
        else:
            ranked = self.fuse(tokens, bm25, dense, fusion or self.fusion, top_k=2 * depth if one_per_doc else k)
        chosen = select_hits(ranked, self.index.passages, k, one_per_doc)
        return search_results(chosen, bm25, dense, self.index.passages, self.index.documents)


def check_search(mode: str, k: int) -> None:
    """Validate a search's mode and size (every backend gives the same messages).

    Raises:
        ValueError: unknown mode, or ``k < 1``.
    """
    if mode not in ("hybrid", "bm25", "dense"):
        raise ValueError(f"mode must be 'hybrid', 'bm25' or 'dense', got {mode!r}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")


def candidate_depth(candidates: int, k: int, one_per_doc: bool, mode: str = "hybrid") -> int:
    """How many candidates to take from each retriever: at least ``candidates`` for fusion; one passage per document
    needs deeper lists (documents average a few passages each); a single retriever's own top-``k`` (``mode`` bm25
    or dense, every passage wanted) is already the answer, so it is asked for ``k`` rows only."""
    if mode != "hybrid" and not one_per_doc:
        return k
    return max(candidates, k * PASSAGES_PER_DOC if one_per_doc else k)


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


def search_results(
    chosen: Sequence[Hit],
    bm25: Sequence[Hit],
    dense: Sequence[Hit],
    passages: Sequence[Passage],
    documents: Mapping[str, Document],
) -> list[SearchResult]:
    """``chosen`` as ranked results (rank 1 first), each with its rank and score in the BM25 and dense candidate
    lists when it was among them."""
    bm25_at = {hit.row: (rank, hit.score) for rank, hit in enumerate(bm25, start=1)}
    dense_at = {hit.row: (rank, hit.score) for rank, hit in enumerate(dense, start=1)}
    results: list[SearchResult] = []
    for rank, hit in enumerate(chosen, start=1):
        passage = passages[hit.row]
        bm25_rank, bm25_score = bm25_at.get(hit.row, (None, None))
        dense_rank, dense_score = dense_at.get(hit.row, (None, None))
        results.append(
            SearchResult(rank, passage, documents[passage.doc_id], hit.score, bm25_rank, dense_rank, bm25_score,
                         dense_score)
        )
    return results
