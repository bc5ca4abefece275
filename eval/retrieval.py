"""Retrieval evaluation: the dev set (``eval/devset.jsonl``) and any BEIR-format benchmark folder.

Relevance is judged per document (qrels are document-level): each run's passage ranking is rolled up to documents
by the best-ranked passage of each document (``one_per_doc``; the MaxP roll-up of Dai & Callan, SIGIR 2019).
Metrics are computed by ir-measures (MacAvaney et al., ECIR 2022), backed by pytrec_eval (trec_eval's definitions:
nDCG with linear gain, as BEIR reports it).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ir_measures
from ir_measures import Measure

from citerag.index.errors import CiteragError
from citerag.index.retrieve import Retriever
from citerag.index.search import SearchResult

DEVSET_MEASURES: dict[str, Measure] = {
    "Recall@1": ir_measures.R @ 1,
    "Recall@5": ir_measures.R @ 5,
    "Recall@10": ir_measures.R @ 10,
    "MRR@10": ir_measures.RR @ 10,
    "nDCG@10": ir_measures.nDCG @ 10,
}
BENCHMARK_MEASURES: dict[str, Measure] = {
    "nDCG@10": ir_measures.nDCG @ 10,
    "Recall@10": ir_measures.R @ 10,
    "Recall@100": ir_measures.R @ 100,
    "MRR@10": ir_measures.RR @ 10,
}
DEPTH = 100  # documents retrieved per query

# A run: query text -> ranked passages (one per document), given a retriever.
RunFn = Callable[[Retriever, str], list[SearchResult]]


def _mode(mode: str, fusion: str | None = None) -> RunFn:
    return lambda retriever, query: retriever.search(query, k=DEPTH, mode=mode, one_per_doc=True, fusion=fusion)  # type: ignore[arg-type]


DEVSET_RUNS: dict[str, RunFn] = {"bm25": _mode("bm25"), "dense": _mode("dense"), "hybrid": _mode("hybrid")}
BENCHMARK_RUNS: dict[str, RunFn] = {
    "bm25": _mode("bm25"),
    "dense": _mode("dense"),
    "hybrid-rrf": _mode("hybrid", "rrf"),
    "hybrid-weighted": _mode("hybrid", "weighted"),
    "hybrid-bounded": _mode("hybrid", "bounded"),
}


@dataclass(frozen=True, slots=True)
class DevQuestion:
    """One dev-set question: ``qrels`` maps doc_id -> grade (2 answers it, 1 partially); empty = no answer.

    Attributes:
        answer: acceptable answer strings (any one, contained in the answer, makes it right).
        decision: the gold ``yes``/``no`` of a yes/no question (the answer's decision must equal it), else ``None``.
        papers: for questions about named papers, ``[{"doc_id", "names": [...]}]``: the answer must name each
            paper by one of its names.
        half: ``"dev"`` or ``"test"`` where the set splits by document itself (else by ``qid``:
            :func:`~citerag.eval.qa.half`).
        support: the sentences of the relevant abstracts that answer it, verbatim (failure attribution: an evidence
            miss is a retrieved paper whose answering sentence the model did not read).
    """

    qid: str
    question: str
    kind: str
    qrels: dict[str, int]
    answer: list[str]
    decision: str | None = None
    papers: list[dict[str, Any]] | None = None
    half: str | None = None
    support: list[str] | None = None


def load_devset(path: Path) -> list[DevQuestion]:
    """Read a dev set: one JSON object per line with ``qid``, ``question``, ``kind``, ``qrels``, ``answer``."""
    with path.open(encoding="utf-8") as handle:
        return [DevQuestion(**json.loads(line)) for line in handle if line.strip()]


@dataclass(frozen=True, slots=True)
class Benchmark:
    """A BEIR-format folder: ``corpus.jsonl``, ``queries.jsonl`` and ``qrels/test.tsv``."""

    name: str
    corpus: Path
    queries: dict[str, str]
    qrels: list[ir_measures.Qrel]


def load_beir(folder: Path, split: str = "test") -> Benchmark:
    """Read a BEIR folder; only queries that have qrels in ``split`` are kept.

    Raises:
        CiteragError: a required file is missing (the message names it).
    """
    corpus, queries_file, qrels_file = folder / "corpus.jsonl", folder / "queries.jsonl", folder / "qrels" / f"{split}.tsv"
    for required in (corpus, queries_file, qrels_file):
        if not required.is_file():
            raise CiteragError(f"{required}: not found; a BEIR folder holds corpus.jsonl, queries.jsonl, qrels/{split}.tsv")
    with qrels_file.open(encoding="utf-8") as handle:
        rows = [row for row in csv.reader(handle, delimiter="\t") if row and row[0] != "query-id"]
    qrels = [ir_measures.Qrel(qid, doc_id, int(grade)) for qid, doc_id, grade in rows]
    judged = {q.query_id for q in qrels}
    with queries_file.open(encoding="utf-8") as handle:
        queries = {str(r["_id"]): r["text"] for r in map(json.loads, handle) if str(r["_id"]) in judged}
    return Benchmark(folder.name, corpus, queries, qrels)


def document_run(retriever: Retriever, queries: dict[str, str], run: RunFn) -> list[ir_measures.ScoredDoc]:
    """A document-level run; each document is scored ``DEPTH - rank + 1`` so pytrec_eval keeps the exact order."""
    return [
        ir_measures.ScoredDoc(qid, result.passage.doc_id, float(DEPTH - result.rank + 1))
        for qid, query in queries.items()
        for result in run(retriever, query)
    ]


def score(qrels: list[ir_measures.Qrel], run: list[ir_measures.ScoredDoc], measures: dict[str, Measure] | None = None) -> dict[str, float]:
    """Mean of each measure over the queries that have qrels (a query with no retrieved document scores 0)."""
    measures = measures or DEVSET_MEASURES
    aggregate = ir_measures.calc_aggregate(list(measures.values()), qrels, run)
    return {name: float(aggregate.get(measure, 0.0)) for name, measure in measures.items()}


def evaluate_devset(retriever: Retriever, questions: list[DevQuestion]) -> dict[str, Any]:
    """Metrics per mode, overall and Recall@5 per question kind.

    Returns:
        ``{"modes": {mode: {metric: value}}, "by_kind": {mode: {kind: recall@5}}, "questions": n_answerable}``.
    """
    answerable = [q for q in questions if q.qrels]
    qrels = [ir_measures.Qrel(q.qid, doc_id, grade) for q in answerable for doc_id, grade in q.qrels.items()]
    queries = {q.qid: q.question for q in answerable}
    kinds = sorted({q.kind for q in answerable})
    out: dict[str, Any] = {"modes": {}, "by_kind": {}, "questions": len(answerable)}
    for mode, run_fn in DEVSET_RUNS.items():
        run = document_run(retriever, queries, run_fn)
        out["modes"][mode] = score(qrels, run)
        out["by_kind"][mode] = {}
        for kind in kinds:
            ids = {q.qid for q in answerable if q.kind == kind}
            kind_qrels = [r for r in qrels if r.query_id in ids]
            kind_run = [r for r in run if r.query_id in ids]
            out["by_kind"][mode][kind] = score(kind_qrels, kind_run)["Recall@5"]
    return out


def evaluate_benchmark(retriever: Retriever, benchmark: Benchmark, runs: dict[str, RunFn] | None = None) -> dict[str, Any]:
    """Metrics of each run on a BEIR benchmark: ``{"runs": {name: {metric: value}}, "queries": n}``."""
    runs = runs or BENCHMARK_RUNS
    results = {
        name: score(benchmark.qrels, document_run(retriever, benchmark.queries, run_fn), BENCHMARK_MEASURES)
        for name, run_fn in runs.items()
    }
    return {"runs": results, "queries": len(benchmark.queries)}


def metrics_table(rows: dict[str, dict[str, float]], first: str = "run") -> str:
    """A Markdown table: one row per key of ``rows``, one column per metric, 3 decimals."""
    names = list(next(iter(rows.values())))
    lines = [f"| {first} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    lines += [f"| {key} | " + " | ".join(f"{values[n]:.3f}" for n in names) + " |" for key, values in rows.items()]
    return "\n".join(lines)


def markdown_table(results: dict[str, Any]) -> str:
    """Dev-set results as two Markdown tables (metrics by mode; Recall@5 by question kind)."""
    return (
        metrics_table(results["modes"], "mode")
        + "\n\nRecall@5 by question kind:\n\n"
        + metrics_table(results["by_kind"], "mode")
    )
