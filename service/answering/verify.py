"""The verify step: every sentence the model wrote is given the sentences of the papers read that support it, so
that a citation points at the sentence that says the thing, by construction.

The model writes without citations; a written sentence rests on the read sentences that cover it best
(:func:`sources`: the single best one, or the best pair when no single sentence covers it). Sources *support* a
sentence (:func:`check`) when

* every number it states is stated by them or by the question, digit for digit (the rule ``numbers``);
* at least :attr:`~citerag.service.answering.config.AnswerConfig.min_support` of the content words it adds to the
  question are in them or in the papers' labels (the rule ``support``): the model may join the paper's words with
  its own, not bring new ones.

A sentence no source supports is dropped. When no written sentence survives, the answer is the read sentence most
like the first one the model wrote (the rule ``extract``; off: the service abstains). A sentence whose opening does
not name its subject ("We ...", "In this work, we ...", "This method ...") is given one (:func:`named`: the rule
``name_subject``), and one that only frames its statement ("According to the paper, X") keeps the statement.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from citerag.index.text import readable, split_sentences
from citerag.index.tokenize import tokenize
from citerag.service.answering.config import AnswerConfig
from citerag.service.answering.language import (
    CITATION_MARKER,
    CLAUSE_LEAD,
    FUNCTION_WORDS,
    STOCK_LEAD,
    RESEARCH_NOUNS,
    marker_numbers,
    number_values,
    stated_numbers,
)
from citerag.service.answering.names import subject_label
from citerag.service.answering.papers import word_count
from citerag.service.answering.types import Evidence, Statement, Trace

_WORD = re.compile(r"[^\W_]+(?:[-–][^\W_]+)*")
#: A term this long is held by a longer word it begins ("data" by "dataset"; BM25's stems do not join a word and
#: its compounds or derivations).
MIN_PREFIX_CHARS = 4
#: A frame that attributes a statement to the text read instead of saying it: "According to the paper, X", "The
#: paper states that X", "Sentence [2] says that X" (markers already removed). What follows is the statement.
_FRAME = re.compile(
    r"^(?:according to (?:the )?(?:paper|abstract|study|text|sentences?|evidence)[^,]{0,40},\s*"
    r"|(?:it|(?:the )?(?:paper|abstract|study|text|sentences?|evidence)(?:'s (?:results|findings))?)\s+"
    r"(?:states?|says?|mentions?|shows?|reports?|notes?|concludes?|suggests?|indicates?|finds?|answers the question "
    r"by (?:showing|stating|saying|noting|reporting|explaining))\s+that\s+)",
    re.IGNORECASE,
)
#: An opening that does not name its subject (:data:`~citerag.service.answering.language.PRONOUN_OPENING`): a
#: stock lead ("In this work, ") or another short lead clause, then a pronoun or a demonstrative.
_OPENING = re.compile(rf"^(?P<lead>{STOCK_LEAD}|{CLAUSE_LEAD})?(?P<pronoun>we|our|us|this|these|those|it|its|they|"
                      r"their|here)\b,?", re.IGNORECASE)
#: What each opening pronoun becomes: the authors for the first person, "the" for a demonstrative ("This method"
#: -> "The method"), the paper's label for "it"/"its".
_NAMED = {"we": "the authors", "us": "the authors", "our": "the authors'", "they": "the authors",
          "their": "the authors'", "this": "the", "these": "the", "those": "the"}
def holds(term: str, tokens: set[str], min_chars: int = MIN_PREFIX_CHARS) -> bool:
    """Whether ``tokens`` (BM25 stems) hold ``term``: the stem itself, or, when it has ``min_chars`` letters or
    more, a stem it begins.

    >>> holds("data", {"dataset", "strings"}), holds("use", {"user"})
    (True, False)
    """
    return term in tokens or (len(term) >= min_chars and any(token.startswith(term) for token in tokens))


#: Words any paper's summary may use without its text saying them ("the paper", "the method"): no support needed.
GENERIC_TERMS = frozenset(t for noun in RESEARCH_NOUNS for t in tokenize(noun))


def content_tokens(text: str) -> set[str]:
    """The BM25 terms of ``text``'s content words (function words left out).

    >>> sorted(content_tokens("The seeds were kept in a cold bank."))
    ['bank', 'cold', 'kept', 'seed']
    """
    return {t for word in _WORD.findall(text) if word.lower() not in FUNCTION_WORDS for t in tokenize(word)}


def coverage(sentence: str, sources: Sequence[str], question: str = "", labels: Sequence[str] = ()) -> float:
    """The share of ``sentence``'s content terms that are neither the question's nor generic
    (:data:`GENERIC_TERMS`) and that ``sources`` or ``labels`` hold; for a sentence that only restates the question,
    of all its content terms (1.0 when it has none).

    >>> coverage("Seed banks keep seeds at -20 C", ["Banks keep seeds cold, at -20 C."])
    1.0
    >>> coverage("Seed banks keep seeds in orbit", ["Banks keep seeds cold."])
    0.75
    >>> coverage("Yes, seed banks keep seeds", ["Rain falls."], "Do seed banks keep seeds?")
    0.0
    """
    terms = content_tokens(sentence) - content_tokens(question) - GENERIC_TERMS
    if not terms:  # it restates the question: its sources must state what it restates
        terms = content_tokens(sentence) - GENERIC_TERMS
    if not terms:
        return 1.0
    held = set().union(*(content_tokens(text) for text in [*sources, *labels]))
    return sum(holds(term, held) for term in terms) / len(terms)


def missing_numbers(sentence: str, sources: Sequence[str], question: str = "") -> list[str]:
    """The numbers ``sentence`` states that neither ``sources`` nor ``question`` state (digit for digit).

    >>> missing_numbers("It keeps 80.6% of seeds for 12 years", ["Banks keep 80.6% of seeds."])
    ['12']
    >>> missing_numbers("3", ["Seeds were kept in three banks."])
    []
    """
    stated = set().union(*(stated_numbers(text) for text in [*sources, question]))
    return [value for value in dict.fromkeys(number_values(sentence)) if value not in stated]


def check(sentence: str, sources: Sequence[str], config: AnswerConfig, question: str = "",
          labels: Sequence[str] = ()) -> bool:
    """Whether ``sources`` (readable sentences) support ``sentence`` (readable, no markers) for ``question``
    (module docstring), with the rules ``config`` switches on."""
    rules = config.rules
    if rules.numbers and missing_numbers(sentence, sources, question):
        return False
    return not rules.support or coverage(sentence, sources, question, labels) >= config.min_support


def sources(sentence: str, sentences: Sequence[str], config: AnswerConfig, question: str = "",
            labels: Sequence[str] = ()) -> tuple[int, ...]:
    """The read sentences that support ``sentence`` (:func:`check`): the single one that covers it best, else the
    best pair (the best single one and the one that adds most to it); ``()`` when none does.

    >>> read = ["Seed banks store seeds at -20 C.", "Stored seeds stay viable for decades.", "Rain falls."]
    >>> config = AnswerConfig()
    >>> sources("Seed banks store seeds at -20 C", read, config)
    (0,)
    >>> sources("Seeds stored at -20 C stay viable for decades", read, config)
    (0, 1)
    >>> sources("Seeds last a century", read, config)
    ()
    """
    if not sentences:
        return ()
    scores = [coverage(sentence, [source], question, labels) for source in sentences]
    order = sorted(range(len(sentences)), key=lambda i: (-scores[i], i))
    for i in order:
        if scores[i] < scores[order[0]]:
            break
        if check(sentence, [sentences[i]], config, question, labels):
            return (i,)
    first = order[0]
    pairs = sorted((j for j in range(len(sentences)) if j != first),
                   key=lambda j: (-coverage(sentence, [sentences[first], sentences[j]], question, labels), j))
    for j in pairs[:3]:
        if check(sentence, [sentences[first], sentences[j]], config, question, labels):
            return tuple(sorted((first, j)))
    return ()


def closest(sentence: str, sentences: Sequence[str], question: str = "") -> int:
    """The index of the read sentence that covers most of what ``sentence`` adds to ``question``
    (:func:`coverage`), then shares most of its content terms (the first among equals).

    >>> read = ["Seed banks are common.", "Seed banks store seeds cold, at -20 C."]
    >>> closest("Seed banks keep seeds at -20 C", read, "Where do seed banks keep seeds?")
    1
    """
    terms = content_tokens(sentence)
    scores = [(coverage(sentence, [source], question), len(terms & content_tokens(source))) for source in sentences]
    return max(range(len(sentences)), key=lambda i: (*scores[i], -i))


#: A written answer of at most this many words is a bare value ("3", "TACRED", "a gamma process"): it is shown in
#: the read sentence that states it.
BARE_WORDS = 3


def stating(value: str, sentences: Sequence[str], question: str = "") -> int | None:
    """The read sentence that states a bare answer ``value``: it holds every number of it (in digits or words) and
    all its content terms, and, among those, shares most of the question's terms; ``None`` when none does.

    >>> read = ["Seeds keep.", "We test three seed banks.", "Banks keep seeds at -20 C."]
    >>> stating("3", read, "How many seed banks were tested?"), stating("-20 C", read), stating("7", read)
    (1, 2, None)
    """
    numbers = number_values(value)
    terms = {t for t in content_tokens(value) if not re.fullmatch(r"[\d.]+", t)}  # numbers are checked as numbers
    asked = content_tokens(question)
    held = [i for i, source in enumerate(sentences)
            if set(numbers) <= stated_numbers(source) and all(holds(t, content_tokens(source)) for t in terms)]
    return max(held, key=lambda i: (len(asked & content_tokens(sentences[i])), -i), default=None)


def written_sentences(text: str, truncated: bool) -> list[tuple[str, list[int]]]:
    """The model's sentences as ``(text without markers, cited sentence numbers)``; a last sentence cut by the
    token limit (``truncated``) is left out, as is one that is only a decision word.

    >>> written_sentences("Banks keep seeds [1]. They last [2, 3]. Yes.", False)
    [('Banks keep seeds.', [1]), ('They last.', [2, 3])]
    """
    out = []
    spans = split_sentences(text)
    if truncated and spans and not re.search(r"[.!?\]]\s*$", text[spans[-1][0]:spans[-1][1]]):
        spans = spans[:-1]
    for start, end in spans:
        raw = text[start:end]
        cited = [n for match in CITATION_MARKER.finditer(raw) for n in marker_numbers(match.group(1))]
        bare = re.sub(r"\s+([.,;:!?])", r"\1", CITATION_MARKER.sub("", raw)).strip()
        if re.fullmatch(r"\W*(?:yes|no|maybe)\W*", bare, re.IGNORECASE) or not re.search(r"\w", bare):
            continue
        out.append((bare, cited))
    return out


def named(sentence: str, label: str | None = None) -> str:
    """``sentence`` with an opening that does not name its subject (:data:`_OPENING`) named: a stock lead ("In this
    work, ") dropped, "we"/"our" as the authors ("The authors ...", "The authors' ..."; the verb stays plural, so it
    agrees), a demonstrative as "the" ("This method" -> "The method"), "it"/"its" as ``label`` (the paper's name;
    without one, "the paper"). Other sentences are returned as they are.

    >>> named("We keep seeds in foil"), named("In this work, we keep seeds"), named("This method keeps seeds")
    ('The authors keep seeds in foil', 'The authors keep seeds', 'The method keeps seeds')
    >>> named("It keeps 90% of seeds", "FrostVault"), named("To save heat, we loop the flue"), named("Seeds keep")
    ('FrostVault keeps 90% of seeds', 'To save heat, the authors loop the flue', 'Seeds keep')
    """
    match = _OPENING.match(sentence)
    if match is None:
        return sentence
    pronoun = match.group("pronoun").lower()
    lead = match.group("lead") or ""
    if re.fullmatch(STOCK_LEAD, lead, re.IGNORECASE):
        lead = ""
    if pronoun == "here":
        rest = sentence[match.end():].lstrip(" ,")
        return named(f"{lead}{rest}", label) if rest else sentence
    word = _NAMED.get(pronoun) or (f"{label}'s" if pronoun == "its" and label else label) or (
        "the paper's" if pronoun == "its" else "the paper")
    text = f"{lead}{word}{sentence[match.end('pronoun'):]}"
    return text[:1].upper() + text[1:]


def unframed(sentence: str) -> str:
    """``sentence`` without a frame that attributes it to the text read (module docstring).

    >>> unframed("According to the paper, seeds keep."), unframed("The paper's results conclude that seeds keep.")
    ('Seeds keep.', 'Seeds keep.')
    >>> unframed("The paper answers the question by showing that seeds keep.")
    'Seeds keep.'
    """
    rest = _FRAME.sub("", sentence, count=1)
    return rest[:1].upper() + rest[1:] if rest != sentence else sentence


def verify(written: str, truncated: bool, sentences: Sequence[Evidence], config: AnswerConfig, trace: Trace,
           question: str = "", labels: Sequence[str] = ()) -> list[Statement]:
    """The checked statements of the model's ``written`` text over the read ``sentences`` (module docstring), at
    most ``config.max_sentences``; ``[]`` when nothing is supported and the rule ``extract`` is off (or nothing was
    written)."""
    texts = [readable(s.text) for s in sentences]
    statements: list[Statement] = []
    first = None
    for text, _ in written_sentences(written, truncated):
        text = readable(unframed(text)).rstrip(" .;:,")
        first = first or text
        if word_count(text) <= BARE_WORDS and (index := stating(text, texts, question)) is not None:
            statements.append(extracted(index, sentences, config, trace))  # a bare value, in its sentence
        elif found := sources(text, texts, config, question, labels):
            statements.append(Statement(_named(text, sentences[found[0]], config, trace), found))
        else:
            trace.acted("numbers" if missing_numbers(text, texts, question) else "support")
        if len(statements) == config.max_sentences:
            break
    if statements or not sentences or not written.strip():
        return statements
    if not config.rules.extract:
        return []
    trace.acted("extract")
    return [extracted(closest(first or written, texts, question), sentences, config, trace)]


def extracted(index: int, sentences: Sequence[Evidence], config: AnswerConfig, trace: Trace) -> Statement:
    """The read sentence ``sentences[index]`` as a statement of the answer (``origin="extract"``): readable, its
    opening named (:func:`named`, the rule ``name_subject``)."""
    text = readable(sentences[index].text).rstrip(" .;:,")
    return Statement(_named(text, sentences[index], config, trace), (index,), "extract")


def _named(text: str, source: Evidence, config: AnswerConfig, trace: Trace) -> str:
    """``text`` :func:`named` with its source's paper's name, where the rule ``name_subject`` is on."""
    if not config.rules.name_subject:
        return text
    done = named(text, subject_label(source.result.document))
    if done != text:
        trace.acted("name_subject")
    return done
