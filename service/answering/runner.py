"""The answering pipeline, used by ``/ask`` (JSON and server-sent events), the OpenAI-compatible route,
``citerag ask`` / ``chat`` and ``citerag eval``: analyse -> retrieve -> the question kind's recipe (read, judge,
write, verify) -> compose, each stage timed (ms) into the answer's ``timings_ms``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from citerag.index.backend import Searcher
from citerag.index.filters import Filters
from citerag.service.answering.compose import compose
from citerag.service.answering.config import AnswerConfig
from citerag.service.answering.model import Model
from citerag.service.answering.papers import Reader
from citerag.service.answering.prompts import paper_prefix
from citerag.service.answering.question import analyse
from citerag.service.answering.recipes import RECIPES, Recipe, Tools
from citerag.service.answering.retrieve import retrieve
from citerag.service.answering.types import Answer, OnEvent, Outcome, Stopped, Trace
from citerag.service.conversation import Turn


class AnswerPipeline:
    """Answers questions over ``searcher`` (module docstring).

    Args:
        searcher: a :class:`~citerag.index.retrieve.Retriever` or a backend.
        model: the model's calls over papers (``None`` with the default recipes: retrieval only, every answer
            abstains, "not asked").
        config: the answering configuration.
        recipes: the recipe of each question kind (default :data:`~citerag.service.answering.recipes.RECIPES`; a
            test's stand-ins need no model).
    """

    def __init__(self, searcher: Searcher, model: Model | None, config: AnswerConfig | None = None,
                 recipes: dict[str, Recipe] | None = None) -> None:
        self.retriever = searcher
        self.model = model
        self.config = config or AnswerConfig()
        self.recipes = recipes or RECIPES
        self.asks_model = model is not None or recipes is not None
        self.reader = Reader(searcher, self.config)
        self.generator = model.generator if model is not None else None

    @property
    def default_k(self) -> int:
        """Passages retrieved when a call gives no ``k``."""
        return self.config.k

    def ask(self, question: str, k: int | None = None, filters: Filters | None = None, history: Sequence[Turn] = (),
            on_event: OnEvent | None = None, keep: Sequence[str] = ()) -> Answer:
        """Answer ``question`` (a follow-up made standalone from ``history``) from the top-``k`` passages, or
        abstain; ``on_event`` receives the stream's events (:data:`~citerag.service.answering.types.EventKind`);
        ``keep`` names documents to keep as retrieval candidates."""
        trace = Trace(on_event)
        started = time.perf_counter()
        with trace.stage("analyse"):
            analysed = analyse(question, history, keep)
        trace.emit("question", analysed)
        with trace.stage("retrieve"):
            retrieved = retrieve(self.retriever, analysed, self.config, trace, k, filters)
        trace.emit("passages", retrieved.passages)
        passages = retrieved.passages
        if retrieved.gap:
            outcome = Outcome.abstain("retrieval", retrieved.gap)
        elif not self.asks_model:
            outcome = Outcome.abstain("not asked", "not asked")
        else:
            tools = Tools(self.model, self.reader, self.config, self.retriever)  # type: ignore[arg-type]
            try:
                passages, outcome = self.recipes[analysed.kind].answer(analysed, passages, tools, trace)
            except Stopped:
                outcome = Outcome.abstain("stopped", "the client stopped the answer")
        with trace.stage("compose"):
            answer = compose(analysed, passages, outcome, trace)
        trace.timings_ms["total"] = (time.perf_counter() - started) * 1000
        answer.timings_ms = dict(trace.timings_ms)
        answer.completion_tokens = trace.completion_tokens
        answer.rules = tuple(trace.rules)
        return answer

    def read_ahead(self) -> int:
        """Read every abstract-sized paper of a corpus of at most ``config.read_ahead_documents`` documents into
        the paper-state cache (:meth:`~citerag.service.answering.states.PaperStates.read_ahead`); returns how
        many were read (0 for a larger corpus, or without a model)."""
        count = getattr(self.retriever, "count", None)
        if self.model is None or count is None or count() > self.config.read_ahead_documents:
            if self.model is not None:
                self.model.states.ahead = "off"
            return 0
        return self.model.states.read_ahead(paper_prefix([paper]) for paper in self.reader.stored_papers())

    @property
    def papers_read_ahead(self) -> str:
        """Where reading papers ahead stands: ``off``, ``not started``, ``reading``, ``done`` or ``failed``."""
        return self.model.states.ahead if self.model is not None else "off"
