"""What every backend's search shares: the result type, argument checks, candidate depth, the mode/fusion dispatch
and the final selection.

Both :class:`~citerag.index.retrieve.Retriever` (the embedded backend) and :class:`~citerag.index.milvus.MilvusBackend` run a search
the same way, only the candidate lists come from different engines:

1. :func:`check_search` (mode and ``k``) and :func:`check_fusion`;
2. :func:`candidate_depth` candidates from BM25 and/or the dense index, each as a
   :class:`~citerag.index.types.Ranking` whose rows index a passage list;
3. :func:`rank_candidates`: one retriever's list as it is, or the two fused (:mod:`citerag.index.fusion`);
4. :func:`select_top` (``k``, one passage per document) and :func:`search_results`.

The steps pass arrays, so only the ``k`` results returned become Python objects. A fused ranking keeps each row's
place in the lists it was fused from (:attr:`~citerag.index.types.Ranking.places`), so a result's BM25 and dense
ranks are read, not searched for; over an index version's tables a result decodes its passage and document only
when they are read (:class:`SearchResult`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import FrozenInstanceError
from typing import Any, cast, get_args

from citerag.index.fusion import bounded_score_fusion, reciprocal_rank_fusion, weighted_score_fusion
from citerag.index.tables import DocumentTable, PassageTable
from citerag.index.types import Document, FusionMethod, Passage, Ranking, RetrievalMode

#: Every search mode and every hybrid fusion method, in the order messages list them.
RETRIEVAL_MODES: tuple[str, ...] = get_args(RetrievalMode)
FUSION_METHODS: tuple[str, ...] = get_args(FusionMethod)

PASSAGES_PER_DOC = 3  # candidate-depth multiplier for one-passage-per-document searches


#: The constructor's fields of :class:`SearchResult`, in order.
RESULT_FIELDS = ("rank", "passage", "document", "score", "bm25_rank", "dense_rank", "bm25_score", "dense_score")
_set = object.__setattr__


class SearchResult:
    """One ranked passage with its provenance; immutable (:meth:`replace` makes changed copies).

    A result of the embedded backend holds its passage and document as rows of the version's memory-mapped tables
    and decodes each on first access: ranking decodes no text, as Lucene's ``TopDocs`` come before the stored
    fields and Elasticsearch's query phase before its fetch phase. A caller showing ten results with their labels
    (``GET /search``) decodes ten passages and ten labels; one answering from them (``/ask``) also the documents,
    each passage and document once per result list. Built with passages and documents (Milvus, tests) it holds them.

    Attributes:
        rank: 1-based rank in the final list.
        passage: the passage (:class:`~citerag.index.types.Passage`).
        document: its document (:class:`~citerag.index.types.Document`).
        label: the document's display label, read alone when the document is not decoded yet.
        score: the final score: BM25 score, cosine similarity, or fused score, by mode.
        bm25_rank, dense_rank: 1-based rank of this passage in the BM25 / dense candidate lists, ``None`` when it
            was not among that retriever's candidates (or the mode did not run it).
        bm25_score, dense_score: the passage's BM25 score / cosine similarity when it was a candidate, else ``None``.
    """

    # one tuple (rank, score, bm25_rank, dense_rank, bm25_score, dense_score, passage, document, tables, row,
    # doc_row): a result is made in one assignment (~0.3 us; eleven slots took ~2.5), ten a search
    __slots__ = ("_v",)
    _v: tuple[Any, ...]

    def __init__(self, rank: int, passage: Passage, document: Document, score: float, bm25_rank: int | None,
                 dense_rank: int | None, bm25_score: float | None = None, dense_score: float | None = None) -> None:
        _set(self, "_v", (rank, score, bm25_rank, dense_rank, bm25_score, dense_score, passage, document, None, -1, -1))

    @classmethod
    def read_later(cls, rank: int, tables: _ResultTables, row: int, doc_row: int, score: float,
                   bm25_rank: int | None, dense_rank: int | None, bm25_score: float | None,
                   dense_score: float | None) -> SearchResult:
        """A result whose passage is ``tables.passages[row]`` and document ``tables.documents.at(doc_row)``,
        decoded on first access."""
        result = cls.__new__(cls)
        _set(result, "_v", (rank, score, bm25_rank, dense_rank, bm25_score, dense_score, None, None, tables, row,
                            doc_row))
        return result

    rank = property(lambda self: self._v[0])
    score = property(lambda self: self._v[1])
    bm25_rank = property(lambda self: self._v[2])
    dense_rank = property(lambda self: self._v[3])
    bm25_score = property(lambda self: self._v[4])
    dense_score = property(lambda self: self._v[5])

    @property
    def passage(self) -> Passage:
        v = self._v
        return v[6] if v[8] is None else v[8].passage(v[9])

    @property
    def document(self) -> Document:
        v = self._v
        return v[7] if v[8] is None else v[8].document(v[10])

    @property
    def label(self) -> str:
        v = self._v
        return v[7].label if v[8] is None else v[8].label(v[10])

    def replace(self, **changes: object) -> SearchResult:
        """A copy with ``changes`` (fields of :data:`RESULT_FIELDS`) applied, as :func:`dataclasses.replace`; what
        is not decoded yet stays so.

        Raises:
            TypeError: a name that is not a field.
        """
        if unknown := sorted(set(changes) - set(RESULT_FIELDS)):
            raise TypeError(f"SearchResult has no field {unknown[0]!r}; fields: {', '.join(RESULT_FIELDS)}")
        if not {"passage", "document"} & changes.keys():
            rank, score, bm25_rank, dense_rank, bm25_score, dense_score, *held = self._v
            values = (changes.get("rank", rank), changes.get("score", score), changes.get("bm25_rank", bm25_rank),
                      changes.get("dense_rank", dense_rank), changes.get("bm25_score", bm25_score),
                      changes.get("dense_score", dense_score), *held)
            copy = SearchResult.__new__(SearchResult)
            _set(copy, "_v", values)
            return copy
        fields: list[Any] = [changes.get(name, getattr(self, name)) for name in RESULT_FIELDS]
        return SearchResult(*fields)

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, name) for name in RESULT_FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SearchResult):
            return NotImplemented
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        return "SearchResult(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in RESULT_FIELDS) + ")"

    def __reduce__(self) -> tuple[type[SearchResult], tuple[object, ...]]:
        return SearchResult, self._values()  # pickled and copied decoded: the tables stay with their process

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}: a SearchResult is immutable (use replace())")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}: a SearchResult is immutable")


class _ResultTables:
    """The tables one result list reads from: the first read of a passage, a label or a document decodes that field
    of every result (a document listed twice once)."""

    __slots__ = ("passages", "documents", "rows", "doc_rows", "_passages", "_labels", "_documents")

    def __init__(self, passages: PassageTable, documents: DocumentTable, rows: list[int], doc_rows: list[int]) -> None:
        self.passages, self.documents, self.rows, self.doc_rows = passages, documents, rows, doc_rows
        self._passages: dict[int, Passage] | None = None
        self._labels: dict[int, str] | None = None
        self._documents: dict[int, Document] | None = None

    def passage(self, row: int) -> Passage:
        if self._passages is None:
            self._passages = dict(zip(self.rows, self.passages.passages_at(self.rows), strict=True))
        return self._passages[row]

    def document(self, doc_row: int) -> Document:
        if self._documents is None:
            distinct = self._distinct_doc_rows()
            self._documents = dict(zip(distinct, self.documents.documents_at(distinct), strict=True))
        return self._documents[doc_row]

    def label(self, doc_row: int) -> str:
        if self._labels is None:
            if self._documents is not None:  # the documents are decoded already: their labels are at hand
                return self._documents[doc_row].label
            distinct = self._distinct_doc_rows()
            self._labels = dict(zip(distinct, self.documents.labels_at(distinct), strict=True))
        return self._labels[doc_row]

    def _distinct_doc_rows(self) -> list[int]:
        return list(dict.fromkeys(self.doc_rows))  # first-seen order; np.unique costs more on ten values


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
    return cast(FusionMethod, fusion)  # checked against the Literal's values above


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
    are then dropped (:func:`select_top` needs spares)."""
    return 2 * depth if one_per_doc else k


def rank_candidates(
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
    """The ranked candidates of a search: ``bm25`` or ``dense`` as they are for those modes, else the two lists fused
    with ``fusion`` (``top_k`` fused rows at most, :func:`fusion_depth`).

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
    if fusion == "bounded":
        if bm25_bound is None:
            raise ValueError("bounded fusion needs the query's BM25 upper bound")
        return bounded_score_fusion(bm25, dense, bm25_bound(), weights, top_k=top_k)
    if fusion == "weighted":
        return weighted_score_fusion([bm25, dense], weights, top_k=top_k)
    return reciprocal_rank_fusion([bm25, dense], k=rrf_k, top_k=top_k)


def select_top(ranked: Ranking, passages: Sequence[Passage], k: int, one_per_doc: bool) -> Ranking:
    """The first ``k`` of ``ranked`` (rows into ``passages``), only each document's best passage when
    ``one_per_doc``; ``ranked`` itself when it holds ``k`` rows or fewer and every passage is wanted."""
    if not one_per_doc:
        return ranked if len(ranked) <= k else ranked.take(slice(k))
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
    return ranked.take(kept)


def search_results(
    chosen: Ranking,
    bm25: Ranking,
    dense: Ranking,
    passages: Sequence[Passage],
    documents: Mapping[str, Document],
) -> list[SearchResult]:
    """``chosen`` as ranked results (rank 1 first), each with its rank and score in the ``bm25`` and ``dense``
    candidate lists when it was among them (a row listed twice in a list takes its later place). Only the
    ``len(chosen)`` results are made as objects.

    Over a :class:`~citerag.index.tables.PassageTable` and :class:`~citerag.index.tables.DocumentTable` the results
    decode their passage and document on first access (:class:`SearchResult`); other sequences and mappings are
    read at once, by row and by ``doc_id``."""
    bm25_rank, bm25_score = _places(bm25, chosen, 0)
    dense_rank, dense_score = _places(dense, chosen, 1)
    rows, scores = chosen.rows.tolist(), chosen.scores.tolist()
    places = zip(scores, bm25_rank, dense_rank, bm25_score, dense_score, strict=True)
    if isinstance(passages, PassageTable) and isinstance(documents, DocumentTable):
        doc_rows = passages.doc_rows[chosen.rows].tolist()
        tables = _ResultTables(passages, documents, rows, doc_rows)
        return [SearchResult.read_later(at + 1, tables, row, doc_row, *place)
                for at, (row, doc_row, place) in enumerate(zip(rows, doc_rows, places, strict=True))]
    listed = [passages[row] for row in rows]
    return [SearchResult(at + 1, passage, documents[passage.doc_id], *place)
            for at, (passage, place) in enumerate(zip(listed, places, strict=True))]


def _places(run: Ranking, chosen: Ranking, which: int) -> tuple[list[int | None], list[float | None]]:
    """For each row of ``chosen``: its 1-based rank and score in ``run`` (its last place there), or ``None`` twice.

    Read from ``chosen.places`` when ``chosen`` was fused from ``run`` (as its ``which``-th run) and when ``chosen``
    is ``run`` itself (a single retriever's search); otherwise looked up."""
    if len(run) == 0:
        return [None] * len(chosen), [None] * len(chosen)
    scores = run.scores.tolist()
    if chosen is run:
        return list(range(1, len(scores) + 1)), scores
    if chosen.places is not None and len(chosen.runs) > which and chosen.runs[which] is run:
        found: list[int | None] = [None if at < 0 else at for at in chosen.places[which].tolist()]
    else:
        place = {row: at for at, row in enumerate(run.rows.tolist())}  # a row listed twice keeps its later place
        found = [place.get(row) for row in chosen.rows.tolist()]
    return [None if at is None else at + 1 for at in found], [None if at is None else scores[at] for at in found]
