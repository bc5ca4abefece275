"""Failure attribution: for each wrongly answered question, the pipeline stage that lost the answer.

Stages, checked in this order (the first that applies names the loss):

* ``answered off-corpus``: a question no document answers was answered;
* ``retrieval miss``: no relevant document is among the retrieved passages;
* ``kind misread``: the question was analysed as another kind than it is (a fact question answered "Yes.");
* ``evidence miss``: a relevant document was retrieved, but the model never read the sentence that answers (the
  question's ``support`` sentences; without them, a sentence holding a gold string);
* ``gate: <name>``: a rule abstained before the model judged (:attr:`Answer.abstained_by` names it);
* ``judge abstention``: the model judged that what it read does not answer;
* ``verify dropped it``: the model's own text was right and the checked answer is not;
* ``writer``: the model read the answer and wrote a wrong one (a wrong decision, a paper not named).

A right answer is ``right``; a question without gold is ``ungraded``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from citerag.eval.answers import normalise
from citerag.eval.retrieval import DevQuestion

RIGHT, UNGRADED = "right", "ungraded"
#: The analysed kinds (:data:`citerag.service.answering.question.QuestionKind`) each gold kind may be read as.
COMPATIBLE_KINDS: dict[str, frozenset[str]] = {
    "fact": frozenset({"fact", "number", "definition", "which_papers", "comparison"}),
    "number": frozenset({"number", "fact", "definition"}),
    "yesno": frozenset({"yes_no"}),
    "which-paper": frozenset({"which_papers", "fact", "definition"}),
    "two-paper": frozenset({"comparison", "which_papers", "fact", "number"}),
}
#: Old-style abstention reasons, when an answer does not name the stage that abstained: the phrase -> stage.
_REASON_STAGES = (
    ("no passage is close enough", "gate: retrieval gap"),
    ("no passage matched", "retrieval miss"),
    ("which the question counts", "gate: counted term"),
    ("states none for it", "gate: amount"),
    ("asks for an amount", "gate: amount"),
    ("no indexed passage mentions", "gate: unseen word"),
    ("does not answer the question", "judge abstention"),
    ("judged to answer", "judge abstention"),
    ("not found", "judge abstention"),
)


def abstention_stage(answer: Any) -> str:
    """The stage that abstained: ``answer.abstained_by`` when it says (``"judge"`` -> ``judge abstention``, any
    other name -> ``gate: <name>``), else read from its reason."""
    by = getattr(answer, "abstained_by", "")
    if by:
        return "judge abstention" if by == "judge" else by if by.startswith(("retrieval", "verify")) else f"gate: {by}"
    reason = answer.reason.lower()
    return next((stage for phrase, stage in _REASON_STAGES if phrase in reason), "gate: other")


def read_answer(question: DevQuestion, answer: Any) -> bool | None:
    """Whether the model read the sentence that answers ``question`` (a ``support`` sentence, or a sentence with a
    gold string, of a relevant document, overlapping the evidence the answer shows); ``None`` when the question
    says nothing to look for or the answer shows no evidence."""
    evidence = [(e.doc_id, e.start, e.end, e.text) for e in getattr(answer, "evidence", [])]
    if not evidence:
        return None  # the answerer does not say what it read
    documents = {p.document.doc_id: p.document for p in answer.passages if p.document.doc_id in question.qrels}
    spans: list[tuple[str, int, int]] = []
    for doc_id, document in documents.items():
        for sentence in question.support or []:
            at = document.text.find(sentence)
            if at >= 0:
                spans.append((doc_id, at, at + len(sentence)))
    if spans:
        return any(d == doc and s < end and start < e for doc, start, end in spans for d, s, e, _ in evidence)
    if question.answer:
        return any(normalise(gold) in normalise(text) for gold in question.answer for *_, text in evidence)
    return None


def attribute(question: DevQuestion, answer: Any, correct: bool | None) -> str:
    """The stage that lost ``question``'s answer (module docstring), ``right`` or ``ungraded``."""
    if not question.qrels:
        return RIGHT if answer.abstained else "answered off-corpus"
    if correct is None:
        return UNGRADED
    if correct:
        return RIGHT
    retrieved = {p.document.doc_id for p in answer.passages}
    if not retrieved & set(question.qrels):
        return "retrieval miss"
    kind = getattr(answer, "kind", "")
    if kind and question.kind in COMPATIBLE_KINDS and kind not in COMPATIBLE_KINDS[question.kind]:
        return "kind misread"
    if answer.abstained and abstention_stage(answer).startswith("gate"):
        return abstention_stage(answer)
    if read_answer(question, answer) is False:
        return "evidence miss"
    if answer.abstained:
        return abstention_stage(answer)
    raw = normalise(getattr(answer, "raw", "") or "")
    if question.answer and any(normalise(gold) in raw for gold in question.answer):
        return "verify dropped it"
    return "writer"


def attribution_table(stages: Iterable[str]) -> dict[str, int]:
    """How many questions each stage lost (``right`` and ``ungraded`` left out), most first."""
    counts = Counter(stage for stage in stages if stage not in (RIGHT, UNGRADED))
    return dict(counts.most_common())


def stages_of(records: Sequence[dict[str, Any]]) -> list[str]:
    """The ``lost_at`` of each record."""
    return [record.get("lost_at", UNGRADED) for record in records]
