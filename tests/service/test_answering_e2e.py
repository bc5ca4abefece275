"""Evidence-first answering end to end with the real embedder, indexes and model, on a few shared questions of
COVID-QA (full COVID-19 papers: a second domain) and PubMedQA, each over a small index of the gold documents and
distractors (built in seconds, unlike the whole benchmark corpora)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from citerag.eval import qa_metrics as m
from citerag.eval.qa import load_qa
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

BENCHMARKS = ROOT.parent / "shared" / "benchmarks"
COVIDQA = ["covidqa-q3597", "covidqa-q485"]
COVIDQA_DISTRACTORS = ["covidqa-630", "covidqa-102"]
PUBMEDQA = ["pubmedqa-17453263", "pubmedqa-10808977"]
PUBMEDQA_DISTRACTORS = 6


def small_corpus(folder: Path, doc_ids: set[str], extra: int, out: Path) -> Path:
    """``out``: the benchmark's records for ``doc_ids`` plus its first ``extra`` other records (JSONL)."""
    kept, others = [], 0
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            row = json.loads(line)
            if row["_id"] in doc_ids:
                kept.append(line)
            elif others < extra:
                kept.append(line)
                others += 1
    out.write_text("".join(kept), encoding="utf-8")
    return out


@pytest.fixture(scope="module")
def answer_with(settings_factory, tmp_path_factory):
    if not BENCHMARKS.is_dir():
        pytest.skip(f"{BENCHMARKS} is absent (the shared benchmarks are beside the checkout in CI)")
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup, open_answerer, open_retriever

    def make(name: str, qids: list[str], distractors: list[str] | int):
        bench = load_qa(BENCHMARKS / name)
        questions = {q.qid: q for q in bench.questions if q.qid in qids}
        docs = {q.doc_id for q in questions.values()}
        extra = distractors if isinstance(distractors, int) else 0
        docs |= set(distractors) if not isinstance(distractors, int) else set()
        corpus = small_corpus(BENCHMARKS / name, docs, extra, tmp_path_factory.mktemp(name) / "corpus.jsonl")
        settings = settings_factory(corpus=[corpus])
        index = ensure_index(index_setup(settings), show_progress=False)
        answerer = open_answerer(settings, open_retriever(settings, index))
        return answerer, questions

    return make


def test_covidqa_answers_cite_the_gold_span(answer_with) -> None:
    answerer, questions = answer_with("covidqa", COVIDQA, COVIDQA_DISTRACTORS)
    for qid in COVIDQA:
        question = questions[qid]
        answer = answerer.ask(question.question, k=8)
        assert not answer.abstained, (qid, answer.reason)
        cited = [(c.result.passage.doc_id, c.start, c.end) for c in answer.citations]
        assert m.span_hit(cited, question.doc_id, [(s, e) for _, s, e in question.answers]), (qid, answer.answer)
        assert m.token_f1(m.strip_markers(answer.answer), [a[0] for a in question.answers]) >= 0.5, answer.answer
        for citation in answer.citations:  # a citation is the exact span of (the part of) a sentence it states
            assert any(e.doc_id == citation.result.document.doc_id and e.start <= citation.start < citation.end <= e.end
                       for e in answer.evidence)


def test_pubmedqa_answers_open_with_a_decision_and_cite_the_abstract(answer_with) -> None:
    answerer, questions = answer_with("pubmedqa", PUBMEDQA, PUBMEDQA_DISTRACTORS)
    for qid in PUBMEDQA:
        question = questions[qid]
        answer = answerer.ask(question.question, k=8)
        assert answer.decision == question.decision, (qid, answer.answer)
        assert answer.answer.startswith(f"{question.decision.capitalize()}. ")
        assert {c.result.passage.doc_id for c in answer.citations} == {question.doc_id}
