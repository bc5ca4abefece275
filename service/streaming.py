"""Server-sent events for ``POST /ask`` with ``"stream": true``.

Event order: ``passages`` (the retrieved passages, numbered as the model sees them), then one ``token`` event per
generated piece of raw model text, then ``answer`` (the full :class:`~service.schemas.AskResponse` after the
citation check; its ``answer`` replaces the streamed raw text) -- or ``error``. When the client disconnects the
generator is closed and generation stops at the next token.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from fastapi.responses import StreamingResponse

from index.filters import Filters
from service.answer import Answer, Answerer
from service.schemas import AskResponse, PassageOut


def sse(event: str, data: Any) -> str:
    """One server-sent event (``event:`` + one-line JSON ``data:``), per the WHATWG HTML event-stream format."""
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


def answer_events(
    answerer: Answerer,
    question: str,
    k: int,
    filters: Filters | None = None,
    on_done: Callable[[Answer], None] | None = None,
) -> Generator[str, None, None]:
    """The SSE stream of one question (see module docstring). Generation runs in a worker thread; ``on_done``
    receives the finished :class:`Answer` (e.g. for metrics)."""
    started = time.perf_counter()
    passages = answerer.retrieve(question, k, filters)
    retrieve_ms = (time.perf_counter() - started) * 1000
    yield sse("passages", {"passages": [PassageOut.of(p).model_dump() for p in passages]})

    pieces: queue.Queue[tuple[str, Any]] = queue.Queue()
    stop = threading.Event()

    def on_delta(text: str) -> bool:
        pieces.put(("token", text))
        return stop.is_set()

    def work() -> None:
        try:
            pieces.put(("answer", answerer.answer(question, passages, retrieve_ms, on_delta)))
        except Exception as exc:  # noqa: BLE001 - reported to the client as an error event
            pieces.put(("error", exc))

    worker = threading.Thread(target=work, name="citerag-generate", daemon=True)
    worker.start()
    try:
        while True:
            kind, payload = pieces.get()
            if kind == "token":
                yield sse("token", {"text": payload})
            elif kind == "answer":
                if on_done is not None:
                    on_done(payload)
                yield sse("answer", AskResponse.of(payload).model_dump())
                return
            else:
                yield sse("error", {"detail": f"generation failed: {payload}"})
                return
    finally:
        stop.set()  # also on client disconnect (GeneratorExit): the model stops at its next token


def event_stream(events: Generator[str, None, None], on_close: Callable[[], None]) -> StreamingResponse:
    """The ``text/event-stream`` response that sends ``events``; ``on_close`` runs once when the stream ends or
    the client goes away (e.g. to release the question's admission slot)."""
    return StreamingResponse(
        _closing(events, on_close),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _closing(events: Generator[str, None, None], on_close: Callable[[], None]) -> Iterator[str]:
    """Pass ``events`` through, closing them and calling ``on_close`` when the stream ends or the client goes away."""
    try:
        yield from events
    finally:
        events.close()
        on_close()
