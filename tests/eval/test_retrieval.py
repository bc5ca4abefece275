"""Metric code pinned against hand-computed values, and the dev-set evaluation end to end."""

from __future__ import annotations

import math
from pathlib import Path

import ir_measures
import pytest

from citerag.eval.retrieval import evaluate_devset, load_devset, score
from tests.conftest import ROOT


def test_metrics_match_a_hand_computed_example() -> None:
    qrels = [ir_measures.Qrel("q1", "a", 2), ir_measures.Qrel("q1", "b", 1), ir_measures.Qrel("q2", "c", 1)]
    run = [
        ir_measures.ScoredDoc("q1", "x", 3.0), ir_measures.ScoredDoc("q1", "a", 2.0), ir_measures.ScoredDoc("q1", "b", 1.0),
        ir_measures.ScoredDoc("q2", "c", 1.0),
    ]
    got = score(qrels, run)
    # q1: relevant at ranks 2 (grade 2) and 3 (grade 1); q2: relevant at rank 1.
    # trec_eval's nDCG (what BEIR reports): linear gain = grade, discount log2(rank + 1).
    dcg = 2 / math.log2(3) + 1 / math.log2(4)
    idcg = 2 / math.log2(2) + 1 / math.log2(3)
    assert got["nDCG@10"] == pytest.approx((dcg / idcg + 1.0) / 2, abs=1e-6)
    assert got["MRR@10"] == pytest.approx((1 / 2 + 1) / 2)
    assert got["Recall@1"] == pytest.approx((0 + 1) / 2)
    assert got["Recall@5"] == pytest.approx(1.0)


def test_devset_is_well_formed() -> None:
    questions = load_devset(ROOT / "eval" / "devset.jsonl")
    assert len(questions) >= 60
    assert len({q.qid for q in questions}) == len(questions)
    kinds = {q.kind for q in questions}
    assert {"lexical", "paraphrase", "number", "acronym", "multi_doc", "no_answer"} <= kinds
    assert all(not q.qrels for q in questions if q.kind == "no_answer")
    covered = {doc for q in questions for doc, grade in q.qrels.items() if grade == 2}
    assert len(covered) == 38


@pytest.mark.parametrize("name, size", [("seed_questions.jsonl", 24), ("shipped_fresh_questions.jsonl", 120)])
def test_the_question_sets_written_apart_judge_shipped_documents(name: str, size: int) -> None:
    shipped = {doc for q in load_devset(ROOT / "eval" / "devset.jsonl") for doc in q.qrels}
    questions = load_devset(ROOT / "eval" / name)
    assert len(questions) == size and len({q.qid for q in questions}) == size
    assert all(set(q.qrels) <= shipped for q in questions)
    assert all(not q.qrels for q in questions if q.kind == "no_answer")
    assert {"fact", "number", "definition", "yesno", "which-papers", "comparison", "no_answer"} <= {
        q.kind for q in questions}


def test_the_ml_questions_are_split_by_document_and_quote_their_abstracts() -> None:
    """The 221 ML questions: every kind in both halves, no document in both, each support sentence verbatim."""
    import gzip
    import json
    from collections import Counter

    questions = load_devset(ROOT / "eval" / "ml_questions.jsonl")
    assert len(questions) == 221 and len({q.qid for q in questions}) == 221
    kinds = Counter((q.kind, q.half) for q in questions)
    assert {kind for kind, _ in kinds} == {"fact", "number", "yesno", "which-paper", "two-paper", "off-corpus"}
    assert all(kinds[(kind, half)] >= 7 for kind, _ in kinds for half in ("dev", "test"))
    halves: dict[str, set[str]] = {}
    for q in questions:
        for doc in q.qrels:
            halves.setdefault(doc, set()).add(q.half)
    assert all(len(h) == 1 for h in halves.values())
    assert all(q.decision in ("yes", "no") for q in questions if q.kind == "yesno")
    assert all(len(q.papers or []) == 2 for q in questions if q.kind == "two-paper")
    assert all(not q.qrels and not q.answer for q in questions if q.kind == "off-corpus")
    corpus = ROOT.parent / "shared" / "corpora" / "ml_abstracts.jsonl.gz"
    if not corpus.is_file():
        pytest.skip(f"{corpus} is absent")
    wanted = set(halves)
    texts = {}
    with gzip.open(corpus, "rt", encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["_id"] in wanted:
                texts[row["_id"]] = row["text"]
    assert set(texts) == wanted
    for q in questions:
        assert all(any(s in texts[doc] for doc in q.qrels) for s in q.support or []), q.qid


@pytest.mark.slow
def test_three_way_evaluation_on_the_devset(seed_settings) -> None:
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup, open_retriever

    retriever = open_retriever(seed_settings, ensure_index(index_setup(seed_settings), show_progress=False))
    results = evaluate_devset(retriever, load_devset(ROOT / "eval" / "devset.jsonl"))
    assert set(results["modes"]) == {"bm25", "dense", "hybrid"}
    for mode, metrics in results["modes"].items():
        assert set(metrics) == {"Recall@1", "Recall@5", "Recall@10", "MRR@10", "nDCG@10"}
        assert metrics["Recall@10"] >= 0.8, mode
    assert results["by_kind"]["bm25"]["acronym"] == 1.0


def _tiny_beir(tmp_path: Path) -> Path:
    """A three-document BEIR folder with two judged queries and one unjudged."""
    import json

    beir = tmp_path / "tiny"
    (beir / "qrels").mkdir(parents=True)
    docs = [
        {"_id": "d1", "title": "KV cache eviction", "text": "LU-KV allocates head-level budgets for KV cache eviction."},
        {"_id": "d2", "title": "Metagenomics", "text": "EDEN is a metagenomic foundation model with 28 billion parameters."},
        {"_id": "d3", "title": "Conformal prediction", "text": "A full solution path for RKHS conformal prediction."},
    ]
    (beir / "corpus.jsonl").write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    queries = [{"_id": "q1", "text": "Which method evicts the KV cache per head?"},
               {"_id": "q2", "text": "How large is the metagenomic model?"}, {"_id": "q3", "text": "unjudged"}]
    (beir / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return beir


@pytest.mark.slow
@pytest.mark.parametrize(
    ("backend", "fusions"),
    [("embedded", {"rrf", "weighted", "bounded"}), ("milvus", {"rrf", "weighted"})],
)
def test_eval_benchmark_command_on_a_tiny_beir_folder(tmp_path: Path, backend: str, fusions: set[str]) -> None:
    import json

    from typer.testing import CliRunner

    from citerag.service.cli import app

    out = tmp_path / "results"
    result = CliRunner().invoke(app, ["eval", "--benchmark", str(_tiny_beir(tmp_path)), "--out", str(out),
                                      "--index-dir", str(tmp_path / "idx"), "--backend", backend, "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads((out / "retrieval.json").read_text())["rows"]
    suffix = "" if backend == "embedded" else f"-{backend}"
    modes = {"bm25", "dense"} | {f"hybrid-{f}" for f in fusions}
    assert set(rows) == {f"all/tiny-{mode}{suffix}" for mode in modes}
    assert rows[f"all/tiny-hybrid-rrf{suffix}"]["summary"]["nDCG@10"] == pytest.approx(1.0)
    row = rows[f"all/tiny-hybrid-rrf{suffix}"]
    assert row["settings"] == {"what": "2 queries, 3 documents in 3 passages", "backend": backend}
    assert "all/tiny-hybrid-rrf" in (out / "LATEST.md").read_text()
    assert len(list((tmp_path / "runs").glob("*.json"))) == len(modes)  # raw runs beside, not in the repository


def test_missing_benchmark_file_is_named(tmp_path: Path) -> None:
    from citerag.index.errors import CiteragError
    from citerag.eval.retrieval import load_beir

    with pytest.raises(CiteragError, match=r"corpus\.jsonl: not found"):
        load_beir(tmp_path)
