"""Fact questions ("What dataset was X evaluated on?", "How does X choose its step size?"): the best retrieved
paper read whole, judged, and answered in one or two sentences from it; the next paper is read when the first does
not answer (the rule ``second_paper``). With :attr:`~citerag.service.answering.config.AnswerConfig.fact_papers` 2,
the best two are read together instead.
"""

from __future__ import annotations

from citerag.index.search import SearchResult
from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.recipes.base import Tools, judge_write_verify, top_documents
from citerag.service.answering.types import Outcome, Trace

#: The judgement, then what is written after "yes".
REQUEST = (
    "Does the paper answer the question? Reply yes or no. If yes, answer the question on the next line in one or "
    "two sentences."
)


class Fact:
    """The fact recipe (module docstring): one paper at a time, the best two in turn."""

    kind: QuestionKind = "fact"
    request = REQUEST

    def request_for(self, question: Question) -> str:
        """The request after the question."""
        return self.request

    def answer(self, question: Question, passages: list[SearchResult], tools: Tools,
               trace: Trace) -> tuple[list[SearchResult], Outcome]:
        top = top_documents(passages, 2)
        if tools.config.fact_papers == 2:  # the best two read together, within twice the budget
            return judge_write_verify(question, passages, [top], self.request_for(question), tools, trace,
                                      budget_chars=2 * tools.config.read_chars)
        return judge_write_verify(question, passages, [[doc_id] for doc_id in top], self.request_for(question),
                                  tools, trace)
