"""The verify step: every sentence the model wrote is checked against the evidence it cites, so a citation
cannot point at text that does not say the thing.

A sentence is *supported* by evidence sentences when (:func:`check`):

* every number it states is in them, digit for digit (``80.6``, ``1318``; a number the question states counts too),
  so a number is never altered;
* every name it uses (a name-shaped token such as ``LU-KV``, or a capitalised word inside the sentence) is in them,
  in the question, or in a paper's label;
* at least :data:`MIN_SUPPORT` of its content words (BM25 terms: stemmed, function words left out) are in them, the
  question or the labels: the model may join the evidence's words with its own ("reaches", "uses"), not bring new
  ones.

A sentence that its own markers do not support is given to the evidence sentence that does, if one does; otherwise
it is dropped. When no written sentence survives, the answer is the evidence sentence most like the first one the
model wrote, itself (``origin="extract"``; the best-scored evidence sentence when the model wrote nothing). A sentence that opens with a pronoun ("We ...", "This ...") gets its paper's label as its
subject (:func:`~citerag.service.answering.subject.name_subject`); an unfinished last sentence (the token limit) is
dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from citerag.index.text import readable, split_sentences
from citerag.index.tokenize import tokenize
from citerag.service.answering.evidence import Evidence
from citerag.service.answering.language import (
    CITATION_MARKER,
    FUNCTION_WORDS,
    META_WORDS,
    marker_numbers,
    number_values,
)
from citerag.service.answering.names import names_in, paper_label
from citerag.service.answering.state import AnswerState, Statement
from citerag.service.answering.subject import name_subject, opens_with_pronoun

#: The share of a written sentence's content terms that must be in its evidence, the question or the labels
#: (chosen on dev questions: eval/results/qa.md).
MIN_SUPPORT = 0.75
#: At most this many sentences are kept.
MAX_SENTENCES = 3
#: What an answer calls a paper that has neither a title nor a coined name.
UNNAMED_SUBJECT = "The paper"
_WORD = re.compile(r"[^\W_]+(?:[-–][^\W_]+)*")
_CAPITALISED = re.compile(r"(?<=\s)[A-Z][\w-]*")
_DECISION_WORDS = {"yes", "no", "maybe"}


@dataclass(frozen=True, slots=True)
class Check:
    """How a sentence fares against some evidence.

    Attributes:
        coverage: the share of its content terms found, in ``[0, 1]`` (1.0 when it has none).
        missing_numbers: numbers it states that are not there.
        missing_names: names it uses that are not there.
    """

    coverage: float
    missing_numbers: tuple[str, ...] = ()
    missing_names: tuple[str, ...] = ()

    def supported(self, min_support: float = MIN_SUPPORT) -> bool:
        """No missing number or name, and at least ``min_support`` of the content terms found."""
        return not self.missing_numbers and not self.missing_names and self.coverage >= min_support


def content_tokens(text: str) -> set[str]:
    """The BM25 terms of ``text``'s content words (function words left out)."""
    return {t for word in _WORD.findall(text) if word.lower() not in FUNCTION_WORDS for t in tokenize(word)}


def check(sentence: str, sources: Iterable[str], context: Iterable[str] = ()) -> Check:
    """Check ``sentence`` (readable text, no markers) against ``sources`` (readable evidence texts), with
    ``context`` (the question, the paper labels) counting as known words and numbers (module docstring).

    >>> check("ASMC reaches 80.6% exact-match accuracy", ["ASMC attains 80.6% exact-match accuracy."]).supported()
    True
    >>> check("ASMC reaches 86.0% accuracy", ["ASMC attains 80.6% exact-match accuracy."]).missing_numbers
    ('86.0',)
    """
    sources, context = list(sources), list(context)
    known_text = " ".join([*sources, *context])
    known = content_tokens(known_text) | _DECISION_WORDS
    numbers = set(number_values(known_text))
    terms = content_tokens(sentence)
    coverage = len(terms & known) / len(terms) if terms else 1.0
    missing_numbers = tuple(n for n in dict.fromkeys(number_values(sentence)) if n not in numbers)
    names = [*names_in(sentence), *_CAPITALISED.findall(" " + sentence.split(" ", 1)[-1])]
    missing_names = tuple(n for n in dict.fromkeys(names) if not set(tokenize(n)) <= known)
    return Check(coverage, missing_numbers, missing_names)


def written_sentences(text: str, truncated: bool) -> list[tuple[str, list[int]]]:
    """The model's ``text`` as ``(sentence without markers, evidence numbers it cites (1-based))``, in order;
    when ``truncated``, an unfinished last sentence is left out."""
    spans = split_sentences(text)
    out: list[tuple[str, list[int]]] = []
    for i, (start, end) in enumerate(spans):
        raw = text[start:end].strip()
        if truncated and i == len(spans) - 1 and not re.search(r"[.!?]\W*$|\]\W*$", raw):
            continue
        if out and (leading := re.match(rf"^(?:\s*{CITATION_MARKER.pattern})+", raw)):
            # markers opening a span ("accuracy. [2] It ...") close the sentence before it
            moved = [n for m in CITATION_MARKER.finditer(leading.group(0)) for n in marker_numbers(m.group(1))]
            out[-1] = (out[-1][0], out[-1][1] + moved)
            raw = raw[leading.end():]
        cited = [n for m in CITATION_MARKER.finditer(raw) for n in marker_numbers(m.group(1))]
        body = CITATION_MARKER.sub("", raw)
        body = re.sub(r"\s+([.,;:!?])", r"\1", re.sub(r"\s{2,}", " ", body)).strip().rstrip(".!?;:, ")
        body = re.sub(r"^(?:answer|a)\s*:\s*", "", body, flags=re.IGNORECASE)
        if not body and out:  # markers alone after a full stop ("... PairRL. [2]") cite the sentence before
            out[-1] = (out[-1][0], out[-1][1] + cited)
        elif len(body.split()) >= 2 and not {w.lower() for w in _WORD.findall(body)} & META_WORDS:
            out.append((body, cited))
    return out


class Verify:
    """Check the written sentences against the evidence and keep what is supported (module docstring):
    ``state.statements``.

    Args:
        min_support: :data:`MIN_SUPPORT`.
        max_sentences: the most sentences kept (>= 1).

    Raises:
        ValueError: ``min_support`` outside ``[0, 1]`` or ``max_sentences`` below 1.
    """

    name = "verify"

    def __init__(self, min_support: float = MIN_SUPPORT, max_sentences: int = MAX_SENTENCES) -> None:
        if not 0.0 <= min_support <= 1.0 or max_sentences < 1:
            raise ValueError(f"min_support must be in [0, 1] and max_sentences >= 1, got {min_support}, {max_sentences}")
        self.min_support = min_support
        self.max_sentences = max_sentences

    def run(self, state: AnswerState) -> None:
        assert state.info is not None
        evidence = state.evidence
        texts = [readable(e.text) for e in evidence]
        labels = [paper_label(e.result.document) for e in evidence]
        context = [readable(state.info.text), *(label for label in labels if label)]
        statements: list[Statement] = []
        closest: list[int] = []  # for each sentence that failed, the evidence sentence most like it
        for body, cited in written_sentences(state.written, state.truncated):
            indexes = [i - 1 for i in dict.fromkeys(cited) if 1 <= i <= len(evidence)]
            support = self._supporting(body, indexes, texts, context, evidence)
            if support is None:
                closest.append(max(range(len(evidence)), key=lambda i: (check(body, [texts[i]]).coverage,
                                                                        evidence[i].score)))
                continue
            statements.append(Statement(body, support))
        if not statements and evidence:
            best = closest[0] if closest else max(range(len(evidence)), key=lambda i: evidence[i].score)
            statements.append(Statement(texts[best].rstrip(".!?;:, "), (best,), "extract"))
        named = [self._named(s, labels) for s in statements]
        state.statements = list({s.text: s for s in named}.values())[: self.max_sentences]

    def _supporting(
        self, body: str, indexes: Sequence[int], texts: Sequence[str], context: Sequence[str],
        evidence: Sequence[Evidence],
    ) -> tuple[int, ...] | None:
        """The evidence indexes that support ``body``: its own markers' when they do, else the one evidence
        sentence (or the sentences of one paper) that does best; ``None`` when nothing does."""
        if indexes and check(body, [texts[i] for i in indexes], context).supported(self.min_support):
            return tuple(indexes)
        candidates: list[tuple[float, tuple[int, ...]]] = []
        for i in range(len(texts)):
            result = check(body, [texts[i]], context)
            if result.supported(self.min_support):
                candidates.append((result.coverage, (i,)))
        for doc_id in dict.fromkeys(e.doc_id for e in evidence):
            group = tuple(i for i, e in enumerate(evidence) if e.doc_id == doc_id)
            result = check(body, [texts[i] for i in group], context)
            if len(group) > 1 and result.supported(self.min_support):
                candidates.append((result.coverage - 0.01, group))  # one sentence is the tighter citation
        return max(candidates)[1] if candidates else None

    @staticmethod
    def _named(statement: Statement, labels: Sequence[str | None]) -> Statement:
        """``statement`` with its subject named when it opens with a pronoun, and its first letter capitalised."""
        text = statement.text
        if opens_with_pronoun(text):
            text = name_subject(text, labels[statement.evidence[0]] or UNNAMED_SUBJECT)
            origin = "named" if statement.origin == "written" else statement.origin
            statement = Statement(text, statement.evidence, origin)
        if text[:1].islower() and text.split(" ", 1)[0].islower():  # not a name such as "mSGD"
            statement = Statement(text[:1].upper() + text[1:], statement.evidence, statement.origin)
        return statement
