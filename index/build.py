"""Write index versions: a full build, or an incremental update that re-embeds only new and changed passages.

Both end the same way (:func:`write_version`): BM25 over every passage's model text, FAISS over every passage's
vector, committed atomically by :class:`~citerag.index.store.IndexStore`. An update reuses the live version's vectors for
the passages it keeps, so adding 100 abstracts to the 23k index embeds ~430 passages, not ~61,000. The BM25 side is
rebuilt from the kept and new passages' tokens (bm25s builds 60k passages in ~3 s), so it never loses documents of
an earlier batch; the kept passages' tokens are read back from the live version (:class:`~citerag.index.bm25.CorpusTokens`)
rather than tokenised again. An update that only adds passages copies the live FAISS index and inserts the new
vectors (HNSW: into the copied graph); one that removes passages builds FAISS again from the kept vectors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from rich.progress import Progress

from citerag.index.bm25 import BM25Index, CorpusTokens
from citerag.index.chunking import Chunker, model_text
from citerag.index.dense import AUTO_HNSW_THRESHOLD, DenseIndex, choose_kind
from citerag.index.diskspace import disk_space
from citerag.index.embed import Embedder
from citerag.index.progress import build_progress
from citerag.index.sources import LEGACY_KEYS, SourceState, SourceStates
from citerag.index.store import IndexConfig, IndexStore, LoadedIndex, load_version
from citerag.index.tables import DocumentTable, PassageTable
from citerag.index.tokenize import tokenize_many
from citerag.index.types import DenseSetting, Document, Passage
from citerag.index.writes import WritePlan, WriteReport, classify, vectors_for

log = logging.getLogger(__name__)

#: Passages per ``Embedder.encode`` call during a build: the progress bar moves (and an embedding cache looks up) at
#: this step; large enough that the per-call overhead is negligible.
EMBED_STEP = 256


def chunk_documents(documents: list[Document], chunker: Chunker, progress: Progress | None = None) -> list[Passage]:
    """All passages of ``documents``, in document order; documents with no text yield none (and are logged).

    ``progress``, when given, gets a "chunking" task counting documents."""
    task = progress.add_task("chunking", total=len(documents), unit="documents") if progress is not None else None
    passages: list[Passage] = []
    for doc in documents:
        chunks = chunker.chunk(doc)
        if not chunks:
            log.warning("document %s has no text; skipped", doc.doc_id)
        passages.extend(chunks)
        if progress is not None and task is not None:
            progress.advance(task)
    return passages


def embed_passages(
    embedder: Embedder, texts: Sequence[str], lengths: Sequence[int], progress: Progress | None = None
) -> np.ndarray:
    """Embed ``texts`` longest first, :data:`EMBED_STEP` at a time, so each call gets texts of similar length (little
    padding) and ``progress`` (when given) gets an "embedding" task with passages/s and ETA.

    Args:
        lengths: the length of each text (e.g. ``Passage.n_tokens``), used only for the order.

    Returns:
        float32, shape ``(len(texts), embedder.dim)``, L2-normalised rows, in the order of ``texts``.
    """
    vectors = np.zeros((len(texts), embedder.dim), dtype=np.float32)
    order = np.argsort(-np.asarray(lengths, dtype=np.int64), kind="stable")
    task = progress.add_task("embedding", total=len(texts), unit="passages") if progress is not None else None
    for start in range(0, len(texts), EMBED_STEP):
        rows = order[start : start + EMBED_STEP]
        vectors[rows] = embedder.encode([texts[i] for i in rows])
        if progress is not None and task is not None:
            progress.advance(task, len(rows))
    return vectors


def passage_texts(passages: Sequence[Passage], documents: Mapping[str, Document]) -> list[str]:
    """The model text (title prefix + folded text) of each passage: what is embedded and BM25-tokenised.

    A (text, title) pair seen before reuses its model text (equal pairs give the same string object), so a repeated
    passage is folded once."""
    memo: dict[tuple[str, str], str] = {}
    out = []
    for p in passages:
        key = (p.text, documents[p.doc_id].title)
        text = memo.get(key)
        if text is None:
            text = memo[key] = model_text(*key)
        out.append(text)
    return out


def write_version(
    store: IndexStore,
    config: IndexConfig,
    documents: list[Document] | DocumentTable,
    passages: list[Passage] | PassageTable,
    vectors: np.ndarray,
    extra_manifest: dict[str, object] | None = None,
    dense_kind: DenseSetting = "auto",
    hnsw_threshold: int = AUTO_HNSW_THRESHOLD,
    tokens: CorpusTokens | None = None,
    dense: DenseIndex | None = None,
    before_current: Callable[[], None] | None = None,
    sources: SourceState | None = None,
) -> Path:
    """Index ``passages`` (BM25 + FAISS, row i == passage i == ``vectors[i]``) and commit a new live version
    (``before_current``, ``sources``: as for :meth:`~citerag.index.store.IndexStore.write`).

    Args:
        vectors: float32, shape ``(len(passages), dim)``, L2-normalised (unused when ``dense`` is given).
        dense_kind: ``"auto"``, ``"flat"``, ``"hnsw"`` or ``"ivf-sq8"`` (see :func:`citerag.index.dense.choose_kind`).
        tokens: the passages' BM25 tokens when already known (an update keeps those of unchanged passages);
            else every passage is tokenised.
        dense: a FAISS index already holding these passages' vectors in row order (an update that only adds).

    Returns:
        The new version directory.
    """
    bm25 = BM25Index(k1=config.bm25_k1, b=config.bm25_b, method=config.bm25_method)
    if tokens is None:
        by_id = documents if isinstance(documents, DocumentTable) else {doc.doc_id: doc for doc in documents}
        tokens = CorpusTokens.from_texts(passage_texts(passages, by_id))
    bm25.build(tokens)
    if dense is None:
        dense = DenseIndex(config.embedding_dim, choose_kind(len(passages), dense_kind, hnsw_threshold))
        dense.add(vectors)
    with_text = set(passages.doc_ids()) if isinstance(passages, PassageTable) else {p.doc_id for p in passages}
    kept: list[Document] | DocumentTable
    if isinstance(documents, DocumentTable):  # documents without a passage are dropped as Arrow rows
        kept = documents if len(with_text) == len(documents) else DocumentTable.assemble(
            [documents.take(documents.rows_without(set(documents) - with_text))])
    else:
        kept = [doc for doc in documents if doc.doc_id in with_text]
    return store.write(config, kept, passages, bm25, dense, extra=extra_manifest, before_current=before_current,
                       sources=sources)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """How :func:`write_index` logs, shows and lays out one write.

    Attributes:
        dense_kind: FAISS layout of the new version (:func:`citerag.index.dense.choose_kind`).
        show_progress: draw progress bars for chunking and embedding (on a terminal only).
        progress: draw them in this running ``Progress`` instead (e.g. the caller's, which also shows reading).
        log_write: append the write to the write-ahead log (:mod:`citerag.index.wal`). ``False``: the new version holds
            what the live one holds in the log (a change the source files record, a rebuild with new settings).
        logged_as: the write is log entry ``logged_as`` already (a replay): record it, append nothing.
    """

    dense_kind: DenseSetting = "auto"
    show_progress: bool = False
    progress: Progress | None = None
    log_write: bool = True
    logged_as: int | None = None

    def bars(self) -> AbstractContextManager[Progress]:
        """The progress display to draw in: :attr:`progress` when given (left running), else a new one."""
        return nullcontext(self.progress) if self.progress is not None else build_progress(self.show_progress)


def write_index(
    store: IndexStore,
    embedder: Embedder,
    chunker: Chunker,
    config: IndexConfig,
    upserts: Iterable[Document] = (),
    deletes: Iterable[str] = (),
    *,
    replace: bool = False,
    sources: SourceState | None = None,
    reset_sources: Sequence[str] | None = None,
    options: WriteOptions = WriteOptions(),
) -> tuple[Path, WriteReport]:
    """The one write of the embedded index: every full build, ``--add``, start-up sync with the source files,
    API write and log replay is this call. Upserts ``upserts`` and removes ``deletes`` (ids) as one new live
    version, committed under the store's write lock (:meth:`~citerag.index.store.IndexStore.writing`), so a concurrent
    writer, in this process or another, waits and then builds on this one.

    What changes is decided by :func:`citerag.index.writes.classify`, as for every backend. Passages of untouched
    documents keep their BM25 tokens and vectors, and so do a replaced document's passages whose text did not
    change; only the other passages are embedded. When no version is live, or ``replace`` asks for an index of
    other settings than the live one's, every passage is embedded (a full build; the report lists every document
    as added).

    Durability: the write is appended to the write-ahead log (fsynced) before anything is embedded, and the new
    version records its sequence number (``wal_seq``); a failure after the append logs an ``abort``. A ``replace``
    is logged as a ``reset`` naming ``reset_sources`` once its version is complete, just before ``CURRENT`` moves,
    so a build killed midway leaves the previous index live and the log as it was.

    Args:
        replace: the index is to hold exactly ``upserts`` (every live document not among them is deleted;
            ``deletes`` must be empty).
        sources: the new version's source state (:mod:`citerag.index.sources`); ``None`` keeps the live version's.
        reset_sources: the files a logged ``replace`` was read from (required for it).
        options: logging, progress and FAISS layout (:class:`WriteOptions`).

    Returns:
        ``(version directory, report)``; when nothing changes no version is written (the source state, if given,
        is recorded for the live version) and the live one is returned.

    A write refused for space anywhere (the log, a file of the version, ``CURRENT``) raises
    :class:`~citerag.index.diskspace.DiskFull`: nothing of it stays (the version's temporary directory is removed,
    its log entry withdrawn), the live version is unchanged and the condition is recorded
    (:data:`~citerag.index.diskspace.WATCH`) until a write succeeds.

    Raises:
        DiskFull: no space left (or the disk quota used up) on the index's file system; nothing is written.
        DocumentNotFound: a deleted id is not indexed (nothing is written).
        IngestError: a malformed document (:func:`citerag.index.writes.classify`; nothing is written, nothing logged).
        IndexMismatch: the live version fails verification.
        ValueError: an update (not ``replace``) of an index built with other settings; a logged ``replace``
            without ``reset_sources``, or with ``deletes``.
    """
    upserts, deletes = list(upserts), list(deletes)
    if replace and deletes:
        raise ValueError("replace gives the whole new content: pass no deletes")
    if replace and options.log_write and options.logged_as is None and reset_sources is None:
        raise ValueError("a logged replace is a reset of source files: pass reset_sources")
    with disk_space("index", store.root), store.writing():
        # a replacement needs no live version: it also rebuilds when CURRENT names one that was set aside
        pointer = store.live_or_none() if replace else store.current()
        live: LoadedIndex | None = load_version(pointer) if pointer is not None else None
        if replace and (live is None or live.config != config):
            return _full_build(store, embedder, chunker, config, upserts, live, sources, reset_sources, options)
        if live is not None and live.config != config:
            raise ValueError("index settings changed since the live index was built; run a full `citerag index`")
        if replace and live is not None:
            wanted = {doc.doc_id for doc in upserts}
            deletes = [doc_id for doc_id in live.documents if doc_id not in wanted]
        plan = classify(upserts, live.documents if live is not None else {}, deletes, chunk=chunker.chunk)
        # a replayed entry that changes nothing still gets a version recording it, or every start would replay it
        replayed = options.logged_as is not None and live is not None and options.logged_as > live.wal_seq
        if live is not None and plan.writes_nothing and not replayed:
            if sources is not None:
                SourceStates(store.root).put(live.path, sources)
            return live.path, plan.report(0, live.path.name)
        entry: dict[str, list] | None = None if replace else {
            "documents": [*plan.changed.values(), *plan.updated.values()], "doc_ids": plan.deleted}
        return _logged(
            store, live, options, reset_sources, entry,
            lambda seq, before_current: _apply(store, embedder, config, live, plan, sources, options, seq,
                                               before_current),
        )


def build_index(
    documents: list[Document],
    store: IndexStore,
    embedder: Embedder,
    chunker: Chunker,
    config: IndexConfig,
    show_progress: bool = True,
    sources: SourceState | None = None,
    dense_kind: DenseSetting = "auto",
    progress: Progress | None = None,
) -> Path:
    """:func:`write_index` of exactly ``documents``, not logged (for code and tests that build an index from
    documents, not from files). Returns the new version directory."""
    options = WriteOptions(dense_kind=dense_kind, show_progress=show_progress, progress=progress, log_write=False)
    return write_index(store, embedder, chunker, config, documents, replace=True, sources=sources, options=options)[0]


def _logged(
    store: IndexStore,
    live: LoadedIndex | None,
    options: WriteOptions,
    reset_sources: Sequence[str] | None,
    entry: dict[str, list] | None,
    commit: Callable[[int, Callable[[], None] | None], tuple[Path, WriteReport]],
) -> tuple[Path, WriteReport]:
    """Run ``commit(seq, before_current)`` under the log entry the write needs: the replayed entry
    (``options.logged_as``), none (``options.log_write`` off: the live version's number), a ``write`` entry of
    ``entry`` (its documents and deleted ids, appended before anything is embedded), or, for ``entry=None``, a
    ``reset`` of ``reset_sources`` appended just before ``CURRENT`` moves."""
    held = live.wal_seq if live is not None else 0
    if options.logged_as is not None or not options.log_write:
        return commit(held if options.logged_as is None else options.logged_as, None)
    if entry is None:
        with _logged_reset(store, held, reset_sources or []) as (seq, log_reset):
            return commit(seq, log_reset)
    with store.log.pending("write", after=held, **entry) as seq:
        return commit(seq, None)


@contextmanager
def _logged_reset(store: IndexStore, held: int, reset_sources: Sequence[str]) -> Iterator[tuple[int, Callable[[], None]]]:
    """The log entry number of a full replacement and the hook that appends its ``reset`` (run just before
    ``CURRENT`` moves); the entry is withdrawn (an ``abort`` appended, or on a full disk the entry cut off) when the
    commit fails after the hook ran."""
    store.log.drop_abandoned(held)
    seq = max(store.log.read().last, held) + 1
    logged = False

    def log_reset() -> None:
        nonlocal logged
        store.log.append("reset", after=seq - 1, sources=list(reset_sources))
        logged = True

    try:
        yield seq, log_reset
    except BaseException:
        if logged:
            store.log.withdraw(seq)
        raise


def _full_build(
    store: IndexStore,
    embedder: Embedder,
    chunker: Chunker,
    config: IndexConfig,
    documents: list[Document],
    live: LoadedIndex | None,
    sources: SourceState | None,
    reset_sources: Sequence[str] | None,
    options: WriteOptions,
) -> tuple[Path, WriteReport]:
    """Chunk, tokenise, embed and index every document (the part of :func:`write_index` for a new index or new
    settings); called under the write lock."""
    with options.bars() as bars:
        task = bars.add_task("chunking", total=len(documents), unit="documents")

        def chunk(doc: Document) -> list[Passage]:
            bars.advance(task)
            return chunker.chunk(doc)

        plan = classify(documents, {}, chunk=chunk)
        passages = plan.new_passages
        log.info("embedding %d passages of %d documents with %s", len(passages), len(plan.changed), embedder.name)
        vectors = embed_passages(embedder, passage_texts(passages, plan.changed), [p.n_tokens for p in passages], bars)
    documents = list(plan.changed.values())

    def commit(seq: int, before_current: Callable[[], None] | None) -> tuple[Path, WriteReport]:
        path = write_version(store, config, documents, passages, vectors, {"wal_seq": seq}, options.dense_kind,
                             before_current=before_current, sources=sources)
        return path, plan.report(len(passages), path.name)

    return _logged(store, live, options, reset_sources, None, commit)


def _apply(
    store: IndexStore,
    embedder: Embedder,
    config: IndexConfig,
    live: LoadedIndex | None,
    plan: WritePlan,
    sources: SourceState | None,
    options: WriteOptions,
    seq: int,
    before_current: Callable[[], None] | None = None,
) -> tuple[Path, WriteReport]:
    """Embed what changed and commit the new version (the incremental part of :func:`write_index`)."""
    dense_kind = options.dense_kind

    old_docs = live.documents if live is not None else {}
    gone = set(plan.deleted) | set(plan.changed)
    kept_rows = (np.setdiff1d(np.arange(len(live.passages)), live.rows_of(gone), assume_unique=True)
                 if live is not None else np.zeros(0, dtype=np.int64))
    documents: list[Document] | DocumentTable
    if live is not None and not plan.updated:  # the kept documents stay Arrow rows (no Document objects)
        documents = DocumentTable.assemble([live.documents.take(live.documents.rows_without(gone)),
                                            list(plan.changed.values())])
    else:  # a metadata update rewrites its document in place
        documents = [plan.updated.get(doc_id, doc) for doc_id, doc in old_docs.items() if doc_id not in gone]
        documents += plan.changed.values()
    new_passages = plan.new_passages
    new_texts = passage_texts(new_passages, plan.changed)
    length = dict(zip(new_texts, (p.n_tokens for p in new_passages), strict=True))
    with options.bars() as bars:
        new_vectors, embedded = vectors_for(
            new_texts, _stored_vectors(live, [doc_id for doc_id in plan.changed if doc_id in old_docs]),
            lambda missing: embed_passages(embedder, missing, [length[t] for t in missing], bars), embedder.dim,
        )
    passages: list[Passage] | PassageTable = new_passages
    if live is not None:  # the kept rows stay Arrow rows (no Passage objects); doc rows are renumbered on write
        passages = PassageTable.assemble([live.passages.take(kept_rows), new_passages],
                                         _doc_rows(documents))
    # Unchanged passages keep their BM25 tokens and vectors; when the FAISS kind stays, the live index is copied
    # (DenseIndex.extended: kept rows, then the new vectors) instead of indexing every vector again: HNSW keeps its
    # graph when nothing was removed, ivf-sq8 copies the kept rows' codes (no re-encoding, no k-means).
    tokens = dense = None
    vectors = new_vectors
    if live is not None:
        if live.bm25.tokens is not None:
            tokens = live.bm25.tokens.select(kept_rows).extend(tokenize_many(new_texts))
        if live.dense.kind == choose_kind(len(passages), dense_kind):
            keep = None if len(kept_rows) == len(live.passages) else kept_rows
            dense = live.dense.extended(new_vectors, keep)
        else:
            vectors = np.concatenate([live.dense.vectors(kept_rows), new_vectors])
    extra = {key: value for key, value in (live.manifest if live else {}).items() if key not in _MANIFEST_KEYS}
    extra["wal_seq"] = seq
    path = write_version(store, config, documents, passages, vectors, extra, dense_kind, tokens=tokens, dense=dense,
                         before_current=before_current, sources=sources)
    report = plan.report(embedded, path.name)
    log.info(
        "index updated: %d added, %d replaced, %d metadata updated, %d deleted, %d passages embedded",
        len(report.added), len(report.replaced), len(report.updated), len(report.deleted), report.passages_embedded,
    )
    return path, report


def _doc_rows(documents: list[Document] | DocumentTable) -> Mapping[str, int]:
    """``doc_id -> row`` of the new version's documents."""
    return documents.rows if isinstance(documents, DocumentTable) else {d.doc_id: i for i, d in enumerate(documents)}


def _stored_vectors(live: LoadedIndex | None, doc_ids: list[str]) -> dict[str, np.ndarray]:
    """The live vectors of the passages of ``doc_ids`` (documents being re-chunked), by the text they embed."""
    if live is None or not doc_ids:
        return {}
    rows = live.rows_of(doc_ids)
    vectors = live.dense.vectors(rows)
    texts = passage_texts([live.passages[int(row)] for row in rows], live.documents)
    return dict(zip(texts, vectors, strict=True))


# Keys IndexStore.write computes itself, and the source keys of an index older than its sources.json (read from
# there as a fallback, never carried on); everything else in a manifest is carried over by an update.
_MANIFEST_KEYS = frozenset(
    {"format_version", "created_at", "config", "corpus_fingerprint", "counts", "checksums", "libraries"}
) | LEGACY_KEYS
