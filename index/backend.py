"""The retrieval backend interface the service uses, whatever engine stores the passages.

Two implementations:

- the embedded default (FAISS + bm25s files in a versioned directory: :mod:`citerag.index.store`, :mod:`citerag.index.retrieve`,
  served by :class:`citerag.index.embedded.EmbeddedBackend`);
- Milvus (:mod:`citerag.index.milvus`): Milvus Lite in-process (a file URI) or a Milvus server (``http://host:19530``).

The API, CLI and evaluation runner only call the methods below, so a backend is chosen by one setting
(``CITERAG_BACKEND``) and the two can be compared on the same queries (``citerag eval --backend``). What both
share is defined once: a search's checks, candidate depth and fusion in :mod:`citerag.index.search`, the sorting of a write
into added / replaced / updated / unchanged / deleted / skipped in :mod:`citerag.index.writes`, the id rule in
:mod:`citerag.index.ids`. ``tests/index/test_backend_contract.py`` runs the same cases on both.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from citerag.index.filters import Filters
from citerag.index.search import SearchResult
from citerag.index.types import Document, FusionMethod, Passage, RetrievalMode
from citerag.index.writes import WriteReport

__all__ = ["BackendBase", "SearchBackend", "Searcher", "WriteReport", "check_page"]


class Searcher(Protocol):
    """Anything that ranks passages for a query: a :class:`~citerag.index.retrieve.Retriever` or a backend."""

    def search(
        self,
        query: str,
        k: int = 10,
        mode: RetrievalMode = "hybrid",
        one_per_doc: bool = False,
        fusion: FusionMethod | None = None,
        filters: Filters | None = None,
    ) -> list[SearchResult]:
        """Top-``k`` passages for ``query``, best first (``rank`` 1, 2, ...); fewer when fewer passages match
        (an empty corpus gives ``[]``).

        Args:
            mode: ``"hybrid"`` (both retrievers fused), ``"bm25"`` or ``"dense"``.
            one_per_doc: keep only the best passage of each document.
            fusion: this query's fusion method instead of the backend's default.
            filters: metadata conditions (:mod:`citerag.index.filters`), applied before top-k.

        Raises:
            ValueError: unknown mode, ``k < 1``, an unknown fusion or one the backend cannot run, malformed
                filters.
        """
        ...


@runtime_checkable
class SearchBackend(Searcher, Protocol):
    """A searchable, updatable passage store.

    Every method is safe to call from several threads; a search running during a write sees the corpus either
    before or after that write, never a mix.
    """

    name: str

    def write(
        self, upserts: Sequence[Document] = (), deletes: Sequence[str] = (), *, show_progress: bool = False
    ) -> WriteReport:
        """Insert or replace ``upserts`` by ``doc_id`` and remove ``deletes``, as one write (rules and report:
        :mod:`citerag.index.writes`; a replaced document loses all its old passages, a metadata-only change keeps its
        passages and vectors).

        Args:
            show_progress: show the encoder's progress (large first-run ingests).

        Raises:
            IngestError: a document is malformed (an id that breaks :mod:`citerag.index.ids`, one id twice with different
                content, a title too long to chunk, or what the engine cannot store); nothing is written.
            DocumentNotFound: an id of ``deletes`` is not stored; nothing is written.
        """
        ...

    def delete(self, doc_ids: Sequence[str]) -> WriteReport:
        """``write(deletes=doc_ids)``: remove documents and all their passages.

        Raises:
            DocumentNotFound: an id is not stored; nothing is written.
        """
        ...

    def get(self, doc_id: str) -> Document | None:
        """One document by id, or ``None``."""
        ...

    def count(self) -> int:
        """How many documents are stored."""
        ...

    def documents(self, offset: int = 0, limit: int = 100) -> list[Document]:
        """Documents in insertion order (a replaced or re-added document moves to the end, a metadata-only
        change keeps its place), ``limit`` from ``offset``.

        Raises:
            ValueError: ``offset < 0`` or ``limit < 0``.
        """
        ...

    def passages_of(self, doc_id: str) -> list[Passage]:
        """The passages of one document in order (``[]`` for an unknown id)."""
        ...

    def stats(self) -> dict[str, int | str]:
        """At least ``documents`` and ``passages`` (counts), ``version`` (a label of the live state) and
        ``fusion`` (the hybrid default)."""
        ...


class BackendBase:
    """The part every backend shares: ``delete`` as a ``write`` of deletes (each backend implements ``write`` and ``get``)."""

    def write(
        self, upserts: Sequence[Document] = (), deletes: Sequence[str] = (), *, show_progress: bool = False
    ) -> WriteReport:
        """See :meth:`SearchBackend.write` (each backend implements it)."""
        raise NotImplementedError

    def get(self, doc_id: str) -> Document | None:
        """See :meth:`SearchBackend.get` (each backend implements it)."""
        raise NotImplementedError

    def delete(self, doc_ids: Sequence[str]) -> WriteReport:
        """``write(deletes=doc_ids)``.

        Raises:
            DocumentNotFound: an id is not stored; nothing is written.
        """
        return self.write(deletes=doc_ids)


def check_page(offset: int, limit: int) -> None:
    """Validate a ``documents(offset, limit)`` page (every backend gives the same message).

    Raises:
        ValueError: ``offset < 0`` or ``limit < 0``.
    """
    if offset < 0 or limit < 0:
        raise ValueError(f"need offset >= 0 and limit >= 0, got {offset}, {limit}")
