"""Question analysis, done once per question: the standalone question (a follow-up made standalone from the
conversation), the names it mentions, its content terms and its kind, which picks the recipe that answers it
(:mod:`citerag.service.answering.recipes`).

Kinds, checked in this order:

* ``yes_no``: a polar question (:func:`is_yes_no`): its answer opens with the decision;
* ``which_papers``: "Which paper(s)/study ...?" (:func:`asks_which_papers`): its answer names the papers;
* ``comparison``: it asks to compare ("How do A and B differ?", "A versus B", "each of A and B") or names two
  things joined by "and"/"or" ("What do A and B optimise?");
* ``number``: it asks for a quantity ("How many ...", "By how much ...", "What percentage ...") or a date;
* ``definition``: "What is X?" with nothing more asked, or "What does X stand for?";
* ``fact``: anything else.

The kind changes what the model is asked to write and which papers it reads; every kind is answered from the papers
read, and a kind read wrongly still gets an answer of the right content, only worded for the other kind.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from citerag.index.text import fold
from citerag.index.tokenize import tokenize
from citerag.service.answering.language import (
    AUXILIARIES,
    COMPARATIVES,
    EXAMPLE_LIST,
    FUNCTION_WORDS,
    IMPERATIVES,
    WH_WORDS,
)
from citerag.service.answering.names import question_names
from citerag.service.conversation import Standalone, Turn, standalone

QuestionKind = Literal["yes_no", "which_papers", "comparison", "number", "definition", "fact"]
#: Every kind, in the order they are checked.
KINDS: tuple[QuestionKind, ...] = ("yes_no", "which_papers", "comparison", "number", "definition", "fact")
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
    r"^\s*(?:(?:in|from) )?(?:which|what) (?:of the )?(?:(?:\w+ )?(?:papers?|abstracts?|works?|stud(?:y|ies)|"
    r"articles?))\b|^\s*(?:list|name) (?:the |all )?(?:papers|studies)\b",
    re.IGNORECASE,
)
_ONE_PAPER = re.compile(r"^\s*(?:(?:in|from) )?(?:which|what) (?:\w+ )?(?:paper|abstract|work|study|article)\b",
                        re.IGNORECASE)
# Asking to compare: "How does A compare ...", "compare A and B", "differ", "versus", "each of", or a
# question about two papers: "two/both/these two ... papers", "the one ... the other", or two phrases that each
# describe a paper ("the paper that ... and the work that ..."). "compared with" qualifies a figure, and
# "comparison" alone names a task.
_WORK = (r"(?:papers?|works?|stud(?:y|ies)|articles?|analys[ie]s|methods?|approach(?:es)?|frameworks?|algorithms?"
         r"|models?)")
_COMPARE = re.compile(
    r"\bhow (?:do|does|did)\b[^?]{1,120}?\bcompare\b"
    r"|\bcompare\b[^?]{1,80}?\b(?:and|with|to)\b|\bdiffer(?:s|ed|ence|ences)?\b|\bversus\b|\bvs\.?\s|\beach of\b"
    rf"|\b(?:two|both)\b(?:\s+[\w-]+){{0,4}}\s+{_WORK}\b"
    r"|\bboth (?:are|were|use|study|propose)\b|\bthe other\b|\bone (?:paper|work|study)\b[^?]*\banother\b",
    re.IGNORECASE,
)
# A phrase that describes a paper by what it does: "the paper that ...", "the work on ...", "the one whose ...".
_DESCRIBED = re.compile(rf"\bthe\s+(?:[\w-]+\s+){{0,3}}?(?:{_WORK}|one|follow-ups?)\s+(?:that|which|who|whose|on|"
                        r"of|for|with|where|\w+ing)\b", re.IGNORECASE)
_COMPARED_WITH = re.compile(r"\bcompared (?:with|to)\b", re.IGNORECASE)
# A quantity asked for: "how" and a degree word opening the question or its main clause, "by what factor", or
# "what/which" and a measure noun within three words.
_AMOUNT = re.compile(
    r"(?:^|,)\s*(?:\w+\s+){0,3}how (?:many|much|long|old|often|large|big|high|low|far|fast|small)\b"
    r"|\bby what (?:factor|margin|percentage|fraction|amount)\b"
    r"|\b(?:what|which) (?:is |was |are |were )?(?:the )?(?:[\w-]+\s+){0,3}?(?:percentage|percent|proportion|"
    r"fraction|number|share|rate|ratio|amount|size|count|accuracy|speed-?up|score|error|year|date)\b",
    re.IGNORECASE,
)
_DATE = re.compile(r"^\s*(?:when|(?:in )?(?:what|which) (?:year|date|month))\b", re.IGNORECASE)
_DEFINITION = re.compile(r"^\s*what (?:is|are) (?:an? |the )?(?P<subject>[^?,;]{1,80}?)\s*\??\s*$", re.IGNORECASE)
_EXPANSION = re.compile(r"^\s*what (?:does|do|is|are) (?P<subject>\S+(?: \S+){0,2})\s+(?:stand|stands|short) for\b",
                        re.IGNORECASE)


def is_yes_no(question: str) -> bool:
    """True for a polar question, one that offers no alternatives ("Is A or B better?" is not yes/no) and either

    * opens, or its last clause after a colon or full stop opens, with an auxiliary verb ("Does ...", "Is ...",
      "Night shifts: are they harmful?"), or its main clause after a leading subordinate one does ("When
      labels are noisy, does pruning help?"), or
    * is a verbless question with no wh-word and no imperative ("Cold plasma: a disinfectant?").

    >>> is_yes_no("Does mulching raise soil moisture?"), is_yes_no("Is A or B faster?"), is_yes_no("What is A?")
    (True, False, False)
    >>> is_yes_no("Night shifts. Are they harmful to nurses?"), is_yes_no("Cold plasma: a disinfectant?")
    (True, True)
    >>> is_yes_no("Has use by U.S. farmers changed?"), is_yes_no("List the trials of the new vaccine?")
    (True, False)
    >>> is_yes_no("When labels are noisy, does pruning help?"), is_yes_no("With A, what were B, were C?")
    (True, False)
    """
    question = question.strip()
    clause = _CLAUSE.split(question)[-1]
    if offers_alternatives(clause):
        return False
    if _AUXILIARY.match(clause):
        return True
    # A wh-word inside the main clause is a relative one; one that opens a clause between the opening and the
    # main clause asks its own question ("With A, what were B, were C?").
    *leading, main = re.split(r",\s+", question)
    if _AUXILIARY.match(main) and not any(_WH_WORD.match(part) for part in leading[1:]):
        return True
    return question.endswith("?") and not _WH_WORD.search(question) and not _IMPERATIVE.match(question)


def offers_alternatives(clause: str) -> bool:
    """True when ``clause`` asks to choose between alternatives joined by "or": the "or" comes before its last
    word ("Is it wet or dry?") or before a comparative ("Is A or B faster?"). An "or" inside the clause joins parts
    of a yes/no question ("Does rain or snow delay the harvest?"), as does "or not", an open-ended number ("aged 80
    or older") and a list of examples ("Do they use crops like wheat or barley?").

    >>> offers_alternatives("Is A or B faster?"), offers_alternatives("Is it wet or dry?")
    (True, True)
    >>> offers_alternatives("Does rain or snow delay the harvest?"), offers_alternatives("Is X safe or not?")
    (False, False)
    >>> offers_alternatives("Is it safe for people aged 80 or older?")
    False
    >>> offers_alternatives("Do they use crops like wheat or barley?")
    False
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
    """True for "Which paper(s)/study ...?" questions, whose answer names the papers that qualify.

    >>> asks_which_papers("Which studies measured soil carbon?"), asks_which_papers("Which crop yields most?")
    (True, False)
    >>> asks_which_papers("What early work trains a net to read maps?")
    True
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
    """A which-papers question asked of one paper, for a yes or a no ("Which papers use crop rotation?" -> "Does
    the paper use crop rotation?"); ``None`` when ``question`` is no which-papers question or has no verb after its
    lead. English grammar only: an auxiliary takes the singular ("are about" -> "Is the paper about"), a
    present-tense verb follows "Does the paper", a past-tense one "Has the paper".

    >>> polar_form("Which papers use crop rotation?"), polar_form("Which studies are about soil microbes?")
    ('Does the paper use crop rotation?', 'Is the paper about soil microbes?')
    >>> polar_form("What papers proposed a new benchmark?"), polar_form("Which studies have a control group?")
    ('Has the paper proposed a new benchmark?', 'Does the paper have a control group?')
    >>> polar_form("Which paper trains a net to read maps, and how?")
    'Does the paper train a net to read maps?'
    >>> polar_form("Which crop yields most?") is None, polar_form("Which papers?") is None
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
    lower = verb.lower()
    if lower in ("have", "has") and not re.match(r"\w+(?:ed|en)\b", tail):
        return f"Does the paper have {tail}?"
    if lower in _POLAR_AUXILIARY:
        return f"{_POLAR_AUXILIARY[lower]} the paper {tail}?"
    if lower.endswith("ed"):
        return f"Has the paper {verb} {tail}?"
    if lower.endswith("s") and not lower.endswith("ss"):  # "trains" -> "train" after "Does the paper"
        verb = verb[:-2] if lower.endswith(("ches", "shes", "sses", "xes")) else verb[:-1]
    return f"Does the paper {verb} {tail}?"


def content_terms(question: str) -> list[tuple[str, str]]:
    """``(word, BM25 token)`` of each distinct content word of ``question``, in order: function words
    (:data:`~citerag.service.answering.language.FUNCTION_WORDS`) dropped, a hyphenated compound split into its words.

    >>> content_terms("How does the Quillmark tokenizer split words?")
    [('Quillmark', 'quillmark'), ('tokenizer', 'token'), ('split', 'split'), ('words', 'word')]
    """
    seen: dict[str, str] = {}
    for word in re.findall(r"[^\W_]+", fold(question)):
        if word.lower() in FUNCTION_WORDS:
            continue
        for token in tokenize(word):
            if token not in seen:
                seen[token] = word
    return [(word, token) for token, word in seen.items()]


def _joined(question: str, names: Sequence[str]) -> bool:
    """Whether two of ``names`` stand in ``question`` joined by "and", "or", "vs" or a comma."""
    folded = fold(question)
    return any(re.search(rf"{re.escape(a)}\W+(?:(?:and|or|vs\.?|versus)\s+|,\s*)(?:the\s+)?{re.escape(b)}", folded)
               for a in names for b in names if a != b)


def question_kind(question: str, names: Sequence[str] = ()) -> QuestionKind:
    """The kind of ``question`` (module docstring), given the names it mentions.

    >>> question_kind("Is Quillmark faster than beam search?"), question_kind("Which papers use crop rotation?")
    ('yes_no', 'which_papers')
    >>> question_kind("How many layers does Quillmark have?"), question_kind("What is the Quillmark tokenizer?")
    ('number', 'definition')
    >>> question_kind("What top-3 accuracy does Quillmark reach?"), question_kind("What does QMK stand for?")
    ('number', 'definition')
    >>> question_kind("What do Quillmark and Inkwell each optimise?", ["Quillmark", "Inkwell"])
    'comparison'
    >>> question_kind("How do the paper on seed banks and the paper on soil microbes differ in sampling?")
    'comparison'
    >>> question_kind("By how much does Quillmark cut the error, compared with a tagger?", ["Quillmark"])
    'number'
    >>> question_kind("What dataset was Quillmark trained on?")
    'fact'
    >>> question_kind("In which crop comparison trials is the sampler useful?")
    'fact'
    >>> question_kind("What loss does the paper on seed banks use, and the paper that maps soil microbes?")
    'comparison'
    >>> question_kind("Two papers study seed banks: what does each store?")
    'comparison'
    >>> question_kind("One paper dries seeds; another freezes them. What does each save?")
    'comparison'
    >>> question_kind("How much do they save: the work that dries seeds, and the follow-up freezing them?")
    'comparison'
    """
    if is_yes_no(question):
        return "yes_no"
    if asks_which_papers(question):
        return "which_papers"
    if _COMPARE.search(_COMPARED_WITH.sub("", question)) or _joined(question, names) \
            or len(_DESCRIBED.findall(question)) >= 2:
        return "comparison"
    if _AMOUNT.search(question) or _DATE.search(question):
        return "number"
    if _EXPANSION.match(question) or _defined(question) is not None:
        return "definition"
    return "fact"


def _defined(question: str) -> str | None:
    """The ``X`` of "What is X?" (nothing more asked, no wh-word inside) or "What does X stand for?", else ``None``."""
    match = _EXPANSION.match(question) or _DEFINITION.match(question)
    if match is None or _WH_WORD.search(match.group("subject")) or " and " in match.group("subject"):
        return None
    return match.group("subject")


@dataclass(frozen=True, slots=True)
class Question:
    """A question as analysed once, before retrieval.

    Attributes:
        asked: the question as the user asked it.
        text: the standalone question retrieved for and answered (``asked``, or a follow-up rewritten from the
            conversation: :mod:`citerag.service.conversation`).
        kind: :data:`QuestionKind` (module docstring).
        names: the names it mentions (:func:`~citerag.service.answering.names.question_names`), in order.
        terms: ``(word, BM25 token)`` of its content words (:func:`content_terms`).
        follow_up: why it was rewritten from the conversation (``""``: it stood alone).
        keep: documents to keep as retrieval candidates (the previous answer's, and the caller's).
        one_paper: a which-papers question asked in the singular (:func:`asks_one_paper`).
        polar: a which-papers question asked of one paper (:func:`polar_form`), else ``None``.
        subject: what a definition question asks to define, else ``None``.
    """

    asked: str
    text: str
    kind: QuestionKind
    names: tuple[str, ...] = ()
    terms: tuple[tuple[str, str], ...] = ()
    follow_up: str = ""
    keep: tuple[str, ...] = ()
    one_paper: bool = False
    polar: str | None = None
    subject: str | None = None

    @property
    def tokens(self) -> tuple[str, ...]:
        """The BM25 tokens of its content words, in order."""
        return tuple(token for _, token in self.terms)

    @property
    def several_papers(self) -> bool:
        """Whether its answer is about several papers (:data:`SEVERAL_PAPERS`, a which-paper question in the
        singular excepted)."""
        return self.kind in SEVERAL_PAPERS and not self.one_paper


def analyse(question: str, history: Sequence[Turn] = (), keep: Sequence[str] = ()) -> Question:
    """Analyse ``question`` (with the earlier turns ``history``, oldest first; ``keep``: documents to keep as
    candidates) into a :class:`Question`.

    >>> q = analyse("How many layers does QuillMark have?")
    >>> q.kind, q.names, q.tokens
    ('number', ('QuillMark',), ('layer', 'quillmark'))
    """
    resolved: Standalone = standalone(question, history)
    text = resolved.question
    names = tuple(question_names(text))
    kind = question_kind(text, names)
    return Question(
        asked=question.strip(), text=text, kind=kind, names=names, terms=tuple(content_terms(text)),
        follow_up=resolved.reason, keep=tuple(dict.fromkeys([*resolved.keep, *keep])),
        one_paper=kind == "which_papers" and asks_one_paper(text),
        polar=polar_form(text) if kind == "which_papers" else None,
        subject=_defined(text) if kind == "definition" else None,
    )

