"""Comparisons ("How do A and B differ in ...?", "What does each of A and B use?"): the two papers the question is
about (those it names, then the best retrieved) read whole together, judged, and answered with one sentence for
each, each paper named (the rule ``paper_label``). A written answer that rests on one paper only gets the other
paper's sentence closest to the question (the rule ``each_paper``).
"""

from __future__ import annotations

from citerag.index.search import SearchResult
from citerag.index.text import readable
from citerag.service.answering.names import named_documents
from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.recipes.base import Tools, judge_write_verify, top_documents
from citerag.service.answering.types import Outcome, Statement, Trace
from citerag.service.answering.verify import closest

REQUEST = (
    "Do the papers answer the question? Reply yes or no. If yes, answer on the next line with one sentence for each "
    "paper, naming the paper."
)
#: The papers a comparison reads.
PAPERS = 2


class Comparison:
    """The comparison recipe (module docstring)."""

    kind: QuestionKind = "comparison"

    def answer(self, question: Question, passages: list[SearchResult], tools: Tools,
               trace: Trace) -> tuple[list[SearchResult], Outcome]:
        named = named_documents(question.names, passages)
        docs = list(dict.fromkeys([*named, *top_documents(passages, PAPERS + len(named))]))[:PAPERS]
        config = tools.config
        passages, outcome = judge_write_verify(question, passages, [docs], REQUEST, tools, trace,
                                               config.rules.paper_label, budget_chars=PAPERS * config.read_chars)
        if outcome.abstained or not outcome.statements or not config.rules.each_paper:
            return passages, outcome
        covered = {outcome.evidence[i].doc_id for s in outcome.statements for i in s.evidence}
        for doc_id in dict.fromkeys(e.doc_id for e in outcome.evidence):
            if doc_id in covered:
                continue
            own = [i for i, e in enumerate(outcome.evidence) if e.doc_id == doc_id]
            texts = [readable(outcome.evidence[i].text) for i in own]
            index = own[closest(question.text, texts)]
            outcome.statements.append(Statement(readable(outcome.evidence[index].text).rstrip(" .;:,"), (index,),
                                                "extract"))
            trace.acted("each_paper")
        return passages, outcome
