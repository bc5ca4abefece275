"""Retrieval evaluation on the dev set (``eval/devset.jsonl``): Recall@1/5/10, MRR@10 and nDCG@10 per mode.

Relevance is judged per document (qrels are document-level): each mode's passage ranking is rolled up to documents
by the best-ranked passage of each document (``one_per_doc``), the MaxP roll-up of Dai & Callan (SIGIR 2019).
Metrics are computed by ir-measures (MacAvaney et al., ECIR 2022), backed by pytrec_eval.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ir_measures
from ir_measures import Measure

from index.retrieve import Retriever
from index.types import RetrievalMode

MODES: tuple[RetrievalMode, ...] = ("bm25", "dense", "hybrid")
MEASURES: dict[str, Measure] = {
    "Recall@1": ir_measures.R @ 1,
    "Recall@5": ir_measures.R @ 5,
    "Recall@10": ir_measures.R @ 10,
    "MRR@10": ir_measures.RR @ 10,
    "nDCG@10": ir_measures.nDCG @ 10,
}


@dataclass(frozen=True, slots=True)
class DevQuestion:
    """One dev-set question: ``qrels`` maps doc_id -> grade (2 answers it, 1 partially); empty = no answer."""

    qid: str
    question: str
    kind: str
    qrels: dict[str, int]
    answer: list[str]


def load_devset(path: Path) -> list[DevQuestion]:
    """Read a dev set: one JSON object per line with ``qid``, ``question``, ``kind``, ``qrels``, ``answer``."""
    with path.open(encoding="utf-8") as handle:
        return [DevQuestion(**json.loads(line)) for line in handle if line.strip()]


def qrels_of(questions: list[DevQuestion]) -> list[ir_measures.Qrel]:
    """ir-measures qrels of the answerable questions."""
    return [ir_measures.Qrel(q.qid, doc_id, grade) for q in questions for doc_id, grade in q.qrels.items()]


def run_of(retriever: Retriever, questions: list[DevQuestion], mode: RetrievalMode, depth: int = 100) -> list[ir_measures.ScoredDoc]:
    """Document-level run: each document scored by its best passage (score = depth - rank + 1, so ties cannot
    reorder documents inside pytrec_eval)."""
    run = []
    for q in questions:
        for result in retriever.search(q.question, k=depth, mode=mode, one_per_doc=True):
            run.append(ir_measures.ScoredDoc(q.qid, result.passage.doc_id, float(depth - result.rank + 1)))
    return run


def score(qrels: list[ir_measures.Qrel], run: list[ir_measures.ScoredDoc]) -> dict[str, float]:
    """Mean of each measure in :data:`MEASURES` over the queries that have qrels (missing runs count as 0)."""
    aggregate = ir_measures.calc_aggregate(list(MEASURES.values()), qrels, run)
    return {name: float(aggregate.get(measure, 0.0)) for name, measure in MEASURES.items()}


def evaluate_devset(retriever: Retriever, questions: list[DevQuestion]) -> dict[str, Any]:
    """Metrics per mode, overall and Recall@5 per question kind.

    Returns:
        ``{"modes": {mode: {metric: value}}, "by_kind": {mode: {kind: recall@5}}, "questions": n_answerable}``.
    """
    answerable = [q for q in questions if q.qrels]
    qrels = qrels_of(answerable)
    kinds = sorted({q.kind for q in answerable})
    out: dict[str, Any] = {"modes": {}, "by_kind": {}, "questions": len(answerable)}
    for mode in MODES:
        run = run_of(retriever, answerable, mode)
        out["modes"][mode] = score(qrels, run)
        out["by_kind"][mode] = {}
        for kind in kinds:
            ids = {q.qid for q in answerable if q.kind == kind}
            kind_qrels = [r for r in qrels if r.query_id in ids]
            kind_run = [r for r in run if r.query_id in ids]
            out["by_kind"][mode][kind] = score(kind_qrels, kind_run)["Recall@5"]
    return out


def markdown_table(results: dict[str, Any]) -> str:
    """The results as two Markdown tables (metrics by mode; Recall@5 by question kind)."""
    names = list(MEASURES)
    lines = ["| mode | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for mode, values in results["modes"].items():
        lines.append(f"| {mode} | " + " | ".join(f"{values[n]:.3f}" for n in names) + " |")
    kinds = list(next(iter(results["by_kind"].values())))
    lines += ["", "Recall@5 by question kind:", "", "| mode | " + " | ".join(kinds) + " |", "|---|" + "---:|" * len(kinds)]
    for mode, values in results["by_kind"].items():
        lines.append(f"| {mode} | " + " | ".join(f"{values[k]:.3f}" for k in kinds) + " |")
    return "\n".join(lines)
