"""Text normalisation and sentence splitting shared by ingest, chunking and BM25 tokenisation.

Stored text is never changed: these functions produce the *model-facing* form (what is embedded and tokenised)
and character spans into the original. The display form (what a reader sees: math as Unicode, escapes resolved),
:func:`readable`, is :mod:`citerag.index.markup`'s.
"""

from __future__ import annotations

import re
import unicodedata

from citerag.index.markup import MACRO as _BARE_CMD
from citerag.index.markup import SPACES as _SPACES
from citerag.index.markup import readable

__all__ = ["display_label", "fold", "readable", "split_sentences"]

# \href{url}{text} -> text ; \cmd{arg} -> arg ; \cmd -> cmd ; $ and Markdown emphasis dropped.
_HREF = re.compile(r"\\href\{[^{}]*\}\{([^{}]*)\}")
_CMD_WITH_ARG = re.compile(r"\\[A-Za-z]+\*?\{([^{}]*)\}")
_ESCAPED = re.compile(r"\\([%&#_{}$])")
_MARKUP = re.compile(r"\*\*|__|`|\$|[{}]")
# Every pattern above needs one of these characters: a text without any is left as it is by all of them.
_MARKUP_CHARS = re.compile(r"[\\*_`${}]")


def fold(text: str) -> str:
    """Model-facing form of ``text``: LaTeX/Markdown markup removed, NFKC-normalised, whitespace collapsed.

    NFKC maps compatibility characters to their plain form, so ``V₁`` becomes ``V1`` and ``ﬁ`` becomes ``fi``
    (Unicode Standard Annex #15). Case is kept (the embedding model is uncased anyway; BM25 lower-cases itself).

    >>> fold(r"\\textbf{Fast} $\\mathcal{O}(\\log(N))$ for **V₁**")
    'Fast O(log(N)) for V1'
    """
    out = text
    if _MARKUP_CHARS.search(text):  # most queries and many passages hold no markup: skip its passes
        out = _HREF.sub(r"\1", out)
        for _ in range(3):  # nested commands such as \mathcal{O}(\log(N)) unwrap in a few passes
            unwrapped = _CMD_WITH_ARG.sub(r"\1", out)
            if unwrapped == out:
                break
            out = unwrapped
        out = _ESCAPED.sub(r"\1", out)
        out = _BARE_CMD.sub(r"\1", out)
        out = _MARKUP.sub("", out)
    out = unicodedata.normalize("NFKC", out)
    if "  " in out or not out.isprintable():  # whitespace other than single spaces (any other is unprintable)
        out = _SPACES.sub(" ", out)
    return out.strip()


# A sentence ends at . ! or ? (optionally followed by a closing quote/bracket) before whitespace and a character
# that can start a sentence. Common abbreviations in abstracts are not ends.
_SENTENCE_END = re.compile(r"""[.!?]["')\]]?\s+(?=[A-Z0-9\\$(\["'“‘*])""")
_NOT_AN_END = re.compile(r"(?:\b(?:e\.g|i\.e|et al|etc|vs|cf|Fig|Eq|Sec|resp|approx|No)\.|\b[A-Z]\.)$")


def split_sentences(text: str) -> list[tuple[int, int]]:
    """Split ``text`` into sentence spans.

    Returns:
        ``[(start, end), ...]`` character offsets into ``text``, in order, non-overlapping, trailing whitespace
        excluded; concatenating ``text[start:end]`` with the whitespace between them gives back ``text`` (modulo
        leading/trailing whitespace). An all-whitespace text gives ``[]``.
    """
    spans: list[tuple[int, int]] = []
    start = len(text) - len(text.lstrip())
    for match in _SENTENCE_END.finditer(text):
        head = text[start : match.start() + 1]
        if _NOT_AN_END.search(head):
            continue
        end = match.end() - len(match.group()) + len(match.group().rstrip())
        if end > start:
            spans.append((start, end))
        start = match.end()
    end = len(text.rstrip())
    if end > start:
        spans.append((start, end))
    return spans


def display_label(text: str, max_chars: int = 90) -> str:
    """A display label for an untitled document: its first sentence, markup removed, cut at a word boundary.

    Never invents words: the label is a prefix of the folded first sentence, with ``…`` when cut.
    """
    spans = split_sentences(text)
    first = fold(text[spans[0][0] : spans[0][1]]) if spans else fold(text)
    if len(first) <= max_chars:
        return first
    cut = first[:max_chars].rsplit(" ", 1)[0].rstrip(",;:")
    return cut + "…"
