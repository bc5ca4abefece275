"""Composing the answer a user reads from the chosen evidence: the service writes it, the model does not.

Every sentence of the answer is an evidence sentence (folded: markup removed) with the marker of the passage
holding it, so every citation points at the exact span that says the thing. A yes/no question's answer opens with
the decision; a which-papers question's answer names each paper before its sentence, by its title or the name its
abstract introduces (:func:`paper_name`), and only where that name is in the cited passage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from citerag.index.text import fold
from citerag.index.types import Document
from citerag.service.answering.evidence import Evidence
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


def _sentence(evidence: Evidence) -> str:
    """The evidence sentence as the answer shows it: folded, the document's own bracketed reference numbers left
    out (only the service's markers are citations), its passage's marker before the final full stop."""
    text = _OWN_REFERENCE.sub("", fold(evidence.text)).rstrip()
    stop = text[-1] if text and text[-1] in ".!?" else "."
    body = text[:-1] if text and text[-1] in ".!?" else text
    return f"{body} [{evidence.passage}]{stop}"


def compose(
    evidence: Sequence[Evidence], used: Sequence[int], decision: str | None = None, name_papers: bool = False
) -> tuple[str, list[Citation]]:
    """The answer text and its citations.

    Args:
        evidence: the evidence the model read.
        used: indexes into ``evidence`` of the sentences to state, in the order to state them (non-empty).
        decision: ``yes``/``no``/``maybe`` to open the answer with, or ``None``.
        name_papers: name each sentence's paper before it (which-papers questions).

    Returns:
        ``(text, citations)``: citations in order of appearance, one per stated sentence (``n`` = the passage
        number, the span = the sentence's document span).

    Raises:
        ValueError: ``used`` is empty or holds an index outside ``evidence``.
    """
    if not used or not all(0 <= i < len(evidence) for i in used):
        raise ValueError(f"used must be non-empty indexes into {len(evidence)} evidence sentences, got {list(used)}")
    parts: list[str] = [f"{decision.capitalize()}." ] if decision else []
    citations: list[Citation] = []
    for i in used:
        item = evidence[i]
        sentence = _sentence(item)
        if name_papers and (name := paper_name(item.result.document, item.result.passage.text)):
            sentence = f"{name}: {sentence}"
        parts.append(sentence)
        citations.append(Citation(n=item.passage, result=item.result, start=item.start, end=item.end))
    return " ".join(parts), citations
