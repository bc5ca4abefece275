"""The retrieval backend interface the service uses, whatever engine stores the passages.

Two implementations:

- the embedded default (FAISS + bm25s files in a versioned directory: :mod:`index.store`, :mod:`index.retrieve`);
- Milvus (:mod:`index.milvus`): Milvus Lite in-process (a file URI) or a Milvus server (``http://host:19530``).

The API, CLI and evaluation runner only call the methods below, so a backend is chosen by one setting
(``CITERAG_BACKEND``) and the two can be compared on the same queries (``citerag eval --backend``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from index.filters import Filters
from index.search import SearchResult
from index.types import Document, FusionMethod, Passage, RetrievalMode


@dataclass(slots=True)
class WriteReport:
    """What an add or delete changed.

    Attributes:
        added: ids of documents that were new.
        replaced: ids of documents whose title or text changed (their old passages are gone).
        updated: ids whose metadata alone changed (passages and vectors kept).
        unchanged: ids given again with identical title, text and metadata (nothing written).
        deleted: ids removed.
        skipped: ``(doc_id, reason)`` for documents not indexed (e.g. no text).
        passages_embedded: passages sent to the encoder (cache hits excluded).
        version: the backend's version label after the write (embedded: the index version directory name).
    """

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    passages_embedded: int = 0
    version: str = ""


class Searcher(Protocol):
    """Anything that ranks passages for a query: a :class:`~index.retrieve.Retriever` or a backend."""

    def search(
        self,
        query: str,
        k: int = 10,
        mode: RetrievalMode = "hybrid",
        one_per_doc: bool = False,
        fusion: FusionMethod | None = None,
        filters: Filters | None = None,
    ) -> list[SearchResult]:
        """Top-``k`` passages for ``query`` (see :meth:`index.retrieve.Retriever.search`).

        Raises:
            ValueError: unknown mode, ``k < 1`` or malformed filters.
        """
        ...


@runtime_checkable
class SearchBackend(Searcher, Protocol):
    """A searchable, updatable passage store.

    Every method is safe to call from several threads; a search running during a write sees the corpus either
    before or after that write, never a mix.
    """

    name: str

    def add_documents(self, documents: list[Document]) -> WriteReport:
        """Insert or replace ``documents`` by ``doc_id`` (a replaced document loses all its old passages).

        Raises:
            IngestError: a document is malformed; nothing is written.
        """
        ...

    def delete_documents(self, doc_ids: list[str]) -> WriteReport:
        """Remove documents and all their passages.

        Raises:
            DocumentNotFound: an id is not indexed; nothing is written.
        """
        ...

    def document(self, doc_id: str) -> Document | None:
        """One document by id, or ``None``."""
        ...

    def documents(self, offset: int = 0, limit: int = 100) -> list[Document]:
        """Documents in index order, ``limit`` from ``offset``."""
        ...

    def passages_of(self, doc_id: str) -> list[Passage]:
        """The passages of one document in order (``[]`` for an unknown id)."""
        ...

    def stats(self) -> dict[str, int | str]:
        """At least ``documents`` and ``passages`` (counts) and ``version`` (a label of the live state)."""
        ...
