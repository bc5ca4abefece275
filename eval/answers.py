"""Answer-quality evaluation on the dev set: accuracy, citation precision/recall, abstention, latency.

Definitions (per run over the dev set):

* answer accuracy: share of graded questions answered right: the answer contains one of the expected strings
  (after NFKC and case folding), its decision equals the gold one (yes/no questions), and it names every paper
  the question is about (``papers``); an abstention counts as wrong;
* papers named: share of the ``papers`` of two-paper / which-paper questions that the answer names;
* citation precision: share of all citations (answerable questions) whose passage comes from a relevant document;
* citation recall: share of answerable questions with at least one relevant citation;
* out-of-range citations: ``[n]`` markers left in answers with ``n`` outside ``1..len(passages)`` (must be 0);
* abstention accuracy: share of no-answer questions on which the service abstained;
* readable: share of answered questions whose answer breaks none of the readability rules
  (:mod:`citerag.eval.readability`; each answer's broken rules are listed in its record);
* median retrieve / prompt / generate / total time in ms.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from citerag.eval.readability import readability_problems
from citerag.eval.retrieval import DevQuestion
from citerag.service.answering.question import SEVERAL_PAPERS

_MARKER = re.compile(r"\[(\d+)\]")
#: Dev-set kinds whose answers must name every paper they cite (readability rule 4).
SEVERAL_PAPER_KINDS = frozenset({"which-paper", "which-papers", "two-paper", "comparison", "multi_doc"})
#: The gold kinds pooled as ``facts`` (a short answer the paper states: what, how many, which paper).
FACT_KINDS = frozenset({"fact", "number", "which-paper"})


class CitationLike(Protocol):
    """What the evaluation reads of a citation: ``result.passage.doc_id`` (the cited passage's document) and the
    cited span ``start``-``end``."""

    result: Any
    start: int
    end: int


class AnswerLike(Protocol):
    """What the evaluation reads of an answer, whichever answerer made it: ``answerer.ask(question, k=k)`` returns
    an object with these attributes (``decision``: ``"yes"``/``"no"``/``"maybe"`` or ``None``; ``confidence`` in
    [0, 1]; ``timings_ms`` by stage)."""

    answer: str
    abstained: bool
    reason: str
    citations: Sequence[CitationLike]
    passages: Sequence[Any]
    raw: str
    timings_ms: dict[str, float]
    decision: str | None
    confidence: float


class Answering(Protocol):
    """An answerer as the evaluation uses it (:func:`citerag.service.pipeline.open_answerer` makes one)."""

    def ask(self, question: str, *, k: int) -> AnswerLike: ...


def normalise(text: str) -> str:
    """NFKC, case-folded, whitespace-collapsed (for matching expected answer strings)."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


@dataclass(frozen=True, slots=True)
class AnswerRecord:
    """One question's outcome, kept for the per-question listing."""

    qid: str
    kind: str
    correct: bool | None  # None: no expected strings
    abstained: bool
    relevant_citations: int
    citations: int
    out_of_range: int
    answer: str
    timings_ms: dict[str, float]
    reason: str = ""  # why it abstained ("" when it answered)
    raw: str = ""  # the model's unedited output ("" when the model was not called)
    papers_named: int = 0  # of the question's papers, how many the answer names
    papers: int = 0
    decision: str | None = None
    confidence: float = 0.0  # the probability that the evidence answers (the judge's); 0.0 when not asked
    readability: tuple[str, ...] = ()  # the readability rules the answer breaks (eval/readability.py)
    decision_probabilities: dict[str, float] = field(default_factory=dict)  # yes/no/maybe behind ``decision``
    question: str = ""
    analysed_kind: str = ""  # the kind the service read the question as
    lost_at: str = ""  # the stage that lost the answer (:mod:`citerag.eval.attribution`)


def judge(question: DevQuestion, answer: AnswerLike) -> AnswerRecord:
    """Score one answer against its dev-set question."""
    relevant = sum(c.result.passage.doc_id in question.qrels for c in answer.citations)
    out_of_range = sum(not 1 <= int(n) <= len(answer.passages) for n in _MARKER.findall(answer.answer))
    correct = None
    text = normalise(answer.answer)
    named = [any(normalise(name) in text for name in paper["names"]) and not answer.abstained
             for paper in question.papers or []]
    if question.answer or question.decision or question.papers:
        correct = not answer.abstained
        if question.answer:
            correct = correct and any(normalise(expected) in text for expected in question.answer)
        if question.decision:
            correct = correct and getattr(answer, "decision", None) == question.decision
        if question.papers:
            correct = correct and all(named)
    several = question.kind in SEVERAL_PAPER_KINDS or getattr(answer, "kind", "") in SEVERAL_PAPERS
    problems = () if answer.abstained else tuple(readability_problems(answer.answer, answer.citations, several,
                                                                      question.question))
    from citerag.eval.attribution import attribute

    return AnswerRecord(
        question.qid, question.kind, correct, answer.abstained, relevant, len(answer.citations), out_of_range,
        answer.answer, {k: round(v, 1) for k, v in answer.timings_ms.items()}, answer.reason, answer.raw,
        sum(named), len(named), getattr(answer, "decision", None), float(getattr(answer, "confidence", 0.0)),
        problems, {k: round(v, 4) for k, v in getattr(answer, "decision_probabilities", {}).items()},
        question.question, getattr(answer, "kind", ""), attribute(question, answer, correct),
    )


def summarise(records: list[AnswerRecord], questions: list[DevQuestion]) -> dict[str, float]:
    """Aggregate metrics (module docstring) over ``records`` (one per question, same order)."""
    answerable = [r for r, q in zip(records, questions, strict=True) if q.qrels]
    unanswerable = [r for r, q in zip(records, questions, strict=True) if not q.qrels]
    graded = [r for r in records if r.correct is not None]
    citations = sum(r.citations for r in answerable)
    answered = sum(not r.abstained for r in records)

    def median(key: str) -> float:
        values = [r.timings_ms.get(key, 0.0) for r in records if not r.abstained or key == "retrieve"]
        return statistics.median(values) if values else 0.0

    by_kind: dict[str, float] = {}
    for kind in dict.fromkeys(r.kind for r in graded):
        of_kind = [r for r in graded if r.kind == kind]
        by_kind[kind] = sum(bool(r.correct) for r in of_kind) / len(of_kind)
    several = [r for r in records if r.papers >= 2]
    if several:
        by_kind["both_named"] = sum(r.papers_named == r.papers for r in several) / len(several)
    facts = [r for r in graded if r.kind in FACT_KINDS]
    if facts:
        by_kind["facts"] = sum(bool(r.correct) for r in facts) / len(facts)
    if unanswerable:
        by_kind["off_corpus_abstained"] = sum(r.abstained for r in unanswerable) / len(unanswerable)
    return {
        "questions": float(len(records)),
        **by_kind,
        "answer_accuracy": sum(bool(r.correct) for r in graded) / max(1, len(graded)),
        "citation_precision": sum(r.relevant_citations for r in answerable) / max(1, citations),
        "citation_recall": sum(r.relevant_citations > 0 for r in answerable) / max(1, len(answerable)),
        "out_of_range_citations": float(sum(r.out_of_range for r in records)),
        "papers_named": sum(r.papers_named for r in records) / max(1, sum(r.papers for r in records)),
        "abstention_accuracy": sum(r.abstained for r in unanswerable) / max(1, len(unanswerable)),
        "readable": sum(not r.readability for r in records if not r.abstained) / max(1, answered),
        "false_abstentions": sum(r.abstained for r in answerable) / max(1, len(answerable)),
        "median_retrieve_ms": median("retrieve"),
        "median_prompt_ms": median("prompt"),
        "median_generate_ms": median("generate"),
        "median_total_ms": median("total"),
    }


def evaluate_answers(answerer: Answering, questions: list[DevQuestion], k: int = 5,
                     on_record: Callable[[AnswerRecord], None] | None = None) -> dict[str, Any]:
    """Ask every dev-set question; return ``{"summary": {...}, "attribution": {stage: n}, "questions": [AnswerRecord
    as dict, ...]}`` (``attribution``: :func:`~citerag.eval.attribution.attribution_table`). ``on_record`` sees each
    record as it is made (progress bars)."""
    from citerag.eval.attribution import attribution_table

    records = []
    for question in questions:
        records.append(judge(question, answerer.ask(question.question, k=k)))
        if on_record is not None:
            on_record(records[-1])
    return {
        "summary": summarise(records, questions),
        "attribution": attribution_table(r.lost_at for r in records),
        "questions": [asdict(record) for record in records],
    }
