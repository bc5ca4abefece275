"""Dense retrieval: FAISS exact inner-product search over L2-normalised passage vectors (inner product == cosine)."""

from __future__ import annotations

from pathlib import Path

import faiss
import numpy as np

from index.types import Hit


class DenseIndex:
    """A FAISS ``IndexFlatIP`` over passage vectors (row i == passage i).

    Args:
        dim: vector dimension (384 for all-MiniLM-L6-v2).
    """

    FILENAME = "dense.faiss"

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._index: faiss.Index = faiss.IndexFlatIP(dim)

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
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """Top-``k`` passages by inner product with ``query`` (float32, shape ``(dim,)``, L2-normalised).

        Args:
            allowed: optional boolean mask of shape ``(size,)``: only those rows are searched (FAISS ID selector),
                so filters apply inside the search, not after it.

        Returns:
            Hits sorted by descending score; FAISS's ``-1`` padding (fewer than ``k`` vectors) is never returned.
        """
        if self.size == 0 or k <= 0:
            return []
        k = min(k, self.size)
        params = None
        if allowed is not None:
            ids = np.flatnonzero(allowed).astype(np.int64)
            if ids.size == 0:
                return []
            params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(ids))
        scores, rows = self._index.search(query.reshape(1, -1).astype(np.float32), k, params=params)
        return [Hit(int(row), float(score), "dense") for row, score in zip(rows[0], scores[0]) if row >= 0]

    def reconstruct_all(self) -> np.ndarray:
        """All stored vectors: float32, shape ``(size, dim)``."""
        if self.size == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        return self._index.reconstruct_n(0, self.size)

    def save(self, directory: Path) -> None:
        """Write ``dense.faiss`` under ``directory``."""
        faiss.write_index(self._index, str(directory / self.FILENAME))

    @classmethod
    def load(cls, directory: Path, mmap: bool = True) -> DenseIndex:
        """Read ``dense.faiss`` (memory-mapped when ``mmap``)."""
        flags = faiss.IO_FLAG_MMAP if mmap else 0
        raw = faiss.read_index(str(directory / cls.FILENAME), flags)
        index = cls(raw.d)
        index._index = raw
        return index
