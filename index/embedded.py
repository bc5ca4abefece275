"""The embedded backend: FAISS + bm25s files in a versioned directory, searched in-process.

Readers never lock: each search reads one immutable ``(index, retriever)`` snapshot, and a write swaps in a new
snapshot only after the new version is committed and verified, so a search sees the corpus before or after a write,
never a mix. Writes are committed by one writer thread at a lowered CPU priority, and the writes that wait for it
are committed together, as one version (:mod:`citerag.index.group_commit`).

A version is opened with the fast check (each file's size and mtime as written, :mod:`citerag.index.store`);
:meth:`EmbeddedBackend.verify_in_background` then hashes every file in full. A version that fails is refused at
once (searches raise :class:`~citerag.index.errors.IndexMismatch`, HTTP 503) and replaced by the recovered one.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from citerag.index.backend import BackendBase, WriteReport, check_page
from citerag.index.build import WriteOptions, write_index
from citerag.index.chunking import Chunker
from citerag.index.embed import Embedder
from citerag.index.errors import IndexMismatch
from citerag.index.filters import Filters
from citerag.index.group_commit import GroupCommit
from citerag.index.retrieve import Retriever
from citerag.index.search import SearchResult
from citerag.index.store import IndexConfig, IndexStore, LoadedIndex, verify_files
from citerag.index.types import DenseSetting, Document, FusionMethod, Passage, RetrievalMode

log = logging.getLogger(__name__)

#: Where the full check of the live version stands: not started, running, passed, or failed (the version refused).
Verification = Literal["pending", "verifying", "verified", "failed"]


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One live index version and the retriever over it."""

    index: LoadedIndex
    retriever: Retriever


class EmbeddedBackend(BackendBase):
    """:class:`~citerag.index.backend.SearchBackend` over an :class:`~citerag.index.store.IndexStore`.

    Args:
        store: the index directory (a version must be live: build one first).
        index: the live version, already loaded.
        open_retriever: makes the retriever for a loaded version (carries the fusion settings).
        embedder: encoder for new passages (may be a caching wrapper); the retriever has its own for queries.
        chunker: as the live index was built with.
        config: as the live index was built with.
        dense_kind: ``"auto"``, ``"flat"``, ``"hnsw"`` or ``"ivf-sq8"`` for versions this backend writes.
        writer_nice: the nice increment of the thread that commits writes (:mod:`citerag.index.priority`; 0: none).
    """

    name = "embedded"

    def __init__(
        self,
        store: IndexStore,
        index: LoadedIndex,
        open_retriever: Callable[[LoadedIndex], Retriever],
        embedder: Embedder,
        chunker: Chunker,
        config: IndexConfig,
        dense_kind: DenseSetting = "auto",
        writer_nice: int = 0,
    ) -> None:
        self.store = store
        self._open_retriever = open_retriever
        self.embedder = embedder
        self.chunker = chunker
        self.config = config
        self.dense_kind = dense_kind
        self._write_lock = threading.Lock()
        self.commits = GroupCommit(self._commit, nice=writer_nice)
        self.snapshot = Snapshot(index, open_retriever(index))
        self.verification: Verification = "pending"
        self.refused: str | None = None
        """Why the live version is refused (it failed the full check), until a recovered one replaces it."""

    @property
    def index(self) -> LoadedIndex:
        """The live version."""
        return self.snapshot.index

    @property
    def retriever(self) -> Retriever:
        """The retriever over the live version."""
        return self.snapshot.retriever

    @property
    def vocabulary_size(self) -> int:
        """:attr:`citerag.index.retrieve.Retriever.vocabulary_size` of the live version."""
        return self.snapshot.retriever.vocabulary_size

    def unseen_terms(self, terms: list[str]) -> list[str]:
        """:meth:`citerag.index.retrieve.Retriever.unseen_terms` over the live version."""
        return self.snapshot.retriever.unseen_terms(terms)

    def search(
        self,
        query: str,
        k: int = 10,
        mode: RetrievalMode = "hybrid",
        one_per_doc: bool = False,
        fusion: FusionMethod | None = None,
        filters: Filters | None = None,
    ) -> list[SearchResult]:
        """See :meth:`citerag.index.retrieve.Retriever.search`.

        Raises:
            IndexMismatch: the live version failed its full check and is being replaced.
        """
        if self.refused is not None:
            raise IndexMismatch(self.refused)
        return self.snapshot.retriever.search(query, k, mode, one_per_doc, fusion, filters)

    def verify_in_background(self, recover: Callable[[Path, str], LoadedIndex]) -> threading.Thread:
        """Hash every file of the live version in a background thread (:func:`~citerag.index.store.verify_files`,
        a few seconds a gigabyte; hashlib releases the GIL, so searches go on). On a mismatch the version is refused
        at once and ``recover(path, reason)`` (which moves it aside and recovers from the newest verified version
        and the write log) gives the version served next, itself checked in full. Returns the started thread."""
        thread = threading.Thread(target=self._verify, args=(recover,), name="citerag-verify", daemon=True)
        thread.start()
        return thread

    def _verify(self, recover: Callable[[Path, str], LoadedIndex]) -> None:
        self.verification = "verifying"
        index = self.snapshot.index
        try:
            verify_files(index.path, index.manifest, full=True)
        except IndexMismatch as exc:
            self.verification = "failed"
            self.refused = f"index version {index.path.name} failed its full check and is refused: {exc}"
            log.error("%s", self.refused)
            with self._write_lock:
                try:  # recover() hashes every remaining version in full before serving it
                    recovered = recover(index.path, str(exc))
                except Exception as failure:  # noqa: BLE001 - kept as the refusal's message
                    self.refused += f"; recovery failed: {failure}"
                    log.error("recovery after the failed check failed: %s", failure)
                    return
                self.snapshot = Snapshot(recovered, self._open_retriever(recovered))
                self.refused = None
            log.warning("serving the recovered index version %s", recovered.path.name)
        self.verification = "verified"

    def write(
        self, upserts: Sequence[Document] = (), deletes: Sequence[str] = (), *, show_progress: bool = False
    ) -> WriteReport:
        """Insert or replace ``upserts`` and remove ``deletes``, committed as a new index version
        (:func:`citerag.index.build.write_index`; rules: :mod:`citerag.index.writes`) together with the other writes
        waiting at that moment (:mod:`citerag.index.group_commit`); returns once the version is served, with the
        report of this write's documents.

        Raises:
            IngestError: a malformed document (nothing of this write is written).
            DocumentNotFound: a deleted id is not indexed (nothing of this write is written).
            DiskFull: no space left for the new version (nothing of this write is written).
            IndexMismatch: the live version failed its full check (nothing is written over it; retry once the
                recovered version is served).
        """
        return self.commits.submit(upserts, deletes, show_progress)

    def _commit(self, upserts: list[Document], deletes: list[str], show_progress: bool) -> WriteReport:
        """One write as one new version, served once committed (the writer thread's work)."""
        with self._write_lock:
            if self.refused is not None:
                raise IndexMismatch(self.refused)
            options = WriteOptions(dense_kind=self.dense_kind, show_progress=show_progress)
            path, report = write_index(
                self.store, self.embedder, self.chunker, self.config, upserts, deletes, options=options
            )
            if path != self.snapshot.index.path:
                index = self.store.load()
                self.snapshot = Snapshot(index, self._open_retriever(index))
        return report

    def get(self, doc_id: str) -> Document | None:
        """One document by id, or ``None``."""
        return self.snapshot.index.documents.get(doc_id)

    def count(self) -> int:
        """How many documents the live version holds."""
        return len(self.snapshot.index.documents)

    def documents(self, offset: int = 0, limit: int = 100) -> list[Document]:
        """Documents in index order (a replaced document moves to the end), ``limit`` from ``offset``.

        Raises:
            ValueError: ``offset < 0`` or ``limit < 0``.
        """
        check_page(offset, limit)
        return self.snapshot.index.documents.values_in_order(offset, limit)

    def passages_of(self, doc_id: str) -> list[Passage]:
        """The passages of one document in order (``[]`` for an unknown id)."""
        return self.snapshot.index.passages_of(doc_id)

    def stats(self) -> dict[str, int | str]:
        """``documents``, ``passages``, ``version`` (the live version directory), ``dense_index`` kind, ``fusion``
        (the hybrid default) and ``verification`` (the full check of the live version, :data:`Verification`)."""
        index, retriever = self.snapshot.index, self.snapshot.retriever
        return {
            "documents": len(index.documents),
            "passages": len(index.passages),
            "version": index.path.name,
            "dense_index": index.dense.kind,
            "fusion": retriever.fusion,
            "verification": self.verification,
        }
