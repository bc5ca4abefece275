"""Dense retrieval: FAISS inner-product search over L2-normalised passage vectors (inner product == cosine).

Three index kinds, chosen by corpus size (``choose_kind``) or forced by a setting:

- ``flat``: ``IndexFlatIP``, exact; 4 * dim bytes per passage (1,536 B at 384-d); search time linear in size.
- ``hnsw``: ``IndexHNSWFlat`` (Malkov & Yashunin 2018), approximate; the same float32 vectors plus the graph
  (about 2 * M * 4 B per passage at M = 32: ~256 B), so ~1.8 KB per passage at 384-d; search time roughly
  logarithmic. ``efSearch`` trades recall for time (the performance page has the measured Recall@10 vs flat).
- ``ivf-sq8``: ``IndexIVFScalarQuantizer`` (inverted file, Jégou et al., "Product quantization for nearest neighbor
  search", TPAMI 2011; here with 8-bit scalar codes instead of PQ): k-means splits the vectors into ``nlist`` lists
  (a flat coarse quantizer of ``nlist`` float32 centroids); each vector is stored as one byte per dimension (its
  residual to the list's centroid, quantised uniformly per dimension, FAISS ``QT_8bit``) plus its 8-byte row id:
  ``dim + 8`` B per passage (392 B at 384-d; the file, centroids included, 395 B at 1M: 4.6x less than HNSW). A
  search scans the ``nprobe`` lists whose centroids are nearest the query. Scores are approximate: on the abstracts'
  MiniLM vectors the returned score is 3e-4 off the exact cosine on average, 1e-3 at most. The 8-bit ranges are
  trained with the centroids; components outside them are clamped (an index trained on half the abstracts' passages
  reconstructs the other half as well on average, worst cosine 0.995; far off-distribution vectors fare worse, see
  ``IVF_RETRAIN_GROWTH``).

Index files are opened memory-mapped (``faiss.IO_FLAG_MMAP_IFC``: flat codes, HNSW's vectors and IVF lists are
zero-copy views of the file; HNSW's graph, ~260 B a passage, is still read), so opening a million passages takes
10-110 ms instead of 0.5-9 s (the performance page) and the pages are shared by every process serving
the same version; such an index is read-only: :meth:`DenseIndex.extended` copies it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import faiss as _faiss
import numpy as np

from citerag.index.types import DenseSetting, Hit, Ranking

#: faiss's SWIG bindings ship incomplete annotations (index subclasses' fields, search parameters): read as Any.
faiss: Any = _faiss

DenseKind = Literal["flat", "hnsw", "ivf-sq8"]
KINDS: tuple[DenseKind, ...] = ("flat", "hnsw", "ivf-sq8")
HNSW_M = 32  # graph degree (FAISS default for IndexHNSWFlat is 32)
HNSW_EF_CONSTRUCTION = 80
# The constants below were chosen by measurement on 2 cores (the dense-layouts and search-latency benches); what was
# measured and why each value was kept is on the documentation's performance page ("Dense index parameters").
#: HNSW's candidate-list size at query time: keeps Recall@10 against exact search at or above 0.95 at a million
#: passages.
HNSW_EF_SEARCH = 256
#: Passages from which "auto" builds HNSW: below it exact search stays within a few ms a query.
AUTO_HNSW_THRESHOLD = 50_000
#: Passages from which "auto" builds ivf-sq8 instead of HNSW: above it HNSW's memory (~1.8 KB a passage) and build
#: time outweigh its recall.
AUTO_IVF_THRESHOLD = 200_000
#: IVF lists: ``IVF_LISTS_PER_SQRT * sqrt(n)``, rounded; the FAISS wiki ("Guidelines to choose an index") suggests 4
#: to 16 * sqrt(n); fewer, longer lists train and add much faster (k-means costs ~ training points * nlist).
IVF_LISTS_PER_SQRT = 2.0
#: k-means training sample: this many vectors per list (FAISS samples them, seed 1234; 10 iterations). FAISS warns
#: under 39 per centroid and caps at 256 by default; training time grows linearly with it.
IVF_TRAIN_PER_LIST = 64
IVF_MIN_TRAIN_PER_LIST = 39  # never more lists than n / 39: each centroid gets FAISS's minimum of training points
#: Lists scanned per query: keeps Recall@10 at or above 0.95 with a margin at a million passages.
IVF_NPROBE = 80
#: A search restricted to a fraction f of the rows scans ``nprobe / f ** IVF_FILTER_EXPONENT`` lists (at most all):
#: rows outside the filter are skipped before their distance is computed, so scanning is cheap, but fewer allowed
#: rows per list need more lists.
IVF_FILTER_EXPONENT = 0.5
#: An ivf-sq8 index is trained again (k-means over its reconstructed vectors and the new ones) when an add brings it
#: to a size for which ivf_lists() gives IVF_RETRAIN_GROWTH times its nlist: with nlist ~ sqrt(n) the corpus grew
#: ~4x since training (2x while it is small enough that the training-points cap, n // 39, sets nlist), so lists are
#: ~4x the rule's length and every probe scans ~4x the codes (slower; recall grows). Shrinking never retrains.
IVF_RETRAIN_GROWTH = 2
#: OpenMP threads FAISS may use for one query: a single query's scan split over threads waits at a barrier for the
#: slowest one, and the service runs concurrent requests, one search each, so splitting buys no throughput.
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


def choose_kind(
    n_passages: int,
    setting: DenseSetting = "auto",
    threshold: int = AUTO_HNSW_THRESHOLD,
    ivf_threshold: int = AUTO_IVF_THRESHOLD,
) -> DenseKind:
    """The index kind for ``n_passages``: ``setting`` when it names a kind (``"flat"``, ``"hnsw"``, ``"ivf-sq8"``);
    for ``"auto"``: flat below ``threshold`` passages, HNSW from it, ivf-sq8 from ``ivf_threshold`` on.

    Raises:
        ValueError: an unknown setting.
    """
    if setting in KINDS:
        return setting  # type: ignore[return-value]
    if setting != "auto":
        raise ValueError(f"dense index must be 'auto', 'flat', 'hnsw' or 'ivf-sq8', got {setting!r}")
    if n_passages >= ivf_threshold:
        return "ivf-sq8"
    return "hnsw" if n_passages >= threshold else "flat"


def ivf_lists(n: int) -> int:
    """IVF lists for ``n`` vectors: ``round(IVF_LISTS_PER_SQRT * sqrt(n))``, at most ``n // IVF_MIN_TRAIN_PER_LIST``
    (every centroid trained on enough points) and at least 1."""
    return max(1, min(round(IVF_LISTS_PER_SQRT * math.sqrt(max(n, 0))), n // IVF_MIN_TRAIN_PER_LIST))


def _empty_ivf(dim: int, nlist: int) -> faiss.IndexIVFScalarQuantizer:
    """An untrained ``IVF<nlist>,SQ8`` inner-product index (by residual) sampling ``IVF_TRAIN_PER_LIST`` a list."""
    index = faiss.index_factory(dim, f"IVF{nlist},SQ8", faiss.METRIC_INNER_PRODUCT)  # already the IVF-SQ class
    index.cp.max_points_per_centroid = IVF_TRAIN_PER_LIST
    return index


class RowSelector:
    """The rows a boolean mask marks, as a FAISS ``IDSelectorBitmap`` (bit ``i`` of the little-endian packed mask is
    row ``i``), for filtered searches; the same rows as ``IDSelectorBatch(np.flatnonzero(mask))``, without building a
    hash set of every allowed row each query.

    Attributes:
        empty: no row is allowed (a search returns nothing).
        faiss: the selector (it reads the bitmap this object keeps alive).
    """

    def __init__(self, allowed: np.ndarray) -> None:
        allowed = np.asarray(allowed, dtype=bool)
        self._bitmap = np.packbits(allowed, bitorder="little")
        self.allowed = int(np.count_nonzero(allowed))
        """How many rows are allowed."""
        self.empty = self.allowed == 0
        self.faiss = faiss.IDSelectorBitmap(self._bitmap)


class DenseIndex:
    """A FAISS index over passage vectors (row i == passage i).

    Args:
        dim: vector dimension (384 for all-MiniLM-L6-v2).
        kind: ``"flat"`` (exact), ``"hnsw"`` or ``"ivf-sq8"`` (approximate; see the module docstring). An
            ivf-sq8 index is trained by its first :meth:`add` (its ``nlist`` is :func:`ivf_lists` of that size).
        ef_search: HNSW candidate-list size at query time (HNSW only).
        nprobe: IVF lists scanned per query (ivf-sq8 only; at most ``nlist``).

    Raises:
        ValueError: an unknown kind.
    """

    FILENAME = "dense.faiss"

    def __init__(self, dim: int, kind: DenseKind = "flat", ef_search: int = HNSW_EF_SEARCH,
                 nprobe: int = IVF_NPROBE) -> None:
        self.dim = dim
        self.ef_search = ef_search
        self.nprobe = nprobe
        self._path: Path | None = None  # the file a memory-mapped (read-only) index views, else None
        self._params: dict[int, faiss.SearchParametersHNSW] = {}
        if kind == "flat":
            self._index: faiss.Index = faiss.IndexFlatIP(dim)
        elif kind == "hnsw":
            hnsw = faiss.IndexHNSWFlat(dim, HNSW_M, faiss.METRIC_INNER_PRODUCT)
            hnsw.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
            self._index = hnsw
        elif kind == "ivf-sq8":
            self._index = _empty_ivf(dim, 1)  # replaced by a trained index on the first add
        else:
            raise ValueError(f"kind must be 'flat', 'hnsw' or 'ivf-sq8', got {kind!r}")

    @property
    def kind(self) -> DenseKind:
        """``"flat"``, ``"hnsw"`` or ``"ivf-sq8"``."""
        if isinstance(self._index, faiss.IndexIVFScalarQuantizer):
            return "ivf-sq8"
        return "hnsw" if isinstance(self._index, faiss.IndexHNSW) else "flat"

    @property
    def size(self) -> int:
        """Number of indexed vectors."""
        return int(self._index.ntotal)

    @property
    def nlist(self) -> int:
        """IVF lists of an ivf-sq8 index (0 for the other kinds, and for an ivf-sq8 index not yet trained)."""
        if not isinstance(self._index, faiss.IndexIVF) or not self._index.is_trained:
            return 0
        return int(self._index.nlist)

    def describe(self) -> str:
        """The kind and its search parameters in words, e.g. ``"ivf-sq8, nlist 2031, nprobe 80"``."""
        if self.kind == "hnsw":
            return f"hnsw, M {HNSW_M}, efSearch {self.ef_search}"
        if self.kind == "ivf-sq8":
            return f"ivf-sq8, nlist {self.nlist}, nprobe {min(self.nprobe, max(self.nlist, 1))}"
        return "flat"

    def add(self, vectors: np.ndarray) -> None:
        """Append vectors: float32, shape ``(n, dim)``, L2-normalised; they get rows ``size .. size + n - 1``.

        An ivf-sq8 index is trained here: by its first non-empty add (k-means over a sample of ``vectors``), and
        again, over its own reconstructed vectors and the new ones, when the size reaches the retrain bound
        (``IVF_RETRAIN_GROWTH``): the old rows are then quantised a second time, from their reconstructions
        (:meth:`vectors`; tests/index/test_dense.py bounds the drift: mean component change < 3e-3).

        Raises:
            ValueError: wrong shape.
            RuntimeError: the index is memory-mapped (read-only): extend a copy (:meth:`extended`).
        """
        if vectors.ndim != 2 or vectors.shape[1] != self.dim:
            raise ValueError(f"expected vectors of shape (n, {self.dim}), got {vectors.shape}")
        if not len(vectors):
            return
        if self._path is not None:
            raise RuntimeError("this index is memory-mapped (read-only); add to a copy from extended()")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if self.kind == "ivf-sq8":
            total = self.size + len(vectors)
            if not self.nlist or ivf_lists(total) >= IVF_RETRAIN_GROWTH * self.nlist:
                if self.size:
                    vectors = np.concatenate([self.vectors(), vectors])
                index = _empty_ivf(self.dim, ivf_lists(total))
                index.train(vectors)
                self._index = index
        self._index.add(vectors)

    def extended(self, vectors: np.ndarray, keep: np.ndarray | None = None) -> DenseIndex:
        """A new index of the same kind and parameters holding this index's rows ``keep`` (int, in that order;
        all rows when ``None``) as rows ``0 ..``, then ``vectors`` (float32, ``(n, dim)``, L2-normalised); this
        index is left as it is (it may be serving searches).

        - ivf-sq8: the kept rows' codes are copied list by list into a new index with the same centroids and
          quantiser (nothing re-encoded, no k-means), then ``vectors`` are added (:meth:`add`; it retrains only
          past the growth bound).
        - hnsw, all rows kept: the graph is copied and the new vectors inserted into it; with ``keep``, the graph
          is built again from the kept vectors (as a fresh index).
        - flat: a fresh index of the kept vectors and the new ones.

        Raises:
            ValueError: wrong shape (as :meth:`add`).
        """
        copy = DenseIndex(self.dim, self.kind, ef_search=self.ef_search, nprobe=self.nprobe)
        if self.kind == "ivf-sq8" and self.nlist:
            copy._index = self._ivf_copy(keep)
        elif self.kind == "hnsw" and keep is None:
            copy._index = faiss.clone_index(self._index) if self._path is None else self._owned_copy()
        else:
            copy.add(self.vectors(keep))
        copy.add(vectors)
        return copy

    def _owned_copy(self) -> faiss.Index:
        """This memory-mapped index read again into memory (owned, so it can be added to)."""
        assert self._path is not None
        if self._path.exists():
            return faiss.read_index(str(self._path))
        return faiss.deserialize_index(faiss.serialize_index(self._index))  # the file is gone (an old version)

    def _ivf_copy(self, keep: np.ndarray | None) -> faiss.IndexIVFScalarQuantizer:
        """A new ivf-sq8 index with this one's centroids and quantiser holding the codes of rows ``keep``,
        renumbered ``0 .. len(keep) - 1`` in that order (all rows when ``None``)."""
        source = self._index
        nlist, code_size = int(source.nlist), int(source.code_size)
        out = _empty_ivf(self.dim, nlist)
        out.quantizer.add(source.quantizer.reconstruct_n(0, nlist))
        out.sq = source.sq
        out.is_trained = True
        if keep is None:
            remap = np.arange(self.size, dtype=np.int64)
        else:
            keep = np.asarray(keep, dtype=np.int64)
            if keep.size and (keep.min() < 0 or keep.max() >= self.size or np.unique(keep).size != keep.size):
                raise ValueError(f"keep must hold distinct rows in 0..{self.size - 1}")
            remap = np.full(self.size, -1, dtype=np.int64)
            remap[keep] = np.arange(keep.size, dtype=np.int64)
        lists, total = source.invlists, 0
        for number in range(nlist):
            length = lists.list_size(number)
            if not length:
                continue
            ids = remap[faiss.rev_swig_ptr(lists.get_ids(number), length)]
            codes = faiss.rev_swig_ptr(lists.get_codes(number), length * code_size).reshape(length, code_size)
            kept = ids >= 0
            ids, codes = np.ascontiguousarray(ids[kept]), np.ascontiguousarray(codes[kept])
            if len(ids):
                out.invlists.add_entries(number, len(ids), faiss.swig_ptr(ids), faiss.swig_ptr(codes))
                total += len(ids)
        out.ntotal = total
        return out

    def search(self, query: np.ndarray, k: int, allowed: np.ndarray | None = None) -> list[Hit]:
        """Top-``k`` passages by inner product with ``query`` (float32, shape ``(dim,)``, L2-normalised).

        Args:
            allowed: optional boolean mask of shape ``(size,)``: only those rows are searched (a FAISS bitmap ID
                selector), so filters apply inside the search, not after it. ivf-sq8 scans
                ``nprobe / f ** IVF_FILTER_EXPONENT`` (``nprobe / sqrt(f)``) lists, at most all, when a fraction
                ``f`` of the rows is allowed.

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
        sel = selector.faiss if selector is not None and allowed is not None else None
        if isinstance(self._index, faiss.IndexHNSW):
            ef = max(self.ef_search, k)
            params = faiss.SearchParametersHNSW(efSearch=ef, sel=sel) if sel is not None else self._hnsw_params(ef)
        elif isinstance(self._index, faiss.IndexIVF):
            # a filter allowing a fraction f of the rows scans nprobe / f ** IVF_FILTER_EXPONENT lists (at most all)
            fraction = selector.allowed / size if selector is not None and allowed is not None else 1.0
            nprobe = max(1, min(self.nlist, math.ceil(self.nprobe / fraction**IVF_FILTER_EXPONENT)))
            params = faiss.SearchParametersIVF(nprobe=nprobe, sel=sel)
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
        """Stored vectors: float32, shape ``(len(rows), dim)`` (all ``(size, dim)`` when ``rows`` is ``None``).

        ivf-sq8 stores 8-bit codes: these are their reconstructions (centroid + decoded residual), typically
        ~1e-3 from the vectors added per component (a component outside the range seen in training is clamped to
        it). Added back to the same index, ~99% of them get the very same codes (the rest fall in a neighbouring
        list and are encoded afresh, cosine >= 0.99 to before), so reusing them does not drift. The first call
        with ``rows`` builds FAISS's row -> (list, offset) map (8 B a row; searches do not read it).
        """
        if self.size == 0 or (rows is not None and len(rows) == 0):
            return np.zeros((0, self.dim), dtype=np.float32)
        if rows is None:
            return self._index.reconstruct_n(0, self.size)
        if self.kind == "ivf-sq8" and self._index.direct_map.type == faiss.DirectMap.NoMap:
            self._index.make_direct_map()
        return self._index.reconstruct_batch(np.ascontiguousarray(rows, dtype=np.int64))  # only the rows asked for

    def save(self, directory: Path) -> None:
        """Write ``dense.faiss`` under ``directory``.

        Written through Python's file object, 1 MiB at a time (``faiss.PyCallbackIOWriter``), not by FAISS's own
        ``fopen``/``fwrite``: FAISS ignores the error of ``fclose``, so on a full disk an index small enough to stay
        in the C library's buffer would come out empty or cut short with no error raised. Here a failed write or
        close raises ``OSError`` (``ENOSPC``).

        Raises:
            OSError: the file cannot be written (a full disk: ``errno`` ``ENOSPC``).
        """
        with (directory / self.FILENAME).open("wb") as handle:
            faiss.write_index(self._index, faiss.PyCallbackIOWriter(handle.write))

    @classmethod
    def load(cls, directory: Path, mmap: bool = True, ef_search: int = HNSW_EF_SEARCH,
             nprobe: int = IVF_NPROBE) -> DenseIndex:
        """Read ``dense.faiss``; the kind is read from the file. With ``mmap`` the index views the file
        (``faiss.IO_FLAG_MMAP_IFC``: vectors and codes are not copied, see the module docstring) and is read-only:
        :meth:`add` raises, :meth:`extended` copies it."""
        path = directory / cls.FILENAME
        raw = faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mmap else 0)
        index = cls(raw.d, ef_search=ef_search, nprobe=nprobe)
        index._index = raw
        index._path = path if mmap else None
        return index
