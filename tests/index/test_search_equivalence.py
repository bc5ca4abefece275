"""The embedded search over arrays (issue 19: the fixed Python cost per search) returns exactly what the search over
``Hit`` lists did: the same rows, ranks and scores, to the bit.

``_reference_search`` is a frozen copy of ``Retriever.search`` and the steps it called before the change (tokenising
with the markup passes always run, bm25s's ``get_scores``, ``top_k_hits``, FAISS with an ``IDSelectorBatch``, fusion
in Python dicts, the selection and the results over ``Hit`` lists), kept here as the reference; the comparison runs
over real seed abstracts (real chunker, BM25 and FAISS; the hash stand-in encoder), every mode, fusion and BM25 variant,
flat and HNSW, with and without filters and one passage per document.
"""

from __future__ import annotations

import dataclasses
import math
from collections import defaultdict

import faiss
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from citerag.index import text as text_module
from citerag.index import tokenize as tok
from citerag.index.dense import omp_threads
from citerag.index.filters import passage_mask
from citerag.index.ingest import load_documents
from citerag.index.search import SearchResult, candidate_depth, fusion_depth
from citerag.index.text import fold
from citerag.index.types import Hit, Ranking
from tests.conftest import SCRIPTS, SEEDS, StandInIndex

# --- the reference: the code as it was -----------------------------------------------------------------------------


def _old_fold(text: str) -> str:
    t = text_module
    out = t._HREF.sub(r"\1", text)
    for _ in range(3):
        unwrapped = t._CMD_WITH_ARG.sub(r"\1", out)
        if unwrapped == out:
            break
        out = unwrapped
    out = t._ESCAPED.sub(r"\1", out)
    out = t._BARE_CMD.sub(r"\1", out)
    out = t._MARKUP.sub("", out)
    out = t.unicodedata.normalize("NFKC", out)
    return t._SPACES.sub(" ", out).strip()


def _old_normalize(text: str) -> str:
    out = _old_fold(text).casefold()
    if out.isascii():
        return out
    out = tok.unicodedata.normalize("NFC", tok._DIACRITICS.sub("", tok.unicodedata.normalize("NFD", out)))
    return " ".join(tok._CJK_RUN.sub(lambda m: f" {m.group()} ", out).split())


def _old_tokenize(text: str) -> list[str]:
    tokens: list[str] = []
    for match in tok._COMPOUND.finditer(_old_normalize(text)):
        compound = match.group()
        if tok._CJK_RUN.fullmatch(compound):
            tokens.extend(tok._bigrams(compound))
            continue
        parts = tok._PART.findall(compound)
        if len(parts) > 1:
            tokens.append(tok._stem("".join(parts)))
        tokens.extend(tok._stem(part) for part in parts if part not in tok.STOPWORDS)
    return tokens


def _old_top_k_hits(scores: np.ndarray, k: int, positive_only: bool = False) -> list[Hit]:
    if scores.shape[0] == 0 or k <= 0:
        return []
    rows = np.flatnonzero(scores > 0) if positive_only else np.flatnonzero(np.isfinite(scores))
    values = scores[rows]
    if rows.size > k:
        kth = np.partition(values, rows.size - k)[rows.size - k]
        keep = values >= kth
        rows, values = rows[keep], values[keep]
    order = np.lexsort((rows, -values))[:k]
    return [Hit(row, score) for row, score in zip(rows[order].tolist(), values[order].tolist())]


def _old_bm25_search(bm25, tokens: list[str], k: int, allowed) -> list[Hit]:
    model = bm25._model
    if model is None:
        scores = np.zeros(bm25.size, dtype=np.float32)
    else:
        known = [token for token in tokens if token in model.vocab_dict]
        scores = (np.asarray(model.get_scores(known), dtype=np.float32) if known
                  else np.zeros(bm25.size, dtype=np.float32))
    if allowed is not None:
        scores = np.where(allowed, scores, 0.0)
    return _old_top_k_hits(scores, k, positive_only=True)


def _old_dense_search(dense, query: np.ndarray, k: int, allowed) -> list[Hit]:
    if dense.size == 0 or k <= 0:
        return []
    k = min(k, dense.size)
    selector = None
    if allowed is not None:
        ids = np.flatnonzero(allowed).astype(np.int64)
        if ids.size == 0:
            return []
        selector = faiss.IDSelectorBatch(ids)
    if dense.kind == "hnsw":
        params = faiss.SearchParametersHNSW(efSearch=max(dense.ef_search, k), sel=selector)
    else:
        params = faiss.SearchParameters(sel=selector) if selector is not None else None
    with omp_threads(1):
        scores, rows = dense._index.search(query.reshape(1, -1).astype(np.float32), k, params=params)
    return [Hit(row, score) for row, score in zip(rows[0].tolist(), scores[0].tolist()) if row >= 0]


def _old_ranked(fused: dict[int, float], top_k: int) -> list[Hit]:
    best = sorted(fused.items(), key=lambda item: (-item[1], item[0]))[:top_k]
    return [Hit(row, score) for row, score in best]


def _old_rrf(runs, k, top_k):
    fused: dict[int, float] = defaultdict(float)
    for run in runs:
        for rank, hit in enumerate(run, start=1):
            fused[hit.row] += 1.0 / (k + rank)
    return _old_ranked(fused, top_k)


def _old_min_max(scores):
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        return values
    low, high = values.min(), values.max()
    if high - low <= 1e-12:
        return np.ones_like(values)
    return (values - low) / (high - low)


def _old_weighted(runs, weights, top_k):
    fused: dict[int, float] = defaultdict(float)
    for run, weight in zip(runs, weights, strict=True):
        for hit, norm in zip(run, _old_min_max([h.score for h in run]), strict=True):
            fused[hit.row] += weight * float(norm)
    return _old_ranked(fused, top_k)


def _old_bounded(bm25, dense, bound, weights, top_k):
    fused: dict[int, float] = defaultdict(float)
    for hit in bm25:
        fused[hit.row] += weights[0] * hit.score / bound
    for hit in dense:
        fused[hit.row] += weights[1] * hit.score
    return _old_ranked(fused, top_k)


def _old_search_results(chosen, bm25, dense, passages, documents) -> list[SearchResult]:
    bm25_at = {hit.row: (rank, hit.score) for rank, hit in enumerate(bm25, start=1)}
    dense_at = {hit.row: (rank, hit.score) for rank, hit in enumerate(dense, start=1)}
    results = []
    for rank, hit in enumerate(chosen, start=1):
        passage = passages[hit.row]
        bm25_rank, bm25_score = bm25_at.get(hit.row, (None, None))
        dense_rank, dense_score = dense_at.get(hit.row, (None, None))
        results.append(SearchResult(rank, passage, documents[passage.doc_id], hit.score, bm25_rank, dense_rank,
                                    bm25_score, dense_score))
    return results


def _reference_search(retriever, query, k=10, mode="hybrid", one_per_doc=False, fusion=None, filters=None):
    index = retriever.index
    fusion = fusion or retriever.fusion
    depth = candidate_depth(retriever.candidates, k, one_per_doc, mode)
    allowed = passage_mask(filters, index.documents, index.passages) if filters else None
    tokens = _old_tokenize(query) if mode in ("hybrid", "bm25") else []
    bm25 = _old_bm25_search(index.bm25, tokens, depth, allowed) if mode in ("hybrid", "bm25") else []
    dense = []
    if mode in ("hybrid", "dense") and index.dense.size:
        dense = _old_dense_search(index.dense, retriever.embedder.encode([_old_fold(query)])[0], depth, allowed)
    top_k = fusion_depth(k, depth, one_per_doc)
    if mode == "bm25":
        ranked = bm25
    elif mode == "dense":
        ranked = dense
    elif fusion == "bounded":
        ranked = _old_bounded(bm25, dense, index.bm25.upper_bound(tokens), retriever.weights, top_k)
    elif fusion == "weighted":
        ranked = _old_weighted([bm25, dense], retriever.weights, top_k)
    else:
        ranked = _old_rrf([bm25, dense], retriever.rrf_k, top_k)
    chosen, seen = [], set()
    for hit in ranked:
        if one_per_doc:
            doc_id = index.passages[hit.row].doc_id
            if doc_id in seen:
                continue
            seen.add(doc_id)
        chosen.append(hit)
        if len(chosen) == k:
            break
    return _old_search_results(chosen, bm25, dense, index.passages, index.documents)


# --- the comparison ------------------------------------------------------------------------------------------------

QUERIES = [
    "retrieval augmented generation with citations",
    "GP-EquiFlow equivariant flows",
    r"$\mathcal{O}(\log(N))$ regret bound for \emph{bandits}",
    "KV cache compression for long-context LLM inference",
    "naïve Bayes résumé",
    "learning learning learning",  # a repeated term counts each time
    "zzzunknownword qqqq",  # no BM25 term: the dense side alone
    "the of and",  # stop words only
    "检索增强 模型",
    "ΜΟΝΤΕΛΟ ανακτηση",
    "V₁ speed-up — 40-fold",
]
FILTERS = [None, {"year": 2021}, {"year": {"gte": 2020, "lt": 2023}}, {"year": 1999}]


def _documents() -> list:
    docs = load_documents([SEEDS])
    return [dataclasses.replace(d, meta={**d.meta, "year": 2018 + i % 6}) for i, d in enumerate(docs)]


@pytest.fixture(scope="module")
def retrievers(tokenizer, tmp_path_factory) -> dict:
    """Retrievers over the 38 seed abstracts: Lucene BM25 with a flat and an HNSW index, and BM25+ (a variant with
    non-occurrence scores) and Robertson (IDF can be negative) with flat."""
    from citerag.index.retrieve import Retriever

    out = {}
    for name, method, kind in [("lucene-flat", "lucene", "flat"), ("lucene-hnsw", "lucene", "hnsw"),
                               ("bm25+-flat", "bm25+", "flat"), ("robertson-flat", "robertson", "flat")]:
        stand_in = StandInIndex(tmp_path_factory.mktemp(name), tokenizer, bm25_method=method)
        from citerag.index.build import build_index

        build_index(_documents(), stand_in.store, stand_in.embedder, stand_in.chunker, stand_in.config,
                    show_progress=False, dense_kind=kind)
        index = stand_in.store.load()
        assert index.dense.kind == kind
        out[name] = Retriever(index, stand_in.embedder, candidates=20)
    return out


def _same(got: list[SearchResult], want: list[SearchResult]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert (g.rank, g.passage.chunk_id, g.document.doc_id) == (w.rank, w.passage.chunk_id, w.document.doc_id)
        for field in ("score", "bm25_rank", "dense_rank", "bm25_score", "dense_score"):
            a, b = getattr(g, field), getattr(w, field)
            assert type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b))), (
                field, a, b)


@pytest.mark.parametrize("name", ["lucene-flat", "lucene-hnsw", "bm25+-flat", "robertson-flat"])
@pytest.mark.parametrize("mode", ["hybrid", "bm25", "dense"])
def test_search_returns_what_the_hit_list_search_returned(retrievers, name: str, mode: str) -> None:
    retriever = retrievers[name]
    compared = 0
    for query in QUERIES:
        for filters in FILTERS:
            for fusion in ("bounded", "rrf", "weighted") if mode == "hybrid" else (None,):
                for k, one_per_doc in ((10, False), (3, True), (50, False), (1, False)):
                    got = retriever.search(query, k, mode, one_per_doc, fusion, filters)
                    want = _reference_search(retriever, query, k, mode, one_per_doc, fusion, filters)
                    _same(got, want)
                    compared += len(want)
    assert compared > 100  # the comparison saw results, not only empty lists


def test_fusion_selection_and_results_return_what_the_python_sums_give(retrievers) -> None:
    """fusion.py's and search.py's one form (over :class:`Ranking` arrays, what every backend runs) against the
    reference's sums made one hit at a time in Python dicts, on real candidate lists: the same rows and the same
    float64 scores (RRF with k = 60 and 1-based ranks, min-max weighted, BM25 over its bound plus cosine)."""
    from citerag.index.fusion import bounded_score_fusion, reciprocal_rank_fusion, weighted_score_fusion
    from citerag.index.search import search_results, select_top

    retriever = retrievers["lucene-flat"]
    index = retriever.index
    rng = np.random.default_rng(0)
    for query in QUERIES:
        bm25 = retriever.bm25_hits(query, 30)
        dense = retriever.dense_hits(query, 30)
        assert bm25 == _old_bm25_search(index.bm25, _old_tokenize(query), 30, None)
        assert dense == _old_dense_search(index.dense, retriever.embedder.encode([fold(query)])[0], 30, None)
        runs = [Ranking.of(bm25), Ranking.of(dense)]
        for top_k in (1, 10, 100):
            assert bounded_score_fusion(*runs, 7.5, (0.3, 0.7), top_k).hits() == _old_bounded(bm25, dense, 7.5,
                                                                                             (0.3, 0.7), top_k)
            assert reciprocal_rank_fusion(runs, 60, top_k).hits() == _old_rrf([bm25, dense], 60, top_k)
            assert weighted_score_fusion(runs, (0.5, 0.5), top_k).hits() == _old_weighted([bm25, dense],
                                                                                        (0.5, 0.5), top_k)
        ranked = reciprocal_rank_fusion(runs, 60, 60)
        for one_per_doc in (False, True):
            chosen = select_top(ranked, index.passages, 5, one_per_doc)
            _same(search_results(chosen, *runs, index.passages, index.documents),
                  _old_search_results(chosen.hits(), bm25, dense, index.passages, index.documents))
        # a row listed twice in a run (no engine here returns one): the later place counts, as the dict kept it
        doubled = bm25 + [bm25[int(rng.integers(len(bm25)))]] if bm25 else []
        top10 = ranked.take(slice(10))
        _same(search_results(top10, Ranking.of(doubled), runs[1], index.passages, index.documents),
              _old_search_results(top10.hits(), doubled, dense, index.passages, index.documents))
        assert reciprocal_rank_fusion([Ranking.of(doubled), runs[1]], 60, 50).hits() == _old_rrf([doubled, dense],
                                                                                                 60, 50)


def test_the_sampled_bm25_top_k_is_the_full_top_k() -> None:
    """BM25Index.top narrows its candidates by a threshold from every SAMPLE_STRIDE-th passage (the seed index is too
    small to reach it): the same rows and scores as the full top-k, for ties, zeros, negative scores (Robertson)
    and filters, on score vectors and on a BM25 index of 4,000 passages."""
    from citerag.index.bm25 import SAMPLE_STRIDE, BM25Index, _positive_top

    rng = np.random.default_rng(7)
    for n in (50, 3_000, 40_000):
        for _ in range(20):
            scores = rng.choice([0.0, 0.0, 0.0, 1.5, 2.0, 3.25], n).astype(np.float32)  # heavy ties
            if rng.random() < 0.5:  # distinct values, some negative (Robertson IDFs can be)
                scores += rng.normal(0, 1, n).astype(np.float32)
            for k in (1, 10, 100, 500):
                for allowed in (None, rng.random(n) < 0.5, rng.random(n) < 0.01, np.zeros(n, dtype=bool)):
                    want = _old_top_k_hits(scores if allowed is None else np.where(allowed, scores, 0.0), k, True)
                    assert _positive_top(scores, k, allowed).hits() == want
    sample = scores[::SAMPLE_STRIDE]
    assert np.partition(sample, sample.size - 500)[sample.size - 500] > 0  # the sampled path ran (last vector, k=500)
    words = [f"w{i}" for i in range(300)]
    frequency = np.linspace(1, 0.01, len(words))
    corpus = [list(rng.choice(words, int(rng.integers(1, 40)), p=frequency / frequency.sum())) for _ in range(4_000)]
    for method in ("lucene", "robertson"):
        index = BM25Index(method=method)
        index.build(corpus)
        for query in (["w0"], ["w1", "w2", "w250"], ["w299"], ["w3", "w3", "w10", "nope"]):
            for k in (10, 100):
                for allowed in (None, rng.random(4_000) < 0.2):
                    assert index.search(query, k, allowed) == _old_bm25_search(index, query, k, allowed)


TEXTS = st.text(st.characters(exclude_categories=("Cs",)), max_size=300)
MARKUP = st.sampled_from([r"\textbf{x}", "$a_1$", "**b**", "__c__", "`d`", r"\href{u}{e}", "{f}", r"\%", "＄", "＼x",
                          "GP-EquiFlow", "naïve", "检索增强", "–", "ﬁ", "V₁", " \t\n", "  ", "\xa0", "\u2009", "\u3000",
                          "\x1c", "\u2028", " "])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(TEXTS, MARKUP), max_size=12).map("".join))
def test_fold_and_tokenize_are_unchanged(text: str) -> None:
    assert fold(text) == _old_fold(text)
    assert tok.tokenize(text) == _old_tokenize(text)
    assert tok.tokenize_folded(fold(text)) == _old_tokenize(text)


def test_fold_collapses_whitespace_only_when_it_can_change() -> None:
    """fold skips the whitespace pass for a printable text without double spaces: every other character ``\\s``
    matches is unprintable (checked over every code point of this Python's Unicode database)."""
    spaces = text_module._SPACES
    assert [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF and chr(c) != " " and chr(c).isprintable()
            and spaces.fullmatch(chr(c))] == []


def test_tokenize_is_unchanged_on_the_corpus_and_the_scripts() -> None:
    texts = [d.text for d in load_documents([SEEDS])] + [s for pair in SCRIPTS.values() for s in pair] + QUERIES
    for text in texts:
        assert tok.tokenize(text) == _old_tokenize(text), text
