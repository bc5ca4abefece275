"""A griffe extension for the API reference: the doctest examples of a docstring shown as Python console code
(fenced ``pycon`` blocks), so that their output is never read as Markdown (``[a][b]`` as a link)."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension, Object

_PROMPT = re.compile(r"^\s*(?:>>>|\.\.\.)(?:\s|$)")


def fenced(text: str) -> str:
    """``text`` with each run of doctest lines (a line opening with the ``>>>`` or ``...`` prompt, and the output
    lines after it, up to a blank line) fenced as ``pycon``, at the run's indentation."""
    out: list[str] = []
    inside = False
    for line in text.split("\n"):
        if not inside and _PROMPT.match(line):
            indent = line[: len(line) - len(line.lstrip())]
            out.append(f"{indent}```pycon")
            inside = True
        elif inside and not line.strip():
            out.append(f"{indent}```")
            inside = False
        out.append(line)
    if inside:
        out.append(f"{indent}```")
    return "\n".join(out)


class DoctestFences(Extension):
    """Fence every object's doctest examples (module docstring)."""

    def on_object(self, *, obj: Object, **kwargs: Any) -> None:  # noqa: ARG002 - griffe's hook signature
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fenced(obj.docstring.value)
