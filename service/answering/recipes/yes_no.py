"""Yes/no questions ("Does X need labels?"): the best retrieved paper read whole (judged first to address the
question, the next one read when it does not, only with :attr:`~citerag.service.answering.config.AnswerConfig.
judge_yes_no` or a word no indexed passage holds); the model is shown the paper's sentences most related to the
question again (:func:`~citerag.service.answering.papers.related`) and states what the paper's results conclude about
the question in one sentence of its own, then decides yes, no or maybe after it, one token whose probabilities are
read (:meth:`~citerag.service.answering.model.Model.decide`). The answer is the decision and that conclusion,
checked (:mod:`~citerag.service.answering.verify`; where it is not supported, the paper's sentence most related to
the question).
"""

from __future__ import annotations

from dataclasses import replace

from citerag.index.search import SearchResult
from citerag.service.answering.model import DECISIONS
from citerag.service.answering.papers import related
from citerag.service.answering.prompts import quoted
from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.recipes.base import (
    Judged,
    Tools,
    confidence_bar,
    labels,
    read_judged,
    sentences_of,
    top_documents,
)
from citerag.service.answering.types import Outcome, Trace
from citerag.service.answering.verify import extracted, verify

#: Whether the paper addresses the question at all (the judgement; an off-topic paper is no ground for a yes or a
#: no).
JUDGE_REQUEST = "Does the paper address the question? Reply yes or no."
CONCLUSION_REQUEST = "In one sentence, state what the paper's results conclude about the question."
#: What introduces the paper's sentences most related to the question, quoted again before the conclusion's request
#: (:attr:`~citerag.service.answering.config.AnswerConfig.focus_sentences`): a whole abstract dilutes the sentence
#: that decides, and the model then agrees with the question as asked.
FOCUS_LEAD = "The paper's sentences most related to the question:"


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
        config = tools.config
        bar = confidence_bar(question, tools)
        judging = config.judge_yes_no or bar > config.min_confidence  # a word no passage holds: always judged
        if judging:
            groups = [[doc_id] for doc_id in top_documents(passages, 2)]
            judged = read_judged(question, passages, groups, JUDGE_REQUEST, tools, trace, bar)
        else:  # the best paper is read: retrieval chose it, and the decision says whether it supports the question
            with trace.stage("read"):
                read_passages, papers = tools.reader.read(passages, top_documents(passages, 1))
            trace.emit("evidence", sentences_of(papers))
            judged = Judged(read_passages, papers, 1.0, []) if papers else None
        if judged is None:
            return passages, Outcome.abstain("judge", "no retrieved paper could be read")
        evidence = sentences_of(judged.papers)
        if judged.confidence < bar:
            by = "unseen_words" if judged.confidence >= config.min_confidence else "judge"
            if by == "unseen_words":
                trace.acted(by)
            return judged.passages, Outcome.abstain(
                by, f"the papers read do not address the question (confidence {judged.confidence:.2f} < {bar:.2f})",
                evidence, judged.confidence)
        request = CONCLUSION_REQUEST
        if config.focus_sentences:
            focus = [quoted(evidence[i].text) for i in related(question.text, evidence, config.focus_sentences)]
            request = f"{FOCUS_LEAD}\n" + "\n".join(f"- {text}" for text in focus) + f"\n\n{CONCLUSION_REQUEST}"
        messages, written = tools.model.conclude(judged.papers, question.text, request, trace)
        probabilities = tools.model.decide(messages, written.text, trace)
        decision = decision_of(probabilities, config.min_confidence, config.rules.yes_bar)
        if decision != max(DECISIONS, key=lambda d: probabilities[d]):
            trace.acted("yes_bar")
        with trace.stage("verify"):  # no extract: what a decision rests on is the sentence most related to it
            checked = replace(config, rules=replace(config.rules, extract=False))
            statements = verify(written.text, written.truncated, evidence, checked, trace, question.text,
                                labels(judged.papers))
        if not statements and evidence:  # the decision is the answer: it rests on the sentence most related
            statements = [extracted(related(question.text, evidence, 1)[0], evidence, config, trace)]
        return judged.passages, Outcome(evidence=evidence, statements=statements[:1], written=written.text,
                                        confidence=judged.confidence, decision=decision,
                                        decision_probabilities=probabilities)
