"""DenseIndex: one OpenMP thread per search (set for the searching thread only, restored after); the ivf-sq8 kind's
recall, filters, save/load, extended copies, retraining bound; mapped flat/HNSW files; choose_kind thresholds."""

from __future__ import annotations

import math
import threading

import faiss
import numpy as np
import pytest

from citerag.index.dense import (
    AUTO_HNSW_THRESHOLD,
    AUTO_IVF_THRESHOLD,
    IVF_NPROBE,
    DenseIndex,
    choose_kind,
    ivf_lists,
    omp_threads,
)


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


# --- ivf-sq8 ------------------------------------------------------------------------------------------------------


def _unit(rng: np.random.Generator, n: int, dim: int) -> np.ndarray:
    x = rng.standard_normal((n, dim)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    """20,000 unit vectors (32-d) in 200 seeded clusters (topics, as text embeddings form), and 100 queries near
    some of them."""
    rng = np.random.default_rng(7)
    centres = _unit(rng, 200, 32)
    x = centres[rng.integers(0, 200, 20_000)] + (0.5 / math.sqrt(32)) * rng.standard_normal((20_000, 32))
    x = (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)
    queries = x[:100] + 0.05 * rng.standard_normal((100, 32)).astype(np.float32)
    return x, queries / np.linalg.norm(queries, axis=1, keepdims=True)


@pytest.fixture(scope="module")
def ivf(data) -> DenseIndex:
    index = DenseIndex(32, "ivf-sq8")
    index.add(data[0])
    return index


def _recall(index: DenseIndex, x: np.ndarray, queries: np.ndarray, k: int = 10) -> float:
    exact = np.argsort(-(queries @ x.T), axis=1)[:, :k]
    return float(np.mean([len({h.row for h in index.search(q, k)} & set(e)) / k for q, e in zip(queries, exact)]))


def test_ivf_lists_follow_sqrt_n_and_leave_every_list_enough_training_points() -> None:
    assert ivf_lists(1_031_577) == 2031 and ivf_lists(200_000) == 894 and ivf_lists(20_000) == 283
    assert ivf_lists(5_000) == 5_000 // 39  # capped: every list keeps 39 training points
    assert ivf_lists(0) == ivf_lists(1) == ivf_lists(38) == 1 and ivf_lists(1_000) == 1_000 // 39
    for n in (39, 100, 1_000, 5_000, 10**7):
        assert 1 <= ivf_lists(n) <= max(1, n // 39)


def test_choose_kind_thresholds() -> None:
    assert choose_kind(AUTO_HNSW_THRESHOLD - 1) == "flat" and choose_kind(AUTO_HNSW_THRESHOLD) == "hnsw"
    assert choose_kind(AUTO_IVF_THRESHOLD - 1) == "hnsw" and choose_kind(AUTO_IVF_THRESHOLD) == "ivf-sq8"
    assert choose_kind(10, "ivf-sq8") == "ivf-sq8" and choose_kind(10**7, "hnsw") == "hnsw"
    assert choose_kind(100, threshold=10, ivf_threshold=50) == "ivf-sq8"
    with pytest.raises(ValueError, match="'ivf-sq8'"):
        choose_kind(10, "ivf")


def test_ivf_sq8_recall_against_exact_search(ivf, data) -> None:
    x, queries = data
    assert ivf.kind == "ivf-sq8" and ivf.size == 20_000 and ivf.nlist == 283
    assert ivf.describe() == f"ivf-sq8, nlist 283, nprobe {IVF_NPROBE}"
    assert _recall(ivf, x, queries) >= 0.95  # measured 0.98
    hits = ivf.search(x[42], 5)
    assert hits[0].row == 42 and abs(hits[0].score - 1.0) < 0.01  # 8-bit codes: scores within ~1e-3
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert len(ivf.search(x[0], 50_000)) <= 20_000


def test_ivf_sq8_filters_are_respected_and_a_narrow_filter_still_fills_k(ivf, data) -> None:
    x, queries = data
    rng = np.random.default_rng(1)
    for fraction in (0.5, 0.01):
        allowed = rng.random(len(x)) < fraction
        for q in queries[:20]:
            hits = ivf.search(q, 10, allowed)
            assert len(hits) == 10 and all(allowed[h.row] for h in hits)
            exact = np.flatnonzero(allowed)[np.argsort(-(x[allowed] @ q))[:10]]
            assert len({h.row for h in hits} & set(exact.tolist())) >= 7
    only = np.zeros(len(x), dtype=bool)
    only[[3, 17_000]] = True
    assert {h.row for h in ivf.search(queries[0], 10, only)} == {3, 17_000}
    assert ivf.search(queries[0], 10, np.zeros(len(x), dtype=bool)) == []


def test_ivf_sq8_save_load_round_trip_is_memory_mapped_and_read_only(ivf, data, tmp_path) -> None:
    x, queries = data
    ivf.save(tmp_path)
    loaded = DenseIndex.load(tmp_path)
    assert loaded.kind == "ivf-sq8" and loaded.size == ivf.size and loaded.nlist == ivf.nlist
    for q in queries[:10]:
        assert loaded.search(q, 10) == ivf.search(q, 10)
    np.testing.assert_array_equal(loaded.vectors(np.array([5, 0, 19_999])), ivf.vectors(np.array([5, 0, 19_999])))
    with pytest.raises(RuntimeError, match="memory-mapped"):
        loaded.add(x[:1])
    copy = loaded.extended(x[:3])  # an owned copy of the mapped index
    assert copy.size == ivf.size + 3 and loaded.size == ivf.size
    owned = DenseIndex.load(tmp_path, mmap=False)
    owned.add(x[:2])
    assert owned.size == ivf.size + 2


def test_ivf_sq8_extended_keeps_the_old_rows_codes_and_results(ivf, data) -> None:
    x, queries = data
    rng = np.random.default_rng(2)
    new = np.concatenate([x[:400] + 0.02 * rng.standard_normal((400, 32)), rng.standard_normal((100, 32))])
    new = (new / np.linalg.norm(new, axis=1, keepdims=True)).astype(np.float32)  # 400 near the corpus, 100 far off
    bigger = ivf.extended(new)
    assert bigger.size == ivf.size + 500 and ivf.size == 20_000 and bigger.nlist == ivf.nlist
    np.testing.assert_array_equal(bigger.vectors(np.arange(ivf.size)), ivf.vectors())  # copied, not re-encoded
    error = np.abs(bigger.vectors(np.arange(ivf.size, bigger.size)) - new)
    assert error[:400].mean() < 3e-3  # like the trained vectors; far-off ones are clamped to the trained ranges:
    assert error[400:].mean() < 0.05  # still found below
    for q in queries[:20]:
        old = ivf.search(q, 10)
        both = bigger.search(q, 10)
        assert [h for h in both if h.row < ivf.size] == old[: sum(h.row < ivf.size for h in both)]
    assert bigger.search(new[7], 1)[0].row == ivf.size + 7 and bigger.search(new[450], 1)[0].row == ivf.size + 450


def test_ivf_sq8_extended_with_keep_renumbers_the_kept_rows_without_requantising(ivf, data) -> None:
    x, _ = data
    keep = np.array([19_999, 0, 5, 12_345], dtype=np.int64)
    smaller = ivf.extended(x[:2], keep)
    assert smaller.size == 6 and smaller.kind == "ivf-sq8" and smaller.nlist == ivf.nlist
    np.testing.assert_array_equal(smaller.vectors(np.arange(4)), ivf.vectors(keep))
    assert smaller.search(x[12_345], 1)[0].row == 3
    with pytest.raises(ValueError, match="distinct rows"):
        ivf.extended(x[:1], np.array([1, 1]))


def test_ivf_sq8_reconstructed_vectors_added_back_keep_their_codes(ivf) -> None:
    rows = np.arange(0, 20_000, 7)
    again = ivf.extended(ivf.vectors(rows))
    before, after = ivf.vectors(rows), again.vectors(np.arange(ivf.size, again.size))
    assert np.mean(np.all(after == before, axis=1)) >= 0.97  # measured 0.988: same list, same codes
    cosine = np.sum(after * before, axis=1) / np.linalg.norm(after, axis=1) / np.linalg.norm(before, axis=1)
    assert cosine.min() > 0.99  # the rest went to a neighbouring list and were encoded afresh (measured >= 0.998)


def test_ivf_sq8_retrains_only_past_the_growth_bound(data) -> None:
    x, queries = data
    index = DenseIndex(32, "ivf-sq8")
    assert index.size == 0 and index.nlist == 0 and index.search(queries[0], 5) == []
    index.add(x[:2_000])
    assert index.nlist == ivf_lists(2_000) == 51  # retrained once ivf_lists(size) >= 102, i.e. from 3,978 vectors
    before = index.vectors()
    index.add(x[2_000:3_900])
    assert index.nlist == 51 and index.size == 3_900
    np.testing.assert_array_equal(index.vectors(np.arange(2_000)), before)  # not retrained: codes untouched
    index.add(x[3_900:20_000])  # ivf_lists(20,000) = 283 >= 102: trained again (reconstructions + new)
    assert index.nlist == ivf_lists(20_000) == 283 and index.size == 20_000
    assert np.abs(index.vectors(np.arange(2_000)) - x[:2_000]).mean() < 3e-3  # quantised twice: still close
    assert _recall(index, x, queries) >= 0.9


def test_loaded_flat_and_hnsw_indexes_are_mapped_and_extended_by_copy(tmp_path) -> None:
    rng = np.random.default_rng(3)
    x = _unit(rng, 2_000, 16)
    for kind in ("flat", "hnsw"):
        index = DenseIndex(16, kind)
        index.add(x[:1_500])
        directory = tmp_path / kind
        directory.mkdir()
        index.save(directory)
        loaded = DenseIndex.load(directory)
        assert loaded.kind == kind and loaded.search(x[3], 3) == index.search(x[3], 3)
        with pytest.raises(RuntimeError, match="memory-mapped"):
            loaded.add(x[1_500:])
        bigger = loaded.extended(x[1_500:])
        assert bigger.kind == kind and bigger.size == 2_000 and loaded.size == 1_500
        np.testing.assert_array_equal(bigger.vectors(np.arange(1_500)), x[:1_500])
        assert bigger.search(x[1_900], 1)[0].row == 1_900
        smaller = loaded.extended(x[:0], np.array([10, 4]))
        np.testing.assert_array_equal(smaller.vectors(), x[[10, 4]])


def test_filters_on_every_kind_use_the_mask(data) -> None:
    x, queries = data
    allowed = np.zeros(2_000, dtype=bool)
    allowed[::3] = True
    for kind in ("flat", "hnsw", "ivf-sq8"):
        index = DenseIndex(32, kind)
        index.add(x[:2_000])
        hits = index.search(queries[0], 20, allowed)
        assert len(hits) == 20 and all(allowed[h.row] for h in hits)
        assert math.isclose(hits[0].score, float(np.max(x[:2_000][allowed] @ queries[0])), abs_tol=0.01)
