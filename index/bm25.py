"""Sparse retrieval: BM25 over passage tokens, scored by bm25s (Lù 2024), saved as ``.npy`` arrays.

Default variant: Lucene's BM25 (Robertson & Zaragoza 2009; Lucene's IDF ``log(1 + (N - df + 0.5) / (df + 0.5))``),
k1 = 1.5, b = 0.75 -- the settings bm25s reports 0.690 nDCG@10 with on BEIR SciFact.
"""

from __future__ import annotations

from pathlib import Path

import bm25s
import math

import numpy as np

from index.types import Hit


class BM25Index:
    """A BM25 index over a fixed list of tokenised passages (row i == passage i).

    Args:
        k1: term-frequency saturation (1.2-2.0 usual).
        b: length normalisation in [0, 1].
        method: bm25s variant: ``"lucene"``, ``"robertson"``, ``"atire"``, ``"bm25l"`` or ``"bm25+"``.

    Raises:
        ValueError: a parameter out of range or an unknown method.
    """

    METHODS = ("lucene", "robertson", "atire", "bm25l", "bm25+")

    def __init__(self, k1: float = 1.5, b: float = 0.75, method: str = "lucene") -> None:
        if method not in self.METHODS:
            raise ValueError(f"method must be one of {self.METHODS}, got {method!r}")
        if k1 < 0 or not 0 <= b <= 1:
            raise ValueError(f"need k1 >= 0 and 0 <= b <= 1, got k1={k1}, b={b}")
        self.k1, self.b, self.method = k1, b, method
        self._model: bm25s.BM25 | None = None
        self._df: np.ndarray = np.zeros(0, dtype=np.int64)
        self.size = 0

    def _attach(self, model: bm25s.BM25) -> None:
        self._model = model
        # bm25s keeps one CSC column per vocabulary term: its length is the term's document frequency.
        self._df = np.diff(np.asarray(model.scores["indptr"])).astype(np.int64)

    def build(self, corpus_tokens: list[list[str]]) -> None:
        """Index passages given as token lists (from :func:`index.tokenize.tokenize`), row order kept."""
        self.size = len(corpus_tokens)
        if not corpus_tokens:
            self._model = None
            return
        model = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        model.index(corpus_tokens, show_progress=False)
        self._attach(model)

    def scores(self, query_tokens: list[str]) -> np.ndarray:
        """BM25 score of every passage for the query: float32 array of shape ``(size,)``; 0 where no term matches."""
        if self._model is None:
            return np.zeros(self.size, dtype=np.float32)
        known = [token for token in query_tokens if token in self._model.vocab_dict]
        if not known:
            return np.zeros(self.size, dtype=np.float32)
        return np.asarray(self._model.get_scores(known), dtype=np.float32)

    def upper_bound(self, query_tokens: list[str]) -> float:
        """The most a passage could score for this query: the sum of the Lucene IDFs of its distinct terms,
        ``log(1 + (N - df + 0.5) / (df + 0.5))``, a term absent from the corpus counting with ``df = 0``.

        bm25s's Lucene scores omit the ``(k1 + 1)`` factor, so a term contributes at most its IDF (tf -> infinity).
        Dividing a score by this bound gives the share of the query a passage matches, in [0, 1); for the other
        variants the bound is the same normaliser, not an exact maximum. Returns 1.0 for an empty query.
        """
        if self._model is None or not query_tokens:
            return 1.0
        vocab = self._model.vocab_dict
        n = self.size
        total = 0.0
        for token in set(query_tokens):
            df = int(self._df[vocab[token]]) if token in vocab else 0
            total += math.log(1 + (n - df + 0.5) / (df + 0.5))
        return total or 1.0

    def search(self, query_tokens: list[str], k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """Top-``k`` passages by BM25 score; passages matching no query term are never returned.

        Args:
            query_tokens: tokens of the query (same tokenizer as the corpus).
            k: number of results wanted (fewer come back when fewer passages match).
            allowed: optional boolean mask of shape ``(size,)``; rows outside it are never returned (filters are
                applied before top-k, not after).

        Returns:
            Hits sorted by descending score, ties broken by lower row.
        """
        scores = self.scores(query_tokens)
        if allowed is not None:
            scores = np.where(allowed, scores, 0.0)
        return top_k_hits(scores, k, "bm25", positive_only=True)

    def save(self, directory: Path) -> None:
        """Write the index as bm25s's ``.npy`` + JSON files under ``directory``."""
        directory.mkdir(parents=True, exist_ok=True)
        if self._model is not None:
            self._model.save(str(directory), show_progress=False)

    @classmethod
    def load(cls, directory: Path, size: int, k1: float, b: float, method: str, mmap: bool = True) -> BM25Index:
        """Load an index written by :meth:`save` (memory-mapped by default) for ``size`` passages."""
        index = cls(k1=k1, b=b, method=method)
        index.size = size
        if size:
            index._attach(bm25s.BM25.load(str(directory), mmap=mmap, show_progress=False, verbosity=0))
        return index


def top_k_hits(scores: np.ndarray, k: int, source: str, positive_only: bool = False) -> list[Hit]:
    """The ``k`` highest entries of a score vector as hits, sorted by (-score, row).

    Ties are broken by the lower row also at the ``k``-th place, so a top-``k`` is always the first ``k`` of a deeper
    top-``k``. Only candidate rows (positive, or finite) are selected among, with ``np.partition`` on their values
    rather than ``np.argpartition`` on the whole vector: with numpy 2.x, argpartition of a BM25 score vector (mostly
    tied zeros) cost 4x more at 100k passages (``bench/RESULTS.md``).

    Args:
        scores: float array of shape ``(n,)``; ``-inf`` marks excluded rows.
        k: how many to return (at most ``n``).
        source: the ``Hit.source`` label.
        positive_only: drop rows scoring ``<= 0`` (BM25: no term matched).
    """
    if scores.shape[0] == 0 or k <= 0:
        return []
    rows = np.flatnonzero(scores > 0) if positive_only else np.flatnonzero(np.isfinite(scores))
    values = scores[rows]
    if rows.size > k:  # keep every row scoring at least the k-th highest value (all ties at the boundary)
        kth = np.partition(values, rows.size - k)[rows.size - k]
        keep = values >= kth
        rows, values = rows[keep], values[keep]
    order = np.lexsort((rows, -values))[:k]
    return [Hit(row, score, source) for row, score in zip(rows[order].tolist(), values[order].tolist())]
