"""An answer as it leaves citerag: Markdown for notes and drafts (the page's "Copy with references",
``citerag ask --format markdown``) and a JSON form for tools (``--format json``).

Both carry the answer's readable text with its ``[n]`` markers and one numbered reference per cited passage: the
paper's label (its title, or the name its abstract introduces: :func:`~citerag.service.answering.names.paper_label`),
its document id, and each cited sentence quoted exactly as stored (``document.text[start:end]``: LaTeX and Markdown
kept, which Markdown editors with math render).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from citerag.service.schemas import AskResponse

ExportFormat = Literal["markdown", "json"]


def markdown(response: AskResponse) -> str:
    """``response`` as Markdown: the question, the answer, then ``[n] label (`doc_id`): "quote"`` for each cited
    passage, in the order the answer first cites them.

    >>> from citerag.service.schemas import AskResponse, DisplayOut, QuoteOut, ReferenceOut
    >>> r = AskResponse(question="What does X reach?", question_used="What does X reach?", answer="80.6% [1].",
    ...     answer_display=DisplayOut.of("80.6% [1]."), abstained=False, reason="", citations=[], passages=[],
    ...     references=[ReferenceOut(n=1, label="X", doc_id="d1", quotes=[QuoteOut(start=0, end=9, text="X: 80.6\\\\%")])],
    ...     timings_ms={})
    >>> print(markdown(r))
    **Q:** What does X reach?
    <BLANKLINE>
    80.6% [1].
    <BLANKLINE>
    **References**
    <BLANKLINE>
    [1] X (`d1`): "X: 80.6\\%"
    <BLANKLINE>
    """
    asked = f"**Q:** {response.question}"
    if response.question_used and response.question_used != response.question:
        asked += f" (answered as: {response.question_used})"
    lines = [asked, "", response.answer_display.text]
    if response.abstained:
        lines += ["", f"The service abstained: {response.reason}."]
    if response.references:
        lines += ["", "**References**"]
        for reference in response.references:
            quotes = " … ".join(f'"{quote.text}"' for quote in reference.quotes)
            lines += ["", f"[{reference.n}] {reference.label} (`{reference.doc_id}`): {quotes}"]
    return "\n".join(lines) + "\n"


def as_json(response: AskResponse) -> dict[str, Any]:
    """``response`` as the export's JSON object: ``question``, ``question_used``, ``answer`` (readable, with its
    ``[n]`` markers), ``decision`` (``"yes"``/``"no"``/``"maybe"`` for a yes/no question, else ``None``),
    ``abstained``, ``reason`` and ``references`` (``n``, ``label``, ``doc_id``, ``quotes``: each
    ``start``, ``end`` and the stored ``text``)."""
    return {
        "question": response.question,
        "question_used": response.question_used,
        "answer": response.answer_display.text,
        "decision": response.decision,
        "abstained": response.abstained,
        "reason": response.reason,
        "references": [reference.model_dump() for reference in response.references],
    }
