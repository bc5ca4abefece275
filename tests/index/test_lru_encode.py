"""The in-memory LRU of evidence-sentence vectors (index/embed.py LRUEncode), over a counting stand-in encoder."""

from __future__ import annotations

import numpy as np
import pytest

from citerag.index.embed import LRUEncode


class CountingEncode:
    """A deterministic stand-in: a text's vector is its length and first character code, L2-normalised."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, texts: list[str]) -> np.ndarray:
        self.calls.append(list(texts))
        rows = np.asarray([[len(t), ord(t[0]) if t else 0] for t in texts], dtype=np.float32).reshape(-1, 2)
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        return rows / np.where(norms == 0, 1, norms)


def test_texts_met_again_are_not_encoded_again_and_rows_keep_their_order() -> None:
    inner = CountingEncode()
    encode = LRUEncode(inner, maxsize=8)
    first = encode(["alpha", "beta", "alpha"])
    assert inner.calls == [["alpha", "beta"]]  # each distinct text once
    assert first.shape == (3, 2) and first.dtype == np.float32
    np.testing.assert_array_equal(first[0], first[2])
    second = encode(["beta", "gamma", "alpha"])
    assert inner.calls[1] == ["gamma"]  # only the new text
    np.testing.assert_array_equal(second, inner(["beta", "gamma", "alpha"]))


def test_the_least_recently_used_text_is_dropped_first() -> None:
    inner = CountingEncode()
    encode = LRUEncode(inner, maxsize=2)
    encode(["a1"])
    encode(["b22"])
    encode(["a1"])  # a1 used again: b22 is now the least recent
    encode(["c333"])
    encode(["a1", "b22"])
    assert inner.calls == [["a1"], ["b22"], ["c333"], ["b22"]]


def test_no_texts_give_an_empty_matrix_and_a_cache_needs_room() -> None:
    assert LRUEncode(CountingEncode())([]).shape == (0, 2)
    with pytest.raises(ValueError, match="maxsize must be >= 1"):
        LRUEncode(CountingEncode(), maxsize=0)
