"""The value types answering produces: a checked :class:`Answer` and its :class:`Citation` objects."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from citerag.index.search import SearchResult

if TYPE_CHECKING:
    from citerag.service.answering.evidence import Evidence

NOT_FOUND = "Not found in the indexed abstracts."


@dataclass(frozen=True, slots=True)
class Citation:
    """A citation: ``[n]`` refers to ``passages[n - 1]``.

    Attributes:
        n: 1-based passage number as written in the answer.
        result: the cited passage and its document.
        start, end: character span of the cited text in the source document (``document.text[start:end]``): the
            evidence sentence the answer rests on.
    """

    n: int
    result: SearchResult
    start: int
    end: int


@dataclass(slots=True)
class Answer:
    """The outcome of one question.

    Attributes:
        answer: the answer text (with ``[n]`` markers) or :data:`NOT_FOUND`.
        abstained: True when the service declined to answer.
        reason: why it abstained (``""`` when it answered).
        citations: the checked citations, in order of first appearance.
        passages: the retrieved passages, numbered ``[1]..[k]``.
        raw: the model's unedited output (``""`` when the model was not called).
        timings_ms: ``retrieve``, ``prompt``, ``generate`` and ``total`` in milliseconds (evidence-first answering
            adds ``evidence``).
        completion_tokens: tokens the model generated (model tokens).
        evidence: the evidence sentences the model read (evidence-first answering), best first.
        used: 0-based indexes into ``evidence`` of the sentences the answer is built from.
        decision: ``"yes"``, ``"no"`` or ``"maybe"`` for a yes/no question, else ``None``.
        confidence: the model's probability in ``[0, 1]`` that the stated sentence answers the question (also
            set when it abstained for being below the threshold; 0 when the model was not asked).
    """

    question: str
    answer: str
    abstained: bool
    reason: str
    citations: list[Citation]
    passages: list[SearchResult]
    raw: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    completion_tokens: int = 0
    evidence: list[Evidence] = field(default_factory=list)
    used: list[int] = field(default_factory=list)
    decision: str | None = None
    confidence: float = 0.0
