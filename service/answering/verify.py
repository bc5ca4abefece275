"""The verify step: every sentence the model wrote is checked against the evidence it cites, so a citation
cannot point at text that does not say the thing.

A sentence is *supported* by evidence sentences when (:func:`check`):

* every number it states is in them, digit for digit (``80.6``, ``1318``; a number the question states counts too),
  so a number is never altered, and, for a sentence that opens with a name, in one that is not about another named
  thing (:func:`borrowed_numbers`: a baseline's figure is not the method's);
* every name it uses (a name-shaped token such as ``LU-KV``, or a capitalised word inside the sentence) is in them,
  in the question, or in a paper's label;
* at least :data:`MIN_SUPPORT` of the content words it adds to the question (BM25 terms: stemmed, function words
  left out) are in them or in the papers' labels: the model may join the evidence's words with its own ("reaches",
  "uses"), not bring new ones; a sentence that only restates the question says nothing and is not supported (a
  yes/no answer adds its decision, and all its words must then be supported).

A sentence that attributes its statement to the prompt's material ("The passage [1] states that X", "The evidence
sentences answer the question by stating that X") is checked as X; one that only says where the sentence before it
stands ("This is stated in the passage [1].") gives that sentence its markers (:func:`written_sentences`; other talk
about the prompt is dropped). A sentence that its own markers do not support is given to the evidence sentence that does, if one does; otherwise
it is dropped. When no written sentence survives, the answer is the evidence sentence most like the first one the
model wrote, itself (``origin="extract"``; the best-scored evidence sentence when the model wrote nothing), or, with
``fallback="abstain"``, the service abstains. An answer about several papers (which papers, a comparison) covers
each: a paper the question names that no kept sentence rests on gets its own evidence sentence (and a comparison
that names one paper, the best other one), and so does every paper of the evidence when nothing was kept; in such
an answer, a sentence whose subject is worded as the question worded another paper of the evidence ("the paper on
data assimilation ..." citing ASMC's sentence) is not supported by that citation (:meth:`_Context.check`). An
answer to a question that asks for an amount ("How many ...?", "What accuracy ...?") that states no number is no
answer: the service abstains, and so it does when the model's
number is in no evidence sentence (no sentence of the paper it names) and the sentence that would replace it shares
none of its names (another paper's figure: :meth:`Verify._invented`); an answer to a counting question
("How many rollouts ...?") that states no number of what it counts is the best evidence sentence that does (of the
paper the question names, when it names one). A
sentence that opens with a pronoun ("We ...", "This ...") gets its paper's label as its subject
(:func:`~citerag.service.answering.subject.name_subject`; a paper without one is "The paper on <its topic>"
(:mod:`~citerag.service.answering.topics`), or, without a topic, "The paper", and in an answer about several papers
"One paper", then "Another paper"); an unfinished last sentence (the token limit) is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from citerag.index.text import fold, readable, split_sentences
from citerag.index.tokenize import tokenize
from citerag.index.types import Document
from citerag.service.answering.evidence import COMPARED_PAPERS, Evidence, holds, introduces
from citerag.service.answering.language import (
    ATTRIBUTING_SENTENCE,
    ATTRIBUTION_FRAME,
    CITATION_MARKER,
    FUNCTION_WORDS,
    LEADING_CONJUNCTION,
    META_WORDS,
    NEGATION_CUE,
    OWN_WORK,
    RESEARCH_NOUNS,
    marker_numbers,
    number_values,
    states_number,
)
from citerag.service.answering.names import abbreviates, leading_name, mentions, names_in, paper_label, subject_label
from citerag.service.answering.question import content_terms
from citerag.service.answering.state import AnswerState, Statement
from citerag.service.answering.subject import name_subject, opens_with_pronoun, third_person_inside

#: The share of a written sentence's content terms that must be in its evidence, the question or the labels
#: (chosen on dev questions: eval/results/qa.md).
MIN_SUPPORT = 0.75
#: At most this many sentences are kept.
MAX_SENTENCES = 3
#: What an answer calls a paper that has neither a title nor a coined name.
UNNAMED_SUBJECT = "The paper"
#: What an answer about several papers calls such papers, in the order it first rests on them (the first, then each
#: other one): "The paper ... The paper ..." does not tell a reader that two papers are meant.
UNNAMED_SUBJECTS = ("One paper", "Another paper")
Fallback = Literal["extract", "abstain"]
#: A paper's topic phrase, or ``None`` (:class:`~citerag.service.answering.topics.Topics`).
Describe = Callable[[Document], "str | None"]
_WORD = re.compile(r"[^\W_]+(?:[-–][^\W_]+)*")
_ALNUM = re.compile(r"[\W_]+")
_CAPITALISED = re.compile(r"(?<=\s)[A-Z][\w-]*")
_DECISION_WORDS = {"yes", "no", "maybe"}
#: Content words read after a negation cue, within its clause: the cue's scope ("no additional parameters").
NEGATION_SCOPE_WORDS = 3
_CLAUSE_END = re.compile(r"[,;:.()\[\]]")
#: A clause's end at punctuation or a conjunction that starts another ("needs no retraining and improves accuracy":
#: what it improves is not negated).
_COORDINATED_CLAUSE_END = re.compile(r"[,;:.()\[\]]|\s(?:and|but|or|while|whereas|yet|which|that|so)\s", re.IGNORECASE)
#: A sentence is contradicted by a source whose negated scope (:func:`negated_terms`) holds this many of its terms.
MIN_CONTRADICTED_TERMS = 2
#: A sentence's term this long is held in a longer word of a negated scope ("add" in "no additional").
CONTRADICTION_PREFIX_CHARS = 3
#: Class nouns any research contribution is ("a method", "a framework"): saying one adds nothing to check.
_GENERIC_CLASS = frozenset(t for noun in RESEARCH_NOUNS for t in tokenize(noun))
#: What a sentence says its subject is: "HELIX is a graph neural network that ...": the class noun phrase after
#: "is a", up to a relative pronoun, a preposition or punctuation.
_CLASS = re.compile(
    r"^[^,;:]{1,80}?\s(?:is|are)\s(?:a|an)\s(?P<head>[^,.;:()\[]+?)"
    r"(?=\s+(?:that|which|who|for|to|with|where|in|of|on|using|by|from|designed|based|trained)\b|[,.;:()\[]|$)")


def negated_terms(sentence: str, clause_end: re.Pattern[str] = _CLAUSE_END) -> set[str]:
    """The BM25 tokens of the first :data:`NEGATION_SCOPE_WORDS` content words (:func:`~citerag.service.answering.
    question.content_terms`) after each negation cue of ``sentence`` (:data:`~citerag.service.answering.language.NEGATION_CUE`), within the cue's clause
    (up to ``clause_end``: punctuation; :data:`_COORDINATED_CLAUSE_END` also ends it at a conjunction).

    >>> sorted(negated_terms("The framework introduces no additional parameters and requires one extra pass."))
    ['addit', 'paramet', 'requir']
    >>> sorted(negated_terms("It introduces no additional parameters and requires one pass.", _COORDINATED_CLAUSE_END))
    ['addit', 'paramet']
    >>> negated_terms("It not only improves accuracy but also speed.")
    set()
    """
    terms: set[str] = set()
    for cue in NEGATION_CUE.finditer(sentence):
        clause = clause_end.split(sentence[cue.end():], maxsplit=1)[0]
        terms.update(token for _, token in content_terms(clause)[:NEGATION_SCOPE_WORDS])
    return terms


@dataclass(frozen=True, slots=True)
class Check:
    """How a sentence fares against some evidence.

    Attributes:
        coverage: the share of its content terms found, in ``[0, 1]`` (1.0 when it has none).
        missing_numbers: numbers it states that are not there.
        missing_names: names it uses that are not there.
        missing_class: the terms of what it says its subject is ("HELIX is a graph neural network that ...": the
            noun phrase after "is a") that are not there: the rest of the sentence cannot make up for them.
        other_papers: in an answer about several papers, the question's terms it uses that another paper of the
            evidence holds and the papers it cites do not ("the paper on data assimilation ..." citing ASMC's
            sentence): it says of the cited paper what the question said of another (:meth:`_Context.check`).
        contradicted: its terms that a source negates (:func:`contradicted_terms`: "Regret Pre-training adds
            extra parameters" against "The framework introduces no additional parameters"), when they are
            :data:`MIN_CONTRADICTED_TERMS` or more: the source says the opposite.
        borrowed_numbers: numbers it gives its own subject that the sources state only of another named thing
            (:func:`borrowed_numbers`: "Sequential Monte Carlo reaches p95 = 1318s" from "Autoregressive Metropolis
            Hastings ... reaching p95 = 1318s").
    """

    coverage: float
    missing_numbers: tuple[str, ...] = ()
    missing_names: tuple[str, ...] = ()
    missing_class: tuple[str, ...] = ()
    other_papers: tuple[str, ...] = ()
    contradicted: tuple[str, ...] = ()
    borrowed_numbers: tuple[str, ...] = ()

    def supported(self, min_support: float = MIN_SUPPORT) -> bool:
        """No missing number, name or class term, no other paper's term, nothing a source negates, no number
        borrowed from another subject, and at least ``min_support`` of the content terms found."""
        return not (self.missing_numbers or self.missing_names or self.missing_class or self.other_papers
                    or self.contradicted or self.borrowed_numbers) and self.coverage >= min_support


def borrowed_numbers(sentence: str, sources: Sequence[str], labels: Sequence[str] = ()) -> tuple[str, ...]:
    """The numbers ``sentence`` (readable) gives the name it opens with (:func:`~citerag.service.answering.names.
    leading_name`) that every source stating them (readable) says of another named thing: a background sentence
    that opens with a name ``sentence`` does not mention, shares no word with ``sentence``'s, does not mention
    ``sentence``'s name, and is not about the paper's own work (:data:`~citerag.service.answering.language.OWN_WORK`,
    one of ``labels``, the cited papers' names, or a name one of them holds: "SqueezeNet achieves ..." under the
    title "SqueezeNet: AlexNet-level accuracy with 50x fewer parameters"). ``()`` for a sentence that opens with no
    name: it makes no such attribution. A baseline's figure is not the paper's method's, though the abstract
    states it.

    >>> background = "Autoregressive Metropolis Hastings is inherently serial, reaching p95 = 1318s on MATH500."
    >>> own = "On MATH500, ASMC attains p95 = 73.7s."
    >>> borrowed_numbers("Sequential Monte Carlo reaches p95 = 1318s on MATH500", [background, own], ["ASMC"])
    ('1318',)
    >>> borrowed_numbers("Autoregressive Metropolis Hastings reaches 1318s", [background]), borrowed_numbers(
    ...     "Sequential Monte Carlo reaches p95 = 73.7s", [background, own], ["ASMC"])
    ((), ())
    >>> written, source = "Fire Modules need 50x fewer parameters", "SqueezeNet needs 50x fewer parameters."
    >>> borrowed_numbers(written, [source]), borrowed_numbers(written, [source], ["SqueezeNet: Fewer Parameters"])
    (('50',), ())
    """
    subject = leading_name(sentence)
    if subject is None:
        return ()
    words = {word.lower() for word in subject.split()}

    def about_another(source: str) -> bool:
        other = leading_name(source)
        if other is None or OWN_WORK.search(source) or mentions(sentence, other) or mentions(source, subject):
            return False
        same = words & {word.lower() for word in other.split()} or abbreviates(other, subject) \
            or abbreviates(subject, other)
        return not same and not any(_names_paper(source, other, label) for label in labels)

    stated = [(source, set(number_values(source))) for source in sources]
    return tuple(number for number in dict.fromkeys(number_values(sentence))
                 if (holding := [source for source, values in stated if number in values])
                 and all(about_another(source) for source in holding))


def contradicted_terms(sentence: str, sources: Iterable[str]) -> tuple[str, ...]:
    """The content terms (BM25 stems) of ``sentence`` that one of ``sources`` negates, the most any source does,
    when :data:`MIN_CONTRADICTED_TERMS` or more; ``()`` otherwise, and for a sentence that negates anything itself
    (it may say what the source says: "X adds no parameters"). A term is negated when it is held
    (:data:`CONTRADICTION_PREFIX_CHARS`: "add" in "additional") by the scope of a negation cue of the source
    (:func:`negated_terms`). A claim restated from a question ("Does Regret Pre-training add extra parameters?")
    cannot cite the sentence that denies it.

    >>> contradicted_terms("Regret Pre-training adds extra parameters to the model",
    ...                    ["The framework introduces no additional parameters and needs one extra pass."])
    ('add', 'paramet')
    >>> contradicted_terms("The framework adds no parameters", ["It introduces no additional parameters."])
    ()
    >>> contradicted_terms("HELIX improves accuracy by 5%", ["HELIX needs no retraining and improves accuracy."])
    ()
    """
    if NEGATION_CUE.search(sentence):
        return ()
    terms = content_tokens(sentence)
    best: tuple[str, ...] = ()
    for source in sources:
        negated = negated_terms(source, _COORDINATED_CLAUSE_END)
        held = tuple(sorted(t for t in terms if holds(t, negated, CONTRADICTION_PREFIX_CHARS)))
        best = max(best, held, key=len)
    return best if len(best) >= MIN_CONTRADICTED_TERMS else ()


def content_tokens(text: str) -> set[str]:
    """The BM25 terms of ``text``'s content words (function words left out)."""
    return {t for word in _WORD.findall(text) if word.lower() not in FUNCTION_WORDS for t in tokenize(word)}


def check(sentence: str, sources: Iterable[str], question: str = "", labels: Iterable[str] = (),
          yes_no: bool = False, names_answer: bool = False) -> Check:
    """Check ``sentence`` (readable text, no markers) against ``sources`` (readable evidence texts) and ``labels``
    (the names of the papers they come from), for ``question`` (module docstring).

    The words a sentence shares with the question restate it and need no support; what it adds must be in
    ``sources`` or ``labels``, and it must add something beyond the papers' names (a bare "LU-KV, GLEAN" says
    nothing). Its names must be in ``sources`` or ``labels`` (compared by their letters and digits: ``M2AD`` is in
    "M$^2$AD"): a name taken from the question is not evidence that this paper says the thing, which keeps one paper's
    finding from being given to another. For a ``yes_no`` answer, whose decision is what it adds, all its words
    count, the question's included. When ``names_answer`` (a question about one thing: "What method is proposed
    for CD-CIL?"), a paper's name that the question does not hold is itself the answer, and a sentence that adds
    only that name is supported, if it says something of it (a paper's title alone is not an answer).

    >>> check("ASMC reaches 80.6% exact-match accuracy", ["ASMC attains 80.6% exact-match accuracy."]).supported()
    True
    >>> check("ASMC reaches 86.0% accuracy", ["ASMC attains 80.6% exact-match accuracy."]).missing_numbers
    ('86.0',)
    >>> check("The paper studies speech recognition", ["ASMC attains 80.6%."], "Which paper studies speech recognition?").coverage
    0.0
    >>> check("PolyNeXt uses Platonic symmetries", ["It is equivariant to Platonic symmetries."], "What does PolyNeXt use?",
    ...       ["Platonic Transformer"]).missing_names
    ('PolyNeXt',)
    >>> question, sources = "What method is proposed for CD-CIL?", ["We propose PMDO for CD-CIL."]
    >>> check("PMDO is proposed for CD-CIL", sources, question, ["PMDO"]).coverage
    0.0
    >>> check("PMDO is proposed for CD-CIL", sources, question, ["PMDO"], names_answer=True).coverage
    1.0
    >>> check("HELIX is a graph neural network that learns feature dependencies",  # what it is, not in the source
    ...       ["Unlike graph-based methods, HELIX learns feature dependencies end-to-end."]).missing_class
    ('neural',)
    >>> title = "Order Reduction for Complex Neurons"  # the paper's title alone answers nothing
    >>> check(title, ["We reduce the Hodgkin-Huxley model."], "Which neuron model is reduced?", [title],
    ...       names_answer=True).coverage
    0.0
    """
    sources, labels = list(sources), list(labels)
    known_text = " ".join([*sources, *labels])
    known = content_tokens(known_text) | _DECISION_WORDS
    label_terms = content_tokens(" ".join(labels))
    asked = content_tokens(question)
    numbers = set(number_values(known_text)) | set(number_values(question))
    terms = content_tokens(sentence) - _DECISION_WORDS
    added = terms if yes_no else terms - asked
    # a paper's name can be the answer, said of something ("PMDO is proposed for CD-CIL"); a bare title cannot
    says_more = bool(added - label_terms) or (names_answer and bool(added) and bool(terms - label_terms))
    coverage = len(added & known) / len(added) if says_more else 0.0
    missing_numbers = tuple(n for n in dict.fromkeys(number_values(sentence)) if n not in numbers)
    names = [*names_in(sentence), *_CAPITALISED.findall(" " + sentence.split(" ", 1)[-1])]
    letters = _ALNUM.sub("", fold(known_text).lower())
    missing_names = tuple(n for n in dict.fromkeys(names) if _ALNUM.sub("", fold(n).lower()) not in letters)
    head = _CLASS.match(sentence)
    missing_class = tuple(sorted(content_tokens(head["head"]) - known - asked - _GENERIC_CLASS)) if head else ()
    return Check(coverage, missing_numbers, missing_names, missing_class,
                 contradicted=contradicted_terms(sentence, sources),
                 borrowed_numbers=borrowed_numbers(sentence, sources, labels))


def document_terms(evidence: Sequence[Evidence]) -> dict[str, frozenset[str]]:
    """The content terms (:func:`content_tokens`) of each evidence sentence's whole document, title and text
    (readable), by ``doc_id``."""
    terms: dict[str, frozenset[str]] = {}
    for item in evidence:
        if item.doc_id not in terms:
            document = item.result.document
            terms[item.doc_id] = frozenset(content_tokens(readable(f"{document.title} {document.text}")))
    return terms


#: How many content terms at a sentence's start name its subject (:func:`subject_terms`).
SUBJECT_TERMS = 2


def subject_terms(sentence: str) -> list[str]:
    """The BM25 terms of the first :data:`SUBJECT_TERMS` content words of ``sentence`` that are not a class noun
    any contribution is ("paper", "method"): English puts the subject first, so these name what the sentence is
    about.

    >>> subject_terms("The paper on data assimilation with a diffusion forecaster targets power distributions")
    ['data', 'assimil']
    >>> subject_terms("Error Encoding Networks represent the inherent uncertainty")
    ['error', 'encod']
    """
    terms = (t for word in _WORD.findall(sentence) if word.lower() not in FUNCTION_WORDS for t in tokenize(word))
    return [t for t in terms if t not in _GENERIC_CLASS][:SUBJECT_TERMS]


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
        if frame := ATTRIBUTION_FRAME.match(body):  # "The passage [1] states that X": the statement is X
            body = frame.group("rest")
        if out and (not body or ATTRIBUTING_SENTENCE.match(body)):
            # markers alone after a full stop ("... PairRL. [2]"), or "This is stated in the passage [1].": they
            # cite the sentence before
            out[-1] = (out[-1][0], out[-1][1] + cited)
        elif len(body.split()) >= 2 and not _talks_about_the_prompt(body):
            out.append((body, cited))
    return out


def _talks_about_the_prompt(sentence: str) -> bool:
    """Whether ``sentence`` talks about the prompt's material (:data:`~citerag.service.answering.language.
    META_WORDS`: "as evidence sentence [2] states"); a capitalised word inside it is part of a name, not such talk.

    >>> _talks_about_the_prompt("The evidence sentences do not say"), _talks_about_the_prompt(
    ...     "GLEAN is a framework with GuideLine-grounded Evidence AccumulatioN")
    (True, False)
    """
    words = _WORD.findall(sentence)
    return any(w.lower() in META_WORDS and (i == 0 or not w[:1].isupper()) for i, w in enumerate(words))


def states_count(text: str, counted: Sequence[str]) -> bool:
    """Whether ``text`` (readable) states a number and holds every term of what a counting question counts
    (``counted``, :func:`~citerag.service.answering.question.counted_terms`): "surpassing all 16 baselines" for
    ``("baselin",)``."""
    return states_number(text) and set(counted) <= set(tokenize(fold(text)))


@dataclass(frozen=True, slots=True)
class _Context:
    """What a written sentence is checked with besides its evidence: the question, each evidence sentence's paper
    label, whether the question is a yes/no one and whether a paper's name can be its answer (:func:`check`), and,
    for an answer about several papers, the content terms of each evidence sentence's whole document
    (``documents``, by ``doc_ids[i]``, the document of evidence sentence ``i``; empty otherwise)."""

    question: str
    texts: list[str]
    labels: list[str | None]
    yes_no: bool
    names_answer: bool
    doc_ids: list[str]
    documents: dict[str, frozenset[str]]

    def check(self, sentence: str, indexes: Sequence[int]) -> Check:
        """:func:`check` against the evidence sentences ``indexes``; in an answer about several papers, the
        question's words the sentence uses must not point at a paper it does not cite: a question term that
        another evidence paper's document holds and no cited one does, among the words that name the sentence's
        subject (:func:`subject_terms`), is :attr:`Check.other_papers` (the words a sentence shares with the
        question need no support, but "the paper on data assimilation ... [2]" citing ASMC's sentence says of ASMC
        what the question said of another paper; a word of what is asked, "the inherent uncertainty", may be in one
        paper's abstract only and still be said of the other)."""
        labels = [label for i in indexes if (label := self.labels[i])]
        sources = [self.texts[i] for i in indexes]
        result = check(sentence, sources, self.question, labels, self.yes_no, self.names_answer)
        if not self.documents or not indexes:
            return result
        cited_ids = {self.doc_ids[i] for i in indexes}
        cited = frozenset().union(*(self.documents[d] for d in cited_ids), content_tokens(" ".join(labels)))
        others = frozenset().union(*(terms for d, terms in self.documents.items() if d not in cited_ids))
        used = set(subject_terms(sentence)) & content_tokens(self.question)
        return replace(result, other_papers=tuple(sorted((used & others) - cited)))


def _names_paper(source: str, name: str, label: str) -> bool:
    """Whether ``source``, which opens with ``name``, is about the paper called ``label``: it mentions the label, or
    the label holds the name, one of its name-shaped tokens ("Running V-STaR ..." under "V-STaR: Training
    Verifiers"), or the words it abbreviates ("DCS ..." under "Dynamic Cell Structures")."""
    return mentions(source, label) or mentions(label, name) or abbreviates(name, label) \
        or any(mentions(label, token) for token in names_in(name))


class Verify:
    """Check the written sentences against the evidence and keep what is supported (module docstring):
    ``state.statements``.

    Args:
        min_support: :data:`MIN_SUPPORT`.
        max_sentences: the most sentences kept (>= 1) in an answer about one paper.
        fallback: what happens when no written sentence is supported: ``"extract"`` (the evidence's own sentence)
            or ``"abstain"``.
        describe: an unnamed paper's topic phrase, its name in an answer (:func:`named_subjects`).

    Raises:
        ValueError: ``min_support`` outside ``[0, 1]``, ``max_sentences`` below 1, or an unknown ``fallback``.
    """

    name = "verify"

    def __init__(
        self, min_support: float = MIN_SUPPORT, max_sentences: int = MAX_SENTENCES, fallback: Fallback = "extract",
        describe: Describe | None = None,
    ) -> None:
        if not 0.0 <= min_support <= 1.0 or max_sentences < 1:
            raise ValueError(f"min_support must be in [0, 1] and max_sentences >= 1, got {min_support}, {max_sentences}")
        if fallback not in ("extract", "abstain"):
            raise ValueError(f"fallback must be 'extract' or 'abstain', got {fallback!r}")
        self.min_support = min_support
        self.max_sentences = max_sentences
        self.fallback = fallback
        self.describe = describe

    def run(self, state: AnswerState) -> None:
        assert state.info is not None
        evidence = state.evidence
        texts = [readable(e.text) for e in evidence]
        labels = [paper_label(e.result.document) for e in evidence]
        yes_no, several = state.info.kind == "yes_no", state.info.several_papers
        documents = document_terms(evidence) if several else {}
        context = _Context(readable(state.info.text), texts, labels, yes_no, not (yes_no or several),
                           [e.doc_id for e in evidence], documents)
        statements: list[Statement] = []
        closest: list[int] = []  # for each sentence that failed, the evidence sentence most like it
        failed: list[str] = []
        for body, cited in written_sentences(state.written, state.truncated):
            indexes = [i - 1 for i in dict.fromkeys(cited) if 1 <= i <= len(evidence)]
            support = self._supporting(body, indexes, context, evidence)
            if support is None:
                closest.append(self._closest(body, texts, labels, evidence))
                failed.append(body)
                continue
            statements.append(Statement(as_authors_act(body, texts[support[0]]), support))
        if not statements and self.fallback == "abstain":
            state.abstain("no sentence the model wrote is supported by the evidence it cites")
            return
        if not statements and failed and state.info.amount and (invented := self._invented(failed[0], context,
                                                                                           texts[closest[0]])):
            state.abstain(f"the question asks for an amount; the one written ({', '.join(invented)}) is not in the "
                          "evidence, and no evidence sentence about the same thing states one")
            return
        if several:
            statements = self._each_paper(statements, state, texts)
        elif not statements and evidence:
            best = closest[0] if closest else max(range(len(evidence)), key=lambda i: evidence[i].score)
            statements.append(extract(texts, best))
        counted = state.info.counted
        if counted and not any(states_count(s.text, counted) for s in statements):
            # "How many rollouts ...?" is answered by a number of rollouts: the best evidence sentence stating one
            # (of the paper the question is about, when it names one: another paper's count answers nothing)
            about = () if several else state.named
            statements = _stated(statements, evidence, texts, lambda text: states_count(text, counted), about)
        subject = state.info.subject if state.info.kind == "definition" else None
        if subject and statements and not any(introduces(subject, s.text, with_class=True) for s in statements):
            # "What is Polaris?" is answered by what Polaris is ("Polaris is a ...", "we introduce Polaris, a ..."):
            # the best evidence sentence that says so
            statements = _stated(statements, evidence, texts, lambda text: introduces(subject, text, with_class=True))
        if state.info.amount and statements and not any(states_number(s.text, state.info.text) for s in statements):
            state.abstain("the question asks for an amount, and the evidence states none for it")
            return
        named = named_subjects(statements, evidence, several, self.describe)
        # an answer about several papers: one sentence a paper, as many as the evidence
        state.statements = list({s.text: s for s in named}.values())[: None if several else self.max_sentences]

    def _supporting(
        self, body: str, indexes: Sequence[int], context: _Context, evidence: Sequence[Evidence],
    ) -> tuple[int, ...] | None:
        """The evidence indexes that support ``body``: its own markers' when they do, else the one evidence
        sentence (or the sentences of one paper) that does best; ``None`` when nothing does."""
        if indexes and context.check(body, indexes).supported(self.min_support):
            return tuple(indexes)
        singles = [context.check(body, [i]) for i in range(len(evidence))]
        candidates = [(result.coverage, (i,)) for i, result in enumerate(singles) if result.supported(self.min_support)]
        for doc_id in dict.fromkeys(e.doc_id for e in evidence):
            group = tuple(i for i, e in enumerate(evidence) if e.doc_id == doc_id)
            result = context.check(body, group)
            if len(group) > 1 and result.supported(self.min_support):
                # one sentence is the tighter citation
                order = sorted(group, key=lambda i: (evidence[i].score, singles[i].coverage))
                candidates.append((result.coverage - 0.01, self._fewest(body, order, context)))
        return max(candidates)[1] if candidates else None

    def _fewest(self, body: str, order: Sequence[int], context: _Context) -> tuple[int, ...]:
        """The fewest sentences of one paper's group (which together support ``body``) that still do: each sentence
        is dropped, in ``order``, while the rest still support it, returned in evidence order. :meth:`_supporting`
        orders them by the evidence step's score for the question (a paper read whole: the sentences it did not
        choose, score 0, first), then by how little of ``body`` each covers. A conclusion over a paper read whole
        cites the chosen sentences it rests on, not all of the abstract; word coverage alone kept sentences that
        repeat the question's words and dropped the one that states the finding ("... substantially reducing the
        tail latency")."""
        kept = sorted(order)
        for i in order:
            rest = [j for j in kept if j != i]
            if rest and context.check(body, rest).supported(self.min_support):
                kept = rest
        return tuple(kept)

    @staticmethod
    def _closest(body: str, texts: Sequence[str], labels: Sequence[str | None], evidence: Sequence[Evidence]) -> int:
        """The index of the evidence sentence (``texts``, readable) most like ``body``, a written sentence that no
        evidence supports: the most of its content terms, then the best score. When ``body`` gave its subject a
        figure that a sentence states of another named thing (:attr:`Check.borrowed_numbers`), not that sentence,
        but one of the same paper that states a figure of its own: "Sequential Monte Carlo reaches p95 = 1318s"
        (the baseline's, Autoregressive Metropolis Hastings') is replaced by "On MATH500 ..., ASMC attains ...
        p95 = 73.7s"."""
        borrowed = [bool(borrowed_numbers(body, [text], [label] if label else []))
                    for text, label in zip(texts, labels, strict=True)]
        lent = {item.doc_id for item, lends in zip(evidence, borrowed) if lends}
        return max(range(len(evidence)), key=lambda i: (
            not borrowed[i], evidence[i].doc_id in lent and states_number(texts[i]),
            check(body, [texts[i]]).coverage, evidence[i].score))

    @staticmethod
    def _invented(body: str, context: _Context, closest: str) -> tuple[str, ...]:
        """The numbers ``body`` states that no evidence sentence does (no sentence of the papers it names by their
        labels, when it names one), when the evidence sentence most like it (``closest``, what would replace it)
        shares none of the names it uses: the model gave an amount the evidence lacks, or another paper's ("PMDO
        beats the previous best by 80.6%", 80.6% being ASMC's accuracy), and the replacement would be about
        something else ("PolyNeXt reaches 79.8% on ImageNet" replaced by another paper's accuracy). ``()``
        otherwise."""
        names = {name.lower() for name in names_in(body)}
        if not names or names & {name.lower() for name in names_in(closest)}:
            return ()
        own = [i for i, label in enumerate(context.labels) if label and label.lower() in names]
        return context.check(body, own or range(len(context.texts))).missing_numbers

    @staticmethod
    def _each_paper(statements: list[Statement], state: AnswerState, texts: Sequence[str]) -> list[Statement]:
        """An answer about several papers covers each: a paper the question names that no kept sentence rests on
        (every paper of the evidence when none was kept) gets its best evidence sentence, and so does a comparison's
        paper the question describes beside one it names (the best papers of the evidence, :data:`~citerag.service.
        answering.evidence.COMPARED_PAPERS` in all)."""
        evidence = state.evidence
        firsts: dict[str, int] = {}  # each paper's best-scored evidence sentence, papers in evidence order
        for i, item in enumerate(evidence):
            if item.doc_id not in firsts or item.score > evidence[firsts[item.doc_id]].score:
                firsts[item.doc_id] = i
        wanted = [d for d in state.named if d in firsts]
        if wanted and state.info is not None and state.info.kind == "comparison":  # each paper compared
            wanted += [d for d in firsts if d not in wanted][:max(0, COMPARED_PAPERS - len(wanted))]
        if not statements and (not wanted or state.papers_judged):  # nothing kept: every paper's best
            wanted = list(firsts)
        covered = {evidence[i].doc_id for s in statements for i in s.evidence}
        extracts = [extract(texts, firsts[d]) for d in wanted if d not in covered]
        return [*statements, *extracts]


_GERUND = re.compile(r"^(?P<gerund>[A-Z][\w-]*ing)\s+(?P<rest>.+)$", re.DOTALL)
_AUTHORS_ACT = re.compile(r"\bwe\s+(?P<verb>[\w-]+)\s+(?P<rest>.+)$", re.IGNORECASE | re.DOTALL)


def as_authors_act(sentence: str, evidence: str) -> str:
    """``sentence`` as the authors' act where it is a gerund phrase copied from ``evidence``'s "we <verb> ...": the
    model turned "we re-annotate object labels ..." into the fragment "Re-annotating object labels ...", which has
    no main verb; it is "We re-annotate object labels ..." again (:func:`named_subject` then names the paper).
    ``sentence`` unchanged otherwise: a gerund subject with its own verb ("Training on X makes ...") is not a copy of
    what follows "we <verb>".

    >>> as_authors_act("Re-annotating object labels across 413 scenes", "To this end, we re-annotate object labels "
    ...                "across 413 scenes.")
    'We re-annotate object labels across 413 scenes'
    >>> as_authors_act("Training on rate makes small models competitive", "We train on rate, which makes models better.")
    'Training on rate makes small models competitive'
    """
    gerund, act = _GERUND.match(sentence), _AUTHORS_ACT.search(evidence)
    if not gerund or not act or tokenize(gerund.group("gerund"))[:1] != tokenize(act.group("verb"))[:1]:
        return sentence
    rest, follows = (_WORD.findall(fold(text).lower()) for text in (gerund.group("rest"), act.group("rest")))
    return f"We {act.group('verb')} {gerund.group('rest')}" if follows[: len(rest)] == rest else sentence


def _stated(statements: list[Statement], evidence: Sequence[Evidence], texts: Sequence[str],
            states: Callable[[str], bool], papers: Sequence[str] = ()) -> list[Statement]:
    """The best-scored evidence sentence that ``states`` what was asked (one of ``papers``' when given: doc ids),
    extracted as the answer's one statement; ``statements`` unchanged when no evidence sentence does (``texts``: the
    evidence, readable)."""
    stating = next((i for i in sorted(range(len(evidence)), key=lambda i: -evidence[i].score)
                    if states(texts[i]) and (not papers or evidence[i].doc_id in papers)), None)
    return statements if stating is None else [extract(texts, stating)]


def extract(texts: Sequence[str], index: int) -> Statement:
    """Evidence sentence ``texts[index]`` (readable) as a statement of its own (``origin="extract"``), without its
    final punctuation (compose adds the markers and the full stop)."""
    return Statement(texts[index].rstrip(".!?;:, "), (index,), "extract")


def named_subject(statement: Statement, label: str | None, paper: str = UNNAMED_SUBJECT) -> Statement:
    """``statement`` without a leading conjunction ("And ..."), with its subject named when it opens with a pronoun
    (``label``: its paper's label; ``paper`` when it has none or the sentence names it later:
    :func:`~citerag.service.answering.subject.name_subject`), the first person left inside it in the third
    (:func:`~citerag.service.answering.subject.third_person_inside`), and its first letter capitalised.

    >>> named_subject(Statement("We introduce GP-EquiFlow, a flow model", (0,)), "GP-EquiFlow").text
    'GP-EquiFlow is a flow model'
    """
    text, origin = LEADING_CONJUNCTION.sub("", statement.text), statement.origin
    if opens_with_pronoun(text):
        text = name_subject(text, label or paper, paper)
        origin = "named" if origin == "written" else origin
    text = third_person_inside(text)
    if text[:1].islower() and text.split(" ", 1)[0].islower():  # not a name such as "mSGD"
        text = text[:1].upper() + text[1:]
    return Statement(text, statement.evidence, origin)


def named_subjects(statements: Sequence[Statement], evidence: Sequence[Evidence], several: bool,
                   describe: Describe | None = None) -> list[Statement]:
    """Each of ``statements`` with its subject named (:func:`named_subject`) by the label of its first evidence
    sentence's paper (``statement.evidence`` indexes ``evidence``). A paper the answer cannot call by its label (it
    has none, or the sentence names it later) is "The paper on <topic>" when it has no label and ``describe`` gives
    its topic (:class:`~citerag.service.answering.topics.Topics`), and, in an answer about ``several`` papers, no
    other paper of the answer has the same; else :data:`UNNAMED_SUBJECT`, or, in an answer about several papers,
    :data:`UNNAMED_SUBJECTS`, in the order the answer first calls papers so: "One paper ...", then "Another paper
    ...".

    >>> from types import SimpleNamespace as N
    >>> item = lambda doc_id, text="no name": N(doc_id=doc_id, result=N(document=N(doc_id=doc_id, title="", text=text)))
    >>> texts = ["We perform Sequential Monte Carlo", "We improve validity by introducing ReVSI, a benchmark",
    ...          "We use a particle filter", "Our study uses one too"]
    >>> evidence = [item("a"), item("b", "We introduce ReVSI, a benchmark."), item("c"), item("c")]
    >>> for s in named_subjects([Statement(t, (i,)) for i, t in enumerate(texts)], evidence, several=True):
    ...     print(s.text)
    One paper performs Sequential Monte Carlo
    Another paper improves validity by introducing ReVSI, a benchmark
    Another paper uses a particle filter
    Another paper uses one too
    """
    generic: dict[str, str] = {}  # the papers called by a generic subject, and theirs
    out = []
    for statement in statements:
        item = evidence[statement.evidence[0]]
        document = item.result.document
        label, paper = subject_label(document), UNNAMED_SUBJECT
        # the topic (a model call the first time) only where it can be used: the subject is replaced, or, in an
        # answer about several papers, the text already opens with a generic subject (the bookkeeping below)
        used = opens_with_pronoun(LEADING_CONJUNCTION.sub("", statement.text)) or (
            several and statement.text.startswith(UNNAMED_SUBJECTS))
        topic = describe(document) if describe is not None and label is None and used else None
        if several and item.doc_id in generic:
            paper = generic[item.doc_id]
        elif several:
            taken = {called.lower() for called in generic.values()}
            paper = f"The paper on {topic}" if topic and f"the paper on {topic}".lower() not in taken else \
                UNNAMED_SUBJECTS[min(sum(v in UNNAMED_SUBJECTS for v in generic.values()), len(UNNAMED_SUBJECTS) - 1)]
        elif topic:  # "Which of the two ...?" is answered about one paper: "The paper" would not say which
            paper = f"The paper on {topic}"
        named = named_subject(statement, label, paper)
        if several and named.text.startswith(paper) and named.text != statement.text:
            generic.setdefault(item.doc_id, paper)
        out.append(named)
    return out


def paper_statements(items: Sequence[Evidence], describe: Describe | None = None) -> list[Statement]:
    """What an answer about several papers says of papers no written sentence rests on: each evidence sentence of
    ``items`` (readable) as a statement (``statement.evidence`` indexes ``items``), subjects named
    (:func:`named_subjects`). A judged which-papers answer is these statements, one a named paper (:class:`Verify`
    with nothing written); the judge streams each as its paper is named."""
    texts = [readable(item.text) for item in items]
    return named_subjects([extract(texts, i) for i in range(len(items))], items, several=True, describe=describe)
