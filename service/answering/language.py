"""The English language data answering relies on, in one place: closed-class words, question words, the
openings a written answer may not start with, and the patterns of numbers and citation markers.

Every list here is a closed class of English (function words, auxiliaries, pronouns) or a pattern of written
notation (numbers, ``[n]`` markers); none names a topic, a paper or a question.
"""

from __future__ import annotations

import re

from citerag.index.tokenize import STOPWORDS

#: Negations and limiters: they carry an answer's polarity, so they are never dropped as function words.
NEGATIONS: frozenset[str] = frozenset("not no without never none nor neither cannot only".split())

#: Closed-class English words (articles, pronouns, prepositions, auxiliaries, conjunctions, quantifiers, discourse
#: adverbs) plus the index's stop words (bm25s's English list, as used for BEIR), negations excepted.
FUNCTION_WORDS: frozenset[str] = (
    frozenset(
        """a an the this that these those there their its it itself they them themselves we our us he she his her i
        you your one ones
        of in on at by for from with into onto to as than about among between within through over under after
        before during via per against across upon toward towards
        is are was were be been being has have had do does did doing done can could may might will would should
        shall must having
        and or but so yet also both either which who whom whose what when where why how while whereas although
        though because since if then thus hence however therefore moreover furthermore additionally indeed
        such other others another some any all each every many much more most less few several""".split()
    )
    | STOPWORDS
) - NEGATIONS

#: Auxiliary verbs that open a polar (yes/no) question.
AUXILIARIES = (
    "is are was were do does did can could has have had will would should may might must shall"
).split()
WH_WORDS = "what which who whom whose when where why how".split()
#: Verbs that open a request phrased as a command ("List the ...", "Compare ...").
IMPERATIVES = "list name give show find describe explain summarise summarize compare tell identify state".split()

#: Comparative adjectives and adverbs of degree: "How much faster ...?" asks for a degree, not for an amount of a
#: counted thing ("How many more GPUs ...?" counts GPUs: "more", "fewer" and "less" are skipped, not comparatives here).
COMPARATIVES = frozenset(
    "faster slower quicker larger smaller bigger greater higher lower longer shorter better worse cheaper "
    "stronger weaker earlier later wider narrower deeper shallower heavier lighter denser sparser".split()
)

#: Words that open a list of examples ("crops like wheat or barley", "such as A or B"): an "or" inside
#: such a list joins examples of one thing, not alternatives to choose between. "like" counts after a plural noun
#: only ("functions like"): after a verb it compares ("Does it behave like A or B?").
EXAMPLE_LIST = re.compile(r"(?:\b\w{3,}s like|\bsuch as|\be\.g\.|\bincluding|\bfor (?:example|instance))\s",
                          re.IGNORECASE)

#: Words for the thing a paper is about: "the method", "our model", "this paper" refer to it.
RESEARCH_NOUNS = frozenset(
    """method methods model models paper papers approach approaches work framework frameworks algorithm algorithms
    technique techniques study studies system systems architecture architectures benchmark benchmarks dataset
    datasets authors analysis results result experiments findings proposal idea tool network networks procedure
    pipeline strategy""".split()
)

#: The stock phrases that lead into an abstract's unnamed subject ("In this work, we ...", "To this end, we ...").
STOCK_LEAD = (r"(?:in|with|through) (?:this|our|the present) (?:work|paper|study|article|research),?\s+"
              r"|here,?\s+|to (?:this|that) end,?\s+")
#: Any other short lead clause before a comma ("To address these limits, we ..."); none holding a digit, so "At
#: 10% memory, we ..." keeps the lead that qualifies its number.
CLAUSE_LEAD = r"[^,.;:\d]{1,60},\s+"
#: Openings that do not name their subject: a written sentence may not start with one.
PRONOUN_OPENING = re.compile(
    rf"^\s*(?:{STOCK_LEAD}|{CLAUSE_LEAD})?(?:we|our|us|this|these|those|it|its|they|their|here)\b",
    re.IGNORECASE,
)

#: A number as written: digits with separators and decimals, an optional sign, range, percent or multiplier.
NUMBER = re.compile(r"(?<![\w.])[-+−]?\d+(?:[.,]\d+)*(?:\s?[%‰]|×|x(?![a-z]))?", re.IGNORECASE)
#: A citation marker: ``[2]``, ``[1, 3]``, ``[1][3]`` (each bracket separately), ``[1-3]`` (a range).
CITATION_MARKER = re.compile(r"\[\s*(\d{1,3}(?:\s*(?:[,;]|[-–])\s*\d{1,3})*)\s*\]")


def marker_numbers(marker_body: str) -> list[int]:
    """The numbers a marker's body stands for: ``"1, 3"`` -> ``[1, 3]``, ``"2-4"`` -> ``[2, 3, 4]``.

    >>> marker_numbers("1, 3"), marker_numbers("2-4")
    ([1, 3], [2, 3, 4])
    """
    out: list[int] = []
    for part in re.split(r"\s*[,;]\s*", marker_body.strip()):
        bounds = re.split(r"\s*[-–]\s*", part)
        if len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit() and int(bounds[0]) <= int(bounds[1]):
            out += range(int(bounds[0]), min(int(bounds[1]), int(bounds[0]) + 20) + 1)
        elif part.isdigit():
            out.append(int(part))
    return out


def number_values(text: str) -> list[str]:
    """The numbers ``text`` states, each as its digits and decimal point only (``"1,318"`` -> ``"1318"``,
    ``"80.6%"`` -> ``"80.6"``), in order: what must stay unaltered when an answer restates the text.

    >>> number_values("The kiln reaches 80.6% at p95 = 73.7s, 1,318 s for the old one [2].")
    ['80.6', '73.7', '1318']
    """
    text = CITATION_MARKER.sub(" ", text)
    values = []
    for match in NUMBER.finditer(text):
        digits = re.sub(r"[^\d.,]", "", match.group(0))
        # "1,318" is one thousand three hundred and eighteen; "0,5" (a decimal comma) is rare in English abstracts
        value = re.sub(r",(?=\d{3}(?!\d))", "", digits).replace(",", ".").rstrip(".")
        if value:
            values.append(value)
    return values


#: Cardinal numbers written as words, and their values: a number written either way states it.
NUMBER_WORDS: dict[str, int] = {word: value for value, word in enumerate(
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty".split())} | {
    word: 10 * tens for tens, word in enumerate("thirty forty fifty sixty seventy eighty ninety".split(), start=3)
} | {"twice": 2, "thrice": 3}
#: Words that multiply the number before them ("sixty thousand", "3 million").
MULTIPLIERS: dict[str, int] = {"hundred": 100, "thousand": 1000, "million": 10**6, "billion": 10**9}
_NUMBER_RUN = re.compile(
    rf"(?:\d+(?:\.\d+)?|\b(?:{'|'.join(NUMBER_WORDS)})\b)(?:[\s-]+(?:{'|'.join(NUMBER_WORDS)}|{'|'.join(MULTIPLIERS)})\b)*"
    rf"|\b(?:{'|'.join(MULTIPLIERS)})\b",
    re.IGNORECASE,
)


def _run_value(run: str) -> float | None:
    """The value of a run of number words and digits ("sixty thousand" -> 60000, "twenty five" -> 25)."""
    total, current = 0.0, 0.0
    for word in re.split(r"[\s-]+", run.lower().strip()):
        if word in MULTIPLIERS:
            current = (current or 1) * MULTIPLIERS[word]
            if MULTIPLIERS[word] >= 1000:
                total, current = total + current, 0.0
        elif word in NUMBER_WORDS:
            current += NUMBER_WORDS[word]
        else:
            try:
                current += float(word)
            except ValueError:
                return None
    return total + current


def stated_numbers(text: str) -> set[str]:
    """Every number ``text`` states, in digits (:func:`number_values`) or in words, alone or with a multiplier
    (:data:`NUMBER_WORDS`, :data:`MULTIPLIERS`: "three" states 3, "sixty thousand" 60000, "3 million" 3000000).

    >>> sorted(stated_numbers("Three kilns burn 40% less wood, twice as long."))
    ['2', '3', '40']
    >>> sorted(stated_numbers("A vocabulary of sixty thousand words and 3 million tokens."))
    ['3', '3000000', '60000']
    """
    stated = set(number_values(text))
    for match in _NUMBER_RUN.finditer(text.replace(",", "")):
        value = _run_value(match.group(0))
        if value is not None:
            stated.add(f"{value:g}" if value < 1e15 and value != int(value) else str(int(value)))
    return stated
