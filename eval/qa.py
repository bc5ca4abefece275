"""QA benchmarks in the evaluation runner: COVID-QA (gold answer spans) and PubMedQA (yes/no/maybe decisions).

Both folders hold ``corpus.jsonl`` (indexed once into ``.citerag-bench/<name>/``, like SciFact) and
``questions.jsonl`` (formats in ``shared/README.md``). Every question is asked through the same code path as
``POST /ask`` (:meth:`Answerer.ask`). Questions are split into fixed halves by the parity of the number in their
id (``covidqa-q262`` -> 262, ``pubmedqa-10808977`` -> 10808977): the odd half is for tuning (``dev``), the even half
for reporting (``test``). Metrics are those of :mod:`citerag.eval.qa_metrics`.
"""

from __future__ import annotations

import json
import random
import re
import statistics
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from citerag.index.errors import CiteragError
from citerag.eval import qa_metrics as m

Half = Literal["dev", "test", "all"]


@dataclass(frozen=True, slots=True)
class QAQuestion:
    """One benchmark question.

    Attributes:
        qid: the benchmark's id.
        question: the question text.
        doc_id: the gold document.
        answers: gold answers as ``(text, start, end)`` offsets into the gold document (COVID-QA; empty otherwise).
        decision: the gold ``yes``/``no``/``maybe`` (PubMedQA; ``None`` otherwise).
    """

    qid: str
    question: str
    doc_id: str
    answers: tuple[tuple[str, int, int], ...] = ()
    decision: str | None = None


@dataclass(frozen=True, slots=True)
class QABenchmark:
    """A QA benchmark folder: ``kind`` is ``"span"`` (COVID-QA) or ``"decision"`` (PubMedQA)."""

    name: str
    kind: Literal["span", "decision"]
    corpus: Path
    questions: list[QAQuestion] = field(default_factory=list)


def load_qa(folder: Path) -> QABenchmark:
    """Read a QA benchmark folder (``corpus.jsonl`` and ``questions.jsonl``).

    Raises:
        CiteragError: a file is missing, or a question has neither ``answers`` nor ``decision``.
    """
    corpus, questions_file = folder / "corpus.jsonl", folder / "questions.jsonl"
    for required in (corpus, questions_file):
        if not required.is_file():
            raise CiteragError(f"{required}: not found; a QA benchmark folder holds corpus.jsonl and questions.jsonl")
    questions: list[QAQuestion] = []
    with questions_file.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            row = json.loads(line)
            answers = tuple((a["text"], int(a["start"]), int(a["end"])) for a in row.get("answers", ()))
            if not answers and row.get("decision") not in m.DECISIONS:
                raise CiteragError(
                    f"{questions_file}:{line_no}: a question needs 'answers' or a yes/no/maybe 'decision'")
            questions.append(QAQuestion(str(row["id"]), row["question"], row["doc_id"], answers, row.get("decision")))
    kind: Literal["span", "decision"] = "span" if questions and questions[0].answers else "decision"
    return QABenchmark(folder.name, kind, corpus, questions)


Q = TypeVar("Q")


def half(questions: list[Q], which: Half) -> list[Q]:
    """The ``dev`` or ``test`` half of ``questions`` (in file order), or ``all``. Halves are split by document, so
    that no document is read by both: a question's own ``half`` field when it has one (the ML questions), else the
    parity of the number in its ``doc_id`` (QA benchmarks: ``covidqa-630`` is test, ``pubmed-10808977`` dev), else
    of the number in its ``qid`` (the shipped dev set: ``q001`` is dev). Odd is dev, even is test.

    >>> qa = [QAQuestion("covidqa-q1", "?", "covidqa-630"), QAQuestion("covidqa-q2", "?", "covidqa-641")]
    >>> [q.doc_id for q in half(qa, "test")], [q.doc_id for q in half(qa, "dev")]
    (['covidqa-630'], ['covidqa-641'])
    """
    if which == "all":
        return list(questions)
    return [q for q in questions if half_of(q) == which]


def half_of(question: object) -> Literal["dev", "test"]:
    """The half ``question`` belongs to (:func:`half`)."""
    own = getattr(question, "half", None)
    if own in ("dev", "test"):
        return own
    key = getattr(question, "doc_id", None) or getattr(question, "qid")
    digits = re.findall(r"\d+", key)
    number = int(digits[-1]) if digits else sum(map(ord, key))
    return "dev" if number % 2 else "test"


def sample(questions: list[QAQuestion], n: int | None, seed: int) -> list[QAQuestion]:
    """A fixed sample of ``n`` questions (``random.Random(seed)``), in file order; all of them when ``n`` is None
    or at least their number."""
    if n is None or n >= len(questions):
        return list(questions)
    chosen = set(random.Random(seed).sample(range(len(questions)), n))
    return [q for i, q in enumerate(questions) if i in chosen]


@dataclass(slots=True)
class QARecord:
    """One question's outcome."""

    qid: str
    question: str
    answer: str
    abstained: bool
    citations: list[tuple[str, int, int]]
    timings_ms: dict[str, float]
    decision: str | None = None
    gold_decision: str | None = None
    f1: float = 0.0
    em: float = 0.0
    gold_recall: float = 0.0
    span_hit: bool = False
    cited_gold: int = 0
    confidence: float = 0.0
    reach: int | None = None  # rank of the first retrieved passage holding the gold span (COVID-QA), else None
    decision_probabilities: dict[str, float] = field(default_factory=dict)  # yes/no/maybe behind ``decision``


def judge(question: QAQuestion, answer: Any, reach: int | None = None) -> QARecord:
    """Score one :class:`~citerag.service.answering.Answer` (or anything with ``answer``, ``abstained``, ``citations``,
    ``timings_ms``, ``decision`` and ``confidence``) against ``question``."""
    citations = [(c.result.passage.doc_id, c.start, c.end) for c in answer.citations]
    record = QARecord(
        question.qid, question.question, answer.answer, answer.abstained, citations,
        {k: round(v, 1) for k, v in answer.timings_ms.items()}, getattr(answer, "decision", None), question.decision,
        cited_gold=sum(doc == question.doc_id for doc, _, _ in citations),
        confidence=float(getattr(answer, "confidence", 0.0)), reach=reach,
        decision_probabilities={k: round(v, 4) for k, v in getattr(answer, "decision_probabilities", {}).items()},
    )
    if question.answers and not answer.abstained:
        text = m.strip_markers(answer.answer)
        golds = [a[0] for a in question.answers]
        record.f1, record.em = m.token_f1(text, golds), m.exact_match(text, golds)
        record.gold_recall = m.gold_recall(text, golds)
        record.span_hit = m.span_hit(citations, question.doc_id, [(a[1], a[2]) for a in question.answers])
    return record


def reach_rank(results: list[Any], question: QAQuestion) -> int | None:
    """The 1-based rank of the first passage in ``results`` that overlaps a gold answer span, or ``None``."""
    for rank, result in enumerate(results, start=1):
        p = result.passage
        if p.doc_id == question.doc_id and any(m.spans_overlap((p.start, p.end), (s, e))
                                               for _, s, e in question.answers):
            return rank
    return None


def summarise(records: list[QARecord], kind: str) -> dict[str, float]:
    """Aggregate the per-question records (module docstring of :mod:`citerag.eval.qa_metrics`)."""
    n = max(1, len(records))
    citations = sum(len(r.citations) for r in records)

    def median(key: str) -> float:
        values = [r.timings_ms.get(key, 0.0) for r in records]
        return statistics.median(values) if values else 0.0

    out: dict[str, float] = {"questions": float(len(records))}
    if kind == "span":
        out.update(
            exact_match=sum(r.em for r in records) / n,
            token_f1=sum(r.f1 for r in records) / n,
            gold_recall=sum(r.gold_recall for r in records) / n,
            span_hit=sum(r.span_hit for r in records) / n,
        )
        for depth in (1, 3, 10, 20):
            out[f"gold_in_top{depth}"] = sum(r.reach is not None and r.reach <= depth for r in records) / n
    else:
        out.update(m.decision_scores([r.decision for r in records], [r.gold_decision or "" for r in records]))
    out.update(
        cited_doc_precision=sum(r.cited_gold for r in records) / max(1, citations),
        abstention_rate=sum(r.abstained for r in records) / n,
        median_retrieve_ms=median("retrieve"), median_prompt_ms=median("prompt"),
        median_generate_ms=median("generate"), median_total_ms=median("total"),
    )
    return out


def correct(record: QARecord, kind: str) -> bool:
    """Whether an answer counts as right for the risk-coverage curve: a span hit (COVID-QA) or the gold decision."""
    return record.span_hit if kind == "span" else record.decision == record.gold_decision


def evaluate_qa(
    ask: Callable[[str], Any],
    bench: QABenchmark,
    questions: list[QAQuestion],
    search: Callable[[str], list[Any]] | None = None,
    on_record: Callable[[QARecord, dict[str, float]], None] | None = None,
) -> dict[str, Any]:
    """Ask every question with ``ask`` (question -> Answer); ``search`` (question -> top-20 passages) gives the
    retrieval reach of span benchmarks. ``on_record`` sees each record and the running summary (progress bars).

    Returns ``{"summary": {...}, "risk_coverage": [...], "questions": [record dicts]}``."""
    records: list[QARecord] = []
    for question in questions:
        reach = reach_rank(search(question.question), question) if search is not None and bench.kind == "span" else None
        records.append(judge(question, ask(question.question), reach))
        if on_record is not None:
            on_record(records[-1], summarise(records, bench.kind))
    answered = [r for r in records if not r.abstained]
    return {
        "summary": summarise(records, bench.kind),
        "risk_coverage": m.risk_coverage([r.confidence for r in answered], [correct(r, bench.kind) for r in answered]),
        "questions": [
            asdict(r) for r in records
        ],
    }
