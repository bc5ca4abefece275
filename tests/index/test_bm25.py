"""The BM25 index's build (:class:`citerag.index.bm25._TableBM25`, numpy over a token table) against bm25s's own
``BM25.index`` over the same token lists, and the token table built from texts (each distinct text tokenised once)."""

from __future__ import annotations

import random

import bm25s
import numpy as np
import pytest

from citerag.index.bm25 import BM25Index, CorpusTokens
from citerag.index.tokenize import tokenize


def _corpus(seed: int, passages: int = 300, vocab: int = 120) -> list[list[str]]:
    """Token lists with repeated terms, an empty passage and a Zipf-like term distribution."""
    rng = random.Random(seed)
    terms = [f"t{i}" for i in range(vocab)]
    weights = [1 / (i + 1) for i in range(vocab)]
    corpus = [rng.choices(terms, weights, k=rng.randint(1, 40)) for _ in range(passages)]
    corpus[7] = []
    return corpus


@pytest.mark.parametrize("method", BM25Index.METHODS)
def test_the_array_build_gives_bm25s_scores_value_for_value(method) -> None:
    corpus = _corpus(seed=len(method))
    ours = BM25Index(k1=1.2, b=0.7, method=method)
    ours.build(corpus)
    # bm25s's own build over the same token ids (its pre-tokenised input: id lists and the vocabulary)
    table = CorpusTokens.from_tokens(corpus)
    ids, bounds = table.ids.tolist(), table.offsets.tolist()
    theirs = bm25s.BM25(k1=1.2, b=0.7, method=method)
    theirs.index(([ids[a:b] for a, b in zip(bounds[:-1], bounds[1:])], {t: i for i, t in enumerate(table.vocab)}),
                 show_progress=False)
    assert ours._model.vocab_dict == theirs.vocab_dict
    for key in ("data", "indices", "indptr"):
        mine, reference = ours._model.scores[key], theirs.scores[key]
        assert mine.dtype == reference.dtype, key
        np.testing.assert_array_equal(mine, reference, err_msg=key)
    assert ours._model.scores["num_docs"] == theirs.scores["num_docs"] == 300
    if theirs.nonoccurrence_array is None:
        assert ours._model.nonoccurrence_array is None
    else:
        np.testing.assert_array_equal(ours._model.nonoccurrence_array, theirs.nonoccurrence_array)
    query = ["t0", "t3", "t50", "absent"]
    np.testing.assert_array_equal(ours.scores(query), theirs.get_scores(["t0", "t3", "t50"]))


def test_the_array_build_scores_survive_a_save_and_a_mapped_load(tmp_path) -> None:
    corpus = _corpus(seed=1)
    built = BM25Index()
    built.build(corpus)
    built.save(tmp_path)
    loaded = BM25Index.load(tmp_path, size=len(corpus), k1=1.5, b=0.75, method="lucene")
    np.testing.assert_array_equal(loaded.scores(["t1", "t2"]), built.scores(["t1", "t2"]))
    assert [h.row for h in loaded.search(["t9"], 3)] == [h.row for h in built.search(["t9"], 3)]


def test_a_passage_longer_than_a_build_block_is_scored_whole(monkeypatch) -> None:
    import citerag.index.bm25 as bm25_module

    corpus = _corpus(seed=2, passages=50)
    reference = BM25Index()
    reference.build(corpus)
    monkeypatch.setattr(bm25_module, "_BUILD_BLOCK_TOKENS", 7)  # most passages are longer than a block
    blocked = BM25Index()
    blocked.build(corpus)
    for key in ("data", "indices", "indptr"):
        np.testing.assert_array_equal(blocked._model.scores[key], reference._model.scores[key])


def test_token_table_from_texts_tokenises_each_distinct_text_once() -> None:
    texts = ["Gaussian processes for N-body priors.", "Protein folding with diffusion.",
             "Gaussian processes for N-body priors.", "", "Protein folding with diffusion."]
    calls: list[str] = []

    def counting(text: str) -> list[str]:
        calls.append(text)
        return tokenize(text)

    table = CorpusTokens.from_texts(texts, counting)
    assert sorted(calls) == sorted(set(texts))  # three distinct texts, each tokenised once
    expected = CorpusTokens.from_tokens([tokenize(t) for t in texts])
    assert table.size == 5
    for row in range(5):
        got = [table.vocab[i] for i in table.ids[table.offsets[row]:table.offsets[row + 1]]]
        assert got == [expected.vocab[i] for i in expected.ids[expected.offsets[row]:expected.offsets[row + 1]]]
    assert [table.vocab[i] for i in table.ids[:3]] == ["gaussian", "process", "nbodi"]
