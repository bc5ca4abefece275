"""Build a complete index version: chunk -> BM25 tokens -> embeddings -> BM25 + FAISS -> atomic commit."""

from __future__ import annotations

import logging
from pathlib import Path

from index.bm25 import BM25Index
from index.chunking import Chunker, model_text
from index.dense import DenseIndex
from index.embed import Embedder
from index.store import IndexConfig, IndexStore
from index.tokenize import tokenize_many
from index.types import Document, Passage

log = logging.getLogger(__name__)


def chunk_documents(documents: list[Document], chunker: Chunker) -> list[Passage]:
    """All passages of ``documents``, in document order; documents with no text yield none (and are logged)."""
    passages: list[Passage] = []
    for doc in documents:
        chunks = chunker.chunk(doc)
        if not chunks:
            log.warning("document %s has no text; skipped", doc.doc_id)
        passages.extend(chunks)
    return passages


def build_index(
    documents: list[Document],
    store: IndexStore,
    embedder: Embedder,
    chunker: Chunker,
    config: IndexConfig,
    show_progress: bool = True,
    extra_manifest: dict[str, object] | None = None,
) -> Path:
    """Chunk, tokenise, embed and index ``documents``; commit them as the store's new live version.

    The previous version stays live until the new one is completely written (see :class:`IndexStore`).

    Returns:
        The new version directory.
    """
    passages = chunk_documents(documents, chunker)
    titles = {doc.doc_id: doc.title for doc in documents}
    texts = [model_text(p.text, titles[p.doc_id]) for p in passages]
    bm25 = BM25Index(k1=config.bm25_k1, b=config.bm25_b, method=config.bm25_method)
    bm25.build(tokenize_many(texts))
    log.info("embedding %d passages of %d documents with %s", len(passages), len(documents), embedder.name)
    vectors = embedder.encode(texts, show_progress=show_progress)
    dense = DenseIndex(config.embedding_dim)
    dense.add(vectors)
    with_text = {p.doc_id for p in passages}
    kept = [doc for doc in documents if doc.doc_id in with_text]
    return store.write(config, kept, passages, bm25, dense, extra=extra_manifest)
