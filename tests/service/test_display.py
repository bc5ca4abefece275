"""The display form's HTML (:mod:`citerag.service.display`): math as MathML, emphasis as tags, each piece naming its
stored span, and nothing a document could smuggle in (scripts, handlers, URLs, styles) left after nh3."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from citerag.service.display import ALLOWED_ATTRIBUTES, HTML_TAGS, MATHML_TAGS, display

ASMC = ("reaching p95 $=1318$s on MATH500 at $128\\times$. ASMC attains 80.6\\% exact-match accuracy, "
        "**V₁** and *this*.")
HOSTILE = [
    "$\\text{<script>window.__pwned='script'</script>}$",
    "$\\text{<img src=x onerror=\"window.__pwned='img'\">}$",
    "$\\href{javascript:alert(1)}{x}$ and $\\style{color:red}{y}$",
    "**<img src=x onerror=alert(1)>** and *<svg onload=alert(1)>*",
    "\\emph{<a href=\"javascript:alert(1)\">link</a>} $$<iframe src=//evil>$$",
    "$<math><mi xlink:href=\"javascript:alert(1)\">x</mi></math>$",
]


class _Tags(HTMLParser):
    """Every start tag of a fragment with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(html)
    return parser.tags


def _top_level_spans(html: str) -> list[tuple[int, int]]:
    """``(data-s, data-e)`` of the fragment's top-level spans, in order."""
    return [(int(s), int(e)) for s, e in re.findall(r'(?:^|</span>)<span data-s="(\d+)" data-e="(\d+)">', html)]


def test_math_is_mathml_and_emphasis_is_tagged() -> None:
    shown = display(ASMC)
    assert shown.text == "reaching p95 = 1318s on MATH500 at 128×. ASMC attains 80.6% exact-match accuracy, V₁ and this."
    assert shown.html.count("<math") == 2 and "<mn>1318</mn>" in shown.html and ">×</mo>" in shown.html
    assert "<strong>V₁</strong>" in shown.html and "<em>this</em>" in shown.html
    assert "80.6</span><span" in shown.html  # 80.6 and the escaped % are separate pieces, both shown


def test_every_piece_names_its_stored_span_without_a_gap() -> None:
    shown = display(ASMC)
    spans = [(s, e) for _, _, s, e in shown.map]
    assert [t for t, _ in _tags(shown.html) if t == "span"] and spans[0][0] == 0 and spans[-1][1] == len(ASMC)
    assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert [(int(a["data-s"]), int(a["data-e"])) for t, a in _tags(shown.html) if t == "span"] == spans


@pytest.mark.parametrize("stored", HOSTILE)
def test_markup_in_a_document_cannot_reach_the_page(stored: str) -> None:
    shown = display(stored)
    for tag, attributes in _tags(shown.html):
        assert tag in HTML_TAGS | MATHML_TAGS, tag
        assert set(attributes) <= ALLOWED_ATTRIBUTES.get(tag, set()), (tag, attributes)
    for needle in ("<script", "<img", "<svg", "<iframe", "<a "):  # as text they are escaped (&lt;img)
        assert needle not in shown.html


def test_plain_text_is_one_escaped_piece() -> None:
    shown = display("Tom & Jerry <b>not bold</b>")
    assert shown.html == '<span data-s="0" data-e="27">Tom &amp; Jerry &lt;b&gt;not bold&lt;/b&gt;</span>'
    assert shown.map == ((0, 27, 0, 27),)


def test_display_math_is_a_block_and_inline_math_is_inline() -> None:
    shown = display("Inline $x_i$ and display $$\\sum_{i=1}^{n} x_i$$ and \\[y^2\\] and \\(z\\).")
    assert shown.html.count('<math display="inline">') == 2 and shown.html.count('<math display="block">') == 2
    assert shown.text == "Inline x_i and display ∑_(i = 1)^n x_i and y^2 and z."


def test_a_formula_s_edge_operators_are_spaced_as_tex_spaces_them() -> None:
    """``128\\times`` ends with an ordinary ×, not one spaced for operands it does not have; ``=1318`` opens
    without space before the =; fences keep their spacing."""
    assert '<mn>128</mn><mo lspace="0" rspace="0">×</mo>' in display("at $128\\times$.").html
    assert '<mo lspace="0">=</mo><mn>1318</mn>' in display("p95 $=1318$s").html
    assert '<mo stretchy="false">(</mo>' in display("$(L+1)$").html
