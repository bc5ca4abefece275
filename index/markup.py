"""Stored text as a reader sees it, piece by piece: the display form of an abstract, with the stored span each piece
of it comes from, so a display offset maps back to a stored offset and citation spans never move.

Stored text is never changed (:mod:`citerag.index.text`). :func:`parse` cuts it into :class:`Piece` objects:

* math: ``$...$`` (one line, not ``\\$``, no space inside either dollar, as pandoc reads it; and not money: a
  digit after each dollar, ``US$98 billion to US$261 billion``), ``\\(...\\)``, and display math ``$$...$$``, ``\\[...\\]``: readable
  Unicode by pylatexenc's LaTeX-to-text (``$128\\times$`` -> ``128×``, ``$\\mathcal{O}(\\log N)$`` ->
  ``𝒪(log N)``, ``$=42$`` -> ``= 42``), the formula kept for the page, which renders it as MathML
  (:mod:`citerag.service.display`);
* LaTeX escapes (``80.6\\%`` -> ``80.6%``), text commands (``\\emph{}``, ``\\textit{}``: emphasis; ``\\textbf{}``:
  strong; ``\\texttt{}``: code; ``\\text{}``, ``\\textrm{}``, ...: plain) and ``\\href{url}{text}`` (its text);
* Markdown ``**strong**``, ``__strong__``, ``*emphasis*``, ``_emphasis_`` and ```code```: the markers read as
  nothing, what they enclose carries the style;
* whitespace: a run other than one space reads as one space; none at the start or the end.

Anything else stays as stored (an unknown command such as ``\\cite{x}``, a lone ``$``): nothing is invented, and
every digit outside a formula is kept where it was (a formula keeps its digits, in order).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

#: What a piece of display text is: ``text`` (stored characters shown as they are, unless whitespace was folded at
#: its edges), ``space`` (a whitespace run shown as one space or none), ``escape`` (``\\%`` shown as ``%``),
#: ``math`` (a formula), ``markup`` (emphasis markers and command names: shown as nothing).
PieceKind = Literal["text", "space", "escape", "math", "markup"]
Style = Literal["strong", "em", "code"]


@dataclass(frozen=True, slots=True)
class Piece:
    """One piece of the display form.

    Attributes:
        start, end: the stored characters it shows: ``source[start:end]``.
        text: how it reads (``""`` for markup).
        kind: :data:`PieceKind`.
        styles: the emphasis it is shown with, outermost first.
        latex: for ``math``, the formula without its delimiters.
        block: for ``math``, display math (``$$...$$``, ``\\[...\\]``).
    """

    start: int
    end: int
    text: str
    kind: PieceKind
    styles: tuple[Style, ...] = ()
    latex: str = ""
    block: bool = False


@dataclass(frozen=True, slots=True)
class Markup:
    """A stored text cut into display pieces (:func:`parse`).

    Attributes:
        source: the stored text.
        pieces: in order, covering ``source`` from its first to its last character without a gap.
    """

    source: str
    pieces: tuple[Piece, ...]

    @property
    def text(self) -> str:
        """The readable Unicode form: the pieces' texts joined."""
        return "".join(piece.text for piece in self.pieces)

    def spans(self) -> list[tuple[int, int, int, int]]:
        """The map from display to stored offsets: ``(display_start, display_end, stored_start, stored_end)`` for
        each piece, in order: ``text[display_start:display_end]`` shows ``source[stored_start:stored_end]``."""
        out: list[tuple[int, int, int, int]] = []
        at = 0
        for piece in self.pieces:
            out.append((at, at + len(piece.text), piece.start, piece.end))
            at += len(piece.text)
        return out

    def stored_span(self, start: int, end: int) -> tuple[int, int]:
        """The stored span shown by the display characters ``text[start:end]``: exact inside pieces shown as stored,
        whole pieces otherwise (a formula, an escape).

        >>> m = parse(r"at $128\\times$ less, 80.6\\% more")
        >>> m.text, m.stored_span(3, 7), m.stored_span(14, 19)
        ('at 128× less, 80.6% more', (3, 14), (21, 27))
        """
        found: list[int] = []
        for d_start, d_end, s_start, s_end in self.spans():
            if d_end <= start or d_start >= end or d_start == d_end:
                continue
            literal = self.source[s_start:s_end] == self.text[d_start:d_end]
            found.append(s_start + max(start - d_start, 0) if literal else s_start)
            found.append(s_start + min(end, d_end) - d_start if literal else s_end)
        return (min(found), max(found)) if found else (0, 0)


_TOKEN = re.compile(
    r"""(?P<block>(?<!\\)\$\$(?P<block_tex>.+?)(?<!\\)\$\$|\\\[(?P<bracket_tex>.+?)\\\])
    |(?P<inline>\\\((?P<paren_tex>.+?)\\\)|(?<!\\)\$(?=\S)(?P<dollar_tex>[^$\n]+?)(?<=\S)(?<!\\)\$)
    |(?P<href>\\href\{[^{}]*\}\{)
    |(?P<command>\\(?P<name>emph|textit|textbf|texttt|textsc|textrm|textsf|textup|underline|mbox|text)\{)
    |(?P<escape>\\[%&\#_{}$])
    |(?P<strong>\*\*(?=\S)|__(?=\S))
    |(?P<em>(?<![\w*\\])\*(?=[^\s*])|(?<![\w\\])_(?=[^\s_]))
    |(?P<code>`(?=[^`]))
    |(?P<space>\s{2,}|[^\S ])""",
    re.VERBOSE | re.DOTALL,
)
_COMMAND_STYLE: dict[str, Style] = {"emph": "em", "textit": "em", "textbf": "strong", "texttt": "code"}
#: The style each Markdown marker's group (:data:`_TOKEN`'s ``strong``, ``em``, ``code``) opens.
_MARKER_STYLE: dict[str, Style] = {"strong": "strong", "em": "em", "code": "code"}
# Where an opened emphasis may close: the same marker after a non-space (CommonMark's "right-flanking" run, as
# :func:`_closes` checks); a code span closes at the next backtick.
_CLOSE = {
    "**": re.compile(r"(?<=\S)\*\*"),
    "__": re.compile(r"(?<=\S)__"),
    "*": re.compile(r"(?<=[^\s*])\*(?!\*)"),
    "_": re.compile(r"(?<=[^\s_])_(?!_)"),
    "`": re.compile(r"`"),
}
# Text that holds none of these characters has no markup and no whitespace to fold but single spaces.
MARKUP_CHARS = re.compile(r"[\\*_`${}]|\s(?<! )|  ")
#: A whitespace run (read as one space).
SPACES = re.compile(r"\s+")


def _closes(text: str, match: re.Match[str]) -> bool:
    """Whether the marker ``match`` can close emphasis (CommonMark 0.31, "right-flanking delimiter run"): after a
    non-space, and after punctuation only when a space, punctuation or the end follows; ``_`` never inside a word
    (``window.__pwned`` opens nothing that ``.__x`` would close), nor a single ``*`` (stricter than CommonMark:
    ``*1*1`` and ``*2*2`` are genotypes)."""
    marker = match.group()
    if marker == "`":
        return True
    before = text[match.start() - 1]
    after = text[match.end()] if match.end() < len(text) else " "
    if _punctuation(before) and not (after.isspace() or _punctuation(after)):
        return False
    # a single marker never closes inside a word: "*1*1", "CYP2C19*2*2" are allele names, not emphasis
    return not ((marker[0] == "_" or len(marker) == 1) and after.isalnum())


def _money(text: str, match: re.Match[str]) -> bool:
    """Whether the ``$...$`` ``match`` is two amounts of money, not a formula: a digit follows each dollar
    (``$98 billion to US$261``); ``Mixtral-8$\\times$7B`` is a formula."""
    tex = match.group("dollar_tex")
    return tex is not None and tex[0].isdigit() and text[match.end():match.end() + 1].isdigit()


def _punctuation(ch: str) -> bool:
    return not ch.isalnum() and not ch.isspace()


def _closing_brace(text: str, start: int, end: int) -> int:
    """The index of the ``}`` closing a group opened just before ``start`` (escaped braces skipped), or -1."""
    depth = 0
    i = start
    while i < end:
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            if depth == 0:
                return i
            depth -= 1
        i += 1
    return -1


def _pieces(text: str, start: int, end: int, styles: tuple[Style, ...]) -> list[Piece]:
    """The raw pieces of ``text[start:end]`` (whitespace not folded yet), each carrying ``styles``."""
    out: list[Piece] = []
    at = start
    while at < end:
        match = _TOKEN.search(text, at, end)
        if match is None:
            break
        kind = match.lastgroup
        inner: tuple[int, int, tuple[Style, ...]] | None = None  # a group whose content is parsed on
        close_end = match.end()
        if kind == "inline" and _money(text, match):
            out.append(Piece(at, match.start() + 1, text[at:match.start() + 1], "text", styles))
            at = match.start() + 1
            continue
        if kind in ("block", "inline"):
            latex = next(g for g in match.group("block_tex", "bracket_tex", "paren_tex", "dollar_tex") if g is not None)
            piece = Piece(match.start(), match.end(), math_text(latex), "math", styles, latex, kind == "block")
        elif kind == "escape":
            piece = Piece(match.start(), match.end(), match.group()[1], "escape", styles)
        elif kind == "space":
            piece = Piece(match.start(), match.end(), " ", "space", styles)
        elif kind in ("href", "command"):
            close = _closing_brace(text, match.end(), end)
            style = _COMMAND_STYLE.get(match.group("name") or "")
            if close != -1:
                inner = (match.end(), close, styles + ((style,) if style else ()))
                close_end = close + 1
            piece = Piece(match.start(), match.end(), "", "markup", styles)
        else:  # strong, em, code
            marker = match.group()
            closing = next((c for c in _CLOSE[marker].finditer(text, match.end(), end) if _closes(text, c)), None)
            if closing is not None and len(marker) == 1 and marker in text[match.end():closing.start()]:
                closing = None  # a single * or _ closes at the next one or not at all ("*1*1 and *2*2")
            style = _MARKER_STYLE[kind or ""]
            if closing is not None and "\n\n" not in text[match.end():closing.start()] \
                    and (kind != "em" or any(ch.isalpha() for ch in text[match.end():closing.start()])):
                inner = (match.end(), closing.start(), styles + (style,))
                close_end = closing.end()
            piece = Piece(match.start(), match.end(), "", "markup", styles)
        if (kind in ("href", "command", "strong", "em", "code")) and inner is None:
            continue_at = match.start() + 1  # an opener that never closes is stored text
            out.append(Piece(at, continue_at, text[at:continue_at], "text", styles))
            at = continue_at
            continue
        if match.start() > at:
            out.append(Piece(at, match.start(), text[at:match.start()], "text", styles))
        out.append(piece)
        if inner is not None:
            inner_start, inner_end, inner_styles = inner
            if kind == "code":
                out.append(Piece(inner_start, inner_end, text[inner_start:inner_end], "text", inner_styles))
            else:
                out.extend(_pieces(text, inner_start, inner_end, inner_styles))
            out.append(Piece(inner_end, close_end, "", "markup", styles))
        at = close_end
    if at < end:
        out.append(Piece(at, end, text[at:end], "text", styles))
    return out


def _fold_spaces(pieces: list[Piece]) -> tuple[Piece, ...]:
    """``pieces`` with whitespace folded across them: no space at the start or the end, never two in a row."""
    out: list[Piece] = []
    ends_with_space = True  # the start counts as a space: leading whitespace reads as nothing
    for piece in _merged(pieces):
        text = piece.text
        if piece.kind == "math":
            text = SPACES.sub(" ", text)
        if ends_with_space:
            text = text.lstrip()
        if text != piece.text:
            piece = Piece(piece.start, piece.end, text, piece.kind, piece.styles, piece.latex, piece.block)
        if text:
            ends_with_space = text.endswith(" ")
        out.append(piece)
    for i in range(len(out) - 1, -1, -1):  # trailing whitespace reads as nothing
        piece = out[i]
        text = piece.text.rstrip()
        if text != piece.text:
            out[i] = Piece(piece.start, piece.end, text, piece.kind, piece.styles, piece.latex, piece.block)
        if text:
            break
    return tuple(out)


def _merged(pieces: list[Piece]) -> list[Piece]:
    """``pieces`` with neighbouring stored-text pieces of one style joined (an opener that never closed)."""
    out: list[Piece] = []
    for piece in pieces:
        if out and piece.kind == "text" and out[-1].kind == "text" and out[-1].styles == piece.styles \
                and out[-1].end == piece.start:
            last = out[-1]
            out[-1] = Piece(last.start, piece.end, last.text + piece.text, "text", last.styles)
        else:
            out.append(piece)
    return out


@lru_cache(maxsize=8192)
def parse(text: str) -> Markup:
    """``text`` cut into display pieces (module docstring).

    >>> parse(r"80.6\\% at **V₁**").text
    '80.6% at V₁'
    >>> [(p.kind, p.text) for p in parse(r"80.6\\% at **V₁**").pieces]
    [('text', '80.6'), ('escape', '%'), ('text', ' at '), ('markup', ''), ('text', 'V₁'), ('markup', '')]
    """
    if not MARKUP_CHARS.search(text):
        stripped = text.strip()
        start = text.find(stripped) if stripped else 0
        pieces = [Piece(0, start, "", "space")] if start else []
        pieces.append(Piece(start, start + len(stripped), stripped, "text"))
        if start + len(stripped) < len(text):
            pieces.append(Piece(start + len(stripped), len(text), "", "space"))
        return Markup(text, tuple(p for p in pieces if p.end > p.start or not text))
    return Markup(text, _fold_spaces(_pieces(text, 0, len(text), ())))


def readable(text: str) -> str:
    """``text`` as a reader should see it in plain text (:func:`parse`): inline math as Unicode, LaTeX escapes and
    text commands resolved, Markdown emphasis removed, whitespace collapsed. Unlike
    :func:`~citerag.index.text.fold`, characters are not NFKC-normalised (``V₁`` stays ``V₁``) and no symbol is
    lost: ``80.6\\%`` -> ``80.6%``, ``$128\\times$`` -> ``128×``, ``t $=42$s`` -> ``t = 42s``.

    >>> readable(r"Kiln reaches 80.6\\% at $128\\times$ less cost with \\emph{no} tuning, **V₁**")
    'Kiln reaches 80.6% at 128× less cost with no tuning, V₁'
    """
    if not MARKUP_CHARS.search(text):
        return text.strip()
    return parse(text).text


# Macros written as words (\log N): LaTeX sets them upright with a space before the next symbol, which
# pylatexenc drops ("logN"); an empty group after the name keeps the author's space.
_WORD_MACRO = re.compile(r"(\\[A-Za-z]+)(\s+)(?=[\w\\(])")
# A sub- or superscript group of more than one symbol reads in parentheses (2^{3L^2} -> 2^(3L^2)), not run on.
_SCRIPT_GROUP = re.compile(r"([_^])\{([^{}]*)\}")
_SIMPLE_SCRIPT = re.compile(r"[-+]?[\w.]+|\\[A-Za-z]+")
# Relations read with a space on each side (p95 $=42$s -> p95 = 42s); binary operators between two operands
# too (2.5 × 10^4), but not after a lone number (128×).
_RELATION = re.compile(r"\s*([=<>≤≥≈≠≪≫≡∝→←⇒⇐⇔↔∈∉⊂⊆⊃⊇])\s*")
_OPERATOR = re.compile(r"(?<=\S)\s*([×·±∓÷])\s*(?=\S)")
#: A LaTeX command's name (``\\mathcal`` -> ``mathcal``); :func:`~citerag.index.text.fold` drops the backslash too.
MACRO = re.compile(r"\\([A-Za-z]+)")


@lru_cache(maxsize=8192)
def math_text(latex: str) -> str:
    """One formula as readable Unicode (pylatexenc's LaTeX-to-text, module docstring); the formula without its
    markup when pylatexenc cannot read it. Every digit of ``latex`` is kept, in order.

    >>> math_text(r"\\mathcal{O}(\\log N)"), math_text("=42"), math_text("2^{3L^2}"), math_text(r"128\\times")
    ('𝒪(log N)', '= 42', '2^(3L^2)', '128×')
    """
    source = latex.replace(r"\|", "‖")
    source = _WORD_MACRO.sub(lambda m: m.group(1) + "{}" + m.group(2), source)
    source = _SCRIPT_GROUP.sub(
        lambda m: m.group(0) if _SIMPLE_SCRIPT.fullmatch(m.group(2).strip()) else f"{m.group(1)}{{({m.group(2)})}}",
        source,
    )
    try:
        out = _latex2text().latex_to_text(source)
    except Exception:  # noqa: BLE001 - pylatexenc raises bare IndexError/KeyError on some malformed input
        out = MACRO.sub(r"\1", latex).replace("{", "").replace("}", "")
    out = _RELATION.sub(r" \1 ", out)
    out = _OPERATOR.sub(r" \1 ", out)
    return SPACES.sub(" ", out).strip()


@lru_cache(maxsize=1)
def _latex2text():  # noqa: ANN202 - a pylatexenc LatexNodes2Text
    from pylatexenc.latex2text import LatexNodes2Text

    return LatexNodes2Text(math_mode="text", strict_latex_spaces=False)
