"""bm25s (what citerag uses) against rank-bm25 (the reference implementation) on the same tokens and variant.

bm25s, like Lucene since 8.0, leaves out the constant ``(k1 + 1)`` factor of the BM25 numerator, so its scores are
rank-bm25's divided by ``k1 + 1``: the rankings are identical.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from citerag.index.bm25 import BM25Index
from citerag.index.ingest import load_documents
from citerag.index.tokenize import tokenize
from tests.conftest import SEEDS


class LuceneBM25(BM25Okapi):
    """rank-bm25's Okapi scoring with Lucene's IDF, log(1 + (N - df + 0.5) / (df + 0.5)): the variant citerag uses."""

    def _calc_idf(self, nd: dict[str, int]) -> None:
        self.idf = {w: math.log(1 + (self.corpus_size - df + 0.5) / (df + 0.5)) for w, df in nd.items()}


@pytest.fixture(scope="module")
def corpus() -> list[list[str]]:
    return [tokenize(d.text) for d in load_documents([SEEDS])]


QUERIES = ["KV cache eviction budget", "LU-KV", "metagenomic foundation models parameters", "V₁ pairwise verification",
           "diffusion model data assimilation", "conformal prediction RKHS"]


@pytest.mark.parametrize(("k1", "b"), [(1.5, 0.75), (0.9, 0.4), (1.2, 1.0)])
def test_lucene_scores_and_rankings_match_rank_bm25(corpus: list[list[str]], k1: float, b: float) -> None:
    ref = LuceneBM25(corpus, k1=k1, b=b)
    ours = BM25Index(k1=k1, b=b, method="lucene")
    ours.build(corpus)
    for query in QUERIES:
        tokens = tokenize(query)
        expected = np.asarray(ref.get_scores(tokens), dtype=np.float64) / (k1 + 1)
        got = ours.scores(tokens).astype(np.float64)
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
        top = [h.row for h in ours.search(tokens, 5)]
        assert top == sorted(range(len(corpus)), key=lambda i: (-expected[i], i))[: len(top)]


def test_okapi_matches_robertson_where_idf_is_positive(corpus: list[list[str]]) -> None:
    small = corpus[:10]
    ref = BM25Okapi(small, k1=1.2, b=0.75)
    ours = BM25Index(k1=1.2, b=0.75, method="robertson")
    ours.build(small)
    tokens = [t for t in tokenize("EDEN metagenomic Llama scaling") if sum(t in d for d in small) < len(small) / 2]
    assert tokens
    np.testing.assert_allclose(ours.scores(tokens), ref.get_scores(tokens) / 2.2, rtol=1e-4, atol=1e-4)
