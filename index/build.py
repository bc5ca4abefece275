"""Write index versions: a full build, or an incremental update that re-embeds only new and changed passages.

Both end the same way (:func:`write_version`): BM25 over every passage's model text, FAISS over every passage's
vector, committed atomically by :class:`~index.store.IndexStore`. An update reuses the live version's vectors for
the passages it keeps, so adding 100 abstracts to the 23k index embeds ~430 passages, not ~61,000. The BM25 side is
rebuilt from the kept and new passages' tokens (bm25s builds 60k passages in ~3 s), so it never loses documents of
an earlier batch; the kept passages' tokens are read back from the live version (:class:`~index.bm25.CorpusTokens`)
rather than tokenised again. An update that only adds passages copies the live FAISS index and inserts the new
vectors (HNSW: into the copied graph); one that removes passages builds FAISS again from the kept vectors.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from pathlib import Path

import numpy as np
from rich.progress import Progress

from index.bm25 import BM25Index, CorpusTokens
from index.chunking import Chunker, model_text
from index.dense import AUTO_HNSW_THRESHOLD, DenseIndex, choose_kind
from index.embed import Embedder
from index.progress import build_progress
from index.store import IndexConfig, IndexStore, LoadedIndex, wal_seq
from index.tokenize import tokenize_many
from index.types import DenseSetting, Document, Passage
from index.writes import WritePlan, WriteReport, classify, vectors_for

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


def passage_texts(passages: Sequence[Passage], documents: dict[str, Document]) -> list[str]:
    """The model text (title prefix + folded text) of each passage: what is embedded and BM25-tokenised."""
    return [model_text(p.text, documents[p.doc_id].title) for p in passages]


def write_version(
    store: IndexStore,
    config: IndexConfig,
    documents: list[Document],
    passages: list[Passage],
    vectors: np.ndarray,
    extra_manifest: dict[str, object] | None = None,
    dense_kind: DenseSetting = "auto",
    hnsw_threshold: int = AUTO_HNSW_THRESHOLD,
    tokens: CorpusTokens | None = None,
    dense: DenseIndex | None = None,
    before_current: Callable[[], None] | None = None,
) -> Path:
    """Index ``passages`` (BM25 + FAISS, row i == passage i == ``vectors[i]``) and commit a new live version
    (``before_current``: as for :meth:`~index.store.IndexStore.write`).

    Args:
        vectors: float32, shape ``(len(passages), dim)``, L2-normalised (unused when ``dense`` is given).
        dense_kind: ``"auto"``, ``"flat"`` or ``"hnsw"`` (see :func:`index.dense.choose_kind`).
        tokens: the passages' BM25 tokens when already known (an update keeps those of unchanged passages);
            else every passage is tokenised.
        dense: a FAISS index already holding these passages' vectors in row order (an update that only adds).

    Returns:
        The new version directory.
    """
    by_id = {doc.doc_id: doc for doc in documents}
    bm25 = BM25Index(k1=config.bm25_k1, b=config.bm25_b, method=config.bm25_method)
    bm25.build(tokens if tokens is not None else tokenize_many(passage_texts(passages, by_id)))
    if dense is None:
        dense = DenseIndex(config.embedding_dim, choose_kind(len(passages), dense_kind, hnsw_threshold))
        dense.add(vectors)
    with_text = {p.doc_id for p in passages}
    kept = [doc for doc in documents if doc.doc_id in with_text]
    return store.write(config, kept, passages, bm25, dense, extra=extra_manifest, before_current=before_current)


def build_index(
    documents: list[Document],
    store: IndexStore,
    embedder: Embedder,
    chunker: Chunker,
    config: IndexConfig,
    show_progress: bool = True,
    extra_manifest: dict[str, object] | None = None,
    dense_kind: DenseSetting = "auto",
    progress: Progress | None = None,
    reset_sources: Sequence[str] | None = None,
    logged_as: int | None = None,
) -> Path:
    """Chunk, tokenise, embed and index ``documents``; commit them as the store's new live version.

    The previous version stays live until the new one is completely written (see :class:`IndexStore`).

    Args:
        show_progress: draw progress bars for chunking and embedding (on a terminal only).
        progress: draw them in this running ``Progress`` instead (e.g. the caller's, which also shows reading).
        reset_sources: the files ``documents`` were read from: a full build from them is appended to the write log
            (:mod:`index.wal`, a ``reset``) just before the commit, under the write lock, so the log orders it
            among the API's writes as the versions do.
        logged_as: this build is log entry ``logged_as`` already (a replay); record it, append nothing. With
            neither, the new version holds what ``extra_manifest["wal_seq"]`` says (a rebuild of the same documents).

    Returns:
        The new version directory.
    """
    with nullcontext(progress) if progress is not None else build_progress(show_progress) as bars:
        passages = chunk_documents(documents, chunker, bars)
        by_id = {doc.doc_id: doc for doc in documents}
        log.info("embedding %d passages of %d documents with %s", len(passages), len(documents), embedder.name)
        vectors = embed_passages(embedder, passage_texts(passages, by_id), [p.n_tokens for p in passages], bars)
    with store.writing():  # never commit in the middle of another writer's update (it would then overwrite this)
        extra = dict(extra_manifest or {})
        if logged_as is not None or reset_sources is None:
            if logged_as is not None:
                extra["wal_seq"] = logged_as
            return write_version(store, config, documents, passages, vectors, extra, dense_kind)
        # the reset is logged once the version is complete, just before CURRENT moves: a build killed midway
        # leaves no entry, so the next start serves the previous index rather than rebuilding
        live = store.current()
        held = wal_seq(live) if live is not None else 0
        store.log.drop_abandoned(held)
        seq = extra["wal_seq"] = max(store.log.read().last, held) + 1
        logged = False

        def log_reset() -> None:
            nonlocal logged
            store.log.append("reset", after=seq - 1, sources=reset_sources)
            logged = True

        try:
            return write_version(store, config, documents, passages, vectors, extra, dense_kind,
                                 before_current=log_reset)
        except BaseException:
            if logged:
                store.log.append("abort", target=seq)
            raise


def update_index(
    store: IndexStore,
    embedder: Embedder,
    chunker: Chunker,
    config: IndexConfig,
    upserts: Iterable[Document] = (),
    deletes: Iterable[str] = (),
    extra_manifest: dict[str, object] | None = None,
    show_progress: bool = False,
    dense_kind: DenseSetting = "auto",
    progress: Progress | None = None,
    log_write: bool = True,
    logged_as: int | None = None,
) -> tuple[Path, WriteReport]:
    """Insert or replace ``upserts`` and remove ``deletes`` (document ids), as one new live version.

    What the write does is decided by :func:`index.writes.classify`, as for every backend: new documents are added,
    a changed title or text replaces the document's passages, a metadata-only change keeps its passages and
    vectors, a document given again identical is left as it is, one with no text is skipped (a stored one with its
    id stays). Passages of untouched documents keep their vectors (read back from the live FAISS index), and so do
    a replaced document's passages whose embedded text did not change; only the other passages of new and changed
    documents are embedded. When nothing is live yet this is a full build of ``upserts``.

    The live version is read and the new one committed under the store's write lock
    (:meth:`~index.store.IndexStore.writing`): a concurrent writer, in this process or another, waits, then builds on
    this update's version.

    Durability: the write is appended to the store's write-ahead log (:mod:`index.wal`, fsynced) before anything
    is embedded, and the new version records its sequence number (``wal_seq``), so once this returns the write
    survives the loss of the version that holds it (:mod:`index.recovery`). A failure after the append logs an
    ``abort`` for it.

    Args:
        extra_manifest: keys merged over the live manifest's extra keys (e.g. ``sources``).
        show_progress, progress: as for :func:`build_index` (bars for the new documents only).
        log_write: append the write to the log (``False`` for changes that the source files already record).
        logged_as: the write is log entry ``logged_as`` already (a replay): record it, append nothing.

    Returns:
        ``(version directory, report)``; when nothing changes no version is written and the live one is returned.

    Raises:
        DocumentNotFound: a deleted id is not indexed (nothing is written).
        IngestError: a malformed document (:func:`index.writes.classify`; nothing is written, nothing logged).
        IndexMismatch: the live version fails verification.
        ValueError: the live index was built with other settings (``config`` differs): rebuild instead.
    """
    with store.writing():
        return _update_locked(
            store, embedder, chunker, config, upserts, deletes, extra_manifest, show_progress, dense_kind, progress,
            log_write, logged_as,
        )


def _update_locked(
    store: IndexStore,
    embedder: Embedder,
    chunker: Chunker,
    config: IndexConfig,
    upserts: Iterable[Document],
    deletes: Iterable[str],
    extra_manifest: dict[str, object] | None,
    show_progress: bool,
    dense_kind: DenseSetting,
    progress: Progress | None,
    log_write: bool,
    logged_as: int | None,
) -> tuple[Path, WriteReport]:
    live: LoadedIndex | None = store.load() if store.current() is not None else None
    if live is not None and live.config != config:
        raise ValueError("index settings changed since the live index was built; run a full `citerag index`")
    plan = classify(upserts, live.documents if live is not None else {}, deletes, chunk=chunker.chunk)
    if live is not None and plan.writes_nothing:
        return live.path, plan.report(0, live.path.name)
    held = live.wal_seq if live is not None else 0
    args = (store, embedder, config, live, plan, extra_manifest, show_progress, dense_kind, progress)
    if logged_as is not None or not log_write:
        return _apply(*args, seq=held if logged_as is None else logged_as)
    logged = list(plan.changed.values()) + list(plan.updated.values())
    with store.log.pending("write", after=held, documents=logged, doc_ids=plan.deleted) as seq:
        return _apply(*args, seq=seq)


def _apply(
    store: IndexStore,
    embedder: Embedder,
    config: IndexConfig,
    live: LoadedIndex | None,
    plan: WritePlan,
    extra_manifest: dict[str, object] | None,
    show_progress: bool,
    dense_kind: DenseSetting,
    progress: Progress | None,
    seq: int,
) -> tuple[Path, WriteReport]:
    """Embed what changed and commit the new version (the second half of :func:`update_index`)."""

    old_docs = live.documents if live is not None else {}
    gone = set(plan.deleted) | set(plan.changed)
    kept_rows = [row for row, p in enumerate(live.passages) if p.doc_id not in gone] if live is not None else []
    documents = [plan.updated.get(doc_id, doc) for doc_id, doc in old_docs.items() if doc_id not in gone]
    documents += plan.changed.values()
    new_passages = plan.new_passages
    new_texts = passage_texts(new_passages, plan.changed)
    length = dict(zip(new_texts, (p.n_tokens for p in new_passages), strict=True))
    with nullcontext(progress) if progress is not None else build_progress(show_progress) as bars:
        new_vectors, embedded = vectors_for(
            new_texts, _stored_vectors(live, [doc_id for doc_id in plan.changed if doc_id in old_docs]),
            lambda missing: embed_passages(embedder, missing, [length[t] for t in missing], bars), embedder.dim,
        )
    passages = ([live.passages[row] for row in kept_rows] if live is not None else []) + new_passages
    # Unchanged passages keep their BM25 tokens and vectors; when nothing was removed, the live FAISS index (same
    # kind) is copied and the new vectors inserted instead of indexing every vector again.
    tokens = dense = None
    vectors = new_vectors
    if live is not None:
        if live.bm25.tokens is not None:
            tokens = live.bm25.tokens.select(kept_rows).extend(tokenize_many(new_texts))
        if len(kept_rows) == len(live.passages) and live.dense.kind == choose_kind(len(passages), dense_kind):
            dense = live.dense.extended(new_vectors)
        else:
            vectors = np.concatenate([live.dense.vectors(np.asarray(kept_rows, dtype=np.int64)), new_vectors])
    extra = {key: value for key, value in (live.manifest if live else {}).items() if key not in _MANIFEST_KEYS}
    extra.update(extra_manifest or {})
    extra["wal_seq"] = seq
    path = write_version(store, config, documents, passages, vectors, extra, dense_kind, tokens=tokens, dense=dense)
    report = plan.report(embedded, path.name)
    log.info(
        "index updated: %d added, %d replaced, %d metadata updated, %d deleted, %d passages embedded",
        len(report.added), len(report.replaced), len(report.updated), len(report.deleted), report.passages_embedded,
    )
    return path, report


def _stored_vectors(live: LoadedIndex | None, doc_ids: list[str]) -> dict[str, np.ndarray]:
    """The live vectors of the passages of ``doc_ids`` (documents being re-chunked), by the text they embed."""
    if live is None or not doc_ids:
        return {}
    wanted = set(doc_ids)
    rows = [row for row, p in enumerate(live.passages) if p.doc_id in wanted]
    vectors = live.dense.vectors(np.asarray(rows, dtype=np.int64))
    texts = passage_texts([live.passages[row] for row in rows], live.documents)
    return dict(zip(texts, vectors, strict=True))


# Keys IndexStore.write computes itself; everything else in a manifest is carried over by an update.
_MANIFEST_KEYS = frozenset(
    {"format_version", "created_at", "config", "corpus_fingerprint", "counts", "checksums", "libraries"}
)
