"""The BM25 tokenizer: one pure function shared by indexing and querying.

Pipeline: :func:`citerag.index.text.fold` (LaTeX/Markdown removed, NFKC so ``V₁`` == ``V1``) -> case folding ->
diacritics removed (``naïve`` == ``naive``, ``ά`` == ``α``; Arabic short-vowel marks dropped) -> words of any script,
a word keeping its combining marks (Devanagari vowel signs stay inside the word) -> a hyphenated compound
(``GP-SeedNet``, ``KV-Loop``, ``QX-1``) yields the whole compound (hyphens removed: ``gpseednet``) *and* its parts
(``gp``, ``equiflow``) -> English stop words dropped (bm25s's list, as used for BEIR) -> Snowball English stemming
(PyStemmer).

Chinese, Japanese and Korean text, written without spaces between words, is indexed as overlapping character
bigrams (``大型模型`` -> ``大型``, ``型模``, ``模型``; a lone character stays a unigram), as Lucene's ``CJKAnalyzer``
(``CJKBigramFilter``) does, so a query finds any run of two or more characters inside a document.

Searching for ``GP-SeedNet``, ``GPSeedNet``, ``SeedNet`` or ``gp seednet`` therefore all match the document.

:data:`TOKENIZER_VERSION` changes whenever the tokens of some text change; indexes record it and are rebuilt.
"""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

import regex
import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from citerag.index.text import fold

TOKENIZER_VERSION = 2  # 1: lower-case, no diacritic folding, a CJK run was one token; 2: this module

# A word is a letter/digit of any script followed by letters, digits and combining marks; a compound is words
# joined by single hyphens or dashes.
_WORD = r"[\p{L}\p{N}][\p{L}\p{N}\p{M}]*"
_COMPOUND = regex.compile(rf"{_WORD}(?:[-‐‑–]{_WORD})*")
_PART = regex.compile(_WORD)
# The same compounds in ASCII text (no marks, letters a-z, digits 0-9, the hyphen as the only dash), found by the
# standard library's faster engine.
_ASCII_COMPOUND = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
# Letters of the scripts written without spaces (Script_Extensions, so ー and 々 belong to their runs).
_CJK_RUN = regex.compile(r"(?V1)[[\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}]&&[\p{L}\p{M}]]+")
# Removed after canonical decomposition: combining diacritical marks (U+0300-U+036F, Latin/Greek/Cyrillic accents)
# and Arabic harakat (U+064B-U+065F, U+0670), which Lucene's ArabicNormalizer also drops.
_DIACRITICS = regex.compile(r"[\u0300-\u036f\u064b-\u065f\u0670]")
STOPWORDS: frozenset[str] = frozenset(STOPWORDS_EN)


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


def normalize(text: str) -> str:
    """The form of ``text`` that is split into words: folded (:func:`citerag.index.text.fold`), case-folded, diacritics
    removed, with spaces around each CJK run so it never joins a neighbouring Latin word.

    >>> normalize("Naïve Ἀθῆναι GPT-4模型")
    'naive αθηναι gpt-4 模型'
    """
    return normalize_folded(fold(text))


def normalize_folded(folded: str) -> str:
    """:func:`normalize` of a text already folded: ``normalize(text) == normalize_folded(fold(text))``."""
    out = folded.casefold()
    if out.isascii():
        return out
    out = unicodedata.normalize("NFC", _DIACRITICS.sub("", unicodedata.normalize("NFD", out)))
    return " ".join(_CJK_RUN.sub(lambda m: f" {m.group()} ", out).split())


def _bigrams(run: str) -> list[str]:
    """Overlapping character bigrams of a CJK run; a one-character run is its own token."""
    return [run] if len(run) == 1 else [run[i : i + 2] for i in range(len(run) - 1)]


def tokenize(text: str) -> list[str]:
    """BM25 tokens of ``text``, in order (a compound's whole form precedes its parts).

    >>> tokenize("GP-SeedNet reaches a 40-fold speedup on V₁")
    ['gpseednet', 'gp', 'seednet', 'reach', '40fold', '40', 'fold', 'speedup', 'v1']
    >>> tokenize("naïve 检索增强")
    ['naiv', '检索', '索增', '增强']
    """
    return tokenize_folded(fold(text))


def tokenize_folded(folded: str) -> list[str]:
    """:func:`tokenize` of a text already folded (:func:`citerag.index.text.fold`), for a caller that needs the folded
    form too (a search embeds it): ``tokenize(text) == tokenize_folded(fold(text))``."""
    text = normalize_folded(folded)
    compounds = _ASCII_COMPOUND.findall(text) if text.isascii() else _COMPOUND.findall(text)
    tokens: list[str] = []
    for compound in compounds:
        tokens.extend(_compound_tokens(compound))
    return tokens


@lru_cache(maxsize=200_000)
def _compound_tokens(compound: str) -> tuple[str, ...]:
    """The tokens of one compound of normalised text: a CJK run's bigrams, else the stemmed whole (hyphens removed,
    when it has parts) and its stemmed parts that are not stop words. Cached: words recur across passages and
    queries."""
    if not compound.isascii() and _CJK_RUN.fullmatch(compound):
        return tuple(_bigrams(compound))
    parts = compound.split("-") if compound.isascii() else _PART.findall(compound)
    tokens = [_stem("".join(parts))] if len(parts) > 1 else []
    tokens.extend(_stem(part) for part in parts if part not in STOPWORDS)
    return tuple(tokens)


def tokenize_many(texts: list[str]) -> list[list[str]]:
    """:func:`tokenize` over a list; ``len(result) == len(texts)``."""
    return [tokenize(text) for text in texts]
