"""What papers and questions call things: the name an abstract coins for its method (:func:`coined_name`), the
name-shaped tokens of a text (:func:`names_in`), the label an answer gives a paper (:func:`paper_label`), and the
retrieved documents a question names (:func:`named_documents`).

The corpus's abstracts have no titles, so the name an abstract introduces ("We propose QK-Vault, a ...") is what a
reader calls the paper. A name-shaped token is one with a capital after its first letter or a digit (``TERRA``,
``QK-Vault``, ``GP-SeedNet``, ``V₁``, ``QX-1``); whether it is *the paper's* name is decided by where it stands: set
off as a name (before a comma, a bracket or a colon, or after "called"), not used as a modifier of the next word
("a VLA model", "the KV cache").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache

from citerag.index.search import SearchResult
from citerag.index.text import fold, readable
from citerag.index.types import Document
from citerag.service.answering.language import FUNCTION_WORDS, RESEARCH_NOUNS

# A name-shaped token: a capital after its first letter or a digit, possibly hyphenated (TERRA, QK-Vault, V1, QX-1).
_NAME = r"[A-Za-z][\w]*(?:[-–][\w]+)*"
_COINED = re.compile(rf"(?<![\w-])(?=[\w-]*?[A-Za-z][\w-]*?[A-Z0-9\u2080-\u2089])({_NAME})(?![\w-])")
_INTRODUCED = re.compile(
    r"\b(?:we|this (?:paper|work)|here)\s+(?:\w+\s+){0,4}?(?:propos|introduc|present|develop|design|call|name|dub|"
    r"term|establish|construct|build|release|creat)\w*\b([^.;:]{0,120})|\b(?:called|named|dubbed|termed)\s+([^.;:]{0,60})",
    re.IGNORECASE,
)
# A capitalised word right after the introducing verb and set off as a name ("we propose Quill (", "We introduce
# Vesta, a ..."), or a run of two or more capitalised words there ("we introduce the Tidal Transformer to ...").
_INTRODUCED_WORD = re.compile(
    r"^\s*(?:the |our |an? )?([A-Z][a-z]{2,}(?=\s*[,(:]|\s+an?\s)|[A-Z][\w-]+(?:\s+[A-Z][\w-]+)+)"
)
# What follows a token used as a modifier, not a name: a lower-case word ("VLA model", "KV cache", "LLM-based").
_NEXT_WORD = re.compile(r"^(?:[-–]|\s+)([a-z]\w*)")
# A name after a preposition is one the paper uses, not one it coins ("we build new test sets for the CIFAR-10
# and ImageNet datasets", "we present a family of classes with VCD(C) = 3k").
_PREPOSITION_BEFORE = re.compile(
    r"\b(?:for|on|of|to|in|with|from|over|across|than|by|at|into|between|against|under|via|using)\s+"
    r"(?:(?:the|a|an)\s+)?$",
    re.IGNORECASE,
)
# A name the abstract calls its own: "our PolyKiln models", "our QX-1 framework", "our V1.".
_OUR_NAME = re.compile(
    rf"\bour\s+(?=[\w-]*?[A-Za-z][\w-]*?[A-Z0-9])({_NAME})(?=\s+(?:{'|'.join(sorted(RESEARCH_NOUNS))})\b|[,.;:)])"
)
# A plural acronym is a common noun ("LLMs", "GPUs", "MLPs"), not a coined name.
_PLURAL_ACRONYM = re.compile(r"[A-Z]{2,}s")


def _modifier(following: str) -> bool:
    """Whether a token followed by ``following`` modifies the next word: a lower-case content word follows."""
    word = _NEXT_WORD.match(following)
    return word is not None and word.group(1) not in FUNCTION_WORDS


def _own_part(candidate: str) -> bool:
    """A name-shaped token with a part of its own: more than one character, and not one capitalised part plus
    lower-case words ("LLM-free")."""
    parts = re.split(r"[-–]", candidate)
    return len(candidate) > 1 and bool(_COINED.fullmatch(candidate)) and any(not p.islower() for p in parts) \
        and not _PLURAL_ACRONYM.fullmatch(candidate) \
        and not (len(parts) > 1 and sum(not p.islower() for p in parts) == 1 and not parts[-1][:1].isupper()
                 and not parts[-1].isdigit())


@lru_cache(maxsize=4096)
def coined_name(text: str) -> str | None:
    """The name an abstract coins for its method, model or benchmark, or ``None``: in the words after "we propose
    / introduce / present ..." or "called / named ...", an abbreviation in brackets ("... Kiln Firing Optimization
    (KFO)"),
    else the first name-shaped token not used as a modifier of the next word nor after a preposition, else a
    capitalised word set off as a name ("we propose Quill (...)"); else a name it calls its own ("our PolyKiln
    models").

    >>> coined_name("Long contexts are costly. We propose QK-Vault, a KV cache eviction method.")
    'QK-Vault'
    >>> coined_name("We introduce a VLA model, QX-1, trained on many robots.")
    'QX-1'
    >>> coined_name("To resolve this, we introduce the Tidal Transformer to keep the cost.")
    'Tidal Transformer'
    >>> coined_name("We build new test sets for the CIFAR-10 and ImageNet datasets.") is None
    True
    >>> coined_name("Within KilnFormer, our PolyKiln models match activation-based ones.")
    'PolyKiln'
    >>> coined_name("our GPU kernels") is None
    True
    >>> coined_name("This paper introduces Furrow Scoring, a framework grounded in the Soil Under Plant "
    ...             "Irrigation (SUPI) paradigm.")
    'Furrow Scoring'
    """
    folded = fold(text)
    for match in _INTRODUCED.finditer(folded):
        span = match.group(1) or match.group(2) or ""
        for abbreviation in re.finditer(r"\(([^()\s]+)\)", span):
            if _own_part(abbreviation.group(1)) and not _used_abbreviation(abbreviation.group(1), span):
                return abbreviation.group(1)
        for candidate in _COINED.finditer(span):
            if _own_part(candidate.group(1)) and not _modifier(span[candidate.end():]) \
                    and not _PREPOSITION_BEFORE.search(span[: candidate.start()]) \
                    and not _used_abbreviation(candidate.group(1), span):
                return candidate.group(1)
        if match.group(1) and (word := _INTRODUCED_WORD.match(match.group(1))):
            return word.group(1)
    for match in _OUR_NAME.finditer(folded):
        if _own_part(match.group(1)):
            return match.group(1)
    return None


def _used_abbreviation(short: str, span: str) -> bool:
    """Whether the abbreviation ``short`` in ``span`` is of something the paper uses, not coins: its long form
    (:func:`long_form`) comes after a preposition ("... grounded in the Soil Under Plant Irrigation (SUPI)
    paradigm")."""
    long = long_form(short, span)
    at = span.rfind(long, 0, span.find(f"({short})")) if long else -1
    return at > 0 and bool(_PREPOSITION_BEFORE.search(span[:at]))


def names_in(text: str) -> list[str]:
    """The name-shaped tokens of ``text`` in order (``V₁`` read as ``V1``), one-letter tokens and modifier-only
    compounds ("LLM-free") left out.

    >>> names_in("Does QK-Vault beat an LLM-free baseline on GPT-4 outputs?")
    ['QK-Vault', 'GPT-4']
    """
    return [candidate for candidate in _COINED.findall(fold(text)) if _own_part(candidate)]


#: A title's head before its colon is the paper's name when it has at most this many words ("FrostVault: Cold
#: Storage of Seeds", "Kiln Loops: ...").
MAX_TITLE_HEAD_WORDS = 4


def paper_names(document: Document) -> list[str]:
    """The names an answer may call ``document`` by: its title (readable), the title's head before a colon when
    short (:data:`MAX_TITLE_HEAD_WORDS`), and the name its abstract coins (:func:`coined_name`); ``[]`` when it
    has none of them.

    >>> paper_names(Document("d", "QK-Vault: Fast Eviction", "We propose QK-Vault, an eviction method.", "QK-Vault"))
    ['QK-Vault: Fast Eviction', 'QK-Vault']
    """
    title = readable(document.title).strip()
    names = [title, title_head(title), coined_name(document.text) or ""]
    return [name for name in dict.fromkeys(names) if name]


def title_head(title: str) -> str:
    """A title's head before its colon when it has at most :data:`MAX_TITLE_HEAD_WORDS` words (the paper's name:
    "QK-Vault" in "QK-Vault: Fast Eviction"), else ``""``."""
    head = title.split(": ", 1)[0] if ": " in title else ""
    return head if 0 < len(head.split()) <= MAX_TITLE_HEAD_WORDS else ""


def names_paper(text: str, document: Document, asked: Sequence[str] = ()) -> bool:
    """Whether ``text`` names ``document`` by one of :func:`paper_names` (case and accents folded), or by one of
    ``asked`` (the question's names, :func:`question_names`) that names the document (:func:`is_called`:
    "Root Growth Networks" for "Forecasting Harvests with Root Growth Networks") and ``text`` mentions
    as whole words; ``False`` for a document without a name."""
    folded = fold(text).lower()
    return any(fold(name).lower() in folded for name in paper_names(document)) or any(
        mentions(text, name) and is_called(document, name) for name in asked)


def paper_label(document: Document) -> str | None:
    """What an answer may call ``document``: its title (readable, brackets made round so they cannot read as
    citation markers) followed by the name its abstract coins when the title does not hold it ("Generating
    seed germination with graph neural networks (SeedGNN)"), else the coined name (:func:`coined_name`), else
    ``None``."""
    coined = coined_name(document.text)
    if document.title.strip():
        title = readable(document.title).replace("[", "(").replace("]", ")")
        return f"{title} ({coined})" if coined and coined.lower() not in fold(title).lower() else title
    return coined


def subject_label(document: Document) -> str | None:
    """What an answer's sentence calls ``document`` when it names it as its subject: the shortest of its names a
    reader knows it by. Its title's head before a colon when short (:data:`MAX_TITLE_HEAD_WORDS`: "Seed-Sort",
    "Kiln Loops"); else the name its abstract coins (:func:`coined_name`), unless the title uses that name among
    other words (then it names the topic, not the paper: "MCMC" in "Combining Kriging and MCMC"); else
    :func:`paper_label` (its title, or ``None``). A subject of twenty words
    ("Unsupervised Glaze-to-Colour Prediction with Adaptive Select Layer-Instance Normalization and Semi-cycle
    Consistency (Glaze-GAN) proposed ...") is not read as one.

    >>> subject_label(Document("d", "Glaze Colour Prediction with Semi-cycle Consistency",
    ...                        "We propose Glaze-GAN, a GAN.", ""))
    'Glaze-GAN'
    >>> subject_label(Document("d", "QK-Vault: Fast Eviction of Heads", "We propose QK-Vault.", "")), subject_label(
    ...     Document("d", "Combining Kriging and MCMC", "We combine Markov chain Monte Carlo (MCMC).", ""))
    ('QK-Vault', 'Combining Kriging and MCMC')
    """
    title = readable(document.title).strip().replace("[", "(").replace("]", ")")
    if head := title_head(title):
        return head
    coined = coined_name(document.text)
    if coined and fold(coined).lower() not in fold(title).lower():
        return coined
    return paper_label(document)


def long_form(short: str, text: str) -> str | None:
    """The long form that ``text`` defines for the abbreviation ``short`` ("Adaptive Seed Kalman Filter" in
    "... we propose Adaptive Seed Kalman Filter (ASKF), a ..."), or ``None`` when ``text`` does not define it.

    First the words right before it whose initials spell it, when there are as many as its letters; else Schwartz &
    Hearst (2003), "A simple algorithm for identifying abbreviation definitions in biomedical text": of
    the at most ``min(len(short) + 5, 2 * len(short))`` words before "(short)", the shortest run whose characters
    hold the abbreviation's letters and digits in order, its first one starting a word, and that does not hold the
    abbreviation itself as a word.

    >>> long_form("ASKF", "We propose Adaptive Seed Kalman Filter (ASKF), a parallel method.")
    'Adaptive Seed Kalman Filter'
    >>> long_form("KV", "the KV cache (KV) is large") is None
    True
    >>> long_form("DM", "We introduce Drip Mulching (DM), a technique.")  # the words whose initials spell it
    'Drip Mulching'
    """
    at = text.find(f"({short})")
    if at <= 0 or not any(c.isalnum() for c in short):
        return None
    words = text[:at].split()
    # the words right before it whose initials spell it ("Drip Mulching (DM)": the character match below
    # would take "Decoding" alone, whose D...d spell DD)
    initials = words[-len(short):] if short.isalpha() and 2 <= len(short) <= len(words) else []
    if initials and all(w[:1].lower() == c.lower() for w, c in zip(initials, short)) \
            and short.lower() not in (w.lower().strip(",;:") for w in initials):
        return " ".join(initials).strip(" ,;:")
    window = " ".join(words[-min(len(short) + 5, 2 * len(short)):])
    s, i = len(short) - 1, len(window) - 1
    while s >= 0:
        char = short[s].lower()
        if not char.isalnum():
            s -= 1
            continue
        while i >= 0 and (window[i].lower() != char or (s == 0 and i > 0 and window[i - 1].isalnum())):
            i -= 1
        if i < 0:
            return None
        i -= 1
        s -= 1
    found = window[window.rfind(" ", 0, i + 1) + 1:].strip(" ,;:")
    return found if len(found.split()) > 1 and short.lower() not in found.lower().split() else None


# A title or name the question quotes: 'Dissecting Mulch', "On the Drainage of Mulch and Beyond", ‘X’ (a quote
# not inside a word, so "Mulch's" opens none; capitalised, at most ~15 words).
_QUOTED = re.compile(r"""(?<!\w)['"‘“]([A-Z][^'"‘’“”?]{0,118}?)['"’”](?!\w)""")


def question_names(question: str) -> list[str]:
    """The names ``question`` mentions, in order: what it quotes ('On the Drainage of Mulch and Beyond'),
    name-shaped tokens (:func:`names_in`) and runs of two or more capitalised words after its first word ("Error
    Encoding Networks", "Critique Fine-Tuning"; a run ends at a full stop or a quote).

    >>> question_names("How do SG2P and Root Growth Networks each model uncertainty?")
    ['SG2P', 'Root Growth Networks']
    >>> question_names("Two papers: 'Dissecting Mulch' and 'On the Drainage of Mulch and Beyond'. What ...?")
    ['Dissecting Mulch', 'On the Drainage of Mulch and Beyond']
    """
    folded = fold(question)
    quoted = list(_QUOTED.finditer(folded))
    found = [(match.start(1), match.group(1).strip()) for match in quoted]
    for quote in reversed(quoted):  # the rest is read without the quoted titles
        folded = folded[: quote.start()] + " " * (quote.end() - quote.start()) + folded[quote.end():]
    found += [(folded.find(name), name) for name in dict.fromkeys(names_in(folded))]
    words = list(re.finditer(r"[^\s,;:?!()]+", folded))
    run: list[tuple[int, str]] = []  # (offset, word) of the capitalised words in a row
    opens = False  # the word opens a sentence: its capital says nothing
    for match in [*words[1:], None]:
        word = match.group(0).strip("'\"‘’“”") if match is not None else ""
        sentence_start, opens = opens, word.endswith(".")
        ends = opens or (match is not None and match.group(0)[-1] in "'\"’”")
        if match is not None and word[:1].isupper() and not word.isupper() and not sentence_start:
            run.append((match.start(), word.rstrip(".")))
            if not ends:
                continue
        if len(run) >= 2:
            found.append((run[0][0], " ".join(word for _, word in run)))
        run = []
    names: list[str] = []
    for _, name in sorted(found):
        if not any(name in other or other in name for other in names):
            names.append(name)
    return names


def _words(text: str) -> str:
    """``text`` folded, lower-cased, its runs of punctuation and space made one space: ``"Root-Growth  Nets"`` ->
    ``"root growth nets"``."""
    return re.sub(r"[\W_]+", " ", fold(text).lower()).strip()


def mentions(text: str, name: str) -> bool:
    """Whether ``text`` holds ``name`` as whole words, case, hyphens and punctuation ignored.

    >>> mentions("a Global Grain Filtering (GGF) strategy", "GGF"), mentions("GGFs and more", "GGF")
    (True, False)
    """
    return bool(re.search(rf"(?<!\w){re.escape(_words(name))}(?!\w)", _words(text)))


def is_called(document: Document, name: str) -> bool:
    """Whether ``name`` names ``document``: its title holds the name as whole words, or the name its abstract coins
    is the name (case, hyphens and punctuation ignored: :func:`mentions`)."""
    coined = coined_name(document.text)
    return mentions(document.title, name) or bool(coined and _words(coined) == _words(name))


def named_documents(names: Sequence[str], passages: Sequence[SearchResult]) -> list[str]:
    """The retrieved documents that ``names`` (a question's, :func:`question_names`) name, in the order named: a
    name names the best-ranked document called so, by its title (the name in it as whole words, case ignored) or
    by the name its abstract coins (or calls its own: "our PolyKiln models"), case, hyphens and punctuation
    ignored ("Root Growth Networks" names "Forecasting Harvests with Root-Growth Networks"). A name a
    paper only mentions ("TMV-2") names none.

    >>> from citerag.index.types import Document
    >>> doc = Document("d1", "Forecasting Harvests with Root-Growth Networks", "We predict frames.", "")
    >>> named_documents(["Root Growth Networks"], [SearchResult(1, None, doc, 1.0, 1, 1, 1.0, 0.5)])
    ['d1']
    >>> own = Document("d2", "", "Within KilnFormer, our PolyKiln models match TMV-2 rates.", "")
    >>> [named_documents([n], [SearchResult(1, None, own, 1.0, 1, 1, 1.0, 0.5)]) for n in ("PolyKiln", "TMV-2")]
    [['d2'], []]
    """
    docs: list[str] = []
    for name in names:
        for result in passages:
            document = result.document
            if is_called(document, name):
                if document.doc_id not in docs:
                    docs.append(document.doc_id)
                break
    return docs
