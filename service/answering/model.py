"""The model's work over the papers read, as every recipe uses it: a judgement (the model's P(yes) that the papers
answer), the answer written after it, a yes/no question's conclusion and decision. Each call starts from the
papers' saved state where one is kept (:mod:`citerag.service.answering.states`), is timed into the question's
:class:`~citerag.service.answering.types.Trace`, and streams what the model writes as ``"token"`` events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from citerag.service.answering.choice import choose
from citerag.service.answering.prompts import (
    DECISION_GRAMMAR,
    FIXED_MESSAGES,
    PAPER_SLOT,
    YES_NO_GRAMMAR,
    YES_PREFILL,
    asked,
    continued,
    decision_messages,
    paper_prefix,
)
from citerag.service.answering.states import PaperStates
from citerag.service.answering.types import Paper, Stopped, Trace
from citerag.service.generator import Generator

Messages = list[dict[str, str]]
DECISIONS = ("yes", "no", "maybe")


@dataclass(frozen=True, slots=True)
class Written:
    """What the model wrote: its text (sentence markers as it wrote them) and whether it stopped at its token
    limit."""

    text: str
    truncated: bool


class Model:
    """The model's calls over papers (module docstring).

    Args:
        generator: the loaded chat model.
        states: the paper-state cache.
        answer_tokens: the written answer's limit (tokens).
    """

    def __init__(self, generator: Generator, states: PaperStates, answer_tokens: int) -> None:
        self.generator = generator
        self.states = states
        self.answer_tokens = answer_tokens

    def _ready(self, papers: Sequence[Paper]) -> None:
        """Restore (or read and keep) the papers' saved start when they are read whole."""
        if papers and all(paper.whole for paper in papers):
            self.states.ready(paper_prefix(papers))

    def judge(self, papers: Sequence[Paper], question: str, request: str, trace: Trace) -> tuple[float, Messages]:
        """The model's P(yes) for ``request`` (a yes-or-no request) about ``question`` over ``papers``, and the
        prompt, which the writer continues."""
        if trace.stopped:
            raise Stopped
        with trace.stage("read"):
            self._ready(papers)
        messages = asked(papers, question, request)
        with trace.stage("judge"):
            choice = choose(self.generator, messages, YES_NO_GRAMMAR, ["yes", "no"], pin=False, slot=PAPER_SLOT,
                            fixed=FIXED_MESSAGES)
        trace.model_time(choice.completion.prompt_ms, choice.completion.generate_ms, 1)
        return choice.probabilities["yes"], messages

    def write(self, messages: Messages, trace: Trace, prefill: str | None = YES_PREFILL,
              stream: bool = True) -> Written:
        """The model's answer to ``messages``, its turn begun as ``prefill`` (default: the judge's "yes"; ``None``:
        a new turn), streamed as ``"token"`` events (``stream``; leading space dropped)."""
        if trace.stopped:
            raise Stopped
        started = False

        def emit(piece: str) -> bool:
            nonlocal started
            if not started:
                piece = piece.lstrip()
                started = bool(piece)
            return bool(piece) and stream and trace.emit("token", piece)

        with trace.stage("write"):
            prompt = messages if prefill is None else continued(messages, prefill)
            completion = self.generator.chat(prompt, max_tokens=self.answer_tokens, on_delta=emit, pin=False,
                                             slot=PAPER_SLOT, fixed=FIXED_MESSAGES)
        trace.model_time(completion.prompt_ms, completion.generate_ms, completion.completion_tokens)
        return Written(completion.text.strip(), completion.finish_reason == "length")

    def conclude(self, papers: Sequence[Paper], question: str, request: str, trace: Trace,
                 stream: bool = True) -> tuple[Messages, Written]:
        """A yes/no question's conclusion over ``papers`` (``request`` asks for it), and its prompt."""
        if trace.stopped:
            raise Stopped
        with trace.stage("read"):
            self._ready(papers)
        messages = asked(papers, question, request)
        return messages, self.write(messages, trace, prefill=None, stream=stream)

    def decide(self, conclusion: Messages, written: str, trace: Trace) -> dict[str, float]:
        """The model's probabilities of yes/no/maybe after its ``written`` conclusion to ``conclusion``."""
        if trace.stopped:
            raise Stopped
        with trace.stage("decide"):
            choice = choose(self.generator, decision_messages(conclusion, written), DECISION_GRAMMAR, list(DECISIONS),
                            pin=False, slot=PAPER_SLOT, fixed=FIXED_MESSAGES)
        trace.model_time(choice.completion.prompt_ms, choice.completion.generate_ms, 1)
        return choice.probabilities
