"""Evidence selection without a language model, on a QA benchmark's dev half: for each retrieval depth k and each
weight setting, the share of questions whose gold span is in the top-m evidence sentences (what the model can
choose from), and token-F1 / span hit of the top-1 sentence alone.

    .venv/bin/python eval/evidence_table.py ../shared/benchmarks/covidqa [--half dev] [--sample 200] [--default-only]
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

from citerag.eval import qa_metrics as m
from citerag.service.answering.evidence import DEFAULT_WEIGHTS, select_evidence
from citerag.service.answering.retrieve import merge_same_document
from citerag.index.lifecycle import ensure_index
from citerag.service.pipeline import index_setup, load_embedder, open_retriever
from citerag.eval.qa import half, load_qa, sample
from citerag.service.settings import Settings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder", type=Path)
    parser.add_argument("--half", default="dev")
    parser.add_argument("--sample", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--default-only", action="store_true",
                        help="only the service's setting: k = 8 and the default weights")
    args = parser.parse_args()
    bench = load_qa(args.folder)
    questions = sample(half(bench.questions, args.half), args.sample, args.seed)
    settings = Settings(index_dir=Path(".citerag-bench") / bench.name, corpus=[bench.corpus])
    retriever = open_retriever(settings, ensure_index(index_setup(settings), show_progress=False))
    encode = load_embedder(settings).encode
    retrieved = {q.qid: retriever.search(q.question, k=20, mode="hybrid") for q in questions}
    weights_grid = [(0.4, 0.2, 0.3, 0.1), (1, 0, 0, 0), (0, 1, 0, 0), (0, 0, 1, 0), (0.5, 0.5, 0, 0),
                    (0.3, 0.3, 0.3, 0.1), (0.5, 0.2, 0.2, 0.1), (0.3, 0.2, 0.3, 0.2), (0.4, 0.1, 0.4, 0.1)]
    rows = []
    grid = [(8, DEFAULT_WEIGHTS)] if args.default_only else itertools.product((3, 5, 8, 12), weights_grid)
    for k, weights in grid:
        hits = {1: 0, 3: 0, 6: 0, 9: 0}
        f1 = 0.0
        for q in questions:
            passages = merge_same_document(retrieved[q.qid][:k])
            evidence = select_evidence(q.question, passages, encode, keep=9, weights=weights)
            gold = [(s, e) for _, s, e in q.answers]
            for depth in hits:
                hits[depth] += any(ev.doc_id == q.doc_id and any(m.spans_overlap((ev.start, ev.end), g) for g in gold)
                                   for ev in evidence[:depth])
            if evidence:
                f1 += m.token_f1(evidence[0].text, [a[0] for a in q.answers])
        n = len(questions)
        row = {"k": k, "weights": weights, **{f"hit@{d}": round(h / n, 3) for d, h in hits.items()}, "top1_f1": round(f1 / n, 3)}
        rows.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
