"""Top-k selection: exact (-score, row) order, ties broken by the lower row at the k-th place too, so a top-k is the
head of any deeper top-k -- which lets a single-retriever search ask its retriever for only k rows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from citerag.index.bm25 import top_k_hits
from citerag.index.build import build_index
from citerag.index.chunking import Chunker
from citerag.index.ingest import load_documents
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexConfig, IndexStore
from tests.conftest import SEEDS, HashEmbedder

SCORES = st.lists(st.sampled_from([0.0, 0.5, 1.0, 2.5, -1.0, -math.inf]), max_size=60)


class TestTopKHits:
    def test_ties_at_the_boundary_go_to_the_lower_rows(self) -> None:
        scores = np.array([1.0, 0.0, 3.0, 1.0, 1.0, 3.0], dtype=np.float32)
        hits = top_k_hits(scores, 3, positive_only=True)
        assert [(h.row, h.score) for h in hits] == [(2, 3.0), (5, 3.0), (0, 1.0)]

    def test_positive_only_drops_unmatched_rows_and_finite_keeps_negative_ones(self) -> None:
        scores = np.array([0.0, -1.0, 2.0, -np.inf], dtype=np.float32)
        assert [h.row for h in top_k_hits(scores, 4, positive_only=True)] == [2]
        assert [h.row for h in top_k_hits(scores, 4)] == [2, 0, 1]

    def test_empty_input_and_k_zero(self) -> None:
        assert top_k_hits(np.zeros(0, dtype=np.float32), 5) == []
        assert top_k_hits(np.ones(3, dtype=np.float32), 0) == []

    @given(SCORES, st.integers(1, 70), st.booleans())
    def test_equals_the_head_of_a_full_sort(self, values: list[float], k: int, positive_only: bool) -> None:
        keep = (lambda v: v > 0) if positive_only else math.isfinite
        expected = sorted((-v, row) for row, v in enumerate(values) if keep(v))[:k]
        hits = top_k_hits(np.asarray(values, dtype=np.float32), k, positive_only)
        assert [(h.row, h.score) for h in hits] == [(row, -neg) for neg, row in expected]


@pytest.fixture()
def retriever(tokenizer, tmp_path: Path) -> Retriever:
    embedder = HashEmbedder()
    store = IndexStore(tmp_path / "idx")
    config = IndexConfig(embedder.name, embedder.dim, 256, 128, 64)
    build_index(load_documents([SEEDS]), store, embedder, Chunker(tokenizer, 256, 128, 64), config, show_progress=False)
    return Retriever(store.load(), embedder)


@pytest.mark.parametrize("mode", ["bm25", "dense", "hybrid"])
def test_a_top_k_is_the_head_of_a_deeper_search(retriever: Retriever, mode: str) -> None:
    query = "key-value cache compression with a head-level budget"
    deep = retriever.search(query, k=40, mode=mode)
    for k in (1, 3, 10):
        top = retriever.search(query, k=k, mode=mode)
        assert [(r.passage.chunk_id, r.score, r.bm25_rank, r.dense_rank) for r in top] == [
            (r.passage.chunk_id, r.score, r.bm25_rank, r.dense_rank) for r in deep[:k]
        ]
