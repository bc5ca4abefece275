"""The part of an evidence sentence that answers the question: a sub-span of the sentence, with exact offsets.

A whole evidence sentence is long and the answer in it is usually short (on COVID-QA a chosen sentence holding the
gold span is ~27 words, the gold span ~10), and the sentence's words that restate the question are not the
answer. :func:`answer_span` keeps the sentence's answering part by general rules only (no list of topics, no
fitted weights):

1. *Labels and references off the edges*: a leading section or field label (``BACKGROUND:``, ``Text:``, a
   capitalised word ending in a colon; the answer starts after the last one) and the document's own bracketed
   references (``[12]``, ``(3, 4)``, ``(Smith et al., 2010)``, ``(Figure 1A)``) at either end.
2. *Restatement off the edges*: words at either end that only restate the question (every index term of the word,
   :func:`~citerag.index.tokenize.tokenize`, is one of the question's) or are function words (articles,
   prepositions, auxiliaries, pronouns, conjunctions) are dropped, up to the first content word on each side. A
   leading run of function words alone is dropped only up to its last comma ("However, the ..."): they lead into
   the next content word ("On average, 1 in 66 ...", "In this study, ..." stay whole).
   Negations (``not``, ``no``, ``without`` ...) are content: "NTCP itself is not sufficient to allow HBV
   infection" answers "Is NTCP sufficient to allow HBV infection?" with "not sufficient".
3. *Quantities*: a question that asks for a quantity ("How many", "What percentage", "How long") or a time
   ("When", "What year") is answered by the number phrase of the trimmed span (``over 46,000 cases``,
   ``between 100 and 840 y``, ``12 January 2020``) when there is exactly one: a number the question itself
   states is not a candidate, nor, for a count, a year, nor, for a time, a number that is neither a date, a year
   nor a duration; when the question asks for a percentage only percentages are (if any is there). With several
   candidates the trimmed span stands: which one answers is not known. The phrase keeps one following word that
   the question names (``31 cases``).

At least one content word other than a negation always remains; otherwise the whole sentence is the answer.
Measured without a model on COVID-QA's dev half (``eval/span_table.py``; ``eval/results/qa.md``, "Sub-sentence
answer spans (session 9)").
"""

from __future__ import annotations

import re
from functools import lru_cache

from citerag.index.text import fold
from citerag.index.tokenize import STOPWORDS, tokenize

#: Closed-class English words: trimmable at a span's edges like the index's stop words. Negations are not here.
FUNCTION_WORDS: frozenset[str] = frozenset(
    """a an the this that these those there their its it itself they them themselves we our us he she his her i
    you your one ones
    of in on at by for from with into onto to as than about among between within through over under after before
    during via per against across upon toward towards
    is are was were be been being has have had do does did can could may might will would should shall must
    and or but so yet also both either which who whom whose what when where why how while whereas although though
    because since if then thus hence however therefore moreover furthermore additionally indeed
    such other others another some any all each every""".split()
) | STOPWORDS - {"no", "not"}
#: Words that carry the answer's polarity or limit: never trimmed.
NEGATIONS: frozenset[str] = frozenset("not no without never none nor neither cannot only".split())

_WORD = re.compile(r"\S+")
_EDGE_PUNCTUATION = re.compile(r"^[\W_]+|[\W_]+$")
# A leading label: a capitalised word ending in a colon ("BACKGROUND:", "Text:", "DOI:").
_LABEL = re.compile(r"^[A-Z][A-Za-z]*:$")
# The document's own references: numbered brackets, and parentheses holding a citation or a figure/table pointer.
_REFERENCE = re.compile(
    r"\[\s*\d{1,4}(?:\s*[,;–-]\s*\d{1,4})*\s*\]"
    r"|\(\s*\d{1,3}(?:\s*[,;–-]\s*\d{1,3})*\s*\)"
    r"|\([^()]*(?:\bet al\.|\b(?:19|20)\d\d[a-z]?\b|\bFig(?:ure)?s?\b|\bTables?\b)[^()]*\)"
)

_QUANTITY_QUESTION = re.compile(
    r"\bhow (?:many|much|long|old|often|large|big|high|far|frequent(?:ly)?)\b"
    r"|\bwhat (?:is |was |are |were )?(?:the )?(?:percentage|percent|proportion|fraction|number|share|rate|ratio|"
    r"incidence|prevalence|age|size|length|duration)\b"
    r"|\bat what (?:age|rate|dose|concentration)\b",
    re.IGNORECASE,
)
_TIME_QUESTION = re.compile(
    r"^\W*(?:when|(?:in )?(?:what|which) (?:year|date|month))\b|\bwhen (?:was|were|did|is|does|do|has|have)\b",
    re.IGNORECASE,
)
_PERCENT_QUESTION = re.compile(r"\b(?:percentage|percent|proportion|fraction|share|rate)\b", re.IGNORECASE)
_NUMBER = re.compile(r"[~≈<>≤≥±]?\d[\d,.·]*(?:[-–]\d[\d,.]*)?(?:%|‰|-fold)?")
_NUMBER_WORDS = frozenset(
    """zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen
    eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand million billion
    trillion half single dozen twice double triple""".split()
)
_MONTHS = frozenset(
    """january february march april may june july august september october november december
    jan feb mar apr jun jul aug sep sept oct nov dec""".split()
)
_YEAR = re.compile(r"(?:19|20)\d\d")
_TIME_UNITS = frozenset("y yr yrs year years month months week weeks day days d h hour hours ago century centuries "
                        "decade decades".split())
# Words that open a number phrase ("over 300", "between 100 and 840") or join two numbers ("1250 to 1750").
_NUMBER_LEAD = frozenset("over about approximately nearly around almost more less greater fewer than at least most "
                         "between only roughly up under above below exceeding".split())
_NUMBER_JOIN = frozenset("to and or - – from".split())
# A span never starts with these or ends with these (unmatched brackets, a dangling comma).
_OPENERS, _CLOSERS = "([{", ")]}"


def _core(word: str) -> str:
    """``word`` lower-cased without its leading and trailing punctuation."""
    return _EDGE_PUNCTUATION.sub("", word).lower()


@lru_cache(maxsize=50_000)
def _index_terms(word: str) -> tuple[str, ...]:
    return tuple(tokenize(word))


def _kind(word: str, asked: frozenset[str]) -> str:
    """``"asked"`` (every index term is one of the question's), ``"function"`` or ``"content"``."""
    core = _core(word)
    if not core or core in FUNCTION_WORDS:
        return "function" if core not in NEGATIONS else "content"
    if core in NEGATIONS:
        return "content"
    terms = _index_terms(word)
    if not terms:
        return "function"
    return "asked" if all(t in asked for t in terms) else "content"


class _Words:
    """The words of a sentence (whitespace-separated, with offsets) and what each is for the question."""

    def __init__(self, question: str, text: str) -> None:
        self.text = text
        self.asked = frozenset(tokenize(question))
        self.spans = [(m.start(), m.end()) for m in _WORD.finditer(text)]
        self.words = [text[s:e] for s, e in self.spans]
        references = [(m.start(), m.end()) for m in _REFERENCE.finditer(text)]
        self.reference = [any(s < re_ and rs < e for rs, re_ in references) for s, e in self.spans]
        self.kinds = [_kind(w, self.asked) for w in self.words]

    def __len__(self) -> int:
        return len(self.spans)

    def content(self, lo: int, hi: int) -> int:
        """Content words in words ``[lo, hi)``, references and negations not counted."""
        return sum(self.kinds[i] == "content" and not self.reference[i] and _core(self.words[i]) not in NEGATIONS
                   for i in range(lo, hi))


def _without_labels(words: _Words) -> int:
    """The first word after the sentence's last leading label (0 when there is none), so that at least one
    content word follows."""
    start = 0
    for i, word in enumerate(words.words[:-1]):
        # leading: only the label's own upper-case words precede it ("BACKGROUND AND AIM:"), not a clause
        # ("337.1 (95% CI: 254.1-420.0)" has no label)
        leading = all(w.isupper() for w in words.words[start:i])
        if _LABEL.match(word) and leading and words.content(i + 1, len(words)) >= 1:
            start = i + 1
    return start


def trimmed(words: _Words, lo: int, hi: int) -> tuple[int, int]:
    """Words ``[lo, hi)`` without the restating, function and reference words at either end (rules 1-2 of the
    module docstring); ``(lo, hi)`` itself when no content word would remain."""
    a, b, cut = lo, hi, lo
    restated = False
    while a < b and (words.reference[a] or words.kinds[a] != "content"):
        restated = restated or words.kinds[a] == "asked"
        if words.reference[a] or words.words[a].endswith((",", ";", ":")):
            cut = a + 1  # a clause boundary
        a += 1
    if not restated:
        a = cut  # only function words: they lead into the first content word ("On average", "In this study")
    while b > a and (words.reference[b - 1] or words.kinds[b - 1] != "content"):
        b -= 1
    return (a, b) if words.content(a, b) >= 1 else (lo, hi)


def _is_number(word: str, time: bool) -> bool:
    word = fold(word)  # LaTeX "12\\%" is "12%"
    core = _core(word)
    if time:
        return core in _MONTHS or bool(re.fullmatch(r"\d{1,4}s?", core))
    return core in _NUMBER_WORDS or bool(_NUMBER.fullmatch(word.strip(".,;:()[]{}")))


def _number_phrases(words: _Words, lo: int, hi: int, time: bool) -> list[tuple[int, int]]:
    """Word ranges of the number (or date) phrases in ``[lo, hi)``: runs of numbers joined by
    :data:`_NUMBER_JOIN` words, with their :data:`_NUMBER_LEAD` words."""
    out: list[tuple[int, int]] = []
    w = words.words
    i = lo
    while i < hi:
        if not _is_number(w[i], time) or words.reference[i]:
            i += 1
            continue
        j = i + 1
        while j < hi:
            if _is_number(w[j], time) and not words.reference[j] and not w[j - 1].endswith((",", ";", ":")):
                j += 1
            elif (_core(w[j]) in _NUMBER_JOIN and j + 1 < hi and _is_number(w[j + 1], time)
                  and not w[j - 1].endswith((",", ";", ":"))):
                j += 2
            else:
                break
        a = i
        while a > lo and _core(w[a - 1]) in _NUMBER_LEAD and not w[a - 1].endswith((",", ";", ":")):
            a -= 1
        out.append((a, j))
        i = j
    return out


def quantity_phrase(question: str, words: _Words, lo: int, hi: int) -> tuple[int, int] | None:
    """The word range answering a quantity or time question within ``[lo, hi)`` (rule 3 of the module
    docstring), or ``None`` when the question asks for neither or the range holds no number phrase or several."""
    time = bool(_TIME_QUESTION.search(question)) and not _QUANTITY_QUESTION.search(question)
    if not time and not _QUANTITY_QUESTION.search(question):
        return None
    stated = {_core(w) for w in question.split()}
    candidates = []
    for a, b in _number_phrases(words, lo, hi, time):
        numbers = [_core(w) for w in words.words[a:b] if _is_number(w, time)]
        if any(n in stated for n in numbers):
            continue  # the question's own number
        if not time and all(_YEAR.fullmatch(n) for n in numbers):
            continue  # a year, not a count
        if time and not any(n in _MONTHS or re.fullmatch(r"\d{4}s?", n) for n in numbers) and not (
                b < len(words) and _core(words.words[b]) in _TIME_UNITS):
            continue  # a time is a date, a year or a duration ("2 (SARS-CoV-2)" is none)
        candidates.append((a, b))
    if not time and _PERCENT_QUESTION.search(question):
        candidates = [c for c in candidates if "%" in fold(" ".join(words.words[c[0]:c[1]]))] or candidates
    if len(candidates) != 1:
        return None  # none, or several: which one answers is not known, and the trimmed span holds them all
    a, b = candidates[0]
    if (b < len(words) and words.kinds[b] == "asked" and not words.reference[b] and not _is_number(words.words[b], time)
            and not words.words[b - 1].endswith((",", ";", ":"))):
        b += 1  # the unit the question names: "31 cases"
    return a, b


def _tidy(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` without unmatched brackets and dangling punctuation at its ends (never empty)."""
    s, e = start, end
    while e - s > 1:
        piece = text[s:e]
        if piece[-1] in ",;:" or (piece[-1] in _CLOSERS and piece.count(piece[-1]) > piece.count(
                _OPENERS[_CLOSERS.index(piece[-1])])):
            e -= 1
        elif piece[0] in _OPENERS and piece.count(piece[0]) > piece.count(_CLOSERS[_OPENERS.index(piece[0])]):
            s += 1
        else:
            break
    return s, e


_DOLLAR = re.compile(r"(?<!\\)\$")


def _whole_formulas(text: str, start: int, end: int) -> tuple[int, int]:
    """``[start, end)`` widened so that it cuts no inline ``$...$`` formula of ``text``."""
    dollars = [m.start() for m in _DOLLAR.finditer(text)]
    for opening, closing in zip(dollars[::2], dollars[1::2]):
        if opening < start <= closing:
            start = opening
        if opening < end <= closing:
            end = closing + 1
    return start, end


def answer_span(question: str, text: str, quantities: bool = True) -> tuple[int, int]:
    """The part of the evidence sentence ``text`` that answers ``question``, as offsets ``[start, end)`` into
    ``text`` (module docstring): never empty; ``(0, len(text))`` when nothing can be cut.

    Args:
        quantities: answer quantity and time questions with their number phrase (rule 3).

    >>> text = "Shandong province has a population of 94 million."
    >>> s, e = answer_span("What is the population of Shandong province?", text); text[s:e]
    '94 million.'
    >>> text = "Among others, the heparan sulfates in the membrane proteins mediate the broad, but less specific, "
    >>> text += "virus-cell interaction."
    >>> s, e = answer_span("What regulates the broad, but less specific, virus-cell interaction?", text); text[s:e]
    'the heparan sulfates in the membrane proteins mediate'
    """
    words = _Words(question, text)
    if not words.spans:
        return 0, len(text)
    lo, hi = trimmed(words, _without_labels(words), len(words))
    if quantities and (phrase := quantity_phrase(question, words, lo, hi)) is not None:
        lo, hi = phrase
    return _whole_formulas(text, *_tidy(text, words.spans[lo][0], words.spans[hi - 1][1]))
