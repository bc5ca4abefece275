"""Comparisons ("How do A and B differ in ...?", "What does each of A and B use?"): the two papers the question is
about (those it names; else the best paper for each of the two descriptions it gives, each searched on its own;
else the two best retrieved) read whole together, judged (no abstention where the question's names find both: the
rule ``named_papers``), and answered with one sentence for each, each paper named by its title (the rule
``paper_label``). A written answer that rests on one paper only gets the other paper's sentence closest to the
question (the rule ``each_paper``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from citerag.index.search import SearchResult
from citerag.index.text import readable
from citerag.service.answering.names import named_documents, paper_label
from citerag.service.answering.question import Question, QuestionKind
from citerag.service.answering.recipes.base import Tools, judge_write_verify, top_documents
from citerag.service.answering.types import Outcome, Paper, Trace
from citerag.service.answering.verify import closest, extracted

REQUEST = (
    "Do the papers answer the question? Reply yes or no. If yes, answer on the next line with one sentence for each "
    "paper, each beginning with the paper's number, like \"Paper 1: ...\"."
)
#: The papers a comparison reads.
PAPERS = 2


_REFERENCE = re.compile(r"\b(?:[Tt]he )?(?:(?P<ordinal>first|second) (?:paper|work|study)|[Pp]aper (?P<number>[12]))\b")


def named_references(text: str, papers: Sequence[Paper]) -> str:
    """``text`` with the model's references to the prompt's papers ("Paper 1", "the second paper") replaced by
    the papers' titles (:func:`~citerag.service.answering.names.paper_label`; a paper without one stays as it is).

    >>> from citerag.index.types import Document
    >>> papers = [Paper(Document(d, t, "x", t), (), True, 1) for d, t in (("a", "FrostVault: Cold Seeds"),
    ...                                                                   ("b", "EmberLoop: Kiln Heat"))]
    >>> named_references("Paper 1: keeps seeds. The second paper saves wood.", papers)
    'FrostVault: Cold Seeds: keeps seeds. EmberLoop: Kiln Heat saves wood.'
    """
    def name(match: re.Match[str]) -> str:
        index = ("first", "second").index(match["ordinal"]) if match["ordinal"] else int(match["number"]) - 1
        label = paper_label(papers[index].document) if index < len(papers) else None
        return label or match.group(0)

    return _REFERENCE.sub(name, text)


#: Where a question describing two papers turns from the first to the second: "; another ...", "and the paper that
#: ...", "the other ...", "and the one ...".
_SECOND = re.compile(
    r";\s+|\b(?:and|while|whereas)\s+(?=(?:the|a|an)\s+(?:[\w-]+\s+){0,3}?(?:paper|work|study|one|method|approach|"
    r"analysis|follow-up)\b)|\b(?:another|the other)\b",
    re.IGNORECASE,
)
#: How deep each paper's description is searched for its paper.
DESCRIPTION_K = 5


def descriptions(question: str) -> list[str]:
    """The two descriptions of papers a comparison holds ("How do the paper that X and the paper that Y differ?" ->
    the text before and after the turn), or ``[]`` when it holds no such turn.

    >>> descriptions("How do the paper that stores seeds and the work that fires kilns differ in cost?")
    ['How do the paper that stores seeds', 'the work that fires kilns differ in cost?']
    >>> descriptions("One paper stores seeds in foil; another fires kilns with wood. What does each save?")
    ['One paper stores seeds in foil', 'another fires kilns with wood. What does each save?']
    >>> descriptions("How do FrostVault and EmberLoop differ?")
    []
    """
    turn = next((m for m in _SECOND.finditer(question) if m.start() > 10), None)
    if turn is None:
        return []
    first, second = question[: turn.start()].strip(" ,;"), question[turn.end():].strip(" ,;")
    return [first, second] if len(first.split()) >= 3 and len(second.split()) >= 3 else []


def described_papers(question: Question, passages: list[SearchResult], searcher: object,
                     filters: object = None) -> tuple[list[SearchResult], list[str]]:
    """The two papers a comparison is about, and ``passages`` with what finding them added: those the question
    names (:func:`~citerag.service.answering.names.named_documents`), else the best paper for each of its two
    descriptions (:func:`descriptions`, each searched on its own), else the two best retrieved."""
    named = named_documents(question.names, passages)
    chosen = list(dict.fromkeys(named))[:PAPERS]
    search: Any = getattr(searcher, "search", None)  # a Searcher (citerag.index.backend), where it has one
    for description in descriptions(question.text) if len(chosen) < PAPERS and search is not None else ():
        hits = search(description, k=DESCRIPTION_K, mode="hybrid")
        found = next((h for h in hits if h.document.doc_id not in chosen), None)
        if found is None:
            continue
        chosen.append(found.document.doc_id)
        if all(p.document.doc_id != found.document.doc_id for p in passages):
            passages = [*passages, found.replace(rank=len(passages) + 1)]
    for doc_id in top_documents(passages, PAPERS + len(chosen)):
        if len(chosen) < PAPERS and doc_id not in chosen:
            chosen.append(doc_id)
    return passages, chosen[:PAPERS]


class Comparison:
    """The comparison recipe (module docstring)."""

    kind: QuestionKind = "comparison"

    def answer(self, question: Question, passages: list[SearchResult], tools: Tools,
               trace: Trace) -> tuple[list[SearchResult], Outcome]:
        config = tools.config
        passages, docs = described_papers(question, passages, tools.searcher)
        named = config.rules.named_papers and len(named_documents(question.names, passages)) >= PAPERS
        if named:  # the question's names establish that these are the papers asked about: no judge's abstention
            trace.acted("named_papers")
        passages, outcome = judge_write_verify(question, passages, [docs], REQUEST, tools, trace,
                                               "title" if config.rules.paper_label else "",
                                               budget_chars=PAPERS * config.read_chars,
                                               edit=named_references if config.rules.paper_label else None,
                                               bar=0.0 if named else None)
        if outcome.abstained or not outcome.statements or not config.rules.each_paper:
            return passages, outcome
        covered = {outcome.evidence[i].doc_id for s in outcome.statements for i in s.evidence}
        for doc_id in dict.fromkeys(e.doc_id for e in outcome.evidence):
            if doc_id in covered:
                continue
            own = [i for i, e in enumerate(outcome.evidence) if e.doc_id == doc_id]
            texts = [readable(outcome.evidence[i].text) for i in own]
            index = own[closest(question.text, texts)]
            outcome.statements.append(extracted(index, outcome.evidence, config, trace))
            trace.acted("each_paper")
        return passages, outcome
