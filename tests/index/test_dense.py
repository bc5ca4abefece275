"""FAISS search threads: one OpenMP thread per query, set for the searching thread only and restored after."""

from __future__ import annotations

import threading

import faiss
import numpy as np

from citerag.index.dense import DenseIndex, omp_threads


def test_omp_threads_is_per_thread_and_restored() -> None:
    before = faiss.omp_get_max_threads()
    seen: dict[str, int] = {}

    def other() -> None:
        seen["other"] = faiss.omp_get_max_threads()

    with omp_threads(1):
        seen["inside"] = faiss.omp_get_max_threads()
        worker = threading.Thread(target=other)
        worker.start()
        worker.join()
    assert seen == {"inside": 1, "other": before}
    assert faiss.omp_get_max_threads() == before


def test_search_leaves_the_thread_count_and_finds_the_nearest_rows() -> None:
    rng = np.random.default_rng(0)
    vectors = rng.standard_normal((500, 16)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    before = faiss.omp_get_max_threads()
    for kind in ("flat", "hnsw"):
        index = DenseIndex(16, kind)
        index.add(vectors)
        hits = index.search(vectors[42], 3)
        assert hits[0].row == 42 and abs(hits[0].score - 1.0) < 1e-5
        assert [h.row for h in hits] == list(np.argsort(-(vectors @ vectors[42]))[:3])
    assert faiss.omp_get_max_threads() == before
