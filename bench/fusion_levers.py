"""Retrieval levers on a BEIR benchmark or the dev set, each one row: fusion method, weights, normalisation,
RRF k, candidate depth, BM25 k1/b. Uses the index that `citerag eval` built (no re-embedding).

    .venv/bin/python bench/fusion_levers.py ../shared/benchmarks/scifact   # after citerag eval --benchmark ...
    .venv/bin/python bench/fusion_levers.py devset

Prints one Markdown table (nDCG@10, Recall@10, Recall@100, MRR@10; for the dev set also Recall@5 per kind).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import ir_measures

from citerag.index.bm25 import BM25Index
from citerag.index.chunking import model_text
from citerag.index.fusion import bounded_score_fusion, reciprocal_rank_fusion, weighted_score_fusion
from citerag.index.tokenize import tokenize, tokenize_many
from citerag.index.types import Ranking
from citerag.eval.retrieval import BENCHMARK_MEASURES, load_beir, load_devset, metrics_table, score
from citerag.index.lifecycle import ensure_index
from citerag.service.pipeline import index_setup, open_retriever
from citerag.service.settings import PROJECT_ROOT, Settings

def main(target: str) -> None:
    kinds: dict[str, str] = {}
    if target == "devset":
        settings = Settings()
        questions = [q for q in load_devset(PROJECT_ROOT / "eval" / "devset.jsonl") if q.qrels]
        queries = {q.qid: q.question for q in questions}
        kinds = {q.qid: q.kind for q in questions}
        qrels = [ir_measures.Qrel(q.qid, d, g) for q in questions for d, g in q.qrels.items()]
    else:
        bench = load_beir(Path(target))
        settings = Settings(index_dir=Path(".citerag-bench") / bench.name, corpus=[bench.corpus])
        queries, qrels = bench.queries, bench.qrels
    index = ensure_index(index_setup(settings), show_progress=True)
    retriever = open_retriever(settings, index)
    candidates = {qid: (Ranking.of(retriever.bm25_hits(q, 300)), Ranking.of(retriever.dense_hits(q, 300)))
                  for qid, q in queries.items()}
    bound = {qid: index.bm25.upper_bound(tokenize(q)) for qid, q in queries.items()}

    titles = {doc_id: doc.title for doc_id, doc in index.documents.items()}
    passage_tokens = tokenize_many([model_text(p.text, titles[p.doc_id]) for p in index.passages])
    alt_bm25 = {}
    for k1, b in ((1.2, 0.75), (0.9, 0.4)):
        alt = BM25Index(k1=k1, b=b)
        alt.build(passage_tokens)
        alt_bm25[(k1, b)] = {qid: Ranking.of(alt.search(tokenize(q), 100)) for qid, q in queries.items()}

    def top100(qid: str) -> list[Ranking]:
        return [run.take(slice(100)) for run in candidates[qid]]

    levers: dict[str, Callable[[str], Ranking]] = {
        "bm25 (k1 1.5, b 0.75)": lambda q: candidates[q][0],
        "bm25 (k1 1.2, b 0.75)": lambda q: alt_bm25[(1.2, 0.75)][q],
        "bm25 (k1 0.9, b 0.4)": lambda q: alt_bm25[(0.9, 0.4)][q],
        "dense (passage MaxP)": lambda q: candidates[q][1],
        "rrf k=60, depth 100": lambda q: reciprocal_rank_fusion(top100(q), 60, 1000),
        "rrf k=20, depth 100": lambda q: reciprocal_rank_fusion(top100(q), 20, 1000),
        "rrf k=60, depth 300": lambda q: reciprocal_rank_fusion(list(candidates[q]), 60, 1000),
        "min-max 0.5/0.5": lambda q: weighted_score_fusion(top100(q), [0.5, 0.5], 1000),
        "min-max 0.3/0.7": lambda q: weighted_score_fusion(top100(q), [0.3, 0.7], 1000),
        "bounded 0.5/0.5 (default)": lambda q: bounded_score_fusion(*top100(q), bound[q], (0.5, 0.5), 1000),
        "bounded 0.4/0.6": lambda q: bounded_score_fusion(*top100(q), bound[q], (0.4, 0.6), 1000),
        "bounded 0.6/0.4": lambda q: bounded_score_fusion(*top100(q), bound[q], (0.6, 0.4), 1000),
        "bounded 0.5/0.5, depth 300": lambda q: bounded_score_fusion(*candidates[q], bound[q], (0.5, 0.5), 1000),
    }
    rows = {}
    for name, lever in levers.items():
        run = []
        for qid in queries:
            seen: set[str] = set()
            for row in lever(qid).rows.tolist():
                doc_id = index.passages[row].doc_id
                if doc_id not in seen and len(seen) < 100:
                    seen.add(doc_id)
                    run.append(ir_measures.ScoredDoc(qid, doc_id, float(1000 - len(seen))))
        rows[name] = score(qrels, run, BENCHMARK_MEASURES)
        for kind in sorted(set(kinds.values())):
            ids = {qid for qid, k in kinds.items() if k == kind}
            rows[name][f"R@5 {kind}"] = score(
                [r for r in qrels if r.query_id in ids], [r for r in run if r.query_id in ids], {"R@5": ir_measures.R @ 5}
            )["R@5"]
    print(metrics_table(rows, "lever"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "devset")
