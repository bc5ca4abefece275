"""The display form that the API, the CLI and the web page show beside stored text: readable Unicode with a map back
to the stored characters, and sanitised HTML with math as MathML (issue 29).

Stored text is never changed (offsets, citations and highlights point into it); :mod:`citerag.index.markup` cuts it
into pieces, each knowing the stored characters it shows. Here each piece becomes HTML: a formula is rendered as
MathML by latex2mathml (Chromium, Firefox and Safari render MathML natively: no script, no web font, no network),
emphasis as ``<strong>``/``<em>``/``<code>``, any other text escaped. Every piece is a ``<span data-s data-e>`` naming
its stored span (relative to the text rendered), so a page can mark exactly the cited characters. A fragment with
a formula is sanitised whole by nh3 (the Ammonia HTML sanitiser) with an allow-list of those tags and of MathML's presentation
attributes: latex2mathml copies ``\\text{...}`` into ``<mtext>`` unescaped and ``\\href``/``\\style`` into
attributes, so a document's formula could otherwise carry markup into the page.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from functools import lru_cache

import nh3

from citerag.index.markup import Markup, Piece, parse

#: MathML Core's presentation elements (what latex2mathml writes), and the page's own wrappers.
MATHML_TAGS = frozenset({
    "math", "mrow", "mi", "mn", "mo", "ms", "mtext", "mspace", "msub", "msup", "msubsup", "mfrac", "msqrt",
    "mroot", "mover", "munder", "munderover", "mstyle", "mpadded", "mphantom", "menclose", "merror", "mtable",
    "mtr", "mtd", "mmultiscripts", "mprescripts", "none",
})
HTML_TAGS = frozenset({"span", "strong", "em", "code"})
_PRESENTATION = {"mathvariant", "displaystyle", "scriptlevel"}
#: The attributes kept, by tag: none can hold a URL, a script or a style.
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    "span": {"data-s", "data-e"},
    "math": {"display"},
    "mi": set(_PRESENTATION), "mn": set(_PRESENTATION), "mtext": set(_PRESENTATION), "ms": set(_PRESENTATION),
    "mo": _PRESENTATION | {"stretchy", "fence", "separator", "lspace", "rspace", "form", "largeop",
                           "movablelimits", "accent", "symmetric", "minsize", "maxsize"},
    "mstyle": set(_PRESENTATION), "mrow": set(_PRESENTATION),
    "mfrac": {"linethickness"},
    "mspace": {"width", "height", "depth"},
    "mpadded": {"width", "height", "depth", "lspace", "voffset"},
    "mover": {"accent"}, "munder": {"accentunder"}, "munderover": {"accent", "accentunder"},
    "menclose": {"notation"},
    "mtable": {"columnalign", "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame"},
    "mtr": {"columnalign", "rowalign"}, "mtd": {"columnalign", "rowalign", "columnspan", "rowspan"},
}
_STYLE_TAG = {"strong": "strong", "em": "em", "code": "code"}


@dataclass(frozen=True, slots=True)
class Display:
    """How one stored text reads.

    Attributes:
        text: readable Unicode (math as Unicode, escapes resolved, emphasis markers removed).
        html: sanitised HTML: each piece a ``<span data-s data-e>`` naming the stored span it shows, math as MathML,
            emphasis as ``<strong>``/``<em>``/``<code>``.
        map: ``(display_start, display_end, stored_start, stored_end)`` for each piece: ``text[display_start:
            display_end]`` shows ``stored[stored_start:stored_end]``.
    """

    text: str
    html: str
    map: tuple[tuple[int, int, int, int], ...]


@lru_cache(maxsize=8192)
def display(text: str) -> Display:
    """The display form of the stored ``text`` (module docstring).

    >>> d = display(r"Kiln reaches 80.6\\% at $128\\times$")
    >>> d.text, d.map[1], d.map[3]
    ('Kiln reaches 80.6% at 128×', (17, 18, 17, 19), (22, 26, 23, 34))
    """
    markup = parse(text)
    return Display(markup.text, render_html(markup), tuple(markup.spans()))


def render_html(markup: Markup) -> str:
    """``markup`` as sanitised HTML (:attr:`Display.html`). Without a formula every character of the stored text
    is escaped (``html.escape``) inside this module's own tags, so nothing is left to sanitise; with one, the whole
    fragment goes through :func:`sanitize`."""
    fragment = "".join(_piece_html(piece) for piece in markup.pieces)
    return sanitize(fragment) if any(piece.kind == "math" for piece in markup.pieces) else fragment


def _piece_html(piece: Piece) -> str:
    inner = mathml(piece.latex, piece.block) if piece.kind == "math" else html.escape(piece.text, quote=False)
    if inner:
        for style in reversed(piece.styles):
            inner = f"<{_STYLE_TAG[style]}>{inner}</{_STYLE_TAG[style]}>"
    return f'<span data-s="{piece.start}" data-e="{piece.end}">{inner}</span>'


@lru_cache(maxsize=4096)
def mathml(latex: str, block: bool = False) -> str:
    """``latex`` as a MathML ``<math>`` element (latex2mathml; ``display="block"`` for display math), or its
    readable text, escaped, when latex2mathml cannot read it. Not sanitised: :func:`sanitize` the page's HTML."""
    from latex2mathml.converter import convert

    try:
        return _edge_operators(convert(latex, display="block" if block else "inline"))
    except Exception:  # noqa: BLE001 - latex2mathml raises many kinds on malformed input
        from citerag.index.markup import math_text

        return html.escape(math_text(latex), quote=False)


# The first and the last operator of a formula, when the formula is one row (what latex2mathml writes).
_FIRST_MO = re.compile(r'^(<math[^>]*><mrow>)<mo((?: [a-z]+="[^"]*")*)>(&#x[0-9A-Fa-f]+;|[^<])</mo>')
_LAST_MO = re.compile(r'<mo((?: [a-z]+="[^"]*")*)>(&#x[0-9A-Fa-f]+;|[^<])</mo>(</mrow></math>)$')
_FENCES = set("()[]{}|‖⟨⟩")
_BINARY = set("+−-×·∗±∓÷")


def _edge_operators(mathml: str) -> str:
    """``mathml`` spaced as TeX spaces a formula's edges: an operator that opens a formula has no space before it
    (``p95 $=42$s``), one that closes it none after it, and a binary operator that closes it is an ordinary
    symbol (``$128\\times$``: 128×, not 128 ×); fences keep theirs."""
    first = _FIRST_MO.match(mathml)
    if first and html.unescape(first.group(3)) not in _FENCES:
        mathml = f'{first.group(1)}<mo{first.group(2)} lspace="0">{first.group(3)}</mo>{mathml[first.end():]}'
    last = _LAST_MO.search(mathml)
    if last and html.unescape(last.group(2)) not in _FENCES:
        symbol = html.unescape(last.group(2))
        spacing = ' lspace="0" rspace="0"' if symbol in _BINARY else ' rspace="0"'
        attributes = last.group(1).replace(' lspace="0"', "") if symbol in _BINARY else last.group(1)
        mathml = f"{mathml[:last.start()]}<mo{attributes}{spacing}>{last.group(2)}</mo>{last.group(3)}"
    return mathml


def sanitize(fragment: str) -> str:
    """``fragment`` with every tag and attribute outside :data:`HTML_TAGS`, :data:`MATHML_TAGS` and
    :data:`ALLOWED_ATTRIBUTES` removed (nh3; the content of ``<script>`` and ``<style>`` goes too)."""
    return nh3.clean(
        fragment, tags=set(HTML_TAGS | MATHML_TAGS), attributes=ALLOWED_ATTRIBUTES, strip_comments=True, link_rel=None,
    )
