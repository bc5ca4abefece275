"""The BM25 tokenizer: one pure function shared by indexing and querying.

Pipeline: :func:`index.text.fold` (LaTeX/Markdown removed, NFKC so ``V₁`` == ``V1``) -> lower-case -> split into
runs of letters/digits, where a hyphenated compound (``GP-EquiFlow``, ``LU-KV``, ``XR-1``) yields the whole
compound (hyphens removed: ``gpequiflow``) *and* its parts (``gp``, ``equiflow``) -> English stop words dropped
(bm25s's list, as used for BEIR) -> Snowball English stemming (PyStemmer).

Searching for ``GP-EquiFlow``, ``GPEquiFlow``, ``EquiFlow`` or ``gp equiflow`` therefore all match the document.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer
from bm25s.stopwords import STOPWORDS_EN

from index.text import fold

# A word is a run of letters/digits (any script); a compound is words joined by single hyphens or dashes.
_COMPOUND = re.compile(r"[^\W_]+(?:[-‐‑–][^\W_]+)*")
_PART = re.compile(r"[^\W_]+")
STOPWORDS: frozenset[str] = frozenset(STOPWORDS_EN)


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("english")


@lru_cache(maxsize=200_000)
def _stem(word: str) -> str:
    return _stemmer().stemWord(word)


def tokenize(text: str) -> list[str]:
    """BM25 tokens of ``text``, in order (a compound's whole form precedes its parts).

    >>> tokenize("GP-EquiFlow reaches a 40-fold speedup on V₁")
    ['gpequiflow', 'gp', 'equiflow', 'reach', '40fold', '40', 'fold', 'speedup', 'v1']
    """
    tokens: list[str] = []
    for match in _COMPOUND.finditer(fold(text).lower()):
        compound = match.group()
        parts = _PART.findall(compound)
        if len(parts) > 1:
            tokens.append(_stem("".join(parts)))
        tokens.extend(_stem(part) for part in parts if part not in STOPWORDS)
    return tokens


def tokenize_many(texts: list[str]) -> list[list[str]]:
    """:func:`tokenize` over a list; ``len(result) == len(texts)``."""
    return [tokenize(text) for text in texts]
