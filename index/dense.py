"""Dense retrieval: FAISS inner-product search over L2-normalised passage vectors (inner product == cosine).

Two index kinds, chosen by corpus size (``choose_kind``) or forced by a setting:

- ``flat``: ``IndexFlatIP``, exact; 4 * dim bytes per passage (1,536 B at 384-d); search time linear in size.
- ``hnsw``: ``IndexHNSWFlat`` (Malkov & Yashunin 2018), approximate; the same float32 vectors plus the graph
  (about 2 * M * 4 B per passage at M = 32: ~256 B), so ~1.8 KB per passage at 384-d; search time roughly
  logarithmic. ``efSearch`` trades recall for time (``bench/RESULTS.md`` has the measured Recall@10 vs flat).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Literal

import faiss
import numpy as np

from citerag.index.types import DenseSetting, Hit, Ranking

DenseKind = Literal["flat", "hnsw"]
HNSW_M = 32  # graph degree (FAISS default for IndexHNSWFlat is 32)
HNSW_EF_CONSTRUCTION = 80
# Candidate-list size at query time. Measured Recall@10 against exact search for 200 title queries (bench/RESULTS.md):
# 0.995 at 128 and 0.999 at 256 over 60,681 passages; over 1,031,577 passages (the same passages 17 times) 0.915 at
# 128 and 0.955 at 256, for 0.37 -> 0.67 ms p50 a query: 256 keeps recall >= 0.95 at a million passages.
HNSW_EF_SEARCH = 256
# Passages from which "auto" builds HNSW. Exact search scans every vector: 65-75 ns a passage on one core here
# (p50 3.9-4.6 ms over 60,681 passages, hybrid 5.1-5.9 ms), so below 50,000 it stays near 3.5 ms and a hybrid search
# under 5 ms; HNSW over the same 60,681 passages: dense 0.9 ms, hybrid 1.6 ms p50, Recall@10 0.999 at efSearch 256
# (bench/RESULTS.md).
AUTO_HNSW_THRESHOLD = 50_000
# OpenMP threads FAISS may use for one query. A single query's flat scan split over threads waits at a barrier for
# the slowest one: on a 2-core machine shared with other processes, exact search over 60k passages took p50 31 ms
# with 2 threads and 6.4 ms with 1 (bench/RESULTS.md). The service runs concurrent requests, one search each, so
# splitting one query buys no throughput either.
SEARCH_THREADS = 1


@contextmanager
def omp_threads(n: int) -> Iterator[None]:
    """Run the block with FAISS using ``n`` OpenMP threads for calls made from *this* thread; the previous count is
    restored after. libgomp keeps the count per thread, so an index build in another thread keeps every core."""
    previous = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(n)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(previous)


def choose_kind(n_passages: int, setting: DenseSetting = "auto", threshold: int = AUTO_HNSW_THRESHOLD) -> DenseKind:
    """The index kind for ``n_passages``: ``setting`` when it is ``"flat"`` or ``"hnsw"``, else flat below
    ``threshold`` passages and HNSW from it on.

    Raises:
        ValueError: an unknown setting.
    """
    if setting in ("flat", "hnsw"):
        return setting  # type: ignore[return-value]
    if setting != "auto":
        raise ValueError(f"dense index must be 'auto', 'flat' or 'hnsw', got {setting!r}")
    return "hnsw" if n_passages >= threshold else "flat"


class RowSelector:
    """The rows a boolean mask marks, as a FAISS ``IDSelectorBitmap`` (bit ``i`` of the little-endian packed mask is
    row ``i``), for filtered searches; the same rows as ``IDSelectorBatch(np.flatnonzero(mask))``, without building a
    hash set of every allowed row each query.

    Attributes:
        empty: no row is allowed (a search returns nothing).
        faiss: the selector (it reads the bitmap this object keeps alive).
    """

    def __init__(self, allowed: np.ndarray) -> None:
        self._bitmap = np.packbits(np.asarray(allowed, dtype=bool), bitorder="little")
        self.empty = not self._bitmap.any()
        self.faiss = faiss.IDSelectorBitmap(self._bitmap)


class DenseIndex:
    """A FAISS index over passage vectors (row i == passage i).

    Args:
        dim: vector dimension (384 for all-MiniLM-L6-v2).
        kind: ``"flat"`` (exact) or ``"hnsw"`` (approximate; see the module docstring).
        ef_search: HNSW candidate-list size at query time (ignored for flat).

    Raises:
        ValueError: an unknown kind.
    """

    FILENAME = "dense.faiss"

    def __init__(self, dim: int, kind: DenseKind = "flat", ef_search: int = HNSW_EF_SEARCH) -> None:
        self.dim = dim
        self.ef_search = ef_search
        self._params: dict[int, faiss.SearchParametersHNSW] = {}
        if kind == "flat":
            self._index: faiss.Index = faiss.IndexFlatIP(dim)
        elif kind == "hnsw":
            hnsw = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            self._index = hnsw
        else:
            raise ValueError(f"kind must be 'flat' or 'hnsw', got {kind!r}")

    @property
    def kind(self) -> DenseKind:
        """``"hnsw"`` or ``"flat"``."""
        return "hnsw" if isinstance(self._index, faiss.IndexHNSW) else "flat"

    @property
    def size(self) -> int:
        """Number of indexed vectors."""
        return int(self._index.ntotal)

    def add(self, vectors: np.ndarray) -> None:
        """Append vectors: float32, shape ``(n, dim)``, L2-normalised; they get rows ``size .. size + n - 1``.

        Raises:
            ValueError: wrong shape.
        """
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape (n, {self.dim}), got {vectors.shape}")
        if len(vectors):
            self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def extended(self, vectors: np.ndarray) -> DenseIndex:
        """A copy of this index (same kind and parameters; ``faiss.clone_index``) with ``vectors`` appended as rows
        ``size ..``; this index is left as it is (it may be serving searches). For HNSW this inserts the new
        vectors into the copied graph instead of building the graph again: an update that only adds passages.

        Raises:
            ValueError: wrong shape (as :meth:`add`).
        """
        copy = DenseIndex(self.dim, ef_search=self.ef_search)
        copy._index = faiss.clone_index(self._index)
        copy.add(vectors)
        return copy

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """Top-``k`` passages by inner product with ``query`` (float32, shape ``(dim,)``, L2-normalised).

        Args:
            allowed: optional boolean mask of shape ``(size,)``: only those rows are searched (FAISS ID selector),
                so filters apply inside the search, not after it.

        Returns:
            Hits sorted by descending score; FAISS's ``-1`` padding (fewer than ``k`` vectors) is never returned.
        """
        return self.top(query, k, allowed).hits()

    def selector(self, allowed: np.ndarray) -> RowSelector:
        """The FAISS selector of the rows ``allowed`` marks (boolean, shape ``(size,)``), to pass to :meth:`top`
        with that mask: build it once per filter, not per query (a bitmap, ``size / 8`` bytes)."""
        return RowSelector(allowed)

    def top(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None,
            selector: RowSelector | None = None) -> Ranking:
        """:meth:`search` as a :class:`~citerag.index.types.Ranking` (rows int64, scores float32).

        Args:
            selector: :meth:`selector` of ``allowed``, when the caller keeps one; else it is built for this call.
        """
        size = self._index.ntotal
        if size == 0 or k <= 0:
            return Ranking.empty()
        k = min(k, size)
        if allowed is not None:
            selector = selector or RowSelector(allowed)
            if selector.empty:
                return Ranking.empty()
        sel = selector.faiss if allowed is not None else None
        if isinstance(self._index, faiss.IndexHNSW):
            ef = max(self.ef_search, k)
            params = faiss.SearchParametersHNSW(efSearch=ef, sel=sel) if sel is not None else self._hnsw_params(ef)
        else:
            params = faiss.SearchParameters(sel=sel) if sel is not None else None
        query = np.ascontiguousarray(query, dtype=np.float32).reshape(1, -1)
        previous = faiss.omp_get_max_threads()  # as omp_threads(SEARCH_THREADS), without a generator per query
        if previous != SEARCH_THREADS:
            faiss.omp_set_num_threads(SEARCH_THREADS)
        try:
            scores, rows = self._index.search(query, k, params=params)
        finally:
            if previous != SEARCH_THREADS:
                faiss.omp_set_num_threads(previous)
        rows, scores = rows[0], scores[0]
        keep = rows >= 0  # FAISS pads with -1 when fewer than k rows can be returned
        if not keep.all():
            rows, scores = rows[keep], scores[keep]
        return Ranking(rows.astype(np.int64, copy=False), scores)

    def _hnsw_params(self, ef_search: int) -> faiss.SearchParametersHNSW:
        """Unfiltered HNSW search parameters for ``ef_search``, made once (FAISS only reads them)."""
        params = self._params.get(ef_search)
        if params is None:
            params = faiss.SearchParametersHNSW(efSearch=ef_search)
            if len(self._params) >= 16:
                self._params.clear()
            self._params[ef_search] = params
        return params

    def vectors(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Stored vectors: float32, shape ``(len(rows), dim)`` (all ``(size, dim)`` when ``rows`` is ``None``)."""
        if self.size == 0 or (rows is not None and len(rows) == 0):
            return np.zeros((0, self.dim), dtype=np.float32)
        if rows is None:
            return self._index.reconstruct_n(0, self.size)
        return self._index.reconstruct_batch(np.ascontiguousarray(rows, dtype=np.int64))  # only the rows asked for

    def save(self, directory: Path) -> None:
        """Write ``dense.faiss`` under ``directory``."""
        faiss.write_index(self._index, str(directory / self.FILENAME))

    @classmethod
    def load(cls, directory: Path, mmap: bool = True, ef_search: int = HNSW_EF_SEARCH) -> DenseIndex:
        """Read ``dense.faiss`` (memory-mapped when ``mmap``); the kind is read from the file."""
        flags = faiss.IO_FLAG_MMAP if mmap else 0
        raw = faiss.read_index(str(directory / cls.FILENAME), flags)
        index = cls(raw.d, ef_search=ef_search)
        index._index = raw
        return index
