"""The compose step: the answer text and its citations from a recipe's checked statements.

Each statement is written with the markers of the passages holding the sentences it rests on (``[n]``: the number
of the passage in the answer's ``passages``), before its final full stop; each of those sentences becomes a
citation whose span is that sentence's exact place in its document, so a citation always points at the text that
says the thing. A yes/no answer opens with its decision. In an answer about papers (``labelled``: which papers,
comparisons), each paper's first sentence opens with its label where the sentence does not name the paper.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from citerag.index.search import SearchResult
from citerag.index.types import Document
from citerag.service.answering.names import names_paper, paper_label, subject_label
from citerag.service.answering.question import Question
from citerag.service.answering.types import NOT_FOUND, Answer, Citation, Evidence, Labelled, Outcome, Statement, Trace

_OPENING_DECISION = re.compile(r"^(?:yes|no|maybe)\b[,.:;]?\s*", re.IGNORECASE)


def statement_text(statement: Statement, evidence: Sequence[Evidence], labelled: Labelled,
                   names: Sequence[str] = ()) -> str:
    """``statement`` as the answer writes it: its text, the markers of the passages holding its evidence (``[n]``,
    each once) and a full stop; ``labelled``: its paper's name or title before it (``"Name: ..."``) when the text does
    not name the paper by one of its own names or one of the question's ``names`` that names it.

    >>> from citerag.index.types import Document
    >>> doc = Document("d", "Seedkeep: Cold Banks", "We propose Seedkeep.", "")
    >>> result = SearchResult(1, None, doc, 1.0, 1, 1)
    >>> statement_text(Statement("It keeps seeds", (0,)), [Evidence(3, result, 0, 5, "x")], labelled="name")
    'Seedkeep: It keeps seeds [3].'
    >>> statement_text(Statement("It keeps seeds", (0,)), [Evidence(3, result, 0, 5, "x")], labelled="title")
    'Seedkeep: Cold Banks: It keeps seeds [3].'
    """
    text = statement.text.rstrip(" .;:,")
    document = evidence[statement.evidence[0]].result.document
    if labelled and (label := needed_label(text, document, names, labelled)):
        text = f"{label}: {text}"
    markers = "".join(f"[{n}]" for n in dict.fromkeys(evidence[i].n for i in statement.evidence))
    return f"{text} {markers}."


def needed_label(text: str, document: Document, names: Sequence[str] = (), labelled: Labelled = "name") -> str | None:
    """The label ``text`` needs to name ``document`` (``"name"``: :func:`~citerag.service.answering.names.
    subject_label`; ``"title"``: :func:`~citerag.service.answering.names.paper_label`), or ``None`` when it names it
    already (by one of its names or one of the question's ``names``) or it has none."""
    label = paper_label(document) if labelled == "title" else subject_label(document)
    return label if label and not names_paper(text, document, names) else None


def compose(question: Question, passages: list[SearchResult], outcome: Outcome, trace: Trace) -> Answer:
    """The :class:`~citerag.service.answering.types.Answer` of ``outcome`` (module docstring)."""
    if outcome.abstained or not outcome.statements:
        reason = outcome.reason or "nothing the model wrote is supported by the papers it read"
        return _answer(question, passages, outcome, NOT_FOUND, [], abstained_by=outcome.abstained_by or "verify",
                       reason=reason)
    evidence = outcome.evidence
    parts: list[str] = []
    citations: dict[tuple[int, int, int], Citation] = {}
    named: set[str] = set()
    for statement in outcome.statements:
        doc_id = evidence[statement.evidence[0]].doc_id
        labelled = outcome.labelled if doc_id not in named else ""
        if labelled and needed_label(statement.text, evidence[statement.evidence[0]].result.document, question.names,
                                     labelled):
            trace.acted("paper_label")
        parts.append(statement_text(statement, evidence, labelled, question.names))
        named.add(doc_id)
        for i in statement.evidence:
            item = evidence[i]
            citations.setdefault((item.n, item.start, item.end), Citation(item.n, item.result, item.start, item.end))
    text = " ".join(parts)
    if outcome.decision:
        text = _OPENING_DECISION.sub("", text)
        text = f"{outcome.decision.capitalize()}. {text[:1].upper()}{text[1:]}"
    return _answer(question, passages, outcome, text, list(citations.values()))


def _answer(question: Question, passages: list[SearchResult], outcome: Outcome, text: str, citations: list[Citation],
            abstained_by: str = "", reason: str = "") -> Answer:
    """The :class:`~citerag.service.answering.types.Answer` of ``outcome`` with ``text`` and ``citations`` (an
    abstention when ``abstained_by`` names who abstained)."""
    return Answer(
        question.text, text, bool(abstained_by), reason, citations, passages, raw=outcome.written,
        evidence=list(outcome.evidence),
        used=[] if abstained_by else sorted({i for s in outcome.statements for i in s.evidence}),
        decision=None if abstained_by else outcome.decision,
        decision_probabilities=dict(outcome.decision_probabilities), confidence=outcome.confidence,
        kind=question.kind, asked=question.asked, abstained_by=abstained_by,
    )
