"""The index's lifecycle: open it (verify, recover), build it on first run, keep it in step with its source files,
and rebuild it from or add to those files.

:func:`ensure_index` is the one way to open the index for serving or evaluating: it recovers
(:func:`recover_index`), builds the first version when nothing was ever indexed, and applies what changed in the
sources. Commands that must never build (``citerag search``, ``docs``) call :func:`recover_index` alone;
``citerag index`` calls :func:`rebuild_sources` or :func:`add_sources`; a version found damaged while served is
handled by :func:`recover_damaged`. Every version these write is committed by
:func:`citerag.index.build.write_index`.

What they need from the service's settings comes as one :class:`IndexSetup` of plain values and a loader of the
encoder, so index/ never imports service/ (:func:`citerag.service.pipeline.index_setup` makes it from the
settings); the encoder is loaded only when a step needs it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from rich.progress import Progress

from citerag.index.backend import SearchBackend, WriteReport
from citerag.index.build import WriteOptions, write_index
from citerag.index.chunking import Chunker
from citerag.index.embed import Embedder, ModelEmbedder
from citerag.index.embed_cache import CachedEmbedder
from citerag.index.errors import IngestError
from citerag.index.ingest import Corpus, read_corpus, source_files
from citerag.index.progress import build_progress
from citerag.index.recovery import IndexUnrecoverable, recover, replay
from citerag.index.sources import (
    SourceStates,
    recorded_sources,
    records_by_source,
    source_changes,
    source_signatures,
    source_state,
    sources_unchanged,
)
from citerag.index.store import KEEP_VERSIONS, IndexConfig, IndexStore, LoadedIndex, Verify
from citerag.index.types import BM25Method, DenseSetting, Document

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class IndexSetup:
    """Where the index lives and how it is built: what the lifecycle functions need from the settings.

    Attributes:
        index_dir: the index directory (versions, write log, source state, write lock).
        corpus: the sources indexed on first run, when the index records none of its own.
        load_embedder: returns the encoder passages and queries are embedded with (called only when a step needs
            it; the caller caches it: loading a model takes seconds).
        chunk_tokens, chunk_overlap: passage size and overlap, in the encoder's word pieces.
        bm25_k1, bm25_b, bm25_method: the BM25 parameters and variant.
        dense_index: the FAISS layout (:data:`~citerag.index.types.DenseSetting`).
        embedding_cache: the directory of the persistent embedding cache (:mod:`citerag.index.embed_cache`), or
            ``None`` to embed without one.
        embedding_cache_bytes: the embedding cache's bound (bytes; least recently used shards go first), or
            ``None`` for no bound.
        keep_versions: index versions kept on disk, the live one included (at least
            :data:`~citerag.index.store.MIN_KEEP_VERSIONS`).
    """

    index_dir: Path
    corpus: tuple[Path, ...]
    load_embedder: Callable[[], ModelEmbedder]
    chunk_tokens: int
    chunk_overlap: int
    bm25_k1: float
    bm25_b: float
    bm25_method: BM25Method
    dense_index: DenseSetting
    embedding_cache: Path | None = None
    embedding_cache_bytes: int | None = None
    keep_versions: int = KEEP_VERSIONS

    def store(self) -> IndexStore:
        """The index directory as an :class:`~citerag.index.store.IndexStore` keeping :attr:`keep_versions`."""
        return IndexStore(self.index_dir, self.keep_versions)

    def config(self, embedder: ModelEmbedder) -> IndexConfig:
        """The :class:`IndexConfig` an index built with ``embedder`` and these settings records (a live version with
        another one is rebuilt by :func:`ensure_index`)."""
        return IndexConfig(
            embedding_model=embedder.name,
            embedding_dim=embedder.dim,
            max_seq_length=embedder.max_seq_length,
            target_tokens=self.chunk_tokens,
            overlap_tokens=self.chunk_overlap,
            bm25_k1=self.bm25_k1,
            bm25_b=self.bm25_b,
            bm25_method=self.bm25_method,
        )

    def chunker(self, embedder: ModelEmbedder) -> Chunker:
        """The chunker these settings ask for, sized in ``embedder``'s word pieces."""
        return Chunker(embedder.tokenizer, embedder.max_seq_length, self.chunk_tokens, self.chunk_overlap)

    def encoder(self, embedder: Embedder) -> AbstractContextManager[Embedder]:
        """``embedder`` behind the persistent embedding cache when there is one, for index builds: use as a context
        manager, which writes the cache on exit."""
        if self.embedding_cache is None:
            return nullcontext(embedder)
        return CachedEmbedder(embedder, self.embedding_cache, max_bytes=self.embedding_cache_bytes)


EMPTY_INDEX = "the index is empty: /search returns no results and /ask abstains until documents are indexed"


def index_notes(index: LoadedIndex) -> list[str]:
    """One line per thing an operator should know about ``index``: records skipped at ingest, an empty index."""
    notes = []
    state = SourceStates(index.path.parent.parent).of(index.path, records=False)
    skipped = state.get("skipped", {"records": 0, "first": []})
    if skipped["records"]:
        more = " …" if skipped["records"] > len(skipped["first"]) else ""
        notes.append(f"skipped {skipped['records']} records without text: {', '.join(skipped['first'])}{more}")
    if not index.documents:
        notes.append(EMPTY_INDEX)
    return notes


def read_sources(paths: list[Path], progress: Progress, later_wins: bool = False) -> Corpus:
    """:func:`~citerag.index.ingest.read_corpus` shown as a "reading" task of ``progress`` (files, then documents);
    ``later_wins`` as there."""
    files = source_files(paths)
    task = progress.add_task(f"reading {len(files)} file(s)", total=len(files), unit="files")
    corpus = read_corpus(paths, later_wins=later_wins)
    progress.update(task, completed=len(files), description=f"read {len(corpus.documents):,} documents")
    return corpus


def build(setup: IndexSetup, paths: list[Path], show_progress: bool = True) -> LoadedIndex:
    """Ingest ``paths`` and write a new live index version under ``setup.index_dir`` holding exactly their
    documents (:func:`rebuild_sources`, without its report; :func:`add_sources` keeps the live documents).

    Records without text are skipped and listed in the source state under ``skipped`` (see :func:`index_notes`);
    when no document is left, or ``paths`` is empty, the new version is an empty index, which is served as such.

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    return rebuild_sources(setup, paths, show_progress)[0]


def rebuild_sources(
    setup: IndexSetup, paths: list[Path], show_progress: bool = True
) -> tuple[LoadedIndex, WriteReport]:
    """Index exactly the documents of ``paths`` (what ``citerag index PATHS`` does) and report what changed against
    the live index: documents the files no longer hold are ``deleted``, unchanged ones keep their vectors (with other
    index settings, or no live index, every document is embedded and reported ``added``).

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    return _ingest(setup, paths, show_progress, add=False)


def add_sources(setup: IndexSetup, paths: list[Path], show_progress: bool = True) -> tuple[LoadedIndex, WriteReport]:
    """Add (or replace, by id) the documents of ``paths`` in the live index, embedding only new and changed
    passages; ``paths`` join the index's sources (what ``citerag index --add`` does). With no live index, the index
    is built from ``paths``.

    Returns:
        ``(index, report)``: the live index after the write, and what changed (a new index reports every document
        as added).

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    return _ingest(setup, paths, show_progress, add=True)


def _ingest(
    setup: IndexSetup, paths: list[Path], show_progress: bool, add: bool, logged_as: int | None = None
) -> tuple[LoadedIndex, WriteReport]:
    """:func:`rebuild_sources` (``add=False``) or :func:`add_sources` (``add=True``); ``logged_as``: a replayed
    reset."""
    store = setup.store()
    store.ensure_writable()
    with build_progress(show_progress) as progress:
        signatures = source_signatures(paths)
        corpus = read_sources(paths, progress)
        embedder = setup.load_embedder()
        config = setup.config(embedder)
        with setup.encoder(embedder) as encoder, store.writing():
            # the sources recorded are read and extended in the same write
            live = store.live_or_none()
            replace = not add or live is None
            records = records_by_source(paths, corpus)
            if not replace:
                state = SourceStates(store.root).of(live)
                # a source added again replaces its records and moves to the end (sources are re-read later-wins,
                # in this order); only the added sources' signatures are new: a pending edit of another source
                # stays pending
                records = {key: value for key, value in recorded_sources(state).items() if key not in records} | records
                paths = [Path(p) for p in state.get("sources", []) if p not in records] + [Path(p) for p in records]
                signatures = {**state.get("source_signatures", {}), **signatures}
            _, report = write_index(
                store, encoder, setup.chunker(embedder), config, corpus.documents, replace=replace,
                sources=source_state(paths, records, corpus.skipped, signatures),
                reset_sources=[str(p.resolve()) for p in paths],
                options=WriteOptions(dense_kind=setup.dense_index, progress=progress, logged_as=logged_as),
            )
    index = store.load()
    for note in index_notes(index):
        log.info("%s (%s)", note, index.path)
    return index, report


def ensure_index(setup: IndexSetup, show_progress: bool = True) -> LoadedIndex:
    """The live index, recovered, built when missing and brought up to date with its sources.

    Recovery first (:func:`recover_index`): a version that fails verification is moved aside, never served; the
    newest verified one plus the write log's acknowledged writes is what is served.

    The sources are those recorded in the live version's source state (:mod:`citerag.index.sources`: what
    ``citerag index PATHS`` and ``citerag index --add PATHS`` built it from), or ``setup.corpus`` on first run.
    When their files' sizes and modification times are as recorded, the index is served as it is (no file is read).
    Otherwise the sources are re-read (later-added sources winning) under the index's write lock, and what changed
    in them is applied (:func:`~citerag.index.sources.source_changes`); when nothing did, only the recorded signatures
    are refreshed. A change of index settings rebuilds the live documents with those changes (documents added,
    replaced or deleted through the API stay so). Sources that no longer exist leave the index as it is (logged).

    Raises:
        IndexUnrecoverable: acknowledged writes cannot all be restored (the message says how to recover).
    """
    store = setup.store()
    states = SourceStates(store.root)
    embedder = setup.load_embedder()
    wanted_config = setup.config(embedder)
    with store.writing():  # recovered, or found empty and built, with no `citerag index` in between
        index = recover_index(setup, show_progress)
        if index is None:
            return build(setup, list(setup.corpus), show_progress=show_progress)
    state = states.of(index.path, records=False)  # no record table is read while the sources are unchanged
    paths = [Path(p) for p in state.get("sources", setup.corpus)]
    if index.config == wanted_config and sources_unchanged(state, paths):
        return index
    with store.writing():  # the live version, the sources and the records are read and replaced in one step
        if store.current() != index.path:  # another writer committed meanwhile
            index = store.load()
        state = states.of(index.path)
        paths = [Path(p) for p in state.get("sources", setup.corpus)]
        try:
            signatures = source_signatures(paths)  # before the read (see source_signatures)
            with build_progress(show_progress) as progress:
                corpus = read_sources(paths, progress, later_wins=True)
        except IngestError as exc:  # a source gone, emptied or unreadable: keep serving what was indexed
            log.warning("the index's sources cannot be read (%s); serving the index as it is, not following them", exc)
            if index.config == wanted_config:
                return index
            upserts: list[Document] = []  # the sources stay recorded as they were, followed again once readable
            deletes: list[str] = []
        else:
            records = records_by_source(paths, corpus)
            upserts, deletes = source_changes(state, index.documents, paths, corpus, records)
            state = source_state(paths, records, corpus.skipped, signatures)
        # what the files record needs no log entry: a lost version's changes are found in the files again
        options = WriteOptions(dense_kind=setup.dense_index, log_write=False)
        with build_progress(show_progress) as progress, setup.encoder(embedder) as encoder:
            options = dataclasses.replace(options, progress=progress)
            chunker = setup.chunker(embedder)
            if index.config != wanted_config:
                log.info("index settings changed since the index was built; rebuilding (%d source records new or "
                         "changed, %d gone)", len(upserts), len(deletes))
                documents = {doc_id: doc for doc_id, doc in index.documents.items() if doc_id not in deletes}
                documents.update((doc.doc_id, doc) for doc in upserts)  # the API's documents and edits are kept
                write_index(store, encoder, chunker, wanted_config, list(documents.values()), replace=True,
                            sources=state, options=options)
            else:
                log.info("sources changed since the index was built: %d records new or changed, %d gone",
                         len(upserts), len(deletes))
                write_index(store, encoder, chunker, wanted_config, upserts, deletes, sources=state, options=options)
    return store.load()


def recover_index(setup: IndexSetup, show_progress: bool = True, verify: Verify = "stat") -> LoadedIndex | None:
    """Serve-safe start: remove the temporary version directories of writes killed mid-version (unless a writer
    holds the lock: :meth:`~citerag.index.store.IndexStore.remove_temporaries`); under the write lock, move versions
    that fail verification aside, make the newest verified one live and replay the write log's entries it does not
    hold (:mod:`citerag.index.recovery`): each write step through :func:`~citerag.index.build.write_index`, a full
    build from its recorded sources (never ``setup.corpus``) through :func:`rebuild_sources`. Returns the live
    index, or ``None`` when nothing was ever indexed. ``verify``: how versions' files are checked
    (:data:`citerag.index.store.Verify`).

    Raises:
        IndexUnrecoverable: as :func:`citerag.index.recovery.recover`.
    """
    store = setup.store()
    store.remove_temporaries()  # version directories of writes killed mid-version (none while a writer runs)
    if not store.version_dirs() and not store.log.path.is_file() and not (store.root / "CURRENT").is_file():
        return None  # nothing was ever indexed here
    with store.writing():
        recovery = recover(store, verify=verify)
        if not recovery.steps:
            return recovery.index
        log.warning("replaying %d step(s) of the write log on %s (%s moved aside)",
                    len(recovery.steps), recovery.index.path.name if recovery.index else "no verified version",
                    ", ".join(name for name, _ in recovery.damaged) or "no version")
        embedder = setup.load_embedder()

        def rebuild(sources: list[str], seq: int) -> None:
            _ingest(setup, [Path(p) for p in sources], show_progress, add=False, logged_as=seq)

        with setup.encoder(embedder) as encoder:
            return replay(store, recovery, encoder, setup.chunker(embedder), rebuild, setup.dense_index)


def recover_damaged(setup: IndexSetup, damaged: Path, reason: str) -> LoadedIndex:
    """After the live version ``damaged`` failed its full check while served: move it aside (``reason`` in its
    ``REASON.txt``) and recover as a start does, every remaining version hashed in full.

    Raises:
        IndexUnrecoverable: as :func:`citerag.index.recovery.recover`, or no verified version and no log remain.
    """
    store = setup.store()
    with store.writing():
        if damaged.is_dir():
            store.quarantine(damaged, reason)
        index = recover_index(setup, show_progress=False, verify="full")
    if index is None:
        raise IndexUnrecoverable(f"{damaged.name} was damaged and nothing else is left to recover from: run "
                                 "`citerag index PATHS` to rebuild")
    return index


def fill_when_empty(backend: SearchBackend, corpus: Sequence[Path], show_progress: bool = True) -> None:
    """The first run of a backend that keeps no source state of its own (Milvus): when it holds no document, the
    documents of ``corpus`` are written to it.

    Raises:
        IngestError: a corpus file is bad (nothing is written).
    """
    if backend.stats()["documents"] == 0:
        documents = read_corpus(corpus).documents
        log.info("%s backend is empty: ingesting %d documents from %s", backend.name, len(documents), list(corpus))
        backend.write(documents, show_progress=show_progress)
