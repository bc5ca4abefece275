"""Answering: one pipeline of small components over one :class:`~citerag.service.answering.state.AnswerState`.

analyse (:mod:`.question`) -> retrieve (:mod:`.retrieve`) -> select evidence (:mod:`.evidence`) -> judge papers
(:mod:`.judge`) -> read paper (:mod:`.whole_paper`) -> judge (:mod:`.judge`) -> write (:mod:`.write`) -> verify
(:mod:`.verify`) -> compose (:mod:`.compose`); the runner (:mod:`.runner`) times them, stops at an abstention and
emits the stream's events. The model writes the answer from the chosen evidence (over a small corpus, from the
answer's paper read whole); the service checks every written sentence against the evidence it cites.
"""

from citerag.service.answering.state import NOT_FOUND, Answer, AnswerState, Citation

__all__ = ["NOT_FOUND", "Answer", "AnswerState", "Citation"]
