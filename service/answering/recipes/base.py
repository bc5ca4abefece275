"""What every recipe shares: the :class:`Tools` it answers with, the :class:`Recipe` protocol, and the mechanics
below every kind: which documents retrieval ranks first (:func:`top_documents`), the bar a judgement must reach
(:func:`confidence_bar`), and one paper's (or a few papers') judgement, writing and checking
(:func:`judge_write_verify`, :func:`read_judged`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from citerag.index.search import SearchResult
from citerag.index.text import readable
from citerag.service.answering.config import AnswerConfig
from citerag.service.answering.model import Model
from citerag.service.answering.names import paper_label
from citerag.service.answering.papers import Reader
from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.types import Evidence, Labelled, Outcome, Paper, Trace
from citerag.service.answering.verify import verify


@dataclass(frozen=True, slots=True)
class Tools:
    """What a recipe answers with.

    Attributes:
        model: the model's calls over papers.
        reader: reads retrieved documents as papers.
        config: the answering configuration (bars, budget, rules).
        searcher: what retrieved the passages (its ``unseen_terms`` and ``vocabulary_size``, where it has them,
            serve the rule ``unseen_words``).
    """

    model: Model
    reader: Reader
    config: AnswerConfig
    searcher: object


class Recipe(Protocol):
    """How one kind of question is answered: which papers are read, what the model is asked, what is checked."""

    kind: QuestionKind

    def answer(self, question: Question, passages: list[SearchResult], tools: Tools,
               trace: Trace) -> tuple[list[SearchResult], Outcome]:
        """The outcome for ``question`` over the retrieved ``passages`` (best first), and the passages the answer
        numbers (``passages`` with those of papers read whole appended)."""
        ...


def top_documents(passages: Sequence[SearchResult], n: int) -> list[str]:
    """The first ``n`` distinct documents of ``passages``, best first."""
    return list(dict.fromkeys(r.document.doc_id for r in sorted(passages, key=lambda r: r.rank)))[:n]


def unseen_words(question: Question, tools: Tools) -> list[str]:
    """The question's content words no indexed passage holds, as written; ``[]`` when the searcher cannot tell or
    its corpus has fewer than ``min_vocabulary_for_unseen`` distinct terms."""
    unseen_terms = getattr(tools.searcher, "unseen_terms", None)
    if unseen_terms is None or getattr(tools.searcher, "vocabulary_size", 0) < tools.config.min_vocabulary_for_unseen:
        return []
    unseen = set(unseen_terms(list(question.tokens)))
    return [word for word, token in question.terms if token in unseen]


def confidence_bar(question: Question, tools: Tools) -> float:
    """The P(yes) a judgement needs: ``min_confidence``, or ``min_confidence_unseen`` for a question with a word no
    indexed passage holds (the rule ``unseen_words``)."""
    config = tools.config
    if config.rules.unseen_words and unseen_words(question, tools):
        return max(config.min_confidence, config.min_confidence_unseen)
    return config.min_confidence


def labels(papers: Sequence[Paper]) -> list[str]:
    """The papers' labels (readable), for support checks: an answer may name a paper."""
    return [readable(label) for paper in papers if (label := paper_label(paper.document))]


def sentences_of(papers: Sequence[Paper]) -> list[Evidence]:
    """Every sentence read, in prompt order (what ``[i]`` numbers)."""
    return [sentence for paper in papers for sentence in paper.sentences]


@dataclass(slots=True)
class Judged:
    """Papers read and judged: the passages (with those of papers read whole), the papers, the model's P(yes) and
    the prompt the writer continues."""

    passages: list[SearchResult]
    papers: list[Paper]
    confidence: float
    messages: list[dict[str, str]]


def read_judged(question: Question, passages: list[SearchResult], groups: Sequence[Sequence[str]], request: str,
                tools: Tools, trace: Trace, bar: float, budget_chars: int | None = None) -> Judged | None:
    """The first group of documents (``groups``: each a list of doc ids read together) whose judgement under
    ``request`` reaches ``bar``; each group after the first is read only with the rule ``second_paper`` on, and
    only while the judgements fall short. The last group judged is returned when none reaches it (``None``:
    nothing could be read)."""
    best: Judged | None = None
    for i, group in enumerate(groups):
        if i and not tools.config.rules.second_paper:
            break
        with trace.stage("read"):
            passages_read, papers = tools.reader.read(passages, group, budget_chars)
        if not papers:
            continue
        trace.emit("evidence", sentences_of(papers))
        confidence, messages = tools.model.judge(papers, question.text, request, trace)
        judged = Judged(passages_read, papers, confidence, messages)
        if best is None or confidence > best.confidence:
            best = judged
        if confidence >= bar:
            if i:
                trace.acted("second_paper")
            break
    return best


def judge_write_verify(question: Question, passages: list[SearchResult], groups: Sequence[Sequence[str]],
                       request: str, tools: Tools, trace: Trace, labelled: Labelled = "",
                       budget_chars: int | None = None,
                       edit: Callable[[str, Sequence[Paper]], str] | None = None,
                       bar: float | None = None) -> tuple[list[SearchResult], Outcome]:
    """The common recipe: read and judge ``groups`` (:func:`read_judged`), abstain below ``bar`` (default
    :func:`confidence_bar`), else let the model write after its "yes" and check what it wrote
    (:func:`~citerag.service.answering.verify.verify`), after ``edit`` (the recipe's own rewriting of the written
    text over the papers read), if any."""
    bar = confidence_bar(question, tools) if bar is None else bar
    judged = read_judged(question, passages, groups, request, tools, trace, bar, budget_chars)
    if judged is None:
        return passages, Outcome.abstain("judge", "no retrieved paper could be read")
    evidence = sentences_of(judged.papers)
    if judged.confidence < bar:
        if judged.confidence >= tools.config.min_confidence:
            trace.acted("unseen_words")
            return judged.passages, Outcome.abstain(
                "unseen_words", f"a word of the question is in no indexed passage, and the papers read do not make "
                f"up for it (confidence {judged.confidence:.2f} < {bar:.2f})", evidence, judged.confidence)
        return judged.passages, Outcome.abstain(
            "judge", f"the papers read do not answer the question (confidence {judged.confidence:.2f} < {bar:.2f})",
            evidence, judged.confidence)
    written = tools.model.write(judged.messages, trace)
    text = edit(written.text, judged.papers) if edit is not None else written.text
    with trace.stage("verify"):
        statements = verify(text, written.truncated, evidence, tools.config, trace, question.text,
                            labels(judged.papers))
    return judged.passages, Outcome(evidence=evidence, statements=statements, written=written.text,
                                    confidence=judged.confidence, labelled=labelled)
