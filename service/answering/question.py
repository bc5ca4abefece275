"""Question analysis, done once per question: its kind, the names it mentions, its content terms, and whether
it refers back to an earlier turn (:class:`QuestionInfo`, made by :func:`analyse`).

Kinds (checked in this order):

* ``yes_no``: a polar question (:func:`is_yes_no`): its answer opens with the decision;
* ``which_papers``: "Which papers/studies ...?" (:func:`asks_which_papers`): its answer names every paper; asked in
  the singular ("Which paper ...?", :func:`asks_one_paper`), the one that fits best;
* ``comparison``: it asks to compare ("How do A and B differ?", "A versus B", "How do A and the method that ...
  each ...?"), or asks about two or more things it names, joined by "and" / "or" ("What do Harmonic-NAS and
  AutoCoG optimise?");
* ``number``: it asks for a quantity or a date ("How many ...", "What percentage ...", "When ...");
* ``definition``: "What is X?" / "What are X?" with nothing more asked, or "What does X stand for?" ("What is X, and
  what/how ...?" asks more: its kind is the rest's, and its answer says what X is first, :func:`asks_more`);
* ``fact``: anything else.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from itertools import takewhile
from typing import Literal

from citerag.index.text import fold
from citerag.index.tokenize import tokenize
from citerag.service.answering.language import (
    AUXILIARIES,
    COMPARATIVES,
    EXAMPLE_LIST,
    FUNCTION_WORDS,
    IMPERATIVES,
    QUANTITY_MODIFIERS,
    WH_WORDS,
)
from citerag.service.answering.names import question_names
from citerag.service.conversation import Standalone, Turn, standalone

QuestionKind = Literal["yes_no", "which_papers", "comparison", "number", "definition", "fact"]
#: The kinds whose answer is about several papers: each paper gets its own sentence and is named.
SEVERAL_PAPERS: frozenset[str] = frozenset({"which_papers", "comparison"})

_AUXILIARY = re.compile(rf"^\s*(?:{'|'.join(AUXILIARIES)})\b", re.IGNORECASE)
_OR = re.compile(r"\bor\b", re.IGNORECASE)
_WH_WORD = re.compile(rf"\b(?:{'|'.join(WH_WORDS)})\b", re.IGNORECASE)
_IMPERATIVE = re.compile(rf"^\s*(?:{'|'.join(IMPERATIVES)})\b", re.IGNORECASE)
# A clause boundary inside a question: a colon, or a full stop before a capital that does not end a one-letter
# abbreviation ("Metered-dose inhalers. Do ...?" splits; "U.S. adults" does not).
_CLAUSE = re.compile(r":\s+|(?<![\s.][A-Z])\.\s+(?=[A-Z])")
_WHICH_PAPERS = re.compile(
    r"^\s*(?:(?:in|from) )?which (?:of the )?(?:papers?|abstracts?|works?|stud(?:y|ies)|articles?|methods)\b"
    r"|^\s*what (?:papers|abstracts|works|studies|articles)\b|^\s*(?:list|name) (?:the |all )?(?:papers|studies)\b",
    re.IGNORECASE,
)
_ONE_PAPER = re.compile(r"^\s*(?:(?:in|from) )?which (?:paper|abstract|work|study|article)\b", re.IGNORECASE)
# "compared with ..." qualifies a figure ("... lower the error rate compared with earlier work?"): only "compare",
# "comparison", "differ", "versus" or "A and B each" ask to compare; "each" after a preposition ("What is HELIX and
# what does it assign to each feature?") is one thing's.
_PREPOSITIONS = ("to", "for", "in", "of", "on", "per", "at", "by", "with", "from")
_COMPARE = re.compile(r"\b(?:compares?|comparison|differ(?:s|ence|ences)?|versus|vs\.?)\b|\band\b[^?]*"
                      + "".join(rf"(?<!\b{p} )" for p in _PREPOSITIONS) + r"\beach\b", re.IGNORECASE)
# Quantity questions: "how" + a degree word, or "what/which" + a generic measure noun ("what percentage"), the noun
# perhaps qualified by up to three words that name no thing: quantity adjectives ("maximum"), words with a digit
# or a hyphen ("top-1", "exact-match") and acronyms ("MoE"): "What top-1 accuracy ...", "What maximum MoE speedup".
_QUALIFIER = rf"(?:(?:{'|'.join(sorted(QUANTITY_MODIFIERS))}|[\w-]*\d[\w-]*|\w+-\w+|(?-i:[A-Z][A-Za-z]*[A-Z]\w*))\s+)"
# "How" opens the question or its main clause ("By how much ...", "For ReLU networks, how many ..."): "governed by
# how fast that weight moves" is a relative clause, not the quantity asked.
_AMOUNT = re.compile(
    r"(?:(?:^|,)\s*(?:\w+\s+){0,3})how (?:many|much|long|old|often|large|big|high|low|far|fast|small)\b"
    rf"|\b(?:what|which) (?:is |was |are |were )?(?:the )?{_QUALIFIER}{{0,3}}(?:percentage|percent|proportion|"
    r"fraction|number|share|rate|ratio|amount|size|count|accuracy|speed-?up|score)\b",
    re.IGNORECASE,
)
# Dates: "When ...", "In what year ...".
_DATE = re.compile(r"^\s*(?:when|(?:in )?(?:what|which) (?:year|date|month))\b", re.IGNORECASE)
# "How many GPUs were ...", "how much data is ...": the counted noun phrase, up to a verb, a preposition or the end.
_COUNTED = re.compile(
    r"\bhow (?:many|much)\s+(?P<np>[^?,;]+?)(?=\s+(?:is|are|was|were|do|does|did|has|have|had|can|could|will|would|"
    r"should|in|on|for|of|to|by|from|with|at|per|than)\b|\s*[?,;]|\s*$)",
    re.IGNORECASE,
)
# A closing aside in parentheses that says which thing is meant: "Polaris (the taxonomy expansion method)".
_ASIDE = re.compile(r"\s+\([^()]*\)$")
_DEFINITION = re.compile(r"^\s*what (?:is|are) (?:an? |the )?(?P<subject>[^?,;]{1,80}?)\s*\??\s*$", re.IGNORECASE)
# "What is the Platonic Transformer, and what symmetry does it respect?", "What is Polaris and is it supervised?":
# X is defined, then a second question (a wh-word then an auxiliary, or an auxiliary then a pronoun) asks more of
# it; "What is the gap between A and what B reports?" asks one thing.
_AUX = "|".join(AUXILIARIES)
_DEFINITION_AND = re.compile(
    rf"^\s*what (?:is|are) (?:an? |the )?(?P<subject>[^?,;]{{1,80}}?),?\s+and\s+"
    rf"(?:(?:{'|'.join(WH_WORDS)})\b[^?]*?\b(?:{_AUX})|(?:{_AUX})\s+(?:it|they|its|this|these))\b",
    re.IGNORECASE,
)
# "What does GGF stand for (in ...)?", "What is ASMC short for?": the long form of an abbreviation is asked.
_EXPANSION = re.compile(r"^\s*what (?:does|do|is|are) \S+(?: \S+){0,2}\s+(?:stand|stands|short) for\b", re.IGNORECASE)


def is_yes_no(question: str) -> bool:
    """True for a polar question, one that offers no alternatives ("Is A or B better?" is not yes/no) and either

    * opens, or its last clause after a colon or full stop opens, with an auxiliary verb ("Does ...", "Is ...",
      "Double balloon enteroscopy: is it safe?"), or its main clause after a leading subordinate one does ("When
      filters are removed, are sparse libraries needed?"), or
    * is a verbless or declarative question with no wh-word and no imperative ("CA 19-9: a contraindication?"):
      English asks those for a yes or a no.

    >>> is_yes_no("Does aspirin reduce stroke risk?"), is_yes_no("Is A or B faster?"), is_yes_no("What is A?")
    (True, False, False)
    >>> is_yes_no("Metered-dose inhalers. Do providers know what to teach?"), is_yes_no("CA 19-9: a contraindication?")
    (True, True)
    >>> is_yes_no("Has use by U.S. adults changed?"), is_yes_no("List the trials of remdesivir?")
    (True, False)
    >>> is_yes_no("When filters are removed, are sparse libraries needed?"), is_yes_no("With X, what were Y, were Z?")
    (True, False)
    """
    question = question.strip()
    clause = _CLAUSE.split(question)[-1]
    if offers_alternatives(clause):
        return False
    if _AUXILIARY.match(clause):
        return True
    # A wh-word inside the main clause is a relative one ("points where the loss is differentiable"); one that
    # opens a clause between the opening and the main clause asks its own question ("With X, what were Y, ...").
    *leading, main = re.split(r",\s+", question)
    if _AUXILIARY.match(main) and not any(_WH_WORD.match(part) for part in leading[1:]):
        return True
    return question.endswith("?") and not _WH_WORD.search(question) and not _IMPERATIVE.match(question)


def offers_alternatives(clause: str) -> bool:
    """True when ``clause`` asks to choose between alternatives joined by "or": the "or" comes before its last
    word ("Are they the same or different?") or before a comparative ("Is A or B faster?", "Is A or B more
    accurate?"). An "or" inside the clause joins parts of a yes/no question ("Does surgery or radiation improve
    survival?", "Are abscesses, phlegmons, or recurrent disease contraindications?"), as does "or not", an
    open-ended number ("patients aged 80 or older") and a list of examples (:data:`~citerag.service.answering.
    language.EXAMPLE_LIST`: "Do they use activation functions like ReLU or GELU?").

    >>> offers_alternatives("Is A or B faster?"), offers_alternatives("Is it continuous or discontinuous?")
    (True, True)
    >>> offers_alternatives("Does surgery or radiation improve survival?"), offers_alternatives("Is X safe or not?")
    (False, False)
    >>> offers_alternatives("Is repair justified for patients aged 80 or older?")
    False
    >>> offers_alternatives("Do they use activation functions like ReLU or GELU?")
    False
    >>> offers_alternatives("Is a model such as GPT or BERT faster?"), offers_alternatives("Does it act like A or B?")
    (True, True)
    """
    for match in _OR.finditer(clause):
        before, after = clause[:match.start()].split(), re.findall(r"[\w-]+", clause[match.end():].lower())
        if not after or after == ["not"] or (before and any(c.isdigit() for c in before[-1])):
            continue
        if any(word in COMPARATIVES or word in ("more", "less") for word in after):
            return True
        if len(after) == 1 and not EXAMPLE_LIST.search(clause[:match.start()]):
            return True
    return False


def asks_which_papers(question: str) -> bool:
    """True for "Which papers/studies ...?" questions, whose answer names every paper that qualifies.

    >>> asks_which_papers("Which studies measured viral load?"), asks_which_papers("Which virus causes it?")
    (True, False)
    """
    return bool(_WHICH_PAPERS.match(question))


def asks_one_paper(question: str) -> bool:
    """True for a which-papers question asked in the singular: it wants the one paper that fits.

    >>> asks_one_paper("Which paper prunes filters?"), asks_one_paper("Which papers prune filters?")
    (True, False)
    """
    return bool(_ONE_PAPER.match(question))


_POLAR_AUXILIARY = {"are": "Is", "were": "Was", "is": "Is", "was": "Was", "have": "Has", "has": "Has", "do": "Does",
                    "did": "Did", "can": "Can", "could": "Could", "will": "Will", "would": "Would"}


def polar_form(question: str) -> str | None:
    """A which-papers question asked of one paper, for a yes or a no ("Which papers use flow matching?" -> "Does
    the paper use flow matching?"); ``None`` when ``question`` is no which-papers question or has no verb after
    its lead. English grammar only: an auxiliary takes the singular ("are about" -> "Is the paper about"), a
    present-tense verb follows "Does the paper", a past-tense one "Has the paper" (a regular past tense is its
    participle).

    >>> polar_form("Which papers use flow matching?"), polar_form("Which abstracts are about genome models?")
    ('Does the paper use flow matching?', 'Is the paper about genome models?')
    >>> polar_form("What papers proposed a new benchmark?"), polar_form("Which studies have a control group?")
    ('Has the paper proposed a new benchmark?', 'Does the paper have a control group?')
    >>> polar_form("Which papers use Sequential Monte Carlo, and for what?")
    'Does the paper use Sequential Monte Carlo?'
    >>> polar_form("Which virus causes it?") is None, polar_form("Which papers?") is None
    (True, True)
    """
    lead = _WHICH_PAPERS.match(question)
    if lead is None:
        return None
    rest = re.sub(r"^\s*(?:that|which|who)\s+", "", question[lead.end():]).strip().rstrip("?").strip()
    # a second question joined on ("..., and for what?", "... and how?") is not asked of each paper
    rest = re.sub(r",?\s+and\s+(?:(?:for|by|with|in)\s+)?(?:what|how|why|which|where|when)\b.*$", "", rest)
    words = rest.split(" ", 1)
    if not words[0] or len(words) < 2:
        return None
    verb, tail = words[0], words[1]
    if verb.lower() in ("have", "has") and not re.match(r"\w+(?:ed|en)\b", tail):
        return f"Does the paper have {tail}?"  # "have" as the main verb: "Which studies have a control group?"
    if verb.lower() in _POLAR_AUXILIARY:
        return f"{_POLAR_AUXILIARY[verb.lower()]} the paper {tail}?"
    if verb.lower().endswith("ed"):
        return f"Has the paper {verb} {tail}?"
    return f"Does the paper {verb} {tail}?"


def content_terms(question: str) -> list[tuple[str, str]]:
    """``(word, BM25 token)`` of each distinct content word of ``question``, in order: function words
    (:data:`~citerag.service.answering.language.FUNCTION_WORDS`) dropped, a hyphenated compound split into its words.

    >>> content_terms("How does the QuillFormer tokenizer split Sanskrit compound-words?")
    [('QuillFormer', 'quillform'), ('tokenizer', 'token'), ('split', 'split'), ('Sanskrit', 'sanskrit'), ('compound', 'compound'), ('words', 'word')]
    """
    seen: dict[str, str] = {}
    for word in re.findall(r"[^\W_]+", fold(question)):
        if word.lower() in FUNCTION_WORDS:
            continue
        for token in tokenize(word):
            if token not in seen:
                seen[token] = word
    return [(word, token) for token, word in seen.items()]


def counted_terms(question: str) -> tuple[str, ...]:
    """The BM25 terms of what a counting question counts ("How many GPUs were used?" -> ``('gpus',)``), quantity
    modifiers ("maximum", "average") left out; ``()`` for other questions.

    >>> counted_terms("How many GPUs were used to train XR-1?"), counted_terms("How much training data does EDEN use?")
    (('gpus',), ('train', 'data'))
    >>> counted_terms("How many parameters does the largest model have?"), counted_terms("What is EDEN?")
    (('paramet',), ())
    >>> counted_terms("By up to how much does V1-Infer raise Pass@1?"), counted_terms("How much faster does RDA learn?")
    ((), ())
    >>> counted_terms("How many more GPUs does XR-1 need?")
    ('gpus',)
    """
    match = _COUNTED.search(fold(question))
    if match is None or match.group("np").split()[0].lower() in AUXILIARIES:
        return ()  # "how much does X raise Y": a degree, not a counted thing
    words = [w for w in re.findall(r"[^\W_]+", match.group("np")) if w.lower() not in QUANTITY_MODIFIERS]
    if words and words[0].lower() in COMPARATIVES:
        return ()  # "how much faster ...": a degree
    words = [w for w in words if w.lower() not in ("more", "fewer", "less")]
    return tuple(dict.fromkeys(t for word in words if word.lower() not in FUNCTION_WORDS for t in tokenize(word)))


def _joined(question: str, names: Sequence[str]) -> bool:
    """Whether two of ``names`` stand in ``question`` joined by "and", "or", "vs" or a comma ("SV2P and Error Encoding
    Networks")."""
    folded = fold(question)
    return any(re.search(rf"{re.escape(a)}\W+(?:(?:and|or|vs\.?|versus)\s+|,\s*)(?:the\s+)?{re.escape(b)}", folded)
               for a in names for b in names if a != b)


def question_kind(question: str, names: Sequence[str] = ()) -> QuestionKind:
    """The kind of ``question`` (module docstring), given the names it mentions.

    >>> question_kind("Is ASMC faster than best-of-n?"), question_kind("Which papers use diffusion?")
    ('yes_no', 'which_papers')
    >>> question_kind("How many parameters does EDEN have?"), question_kind("What is the Platonic Transformer?")
    ('number', 'definition')
    >>> question_kind("What top-1 accuracy does PolyNeXt reach?"), question_kind("What maximum MoE speedup is reached?")
    ('number', 'number')
    >>> question_kind("What does GGF stand for in the reassembly framework?"), question_kind("What is ASMC short for?")
    ('definition', 'definition')
    >>> question_kind("What kind of score does V1 use?"), question_kind("What new accuracy metric is proposed?")
    ('fact', 'fact')
    >>> question_kind("What do Harmonic-NAS and AutoCoG each optimise?", ["Harmonic-NAS", "AutoCoG"])
    'comparison'
    >>> question_kind("How do QSGD and the method that sends side information each cut communication?", ["QSGD"])
    'comparison'
    >>> question_kind("By how much does BML cut the time, compared with a parameter server?", ["BML"])
    'number'
    >>> question_kind("What is HELIX and what does it assign to each feature?", ["HELIX"])
    'fact'
    """
    if is_yes_no(question):
        return "yes_no"
    if asks_which_papers(question):
        return "which_papers"
    if _COMPARE.search(question) or _joined(question, names):
        return "comparison"
    if _AMOUNT.search(question) or _DATE.search(question):
        return "number"
    if _EXPANSION.match(question):
        return "definition"
    if (defined := _defined(question)) is not None and defined.re is _DEFINITION:  # nothing more asked
        return "definition"
    return "fact"


# "What/Which <one to four words> <auxiliary> ...?": the words name the class of the thing asked for; "kind of",
# "type of", "sort of" before them say nothing of it.
_KIND_OF = re.compile(r"^(?:kind|type|sort|form|family)s?\s+of\s+")
_CLASS_ASKED = re.compile(
    rf"^\s*(?:what|which)\s+(?P<np>(?:[\w-]+\s+){{0,3}}[\w-]+)\s+(?:{'|'.join(AUXILIARIES)})\b", re.IGNORECASE
)


def asked_class(question: str) -> str | None:
    """The class of the thing a "What/Which <noun phrase> <auxiliary> ...?" question asks for: the last word of
    its noun phrase, lower-cased, singular or plural as asked ("What base model architecture were the experiments
    run on?" asks for an architecture); ``None`` for other questions, or a phrase that ends in a function word.

    >>> asked_class("What base model architecture were the Regret Pre-training experiments run on?")
    'architecture'
    >>> asked_class("Which dataset does HELIX use?"), asked_class("What is Polaris?")
    ('dataset', None)
    >>> asked_class("Which optimizer gives every parameter its own momentum?") is None  # no auxiliary after the noun
    True
    >>> asked_class("What kind of verification does V1 use?"), asked_class("Which LLMs were tested?")
    ('verification', 'llms')
    >>> asked_class("Which model for variable clustering is used?")
    'model'
    """
    match = _CLASS_ASKED.match(question)
    if match is None:
        return None
    words = _KIND_OF.sub("", match.group("np").lower()).split()
    # the head ends the phrase, or comes before its first function word ("model for variable clustering")
    words = list(takewhile(lambda word: word not in FUNCTION_WORDS, words))
    return words[-1] if words else None


def defined_subject(question: str) -> str | None:
    """What a "What is X?" question asks to define (``X``, without its article and without a closing aside in
    parentheses, which says which X is meant), also when it asks more of X after "and" ("What is X, and what/how
    ...?": :func:`asks_more`), or ``None`` for other questions.

    >>> defined_subject("What is Polaris?"), defined_subject("What is the Platonic Transformer?")
    ('Polaris', 'Platonic Transformer')
    >>> defined_subject("What is Polaris (the taxonomy expansion method)?"), defined_subject("What is SE(3)?")
    ('Polaris', 'SE(3)')
    >>> defined_subject("What is the Platonic Transformer and what symmetry does it respect?")
    'Platonic Transformer'
    >>> defined_subject("How fast is ASMC?"), defined_subject("What is the gap between A and what B reports?")
    (None, None)
    """
    match = _defined(question)
    return None if match is None else _ASIDE.sub("", match.group("subject")) or match.group("subject")


def asks_more(question: str) -> bool:
    """Whether ``question`` asks what X is and then more of it ("What is X, and what/how ...?", "What is X, and is
    it ...?"): its answer says what X is, then answers the rest.

    >>> asks_more("What is the Platonic Transformer and what symmetry does it respect?"), asks_more("What is X?")
    (True, False)
    >>> asks_more("What is Polaris and is it supervised?"), asks_more("What are HELIX and Polaris?")
    (True, False)
    """
    match = _defined(question)
    return match is not None and match.re is _DEFINITION_AND


def _defined(question: str) -> re.Match[str] | None:
    """The match of "What is X, and ...?" (:data:`_DEFINITION_AND`), else of "What is X?" (:data:`_DEFINITION`),
    whose subject ``X`` holds no wh-word ("What is the gap between A and what B reports?" defines nothing); else
    ``None``."""
    match = _DEFINITION_AND.match(question) or _DEFINITION.match(question)
    return None if match is None or _WH_WORD.search(match.group("subject")) else match


@dataclass(frozen=True, slots=True)
class QuestionInfo:
    """A question as analysed once, before retrieval.

    Attributes:
        asked: the question as the user asked it.
        text: the standalone question that is retrieved for and answered (``asked``, or a follow-up rewritten from
            the conversation; :mod:`citerag.service.conversation`).
        kind: :data:`QuestionKind` (module docstring).
        names: the names it mentions (:func:`~citerag.service.answering.names.question_names`), in order.
        terms: ``(word, BM25 token)`` of its content words (:func:`content_terms`).
        counted: the BM25 terms of what a counting question counts (:func:`counted_terms`), else ``()`` (a
            definition question counts nothing, whatever "how many" it holds).
        follow_up: why it was read as a follow-up (``"refers back: 'it'"``, ``"continuation"``, ``"short"``), or ``""``.
        keep: documents an earlier answer cited, kept as retrieval candidates for a follow-up.
        one_paper: a which-papers question asked in the singular (:func:`asks_one_paper`).
        amount: a number question that asks for an amount ("How many ...", "What accuracy ..."), not a date: its
            answer states a number.
        polar: a which-papers question in the plural asked of one paper (:func:`polar_form`: "Does the paper use
            flow matching?"), else ``None``.
        subject: what a "What is X?" question asks to define (:func:`defined_subject`; also "What is X, and what
            ...?", :func:`asks_more`), else ``None``.
        asked_for: the class of what a "What/Which <noun> ...?" question asks for (:func:`asked_class`:
            "architecture"), else ``None``.
    """

    asked: str
    text: str
    kind: QuestionKind
    names: tuple[str, ...] = ()
    terms: tuple[tuple[str, str], ...] = ()
    counted: tuple[str, ...] = ()
    follow_up: str = ""
    keep: tuple[str, ...] = field(default_factory=tuple)
    one_paper: bool = False
    amount: bool = False
    polar: str | None = None
    subject: str | None = None
    asked_for: str | None = None

    @property
    def tokens(self) -> tuple[str, ...]:
        """The BM25 tokens of its content words (:attr:`terms`), in order."""
        return tuple(token for _, token in self.terms)

    @property
    def several_papers(self) -> bool:
        """Whether its answer is about several papers (:data:`SEVERAL_PAPERS`)."""
        return self.kind in SEVERAL_PAPERS

    @property
    def rewritten(self) -> bool:
        """Whether the answered question differs from the asked one."""
        return self.text != self.asked


def analyse(question: str, history: Sequence[Turn] = ()) -> QuestionInfo:
    """Analyse ``question`` (with the earlier turns ``history``, oldest first) into a :class:`QuestionInfo`.

    >>> info = analyse("How many parameters does EDEN have?")
    >>> info.kind, info.names, [t for _, t in info.terms], info.amount
    ('number', ('EDEN',), ['paramet', 'eden'], True)
    >>> analyse("When was EDEN released?").amount
    False
    """
    resolved: Standalone = standalone(question, history)
    names = tuple(question_names(resolved.question))
    kind = question_kind(resolved.question, names)
    one_paper = asks_one_paper(resolved.question)
    return QuestionInfo(
        asked=question.strip(), text=resolved.question, kind=kind, names=names,
        terms=tuple(content_terms(resolved.question)),
        counted=() if kind == "definition" else counted_terms(resolved.question),
        follow_up=resolved.reason, keep=resolved.keep, one_paper=one_paper,
        amount=kind == "number" and bool(_AMOUNT.search(resolved.question)),
        polar=polar_form(resolved.question) if kind == "which_papers" and not one_paper else None,
        subject=defined_subject(resolved.question), asked_for=asked_class(resolved.question),
    )


class Analyse:
    """The analyse step: ``state.info`` = :func:`analyse` of ``state.question`` with ``state.history`` (plus the
    documents ``state.keep`` names as retrieval candidates)."""

    name = "analyse"

    def run(self, state) -> None:  # noqa: ANN001 - AnswerState (imported lazily: state imports this module's types)
        info = analyse(state.question, state.history)
        if state.keep:
            info = replace(info, keep=tuple(dict.fromkeys([*info.keep, *state.keep])))
        state.info = info
        state.emit("question", info)
