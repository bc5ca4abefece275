"""Yes/no questions ("Does X need labels?"): the best retrieved paper read whole and judged to address the question
(the next one read when it does not: the rule ``second_paper``); the model states what the paper concludes about
the question in one sentence of its own, then decides yes, no or maybe after it, one token whose probabilities are
read (:meth:`~citerag.service.answering.model.Model.decide`). The answer is the decision and that conclusion,
checked (:mod:`~citerag.service.answering.verify`; where it is not supported, the paper's sentence closest to it).
"""

from __future__ import annotations

from citerag.index.search import SearchResult
from citerag.index.text import readable
from citerag.service.answering.model import DECISIONS
from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.recipes.base import (
    Tools,
    confidence_bar,
    labels,
    read_judged,
    sentences_of,
    top_documents,
)
from citerag.service.answering.types import Outcome, Statement, Trace
from citerag.service.answering.verify import closest, verify

#: Whether the paper addresses the question at all (the judgement; an off-topic paper is no ground for a yes or a
#: no).
JUDGE_REQUEST = "Does the paper address the question? Reply yes or no."
CONCLUSION_REQUEST = "In one sentence, state what the paper's results conclude about the question."


def decision_of(probabilities: dict[str, float], min_yes: float, yes_bar: bool) -> str:
    """The decision the probabilities give: the likeliest, but a "yes" under ``min_yes`` is the likelier of "no"
    and "maybe" where ``yes_bar`` is on.

    >>> decision_of({"yes": 0.6, "no": 0.3, "maybe": 0.1}, 0.65, True), decision_of({"yes": 0.6, "no": 0.3,
    ...                                                                            "maybe": 0.1}, 0.65, False)
    ('no', 'yes')
    """
    decision = max(DECISIONS, key=lambda d: probabilities[d])
    if yes_bar and decision == "yes" and probabilities["yes"] < min_yes:
        decision = max(("no", "maybe"), key=lambda d: probabilities[d])
    return decision


class YesNo:
    """The yes/no recipe (module docstring)."""

    kind: QuestionKind = "yes_no"

    def answer(self, question: Question, passages: list[SearchResult], tools: Tools,
               trace: Trace) -> tuple[list[SearchResult], Outcome]:
        groups = [[doc_id] for doc_id in top_documents(passages, 2)]
        bar = confidence_bar(question, tools)
        judged = read_judged(question, passages, groups, JUDGE_REQUEST, tools, trace, bar)
        if judged is None:
            return passages, Outcome.abstain("judge", "no retrieved paper could be read")
        evidence = sentences_of(judged.papers)
        if judged.confidence < bar:
            by = "unseen_words" if judged.confidence >= tools.config.min_confidence else "judge"
            if by == "unseen_words":
                trace.acted(by)
            return judged.passages, Outcome.abstain(
                by, f"the papers read do not address the question (confidence {judged.confidence:.2f} < {bar:.2f})",
                evidence, judged.confidence)
        messages, written = tools.model.conclude(judged.papers, question.text, CONCLUSION_REQUEST, trace)
        probabilities = tools.model.decide(messages, written.text, trace)
        config = tools.config
        decision = decision_of(probabilities, config.min_confidence, config.rules.yes_bar)
        if decision != max(DECISIONS, key=lambda d: probabilities[d]):
            trace.acted("yes_bar")
        with trace.stage("verify"):
            statements = verify(written.text, written.truncated, evidence, config, trace, question.text,
                                labels(judged.papers))
        if not statements and evidence:  # the decision is the answer: it rests on the closest sentence
            texts = [readable(s.text) for s in evidence]
            index = closest(written.text or question.text, texts)
            statements = [Statement(texts[index].rstrip(" .;:,"), (index,), "extract")]
        return judged.passages, Outcome(evidence=evidence, statements=statements[:1], written=written.text,
                                        confidence=judged.confidence, decision=decision,
                                        decision_probabilities=probabilities)
