"""The compose step: the answer text and its citations from the checked statements.

Each statement is written with the markers of the passages holding its evidence (``[n]``: the number of the
retrieved passage, as the API's ``passages`` list numbers them), before its final full stop; each of its evidence
sentences becomes a citation whose span is that sentence's exact place in the document, so a citation always
points at the text that says the thing. A yes/no answer opens with its decision; an answer about several papers
names each paper it cites (its label before the first sentence citing it, where the sentence does not name it). A
definition spells out the abbreviation it is asked about where its cited evidence defines it ("ASMC (Adaptive
Sequential Monte Carlo) is ...": :func:`~citerag.service.answering.names.long_form`), and any answer spells out an
abbreviation it uses where the question wrote the long form ("DD (Divergence Decoding) steers ...").
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from citerag.index.text import fold, readable
from citerag.service.answering.evidence import Evidence
from citerag.service.answering.names import long_form, mentions, names_in, names_paper, subject_label
from citerag.service.answering.state import AnswerState, Citation, Statement
from citerag.service.answering.write import first_word_decision


_OPENING_DECISION = re.compile(r"^(?:yes|no|maybe)\b[,.:;]?\s*", re.IGNORECASE)


def spelled_out(text: str, names: Sequence[str], sources: Sequence[str], asked: str | None = None) -> str:
    """``text`` with the first mention of each of ``names`` followed by its long form in brackets, where one of
    ``sources`` defines it and ``text`` does not already hold it; with ``asked`` (a question), only where the
    question calls it by that long form (the reader asked about "Divergence Decoding", the answer says "DD").

    >>> spelled_out("ASMC is a particle method [1].", ["ASMC"], ["We propose Adaptive Sequential Monte Carlo (ASMC)."])
    'ASMC (Adaptive Sequential Monte Carlo) is a particle method [1].'
    >>> source = ["We introduce Divergence Decoding (DD), a decoding method."]
    >>> spelled_out("DD steers the logits [1].", ["DD"], source, asked="Does Divergence Decoding steer logits?")
    'DD (Divergence Decoding) steers the logits [1].'
    >>> spelled_out("DD steers the logits [1].", ["DD"], source, asked="Does DD steer logits?")
    'DD steers the logits [1].'
    """
    for name in names:
        mention = re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", text)
        found = next((lf for source in sources if (lf := long_form(name, source))), None)
        if found and asked is not None and not mentions(asked, found):
            continue
        if mention and found and fold(found).lower() not in fold(text).lower():
            text = f"{text[:mention.end()]} ({found}){text[mention.end():]}"
    return text


def statement_text(statement: Statement, evidence: Sequence[Evidence], labelled: bool,
                   names: Sequence[str] = ()) -> str:
    """``statement`` as the answer writes it: its text, the markers of the passages holding its evidence
    (``[n]``, each once) and a full stop; ``labelled``: its paper's label before it (``"LU-KV: ..."``) when the text
    does not name the paper (an answer about several papers, the paper's first sentence), by one of its own names
    or by one of the question's ``names`` that names it ("Error Encoding Networks" for "Prediction Under Uncertainty
    with Error Encoding Networks": :func:`~citerag.service.answering.names.names_paper`).

    Args:
        statement: a checked statement; ``statement.evidence`` indexes ``evidence``.
        evidence: the evidence the statement rests on.
        names: the names the question uses (``QuestionInfo.names``).
    """
    text = statement.text.rstrip(" .;:,")
    document = evidence[statement.evidence[0]].result.document
    label = subject_label(document)
    if labelled and label and not names_paper(text, document, names):
        text = f"{label}: {text}"
    markers = "".join(f"[{n}]" for n in dict.fromkeys(evidence[i].n for i in statement.evidence))
    return f"{text} {markers}."


class Compose:
    """Compose ``state.answer`` and ``state.citations`` from ``state.statements`` (module docstring)."""

    name = "compose"

    def run(self, state: AnswerState) -> None:
        assert state.info is not None
        evidence = state.evidence
        parts: list[str] = []
        citations: dict[tuple[int, int, int], Citation] = {}
        named_docs: set[str] = set()
        several = len({evidence[i].doc_id for s in state.statements for i in s.evidence}) > 1 \
            or state.info.kind == "which_papers"
        for statement in state.statements:
            doc_id = evidence[statement.evidence[0]].doc_id
            parts.append(statement_text(statement, evidence, several and doc_id not in named_docs, state.info.names))
            named_docs.add(doc_id)
            for i in statement.evidence:
                item = evidence[i]
                citations.setdefault((item.n, item.start, item.end), Citation(item.n, item.result, item.start, item.end))
        text = " ".join(parts)
        cited = [readable(evidence[i].text) for s in state.statements for i in s.evidence]
        if state.info.kind == "definition":
            text = spelled_out(text, state.info.names, cited)
        else:  # an abbreviation the answer uses where the question wrote its long form
            text = spelled_out(text, names_in(text), cited, asked=state.info.text)
        if state.decision and first_word_decision(text) != state.decision:
            # the decision opens the answer; a contrary first word the model wrote goes ("No, it ..." after "yes")
            text = _OPENING_DECISION.sub("", text)
            text = f"{state.decision.capitalize()}. {text[:1].upper()}{text[1:]}"
        state.answer = text
        state.citations = list(citations.values())
