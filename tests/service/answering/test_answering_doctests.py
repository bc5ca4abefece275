"""The examples in the answering modules' docstrings run as tests."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = ["choice", "compose", "language", "names", "papers", "prompts", "question", "verify", "recipes.yes_no",
           "recipes.comparison"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name: str) -> None:
    module = importlib.import_module(f"citerag.service.answering.{name}")
    failed, tried = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert tried > 0 and failed == 0
