"""Probes: one-off measurements of a design before it is built, each recording what it measured under
``eval/results/probe_*.jsonl`` (see each module). What the probes share is here; the service's modules are
imported only when called, so that analysing a record does not load the model."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from citerag.service.answering.runner import AnswerPipeline
    from citerag.service.answering.state import AnswerState
    from citerag.service.settings import Settings

#: The pipeline's steps before the model is asked: analyse, retrieve, select evidence.
STEPS_BEFORE_THE_MODEL = 3


def open_probe() -> tuple[Settings, AnswerPipeline]:
    """The process's settings and the answering pipeline over the embedded backend of the shipped index (built if
    missing), as ``citerag serve`` opens them."""
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup, open_answerer, open_backend
    from citerag.service.settings import get_settings

    settings = get_settings()
    backend = open_backend(settings, ensure_index(index_setup(settings), show_progress=False))
    return settings, open_answerer(settings, backend)


def before_the_model(answerer: AnswerPipeline, question: str, k: int) -> AnswerState:
    """``question``'s state after the pipeline's first :data:`STEPS_BEFORE_THE_MODEL` steps, stopping at an
    abstention."""
    from citerag.service.answering.state import AnswerState

    state = AnswerState(question=question, k=k)
    for step in answerer.components[:STEPS_BEFORE_THE_MODEL]:
        step.run(state)
        if state.abstained:
            break
    return state
