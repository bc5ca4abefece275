"""The typed values answering passes from stage to stage, in data-flow order:

:class:`~citerag.service.answering.question.Question` (analyse) -> retrieved passages
(:class:`~citerag.index.search.SearchResult`) -> :class:`Paper` (what the model reads) -> :class:`Outcome` (a
recipe's checked statements, or its abstention) -> :class:`Answer` (composed, as the API, the CLI and the
evaluation read it). :class:`Trace` carries what every stage reports along the way: timings, model time, the
stream's events and the rules that acted.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Literal

from citerag.index.search import SearchResult
from citerag.index.types import Document

NOT_FOUND = "Not found in the indexed abstracts."

#: What a stream receives, in order: ``"question"`` (the analysed Question), ``"passages"`` (list of SearchResult),
#: ``"evidence"`` (list of Evidence: the sentences the model reads, as soon as they are known), ``"token"`` (str: a
#: piece of the answer text as it is written).
EventKind = Literal["question", "passages", "evidence", "token"]
#: How an answer about papers names them (:attr:`Outcome.labelled`).
Labelled = Literal["", "name", "title"]
#: An event listener: returns True to stop answering (a client went away).
OnEvent = Callable[[EventKind, Any], "bool | None"]


@dataclass(frozen=True, slots=True)
class Evidence:
    """One sentence of a paper the model reads.

    Attributes:
        n: 1-based number of the retrieved passage holding it (in the answer's ``passages``): the ``[n]`` an answer
            resting on it cites.
        result: that passage and its document.
        start, end: character offsets into the document text: ``result.document.text[start:end] == text``.
        text: the sentence as stored (markup kept); prompts and answers show it readable.
        score: its relevance to the question in ``[0, 1]`` (0 where not scored).
        dense: its cosine similarity to the question, in ``[-1, 1]`` (0 where not scored).
    """

    n: int
    result: SearchResult
    start: int
    end: int
    text: str
    score: float = 0.0
    dense: float = 0.0

    @property
    def doc_id(self) -> str:
        return self.result.document.doc_id


@dataclass(frozen=True, slots=True)
class Paper:
    """A document as the model reads it: its sentences numbered in the document's order.

    Attributes:
        document: the document.
        sentences: what is read, in document order: every sentence when ``whole``, else those of its retrieved
            passages.
        whole: the document is read whole (an abstract), so its prompt state can be kept
            (:mod:`~citerag.service.answering.states`).
        rank: the rank of its best retrieved passage (1-based).
    """

    document: Document
    sentences: tuple[Evidence, ...]
    whole: bool
    rank: int

    @property
    def doc_id(self) -> str:
        return self.document.doc_id

    @property
    def chars(self) -> int:
        """The characters read (the reading budget's unit)."""
        return sum(len(s.text) for s in self.sentences)


@dataclass(frozen=True, slots=True)
class Statement:
    """One checked sentence of the answer, before its markers are written.

    Attributes:
        text: the sentence without markers or final punctuation.
        evidence: indexes into the outcome's ``evidence`` of the sentences it rests on (non-empty).
        origin: ``"written"`` (the model's sentence, checked) or ``"extract"`` (a paper's own sentence, where the
            model's failed the checks).
    """

    text: str
    evidence: tuple[int, ...]
    origin: Literal["written", "extract"] = "written"


@dataclass(frozen=True, slots=True)
class Citation:
    """A citation: ``[n]`` refers to ``passages[n - 1]``; ``start``-``end`` is the exact span of the sentence the
    answer rests on (``result.document.text[start:end]``)."""

    n: int
    result: SearchResult
    start: int
    end: int


@dataclass(slots=True)
class Outcome:
    """What a recipe returns: the statements of its answer (checked), or why it abstains.

    Attributes:
        evidence: the sentences the model read, in prompt order (statements index them).
        statements: the checked sentences, in answer order (empty when abstaining).
        written: the model's text, unedited.
        confidence: the model's P(yes) that what it read answers the question (1.0 where not judged).
        decision, decision_probabilities: a yes/no question's decision and the probabilities behind it.
        abstained_by: the stage or rule that abstained (``""`` when answered): ``"judge"`` or a rule's name.
        reason: why it abstained.
        labelled: how each paper's first statement is prefixed with the paper's name where it does not name the
            paper (answers about papers): ``"name"`` (its short name:
            :func:`~citerag.service.answering.names.subject_label`), ``"title"`` (its title:
            :func:`~citerag.service.answering.names.paper_label`; a which-paper answer names the paper asked for),
            or ``""`` (not prefixed).
    """

    evidence: list[Evidence] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    written: str = ""
    confidence: float = 1.0
    decision: str | None = None
    decision_probabilities: dict[str, float] = field(default_factory=dict)
    abstained_by: str = ""
    reason: str = ""
    labelled: Labelled = ""

    @classmethod
    def abstain(cls, by: str, reason: str, evidence: list[Evidence] | None = None, confidence: float = 0.0,
                written: str = "") -> Outcome:
        """An abstention by ``by`` (``"judge"`` or a rule's name), saying ``reason``."""
        return cls(evidence=evidence or [], abstained_by=by, reason=reason, confidence=confidence, written=written)

    @property
    def abstained(self) -> bool:
        return bool(self.abstained_by)


@dataclass(slots=True)
class Answer:
    """The outcome of one question, as the API, the CLI and the evaluation read it.

    Attributes:
        question: the question answered (the standalone form of a follow-up).
        answer: the answer text (with ``[n]`` markers) or :data:`NOT_FOUND`.
        abstained: True when the service declined to answer.
        reason: why it abstained (``""`` when it answered).
        citations: the checked citations, in order of first appearance.
        passages: the retrieved passages (and the unretrieved ones of papers read whole), numbered ``[1]..[k]``.
        raw: the model's unedited text (``""`` when the model did not write).
        timings_ms: per stage (``analyse``, ``retrieve``, ``read``, ``judge``, ``write``, ``verify``, ``compose``),
            the model's ``prompt`` and ``generate`` time, and ``total``, in ms (stages not run are absent).
        completion_tokens: tokens the model generated (model tokens).
        evidence: the sentences the model read, in prompt order.
        used: 0-based indexes into ``evidence`` of the sentences the answer rests on.
        decision: ``"yes"``, ``"no"`` or ``"maybe"`` for a yes/no question, else ``None``.
        decision_probabilities: the model's probabilities of yes/no/maybe behind ``decision``.
        confidence: the model's P(yes) that what it read answers the question (0 when not asked).
        kind: the question's kind (:data:`~citerag.service.answering.question.QuestionKind`).
        asked: the question as asked (``""``: the same as ``question``).
        abstained_by: the stage or rule that abstained (``""`` when answered).
        rules: the rules that acted on this answer (:class:`~citerag.service.answering.config.Rules` names).
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
    abstained_by: str = ""
    rules: tuple[str, ...] = ()


class Stopped(Exception):
    """The stream's listener asked to stop: the answer is abandoned."""


@dataclass(slots=True)
class Trace:
    """What the stages report while one question is answered: per-stage and model timings (ms), generated tokens,
    the stream's events and the rules that acted.

    Attributes:
        on_event: the stream's listener, or ``None``.
        timings_ms: stage -> ms, plus ``prompt``/``generate`` (model time).
        completion_tokens: tokens the model generated.
        rules: the rules that acted, in order (each once).
        stopped: the listener asked to stop.
    """

    on_event: Callable[[EventKind, Any], bool | None] | None = None
    timings_ms: dict[str, float] = field(default_factory=dict)
    completion_tokens: int = 0
    rules: list[str] = field(default_factory=list)
    stopped: bool = False

    def emit(self, kind: EventKind, payload: Any) -> bool:
        """Send an event to the listener; True (and :attr:`stopped`) once it asks to stop."""
        if self.on_event is not None and not self.stopped and self.on_event(kind, payload):
            self.stopped = True
        return self.stopped

    def acted(self, rule: str) -> None:
        """Record that ``rule`` changed this answer (ablation reads it)."""
        if rule not in self.rules:
            self.rules.append(rule)

    def model_time(self, prompt_ms: float, generate_ms: float, tokens: int) -> None:
        """Count one model call's prompt and generation time (ms) and its generated tokens."""
        self.timings_ms["prompt"] = self.timings_ms.get("prompt", 0.0) + prompt_ms
        self.timings_ms["generate"] = self.timings_ms.get("generate", 0.0) + generate_ms
        self.completion_tokens += tokens

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the block as stage ``name`` (ms, added to what the stage already took)."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.timings_ms[name] = self.timings_ms.get(name, 0.0) + (time.perf_counter() - started) * 1000
