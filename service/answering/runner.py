"""The answering runner: one pipeline of components over one :class:`~citerag.service.answering.state.AnswerState`,
used by ``/ask`` (JSON and server-sent events), the OpenAI-compatible route, ``citerag ask`` / ``chat`` and
``citerag eval``.

A component is any object with a ``name`` (its stage in ``timings_ms``) and ``run(state) -> None``. The runner
runs them in order, times each (ms), stops at an abstention (or when a stream's listener asks to stop), and adds
the ``total``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from citerag.index.backend import Searcher
from citerag.index.filters import Filters
from citerag.service.answering.compose import Compose
from citerag.service.answering.evidence import EVIDENCE_SENTENCES, Encode, SelectEvidence
from citerag.service.answering.judge import CLOSE_COSINE, MIN_CONFIDENCE, MIN_CONFIDENCE_UNSEEN, Judge, JudgePapers
from citerag.service.answering.prompts import FIXED_MESSAGES
from citerag.service.answering.question import Analyse
from citerag.service.answering.retrieve import MIN_DENSE_SCORE, Retrieve
from citerag.service.answering.state import Answer, AnswerState, OnEvent
from citerag.service.answering.topics import Topics
from citerag.service.answering.verify import Verify
from citerag.service.answering.whole_paper import MAX_DOCUMENTS, ReadPaper
from citerag.service.answering.write import MAX_ANSWER_TOKENS, Write
from citerag.service.conversation import Turn
from citerag.service.generator import Generator


class Component(Protocol):
    """One step of the pipeline: it reads and fills its part of the state."""

    name: str

    def run(self, state: AnswerState) -> None: ...


class AnswerPipeline:
    """Runs ``components`` in order over one question's state (module docstring).

    Args:
        components: the steps, in data-flow order.
        searcher: the searcher the retrieve step uses.
        default_k: passages retrieved when a call gives no ``k``.
        generator: the chat model the steps share (``None`` for a pipeline without one), for operators.
    """

    def __init__(
        self, components: Sequence[Component], searcher: Searcher | None, default_k: int = 8,
        generator: Generator | None = None,
    ) -> None:
        self.components = list(components)
        self.retriever = searcher
        self.default_k = default_k
        self.generator = generator

    def run(self, state: AnswerState) -> AnswerState:
        """Run the components over ``state`` and return it, with ``timings_ms`` filled."""
        started = time.perf_counter()
        for component in self.components:
            tic = time.perf_counter()
            component.run(state)
            state.timings_ms[component.name] = (time.perf_counter() - tic) * 1000
            if state.abstained or state.stopped:
                break
        state.timings_ms["total"] = (time.perf_counter() - started) * 1000
        return state

    def ask(
        self,
        question: str,
        k: int | None = None,
        filters: Filters | None = None,
        history: Sequence[Turn] = (),
        on_event: OnEvent | None = None,
        keep: Sequence[str] = (),
    ) -> Answer:
        """Answer ``question`` (a follow-up made standalone from ``history``) from the top-``k`` passages, or
        abstain; ``on_event`` receives the stream's events (:data:`~citerag.service.answering.state.EventKind`);
        ``keep`` names documents to keep as retrieval candidates."""
        state = AnswerState(question=question, history=history, k=k or self.default_k, filters=filters,
                            keep=tuple(keep), on_event=on_event)
        return Answer.of(self.run(state))


def retrieval_pipeline(searcher: Searcher, default_k: int = 8,
                       min_dense_score: float = MIN_DENSE_SCORE) -> AnswerPipeline:
    """Analyse and retrieve only, no model: its answers abstain with the retrieved passages (``"not asked"``), for
    retrieval-only evaluation."""
    return AnswerPipeline([Analyse(), Retrieve(searcher, min_dense_score), _NotAsked()], searcher, default_k)


class _NotAsked:
    name = "not_asked"

    def run(self, state: AnswerState) -> None:
        state.abstain("not asked")


def evidence_pipeline(
    searcher: Searcher,
    generator: Generator,
    encode: Encode,
    default_k: int = 8,
    min_dense_score: float = MIN_DENSE_SCORE,
    evidence_sentences: int = EVIDENCE_SENTENCES,
    min_confidence: float = MIN_CONFIDENCE,
    min_confidence_unseen: float = MIN_CONFIDENCE_UNSEEN,
    max_answer_tokens: int = MAX_ANSWER_TOKENS,
    second_look: bool = True,
    judge_papers: bool = True,
    close_cosine: float = CLOSE_COSINE,
    topics_dir: Path | None = None,
    whole_paper_documents: int = MAX_DOCUMENTS,
) -> AnswerPipeline:
    """The default pipeline: analyse -> retrieve -> select evidence -> judge papers -> read paper -> judge -> write
    -> verify -> compose.

    Args:
        searcher: a :class:`~citerag.index.retrieve.Retriever` or a backend.
        generator: the loaded chat model.
        encode: the dense encoder (``list[str] -> (n, dim) float32``, L2-normalised rows), for evidence scoring.
        default_k: passages retrieved per question when a call gives no ``k``.
        min_dense_score, evidence_sentences, min_confidence, min_confidence_unseen, max_answer_tokens, second_look,
            close_cosine: the components' settings (see each); ``min_confidence`` is also the P(yes) a yes/no
            question's "yes" needs (:data:`~citerag.service.answering.write.MIN_YES`).
        judge_papers: judge each candidate paper of a which-papers question (:class:`~citerag.service.answering.
            judge.JudgePapers`; a second judgement over each passing paper read whole, when the read-paper step
            is on); off, the papers whose best sentence scores half the best one's are named.
        topics_dir: where unnamed papers' topic phrases are kept (:class:`~citerag.service.answering.topics.Topics`;
            ``None``: in memory only).
        whole_paper_documents: the largest corpus whose papers are read whole (:class:`~citerag.service.answering.
            whole_paper.ReadPaper`; 0: never; only with a generator that has a ``state_dir``).
    """
    generator.fixed_messages = FIXED_MESSAGES  # the cache keeps the system prompt and the worked example
    describe = Topics(generator, topics_dir)
    read_paper = ReadPaper(generator, searcher, whole_paper_documents)
    return AnswerPipeline(
        [
            Analyse(),
            Retrieve(searcher, min_dense_score),
            SelectEvidence(encode, evidence_sentences, judged_papers=judge_papers),
            *([JudgePapers(generator, describe=describe, read_paper=read_paper)] if judge_papers else []),
            read_paper,
            Judge(generator, searcher, min_confidence, min_confidence_unseen, second_look, close_cosine),
            # a "yes" needs what every answer needs; over a large corpus a yes/no question's paper is read whole too
            Write(generator, max_answer_tokens, min_yes=min_confidence, second_reading=read_paper.second_reading),
            Verify(describe=describe),
            Compose(),
        ],
        searcher,
        default_k,
        generator,
    )
