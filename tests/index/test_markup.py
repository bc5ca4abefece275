"""The display form of stored text (:mod:`citerag.index.markup`): pieces that keep their stored spans, readable
Unicode for math and escapes, and no number or unit of the stored text dropped or changed."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from citerag.index.ingest import load_documents
from citerag.index.markup import math_text, parse, readable
from citerag.index.text import fold, split_sentences
from tests.conftest import SEEDS

ASMC = ("reaching p95 $=1318$s on MATH500 at $128\\times$. We propose Adaptive Sequential Monte Carlo (ASMC). "
        "ASMC attains 80.6\\% exact-match accuracy with p95 = 73.7s, with $\\mathcal{O}(\\log N)$ cost.")


def _digits(text: str) -> list[str]:
    return re.findall(r"\d", unicodedata.normalize("NFKC", text))


def _contiguous(text: str) -> None:
    """The pieces of ``text`` cover it from 0 to its end without a gap, and a text piece shows its stored
    characters (whitespace at its edges aside)."""
    pieces = parse(text).pieces
    assert [p.start for p in pieces[1:]] == [p.end for p in pieces[:-1]]
    assert (pieces[0].start, pieces[-1].end) == (0, len(text))
    for piece in pieces:
        if piece.kind == "text":
            assert piece.text.strip() == text[piece.start:piece.end].strip()


class TestReadable:
    @pytest.mark.parametrize(("stored", "shown"), [
        ("reaching p95 $=1318$s on MATH500", "reaching p95 = 1318s on MATH500"),
        ("at $128\\times$.", "at 128×."),
        ("attains 80.6\\% exact-match", "attains 80.6% exact-match"),
        ("costs $\\mathcal{O}(\\log N)$ time", "costs 𝒪(log N) time"),
        ("we introduce **V₁**, a framework", "we introduce V₁, a framework"),
        ("a *highly scalable* variant and \\emph{no} tuning", "a highly scalable variant and no tuning"),
        ("bound $2^{3L^2}$ and $\\max_{i,j}|S_{ij}|$", "bound 2^(3L^2) and max_(i,j)|S_ij|"),
        ("see \\href{https://x.org}{our code}", "see our code"),
        ("a\n\n  b", "a b"),
        ("from US$98 billion to US$261 billion", "from US$98 billion to US$261 billion"),
        ("on Mixtral-8$\\times$7B", "on Mixtral-8×7B"),
    ])
    def test_math_escapes_and_emphasis(self, stored: str, shown: str) -> None:
        assert readable(stored) == shown

    def test_text_without_markup_is_itself(self) -> None:
        assert readable("  A plain sentence, 3 digits 123.  ") == "A plain sentence, 3 digits 123."

    def test_asterisks_and_underscores_that_emphasise_nothing_stay(self) -> None:
        assert readable("p < 0.05*, and 0.01* here") == "p < 0.05*, and 0.01* here"
        assert readable("carriers of *1*1 and (*2*2) alleles, *1* only") == "carriers of *1*1 and (*2*2) alleles, *1* only"
        assert readable("window.__pwned='a' and x.__pwned='b'") == "window.__pwned='a' and x.__pwned='b'"
        assert readable("an unclosed $ sign and \\emph{open") == "an unclosed $ sign and \\emph{open"

    def test_formula_the_parser_cannot_read_keeps_its_digits(self) -> None:
        assert _digits(math_text("\\frac{1}{")) == ["1"]


class TestMap:
    def test_each_piece_knows_the_stored_characters_it_shows(self) -> None:
        markup = parse(ASMC)
        _contiguous(ASMC)
        text = markup.text
        for d_start, d_end, s_start, s_end in markup.spans():
            if ASMC[s_start:s_end] == text[d_start:d_end]:
                continue  # shown as stored
            assert ASMC[s_start:s_end].startswith(("$", "\\", "*")) or not text[d_start:d_end].strip()
        at = text.index("128×")
        assert ASMC[slice(*markup.stored_span(at, at + 4))] == "$128\\times$"
        at = text.index("80.6%")
        assert ASMC[slice(*markup.stored_span(at, at + 5))] == "80.6\\%"
        at = text.index("exact-match")
        assert ASMC[slice(*markup.stored_span(at, at + 11))] == "exact-match"


def _corpus_sentences() -> list[str]:
    docs = load_documents([SEEDS])
    return [d.text[s:e] for d in docs for s, e in split_sentences(d.text)] + [d.text for d in docs]


@pytest.mark.parametrize("text", _corpus_sentences())
def test_the_shipped_abstracts_keep_every_number_and_unit(text: str) -> None:
    """Every digit in order, every percent sign (``\\%`` or ``%``) and every times sign (``\\times`` or ``×``) of a
    stored sentence is in its display form; nothing of LaTeX's own (``\\%``, ``\\times``) is left."""
    shown = readable(text)
    _contiguous(text)
    assert _digits(shown) == _digits(fold(text))
    assert shown.count("%") == text.count("%")
    assert shown.count("×") == text.count("\\times") + text.count("×")
    assert "\\%" not in shown and "\\times" not in shown


_TOKENS = st.sampled_from([
    "word", " ", "  ", "\n", "80.6", "1318", "p95", "\\%", "$", "$128\\times$", "$=1318$", "**", "*", "_", "__",
    "\\emph{", "\\textbf{", "}", "{", "`", "x_i", "V₁", "(", ")", ".", ",", "\\href{u}{", "\\$", "~",
])


@given(st.lists(_TOKENS, max_size=30).map("".join))
def test_any_mix_of_markup_keeps_its_digits_and_covers_the_text(text: str) -> None:
    _contiguous(text) if text else None
    assert _digits(readable(text)) == _digits(text)
