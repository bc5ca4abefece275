"""Readability rules for written answers, checked over every dev set (``eval/answers.py``) and in tests:

1. **No pronoun opening**: no sentence of the answer opens with We, Our, This, These, It, They, Here or "In this
   work" (:data:`~citerag.service.answering.language.PRONOUN_OPENING`): the answer names its subject.
2. **No mid-sentence start**: the answer starts with a capital letter, a digit or a name (``mSGD``), not with a
   lower-case word or punctuation.
3. **No mid-sentence end**: each sentence ends with a full stop, question or exclamation mark (after its markers),
   and its last word before the markers is not a function word ("... of a standard [1].").
4. **Every cited paper named** (which-papers and comparison answers): each cited document's title, the title's
   head before a colon or the name its abstract coins (:func:`~citerag.service.answering.names.paper_names`), when
   it has one, or the name the question calls it by, appears in the answer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from citerag.index.text import split_sentences
from citerag.service.answering.language import CITATION_MARKER, FUNCTION_WORDS, PRONOUN_OPENING
from citerag.service.answering.names import names_paper, paper_label, paper_names, question_names

_LAST_WORD = re.compile(r"([^\W_][\w-]*)\W*$")
#: Function words that can close a sentence, standing for a noun phrase ("... predicting sequence, rate, or both.").
_CAN_END = frozenset({"both", "all", "each", "either", "neither", "none", "one", "others", "too",
                      "it", "them", "itself", "themselves"})  # an object: "... layers cannot solve it [1]."


def readability_problems(answer: str, citations: Sequence[Any] = (), name_papers: bool = False,
                         question: str = "") -> list[str]:
    """The rules (module docstring) ``answer`` breaks, one line each (``[]``: none). ``citations`` need
    ``result.document`` (for rule 4, applied when ``name_papers``; a paper is named too by the name ``question``
    gives it: :func:`~citerag.service.answering.names.names_paper`).

    >>> readability_problems("We perform SMC over trajectories [1].")
    ["opens with a pronoun: 'We perform SMC over trajectories [1].'"]
    >>> readability_problems("same budget, ASMC attains 80.6% [1]. It is the cost of a [1].")
    ['starts mid-sentence', "opens with a pronoun: 'It is the cost of a [1].'", "ends mid-sentence: 'It is the cost of a [1].'"]
    >>> readability_problems("ProGen predicts sequence, evolutionary rate, or both [5].")
    []
    >>> readability_problems("A hybrid network of 2^(3L^2) linear attention layers cannot solve it [1].")
    []
    """
    problems: list[str] = []
    text = answer.strip()
    sentences = [text[s:e] for s, e in split_sentences(text)]
    if text and not (text[0].isupper() or text[0].isdigit() or re.match(r"[a-z]+[A-Z0-9]", text)):
        problems.append("starts mid-sentence")
    for sentence in sentences:
        if PRONOUN_OPENING.match(sentence):
            problems.append(f"opens with a pronoun: {sentence!r}")
    for sentence in sentences:
        body = CITATION_MARKER.sub("", sentence).strip()
        last = _LAST_WORD.search(body.rstrip(".!?"))
        word = last.group(1).lower() if last else ""
        if not re.search(r"[.!?]$", sentence.strip()) or (word in FUNCTION_WORDS and word not in _CAN_END):
            problems.append(f"ends mid-sentence: {sentence!r}")
    if name_papers:
        asked = question_names(question)
        for citation in citations:
            document = citation.result.document
            if paper_names(document) and not names_paper(text, document, asked):
                problems.append(f"does not name {paper_label(document)!r}")
    return list(dict.fromkeys(problems))
