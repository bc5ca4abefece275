"""Composing the answer a user reads from the chosen evidence: the service writes it, the model does not.

Every sentence of the answer is an evidence sentence (folded: markup removed) with the marker of the passage
holding it, so every citation points at the exact span that says the thing. A yes/no question's answer opens with
the decision; a which-papers question's answer names each paper before its sentence, by its title or the name its
abstract introduces (:func:`paper_name`), and only where that name is in the cited passage.

An answer that states one sentence, with no decision and no paper named, states only the part of it that answers
the question (:func:`~citerag.service.answering.span.answer_span`) when ``compose`` is given the question; the
citation is then that part's exact span (the evidence list still holds the whole sentence).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from citerag.index.text import fold
from citerag.index.types import Document
from citerag.service.answering.evidence import Evidence
from citerag.service.answering.span import answer_span
from citerag.service.answering.types import Citation
from citerag.service.context import coined_name


def paper_name(document: Document, passage_text: str) -> str | None:
    """What an answer may call ``document`` when citing ``passage_text``: its title, else the name its abstract
    introduces (:func:`~citerag.service.context.coined_name`) when the passage holds that name, else ``None``."""
    if document.title.strip():
        return fold(document.title).replace("[", "(").replace("]", ")")
    name = coined_name(document.text)
    return name if name and name in fold(passage_text) else None


# A document's own numbered references ("[12, 13]", "[4-6]"): shown in an answer they would read as its citations.
_OWN_REFERENCE = re.compile(r"\s*\[\s*\d{1,4}(?:\s*[,;–-]\s*\d{1,4})*\s*\]")


def _sentence(evidence: Evidence, start: int, end: int) -> str:
    """The evidence sentence's document span ``[start, end)`` as the answer shows it: folded, the document's own
    bracketed reference numbers left out (only the service's markers are citations), its passage's marker before
    the final full stop."""
    text = _OWN_REFERENCE.sub("", fold(evidence.result.document.text[start:end])).rstrip()
    stop = text[-1] if text and text[-1] in ".!?" else "."
    body = text[:-1] if text and text[-1] in ".!?" else text
    return f"{body} [{evidence.passage}]{stop}"


def compose(
    evidence: Sequence[Evidence], used: Sequence[int], decision: str | None = None, name_papers: bool = False,
    question: str | None = None,
) -> tuple[str, list[Citation]]:
    """The answer text and its citations.

    Args:
        evidence: the evidence the model read.
        used: indexes into ``evidence`` of the sentences to state, in the order to state them (non-empty).
        decision: ``yes``/``no``/``maybe`` to open the answer with, or ``None``.
        name_papers: name each sentence's paper before it (which-papers questions).
        question: when given, a lone stated sentence (one ``used``, no ``decision``, no ``name_papers``) is cut to
            the part that answers it (:func:`~citerag.service.answering.span.answer_span`).

    Returns:
        ``(text, citations)``: citations in order of appearance, one per stated sentence (``n`` = the passage
        number, the span = the document span of what the answer states of the sentence).

    Raises:
        ValueError: ``used`` is empty or holds an index outside ``evidence``.
    """
    if not used or not all(0 <= i < len(evidence) for i in used):
        raise ValueError(f"used must be non-empty indexes into {len(evidence)} evidence sentences, got {list(used)}")
    parts: list[str] = [f"{decision.capitalize()}." ] if decision else []
    citations: list[Citation] = []
    cut = question is not None and len(used) == 1 and decision is None and not name_papers
    for i in used:
        item = evidence[i]
        start, end = item.start, item.end
        if cut:
            part_start, part_end = answer_span(question or "", item.text)
            start, end = item.start + part_start, item.start + part_end
        sentence = _sentence(item, start, end)
        if name_papers and (name := paper_name(item.result.document, item.result.passage.text)):
            sentence = f"{name}: {sentence}"
        parts.append(sentence)
        citations.append(Citation(n=item.passage, result=item.result, start=start, end=end))
    return " ".join(parts), citations
