"""Server-sent events for ``POST /ask`` with ``"stream": true`` (and the OpenAI-compatible stream), in FastAPI's
own SSE types (:mod:`fastapi.sse`): each event is a ``ServerSentEvent``, framed by ``format_sse_event`` and sent in
an ``EventSourceResponse``.

Event order: ``passages`` (the retrieved passages, numbered as the answer cites them), ``evidence`` (the sentences
the answer is written from, with ``doc_id``, ``start`` and ``end``, as soon as they are chosen; sent again, in
their place, when the judge's second look answers from the next-best sentences, or with the papers named once
each candidate paper of a which-papers question was judged), then one ``token`` event per piece of the answer as
the model writes it (citation markers already the passages' ``[n]``), then ``answer`` (the full
:class:`~citerag.service.schemas.AskResponse` after every sentence was checked against its evidence; its
``answer`` replaces the streamed text) -- or ``error``. An abstention decided before writing streams no
``token``; a which-papers answer made of the named papers' own sentences streams each paper's sentence as soon as
that paper is named, then the ``evidence`` of the named papers. When the client disconnects
the generator is closed and generation stops at the next token.

FastAPI streams SSE itself only from a generator endpoint (``response_class=EventSourceResponse`` and ``yield``),
which cannot also answer plain JSON as ``/ask`` and ``/v1/chat/completions`` do without ``stream``; so the
handlers return the ``EventSourceResponse`` themselves (:func:`event_stream`). That path sends no ``: ping``
keep-alive comments, as before: each event is one ``event:`` line and one ``data:`` line.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Generator, Iterator

import anyio
import anyio.to_thread
from fastapi.sse import EventSourceResponse, ServerSentEvent, format_sse_event
from starlette.types import Receive, Scope, Send

from citerag.service.library import StreamEvent

#: The stream's headers: no caching, and no buffering by an nginx proxy (the headers FastAPI's own SSE sets).
STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def encode(event: ServerSentEvent) -> bytes:
    """One event in the WHATWG event-stream format (FastAPI's ``format_sse_event``): ``data`` as one line of JSON
    with non-ASCII text kept as it is (``raw_data`` as given)."""
    if event.raw_data is not None:
        data: str | None = event.raw_data
    else:
        data = None if event.data is None else json.dumps(event.data, ensure_ascii=False)
    return format_sse_event(data_str=data, event=event.event, id=event.id, retry=event.retry, comment=event.comment)


def answer_events(events: Iterator[StreamEvent]) -> Generator[ServerSentEvent, None, None]:
    """The SSE stream of one question (module docstring): the Python API's events
    (:meth:`~citerag.service.library.Library.ask` with ``stream=True``) as server-sent events, or an ``error`` event
    when answering fails. Closing this generator closes ``events``, which stops the model at its next token."""
    try:
        for event in events:
            yield ServerSentEvent(event=event.kind, data=event.json())
    except Exception as exc:  # noqa: BLE001 - reported to the client as an error event
        yield ServerSentEvent(event="error", data={"detail": f"answering failed: {exc}"})
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()  # also on client disconnect (GeneratorExit)


def event_stream(events: Generator[ServerSentEvent, None, None], on_close: Callable[[], None]) -> EventSourceResponse:
    """The ``text/event-stream`` response that sends ``events``; ``on_close`` runs once when the stream ends or
    the client goes away (e.g. to release the question's admission slot), and ``events`` is closed then, which
    stops the generation at its next token."""
    return _ClosingEventSource(_Events(events, on_close))


class _Events:
    """``events`` encoded, as an iterator that can be closed from another thread while a ``next`` is running (the
    close then waits for it: at most until the model's next token)."""

    def __init__(self, events: Generator[ServerSentEvent, None, None], on_close: Callable[[], None]) -> None:
        self._events = events
        self._on_close = on_close
        self._lock = threading.Lock()
        self._closed = False

    def __iter__(self) -> Iterator[bytes]:
        return self

    def __next__(self) -> bytes:
        with self._lock:
            if self._closed:
                raise StopIteration
            try:
                return encode(next(self._events))
            except BaseException:  # the end (StopIteration), or a failure: either way the stream is over
                self._close()
                raise

    def close(self) -> None:
        """Close ``events`` and call ``on_close``, once."""
        with self._lock:
            self._close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._events.close()
        finally:
            self._on_close()


class _ClosingEventSource(EventSourceResponse):
    """An ``EventSourceResponse`` that closes its events as soon as the response is over, also when the client
    went away. Starlette iterates a synchronous iterator in a worker thread and, on a disconnect, only drops it:
    without this, the events (and the admission slot) would be freed by the garbage collector, seconds or
    minutes later, while the model kept generating for nobody."""

    def __init__(self, events: _Events) -> None:
        super().__init__(events, headers=STREAM_HEADERS)
        self._events = events

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with anyio.CancelScope(shield=True):  # also when the server cancels the request
                await anyio.to_thread.run_sync(self._events.close)
