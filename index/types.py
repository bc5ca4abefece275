"""Frozen value types that flow through the indexing pipeline (ingest -> chunk -> embed/BM25 -> fuse)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from citerag.index.files import json_sha256

RetrievalMode = Literal["hybrid", "bm25", "dense"]
FusionMethod = Literal["bounded", "rrf", "weighted"]
#: BM25 variants bm25s implements (Kamphuis et al., ECIR 2020, name them): ``lucene`` is the default.
BM25Method = Literal["lucene", "robertson", "atire", "bm25l", "bm25+"]
#: FAISS layout asked for: ``flat`` (exact), ``hnsw``, ``ivf-sq8`` (inverted lists of 8-bit codes), or ``auto``
#: (chosen by corpus size, :func:`citerag.index.dense.choose_kind`).
DenseSetting = Literal["auto", "flat", "hnsw", "ivf-sq8"]


@dataclass(frozen=True, slots=True)
class Document:
    """One source document (a paper abstract).

    Attributes:
        doc_id: stable identifier; given by the source (JSONL ``id``/``_id``) or derived from the normalised text.
        title: the source's title, or ``""`` when the source has none (never invented).
        text: the document body exactly as read (LaTeX, Markdown and Unicode kept).
        label: display label: the title when there is one, else the opening words of ``text``.
        meta: optional metadata (``venue``, ``year``, ``url``, ``authors``, ``source``).
    """

    doc_id: str
    title: str
    text: str
    label: str
    meta: dict[str, Any] = field(default_factory=dict)


#: Metadata keys that say where a record was read from, not what it holds: no part of its fingerprint.
PROVENANCE_KEYS = frozenset({"source", "line"})


def document_fingerprint(doc: Document) -> str:
    """Hex sha256 (64 characters) of a document's title, text and metadata, its provenance (:data:`PROVENANCE_KEYS`)
    excluded: equal fingerprints mean nothing to re-index, whichever file or line the record came from. Used by the
    source records (first 16 digits) and the Milvus backend."""
    meta = {key: value for key, value in doc.meta.items() if key not in PROVENANCE_KEYS}
    return json_sha256([doc.title, doc.text, meta])


@dataclass(frozen=True, slots=True)
class Passage:
    """A contiguous span of one document, the unit that is indexed and cited.

    Attributes:
        chunk_id: ``"{doc_id}#{ordinal}"``.
        doc_id: the owning document.
        ordinal: 0-based position of the passage within its document.
        start, end: character offsets into ``Document.text`` (``text == document.text[start:end]``).
        text: the stored passage text (original, un-normalised).
        n_tokens: length of the embedded form in the embedding model's word pieces, special tokens included.
    """

    chunk_id: str
    doc_id: str
    ordinal: int
    start: int
    end: int
    text: str
    n_tokens: int


@dataclass(frozen=True, slots=True)
class Hit:
    """One ranked result of one retriever: a row of the passage table and its score.

    Attributes:
        row: 0-based row into the passage table (int).
        score: retriever score (BM25 score, inner product, or fused score); higher is better.
    """

    row: int
    score: float


@dataclass(frozen=True, slots=True)
class Ranking:
    """A ranked candidate list as two arrays, best first: the array form of a ``list[Hit]``, which the embedded
    backend's search passes between its steps so that only the final ``k`` results become Python objects.

    Attributes:
        rows: int64, shape ``(n,)``: rows of the passage table (distinct in every list a retriever or a fusion
            returns).
        scores: float, shape ``(n,)``, aligned with ``rows``: float32 as BM25 (bm25s) and FAISS return them, float64
            for fused scores; :meth:`hits` turns them into Python floats, as :class:`Hit` holds them.
        runs: for a fused list, the candidate lists it was fused from (``()`` for a retriever's own list).
        places: for a fused list, int64 of shape ``(len(runs), n)``: each row's 0-based place in each of ``runs``
            (its later place when listed twice), ``-1`` where absent; ``None`` otherwise.
    """

    rows: np.ndarray
    scores: np.ndarray
    runs: tuple[Ranking, ...] = ()
    places: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.rows)

    def take(self, at: slice | np.ndarray | list[int]) -> Ranking:
        """The entries ``at`` (a slice, or 0-based positions), their places in ``runs`` kept."""
        places = None if self.places is None else self.places[:, at]
        return Ranking(self.rows[at], self.scores[at], self.runs, places)

    def hits(self) -> list[Hit]:
        """The same list as :class:`Hit` objects (Python ``int`` rows and ``float`` scores)."""
        return [Hit(row, score) for row, score in zip(self.rows.tolist(), self.scores.tolist(), strict=True)]

    @classmethod
    def of(cls, hits: Sequence[Hit]) -> Ranking:
        """The array form of ``hits`` (rows int64, scores float64: a :class:`Hit` score is a Python float)."""
        rows = np.fromiter((hit.row for hit in hits), dtype=np.int64, count=len(hits))
        return cls(rows, np.fromiter((hit.score for hit in hits), dtype=np.float64, count=len(hits)))

    @classmethod
    def empty(cls) -> Ranking:
        """A list with no candidates (one shared object: its arrays are empty and read-only)."""
        return _NO_CANDIDATES


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


_NO_CANDIDATES = Ranking(_read_only(np.zeros(0, dtype=np.int64)), _read_only(np.zeros(0, dtype=np.float64)))
