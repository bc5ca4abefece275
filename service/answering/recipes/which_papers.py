"""Which-papers questions. Asked in the singular ("Which paper prunes filters by their gradients?") the answer is
one paper: the best retrieved paper read whole and judged to do what the question describes (the next one when it
does not: the rule ``second_paper``), named and said in one sentence. Asked in the plural ("Which papers ...?"),
each candidate paper (the best retrieved ones, up to :attr:`~citerag.service.answering.config.AnswerConfig.
candidate_papers`, each whose best passage scores :attr:`~citerag.service.answering.config.AnswerConfig.
candidate_ratio` of the best one's) is read whole and judged on the question asked of one paper ("Does the paper
prune filters ...?"), and every paper judged to do it is named with one sentence. Each paper's sentence opens with
its label where it does not name the paper (the rule ``paper_label``).
"""

from __future__ import annotations

from citerag.index.search import SearchResult
from citerag.index.text import readable
from citerag.service.answering.compose import statement_text
from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.recipes.base import (
    Tools,
    confidence_bar,
    judge_write_verify,
    labels,
    sentences_of,
    top_documents,
)
from citerag.service.answering.types import Evidence, Labelled, Outcome, Statement, Trace
from citerag.service.answering.verify import closest, extracted, verify

ONE_PAPER_REQUEST = (
    "Does the paper do what the question describes? Reply yes or no. If yes, say on the next line in one sentence "
    "what the paper does."
)
EACH_PAPER_REQUEST = (
    "Reply yes or no. If yes, say on the next line in one sentence what the paper does that the question asks about."
)


def candidates(passages: list[SearchResult], most: int, ratio: float) -> list[str]:
    """The documents of ``passages`` whose best passage scores at least ``ratio`` of the best one's, best first,
    at most ``most``."""
    best: dict[str, float] = {}
    for result in sorted(passages, key=lambda r: r.rank):
        best.setdefault(result.document.doc_id, result.score)
    top = max(best.values(), default=0.0)
    return [doc_id for doc_id, score in best.items() if score >= ratio * top][:most]


class WhichPapers:
    """The which-papers recipe (module docstring)."""

    kind: QuestionKind = "which_papers"

    def answer(self, question: Question, passages: list[SearchResult], tools: Tools,
               trace: Trace) -> tuple[list[SearchResult], Outcome]:
        labelled: Labelled = "title" if tools.config.rules.paper_label else ""
        if question.one_paper or question.polar is None:
            groups = [[doc_id] for doc_id in top_documents(passages, 2)]
            return judge_write_verify(question, passages, groups, ONE_PAPER_REQUEST, tools, trace, labelled)
        return self._each(question, passages, tools, trace, labelled)

    def _each(self, question: Question, passages: list[SearchResult], tools: Tools, trace: Trace,
              labelled: Labelled) -> tuple[list[SearchResult], Outcome]:
        config = tools.config
        bar = confidence_bar(question, tools)
        evidence: list[Evidence] = []
        statements: list[Statement] = []
        read: list[Evidence] = []
        best = 0.0
        assert question.polar is not None
        for doc_id in candidates(passages, config.candidate_papers, config.candidate_ratio):
            with trace.stage("read"):
                passages, papers = tools.reader.read(passages, [doc_id])
            if not papers:
                continue
            read += sentences_of(papers)
            trace.emit("evidence", read)  # the candidates read so far
            confidence, messages = tools.model.judge(papers, question.polar, EACH_PAPER_REQUEST, trace)
            best = max(best, confidence)
            if confidence < bar:
                continue
            sentences = sentences_of(papers)
            written = tools.model.write(messages, trace, stream=False)
            with trace.stage("verify"):
                checked = verify(written.text, written.truncated, sentences, config, trace, question.polar,
                                 labels(papers))
            if not checked:
                texts = [readable(s.text) for s in sentences]
                checked = [extracted(closest(question.text, texts), sentences, config, trace)]
            offset = len(evidence)
            evidence += sentences
            shown = Statement(checked[0].text, tuple(offset + i for i in checked[0].evidence), checked[0].origin)
            statements.append(shown)
            text = statement_text(shown, evidence, labelled, question.names)
            if trace.emit("token", f" {text}" if len(statements) > 1 else text):
                break
        if not statements:
            return passages, Outcome.abstain(
                "judge", f"no retrieved paper is judged to answer the question (best confidence {best:.2f})")
        return passages, Outcome(evidence=evidence, statements=statements, confidence=best, labelled=labelled)
