"""The state one question's answering flows through (:class:`AnswerState`), and what it produces: a checked
:class:`Answer` with its :class:`Citation` objects.

Components (:mod:`citerag.service.answering.components`) read and fill the state in one direction: analyse ->
retrieve -> select evidence -> judge papers -> judge -> write -> verify -> compose; the runner
(:mod:`citerag.service.answering.pipeline`) times them and stops at an abstention.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from citerag.index.filters import Filters
from citerag.index.search import SearchResult

if TYPE_CHECKING:
    from citerag.service.answering.evidence import Evidence
    from citerag.service.answering.question import QuestionInfo
    from citerag.service.conversation import Turn

NOT_FOUND = "Not found in the indexed abstracts."

#: What a stream receives, in order: ``"question"`` (the QuestionInfo: the standalone question answered),
#: ``"passages"`` (list of SearchResult), ``"evidence"`` (list of Evidence, as soon as it is chosen), ``"token"``
#: (str: a piece of the answer text as it is written).
EventKind = Literal["question", "passages", "evidence", "token"]
#: An event listener: returns True to stop answering (a client went away).
OnEvent = Callable[[EventKind, Any], "bool | None"]


@dataclass(frozen=True, slots=True)
class Citation:
    """A citation: ``[n]`` refers to ``passages[n - 1]``.

    Attributes:
        n: 1-based passage number as written in the answer.
        result: the cited passage and its document.
        start, end: character span of the cited text in the source document (``document.text[start:end]``): the
            evidence sentence the answer's sentence rests on.
    """

    n: int
    result: SearchResult
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class Statement:
    """One sentence of the answer before markers are written: its text (no markers, no final full stop), the
    0-based evidence indexes it rests on, and how it was made.

    Attributes:
        text: the sentence without its citation markers and final punctuation.
        evidence: indexes into :attr:`AnswerState.evidence` of the sentences that support it (non-empty).
        origin: ``"written"`` (the model's sentence, checked), ``"named"`` (the model's sentence with its subject
            named), or ``"extract"`` (an evidence sentence, its subject named, where the model's failed the check).
    """

    text: str
    evidence: tuple[int, ...]
    origin: Literal["written", "named", "extract"] = "written"


@dataclass(slots=True)
class AnswerState:
    """Everything known about one question while it is answered; each component fills its part.

    Attributes:
        question: the question as asked.
        history: earlier turns of the conversation (oldest first).
        k: passages to retrieve.
        filters: metadata conditions applied inside retrieval.
        keep: documents to keep as retrieval candidates (besides those a follow-up's history names).
        info: the analysed question (analyse).
        passages: the retrieved passages, numbered ``[1]..[len]`` (retrieve).
        retrieved: the ``(doc_id, start, end)`` document spans the question's search retrieved, when the retrieve
            step read some document whole (:data:`~citerag.service.answering.retrieve.WHOLE_DOCUMENT_CHARS`): a
            sentence outside them only states what a rule of the select-evidence step asks for; empty: all of
            ``passages`` was retrieved.
        named: the retrieved documents the question names, in the order named (select evidence:
            :func:`~citerag.service.answering.names.named_documents`).
        evidence: the evidence sentences the model reads, in prompt order (select evidence).
        reserve: the next-best sentences, read in their place when the judge finds that the evidence does not
            answer (select evidence; empty for questions about several papers and yes/no questions).
        confidence: probability in ``[0, 1]`` that the evidence answers the question (judge; 1.0 when the evidence
            score alone decided it).
        papers_judged: each candidate paper of a which-papers question was judged and the evidence is the named
            papers' sentences, answered as they stand (judge papers: no single judgement, no writing).
        read_whole: the evidence is every sentence of the answer's paper, in its order (read paper).
        decision: ``"yes"``/``"no"``/``"maybe"`` for a yes/no question (write), else ``None``.
        decision_probabilities: the model's probabilities of yes/no/maybe behind ``decision`` (write).
        written: the model's text as written (write).
        truncated: the model stopped at its token limit, mid-sentence perhaps (write).
        statements: the checked sentences (verify).
        answer: the answer text with ``[n]`` markers (compose).
        citations: the checked citations, in order of appearance (compose).
        abstained, reason: whether and why the service declined to answer (any component).
        timings_ms: per stage, plus ``prompt``/``generate`` (model time) and ``total``, in ms.
        completion_tokens: tokens the model generated (model tokens).
        on_event: the stream's listener, or ``None``.
        stopped: the listener asked to stop.
    """

    question: str
    history: Sequence[Turn] = ()
    k: int = 8
    filters: Filters | None = None
    keep: tuple[str, ...] = ()
    info: QuestionInfo | None = None
    passages: list[SearchResult] = field(default_factory=list)
    retrieved: list[tuple[str, int, int]] = field(default_factory=list)
    named: list[str] = field(default_factory=list)
    evidence: list[Evidence] = field(default_factory=list)
    reserve: list[Evidence] = field(default_factory=list)
    confidence: float = 0.0
    papers_judged: bool = False
    read_whole: bool = False
    decision: str | None = None
    decision_probabilities: dict[str, float] = field(default_factory=dict)
    written: str = ""
    truncated: bool = False
    statements: list[Statement] = field(default_factory=list)
    answer: str = ""
    citations: list[Citation] = field(default_factory=list)
    abstained: bool = False
    reason: str = ""
    timings_ms: dict[str, float] = field(default_factory=dict)
    completion_tokens: int = 0
    on_event: OnEvent | None = None
    stopped: bool = False

    def abstain(self, reason: str) -> None:
        """Decline to answer, saying why; the runner stops after the current component."""
        self.abstained, self.reason, self.answer, self.citations = True, reason, NOT_FOUND, []

    def emit(self, kind: EventKind, payload: Any) -> bool:
        """Send an event to the stream's listener, if any; True (and :attr:`stopped`) once it asks to stop."""
        if self.on_event is not None and self.on_event(kind, payload):
            self.stopped = True
        return self.stopped

    def add_model_time(self, prompt_ms: float, generate_ms: float, tokens: int) -> None:
        """Count one model call's prompt evaluation and generation time (ms) and generated tokens."""
        self.timings_ms["prompt"] = self.timings_ms.get("prompt", 0.0) + prompt_ms
        self.timings_ms["generate"] = self.timings_ms.get("generate", 0.0) + generate_ms
        self.completion_tokens += tokens


@dataclass(slots=True)
class Answer:
    """The outcome of one question, as the API, the CLI and the evaluation read it.

    Attributes:
        question: the question answered (the standalone form of a follow-up).
        answer: the answer text (with ``[n]`` markers) or :data:`NOT_FOUND`.
        abstained: True when the service declined to answer.
        reason: why it abstained (``""`` when it answered).
        citations: the checked citations, in order of first appearance.
        passages: the retrieved passages, numbered ``[1]..[k]``.
        raw: the model's unedited text (``""`` when the model did not write).
        timings_ms: ``retrieve``, ``evidence``, ``judge``, ``write``, ``verify``, ``compose``, the model's
            ``prompt`` and ``generate`` time, and ``total``, in milliseconds (stages not run are absent).
        completion_tokens: tokens the model generated (model tokens).
        evidence: the evidence sentences the model read, in prompt order.
        used: 0-based indexes into ``evidence`` of the sentences the answer rests on.
        decision: ``"yes"``, ``"no"`` or ``"maybe"`` for a yes/no question, else ``None``.
        decision_probabilities: the model's probabilities of yes/no/maybe behind ``decision`` (empty otherwise).
        confidence: probability in ``[0, 1]`` that the evidence answers the question (0 when not estimated).
        kind: the question's kind (:data:`~citerag.service.answering.question.QuestionKind`).
        asked: the question as asked (``""``: the same as ``question``).
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
    decision_probabilities: dict[str, float] = field(default_factory=dict)
    confidence: float = 0.0
    kind: str = "fact"
    asked: str = ""

    @classmethod
    def of(cls, state: AnswerState) -> Answer:
        """The answer a finished :class:`AnswerState` holds."""
        used = sorted({i for s in state.statements for i in s.evidence}) if not state.abstained else []
        return cls(
            question=state.info.text if state.info else state.question, answer=state.answer,
            abstained=state.abstained, reason=state.reason, citations=list(state.citations),
            passages=list(state.passages), raw=state.written, timings_ms=dict(state.timings_ms),
            completion_tokens=state.completion_tokens, evidence=list(state.evidence), used=used,
            decision=state.decision, decision_probabilities=dict(state.decision_probabilities),
            confidence=state.confidence, kind=state.info.kind if state.info else "fact",
            asked=state.question,
        )
