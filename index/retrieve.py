"""The embedded backend's retriever: BM25 and dense top-N candidates from one loaded index, fused by bounded score
fusion (default), RRF, or min-max weighted fusion. The default was chosen by measurement (the documentation's
retrieval page). The steps every backend shares (checks, candidate depth, fusion, selection) are in
:mod:`citerag.index.search`."""

from __future__ import annotations

import numpy as np

from citerag.index.dense import RowSelector
from citerag.index.embed import Embedder
from citerag.index.filters import Filters, filter_key, passage_mask
from citerag.index.fusion import RRF_K
from citerag.index.search import (
    SearchResult, candidate_depth, check_fusion, check_search, fusion_depth, rank_candidates, search_results,
    select_top,
)
from citerag.index.store import LoadedIndex
from citerag.index.text import fold
from citerag.index.tokenize import tokenize, tokenize_folded
from citerag.index.types import FusionMethod, Hit, Passage, Ranking, RetrievalMode


class Retriever:
    """Searches one loaded index.

    Args:
        index: a verified :class:`~citerag.index.store.LoadedIndex`.
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
        self.index = index
        self.embedder = embedder
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.fusion = check_fusion(fusion)
        self.weights = weights
        # per distinct filter: its passage mask and the FAISS selector of the same rows
        self._masks: dict[str, tuple[np.ndarray, RowSelector]] = {}

    def mask(self, filters: Filters | None) -> np.ndarray | None:
        """Boolean passage mask for ``filters`` (``None`` = no filter); cached per distinct filter.

        Raises:
            ValueError: malformed filters (see :mod:`citerag.index.filters`).
        """
        return self._filter(filters)[0]

    def _filter(self, filters: Filters | None) -> tuple[np.ndarray | None, RowSelector | None]:
        """:meth:`mask` and the dense index's selector of its rows, both cached per distinct filter."""
        if not filters:
            return None, None
        key = filter_key(filters)
        entry = self._masks.get(key)
        if entry is None:  # never re-read the cache after writing it: another thread may clear it in between
            mask = passage_mask(filters, self.index.documents, self.index.passages)
            entry = (mask, self.index.dense.selector(mask))
            if len(self._masks) >= 64:
                self._masks.clear()
            self._masks[key] = entry
        return entry

    def bm25_hits(self, query: str, depth: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """BM25 candidates for ``query`` (at most ``depth``), restricted to ``allowed`` rows when given."""
        return self.index.bm25.search(tokenize(query), depth, allowed)

    def dense_hits(self, query: str, depth: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """Dense candidates for ``query`` (at most ``depth``); embeds the folded query."""
        return self._dense_top(fold(query), depth, allowed, None).hits()

    def _dense_top(self, folded: str, depth: int, allowed: np.ndarray | None, selector: RowSelector | None) -> Ranking:
        if self.index.dense.size == 0:
            return Ranking.empty()
        vector = self.embedder.encode([folded])[0]
        return self.index.dense.top(vector, depth, allowed, selector)

    def count(self) -> int:
        """How many documents are indexed."""
        return len(self.index.documents)

    def passages_of(self, doc_id: str) -> list[Passage]:
        """The passages of one document in order (``[]`` for an unknown id), as a backend gives them: the
        answering steps read an abstract whole through it, whichever of the two they are given."""
        return self.index.passages_of(doc_id)

    @property
    def vocabulary_size(self) -> int:
        """Distinct BM25 terms in the indexed passages."""
        return self.index.bm25.vocabulary_size

    def unseen_terms(self, terms: list[str]) -> list[str]:
        """Those of ``terms`` (BM25 tokens, :func:`~citerag.index.tokenize.tokenize`) that no indexed passage holds."""
        return [t for t, df in zip(terms, self.index.bm25.document_frequencies(terms), strict=True) if df == 0]

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
            filters: metadata conditions (:mod:`citerag.index.filters`), applied inside both retrievers before top-k.

        Raises:
            ValueError: unknown mode or fusion, ``k < 1`` or malformed filters.
        """
        check_search(mode, k)
        fusion = check_fusion(fusion) if fusion else self.fusion
        depth = candidate_depth(self.candidates, k, one_per_doc, mode)
        allowed, selector = self._filter(filters)
        folded = fold(query)  # once: the BM25 tokens and the embedded text both start from it
        tokens = tokenize_folded(folded) if mode in ("hybrid", "bm25") else []
        empty = Ranking.empty()
        bm25 = self.index.bm25.top(tokens, depth, allowed) if mode in ("hybrid", "bm25") else empty
        dense = self._dense_top(folded, depth, allowed, selector) if mode in ("hybrid", "dense") else empty
        ranked = rank_candidates(
            mode, bm25, dense, fusion, fusion_depth(k, depth, one_per_doc), rrf_k=self.rrf_k, weights=self.weights,
            bm25_bound=lambda: self.index.bm25.upper_bound(tokens),
        )
        chosen = select_top(ranked, self.index.passages, k, one_per_doc)
        return search_results(chosen, bm25, dense, self.index.passages, self.index.documents)
