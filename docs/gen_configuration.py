"""Write ``docs/configuration.md``: the introduction below and every setting
(:func:`citerag.service.settings.settings_reference`). ``make docs`` runs it; a test checks the page is current.

    python docs/gen_configuration.py
"""

from __future__ import annotations

from pathlib import Path

from citerag.service.settings import settings_reference

PAGE = Path(__file__).with_name("configuration.md")
INTRODUCTION = """# Configuration

One settings object (`service/settings.py`, pydantic-settings). Sources, strongest first: command-line options,
`CITERAG_*` environment variables, a `.env` file, a `citerag.toml` in the working directory (`chunk_tokens = 160`,
no prefix), then the defaults. `citerag config` prints the effective values and where each comes from. A list is
given as JSON (`CITERAG_CORPUS='["data/icml2026", "more.jsonl"]'`).

Answering's defaults live in one place, `citerag.service.answering.config.AnswerConfig`, which the settings take
theirs from; its rules' switches (`Rules`) are set in code and measured by `citerag eval --ablate`.

This page is generated from the settings (`python docs/gen_configuration.py`, run by `make docs`).

"""


def page() -> str:
    """The configuration page's Markdown."""
    return INTRODUCTION + settings_reference()


if __name__ == "__main__":
    PAGE.write_text(page(), encoding="utf-8")
