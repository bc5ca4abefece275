"""Answering: analyse -> retrieve -> the question kind's recipe (read the papers, judge, write, verify) ->
compose (:mod:`.runner`). The model reads the papers retrieval found, whole where they are abstracts, and writes the
answer; the service checks every written sentence against the sentences it rests on, so every citation is the span
that says the thing.
"""

from citerag.service.answering.types import NOT_FOUND, Answer, Citation, Evidence

__all__ = ["NOT_FOUND", "Answer", "Citation", "Evidence"]
