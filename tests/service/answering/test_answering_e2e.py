"""Answering end to end with the real embedder, indexes and model: one question of each kind over a sample of the
22,981 ML abstracts (a few thousand abstracts, so that the index builds in about a minute), each answer checked for
its content, its citations and the readability rules; and one question of COVID-QA (full COVID-19 papers, read as
their retrieved passages) and of PubMedQA (yes/no/maybe over clinical abstracts), each over a small index of the
gold documents and distractors. The questions are written for these tests, apart from the evaluation sets."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from citerag.eval import qa_metrics as m
from citerag.eval.qa import load_qa
from citerag.eval.readability import readability_problems
from tests.conftest import ROOT

pytestmark = pytest.mark.slow

SHARED = ROOT.parent / "shared"
ML_ABSTRACTS = SHARED / "corpora" / "ml_abstracts.jsonl.gz"
#: Every this-many-th abstract joins the sample as a distractor (about 2,900 abstracts).
SAMPLE_EVERY = 8
CAPG, COCLUSTER, LAM, PARABOLIC = ("icml2018-2018", "icml2017-591", "uai2024-f2a2473d1a",
                                   "aistats2025-7gausJk3jB")


def _sample(out: Path) -> Path:
    """``out``: the papers these tests ask about and every :data:`SAMPLE_EVERY`-th other abstract (JSONL)."""
    keep = {CAPG, COCLUSTER, LAM, PARABOLIC}
    with gzip.open(ML_ABSTRACTS, "rt", encoding="utf-8") as handle, out.open("w", encoding="utf-8") as sample:
        for i, line in enumerate(handle):
            if json.loads(line)["_id"] in keep or i % SAMPLE_EVERY == 0:
                sample.write(line)
    return out


@pytest.fixture(scope="module")
def ml(settings_factory, tmp_path_factory):
    if not ML_ABSTRACTS.is_file():
        pytest.skip(f"{ML_ABSTRACTS} is absent (the shared corpora are beside the checkout in CI)")
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup, open_answerer, open_retriever

    settings = settings_factory(corpus=[_sample(tmp_path_factory.mktemp("ml") / "sample.jsonl")])
    return open_answerer(settings, open_retriever(settings, ensure_index(index_setup(settings), show_progress=False)))


def _checked(answer, kind: str, expected: list[str], cited: set[str]) -> None:
    """``answer`` is of ``kind``, holds one of ``expected`` (case ignored), cites exactly the documents ``cited``,
    quotes every citation exactly, and breaks no readability rule."""
    assert not answer.abstained, answer.reason
    assert answer.kind == kind
    assert any(text.lower() in answer.answer.lower() for text in expected), answer.answer
    assert {c.result.document.doc_id for c in answer.citations} == cited, answer.answer
    for citation in answer.citations:  # every citation is the exact span of a sentence the model read
        assert any(e.doc_id == citation.result.document.doc_id and (e.start, e.end) == (citation.start, citation.end)
                   for e in answer.evidence)
    assert readability_problems(answer.answer, answer.citations, kind in ("which_papers", "comparison")) == []


def test_fact(ml) -> None:
    answer = ml.ask("What does the policy gradient estimator for bounded action spaces exploit to reduce variance?")
    _checked(answer, "fact", ["clipped"], {CAPG})


def test_number(ml) -> None:
    answer = ml.ask("On how many domain generalization benchmarks was Logit Attribution Matching evaluated?")
    _checked(answer, "number", ["five"], {LAM})


def test_definition(ml) -> None:
    _checked(ml.ask("What is CAPG?"), "definition", ["clipped action policy gradient", "policy gradient estimator"],
             {CAPG})


def test_yes_no(ml) -> None:
    yes = ml.ask("Does the co-clustering method based on optimal transport use entropy regularization?")
    assert yes.decision == "yes" and yes.answer.startswith("Yes. "), yes.answer
    no = ml.ask("Is the clipped action policy gradient estimator biased?")
    assert no.decision == "no" and no.answer.startswith("No. "), no.answer
    assert {c.result.document.doc_id for c in yes.citations} == {COCLUSTER}
    assert {c.result.document.doc_id for c in no.citations} == {CAPG}


def test_which_paper(ml) -> None:
    answer = ml.ask("Which paper regularizes continual learning with a parabolic partial differential equation?")
    _checked(answer, "which_papers", ["Parabolic Continual Learning"], {PARABOLIC})


def test_comparison(ml) -> None:
    answer = ml.ask("How do CAPG and Logit Attribution Matching differ in what they are for?")
    assert answer.kind == "comparison" and not answer.abstained, answer.reason
    assert {c.result.document.doc_id for c in answer.citations} == {CAPG, LAM}, answer.answer
    assert "CAPG" in answer.answer and ("LAM" in answer.answer or "Logit Attribution Matching" in answer.answer)


def test_off_corpus(ml) -> None:
    answer = ml.ask("What word error rate does the QuillSpeech recognizer reach on the LibriSpeech test-clean set?")
    assert answer.abstained and answer.citations == []


# --- a second domain: full papers and clinical abstracts ------------------------------------------------------------

BENCHMARKS = SHARED / "benchmarks"


def _small_corpus(folder: Path, doc_ids: set[str], extra: int, out: Path) -> Path:
    """``out``: the benchmark's records for ``doc_ids`` plus its first ``extra`` other records (JSONL)."""
    kept, others = [], 0
    with (folder / "corpus.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            if json.loads(line)["_id"] in doc_ids:
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

    def make(name: str, qid: str, extra: int):
        bench = load_qa(BENCHMARKS / name)
        question = next(q for q in bench.questions if q.qid == qid)
        corpus = _small_corpus(BENCHMARKS / name, {question.doc_id}, extra,
                               tmp_path_factory.mktemp(name) / "corpus.jsonl")
        settings = settings_factory(corpus=[corpus])
        index = ensure_index(index_setup(settings), show_progress=False)
        return open_answerer(settings, open_retriever(settings, index)), question

    return make


def test_a_full_paper_is_read_as_its_retrieved_passages_and_the_answer_cites_the_gold_span(answer_with) -> None:
    answerer, question = answer_with("covidqa", "covidqa-q262", 3)
    answer = answerer.ask(question.question)
    assert not answer.abstained, answer.reason
    cited = [(c.result.passage.doc_id, c.start, c.end) for c in answer.citations]
    assert m.span_hit(cited, question.doc_id, [(s, e) for _, s, e in question.answers]), answer.answer
    gold = next(e.result.document for e in answer.evidence if e.doc_id == question.doc_id)
    read = sum(len(e.text) for e in answer.evidence if e.doc_id == question.doc_id)
    assert read < len(gold.text) / 4  # a full paper is read as its retrieved passages, never whole


def test_a_clinical_yes_no_question_opens_with_its_decision(answer_with) -> None:
    answerer, question = answer_with("pubmedqa", "pubmedqa-10808977", 6)
    answer = answerer.ask(question.question)
    assert answer.decision == question.decision and answer.answer.lower().startswith(question.decision), answer.answer
    assert {c.result.passage.doc_id for c in answer.citations} == {question.doc_id}
