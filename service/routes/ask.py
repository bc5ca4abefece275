"""``POST /ask``: a cited answer, or an abstention; as JSON, or as server-sent events (:mod:`citerag.service.streaming`).

:func:`answer_or_stream` (admission, then an answer or a stream) is shared with the OpenAI-compatible route.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from citerag.service.conversation import Turn
from citerag.service.schemas import AskRequest, AskResponse, HistoryTurn
from citerag.service.state import Service, ServiceDep
from citerag.service.streaming import answer_events, event_stream

router = APIRouter()


@router.post("/ask", response_model=AskResponse, responses={200: {"content": {"text/event-stream": {}}}})
def ask(body: AskRequest, request: Request, service: ServiceDep) -> AskResponse | EventSourceResponse:
    """Answer from the top-k passages with checked [n] citations, or abstain.

    With ``"stream": true`` (or ``Accept: text/event-stream``) the answer comes as server-sent events:
    ``passages``, ``evidence`` (the sentences it is written from), ``token`` events as it is written, then
    ``answer`` (the checked response). Beyond ``CITERAG_MAX_QUEUE`` questions at once: 503 with ``Retry-After``.

    With ``history`` (earlier turns), a follow-up is made standalone first (:mod:`citerag.service.conversation`)
    and ``question_used`` says what was answered; a history over the configured bounds is a 422 at
    ``["body", "history"]``.
    """
    streaming = body.stream or "text/event-stream" in request.headers.get("accept", "")
    return answer_or_stream(service, body, body.history, streaming, lambda response: response)


def answer_or_stream(
    service: Service,
    body: AskRequest,
    history: Sequence[HistoryTurn | Turn],
    streaming: bool,
    render: Callable[[AskResponse], Any],
    stream: Callable[[Generator[ServerSentEvent, None, None]], Generator[ServerSentEvent, None, None]] = lambda e: e,
) -> Any:
    """Admit the question, then answer ``body.question`` (a follow-up made standalone from ``history``) through the
    Python API (:meth:`~citerag.service.library.Library.ask`): as a stream of events (passed through ``stream``,
    e.g. into OpenAI chunks) or at once, ``render``-ing the response. The admission slot is held until the answer
    or the stream ends (or its client goes away).

    Raises:
        Overloaded: ``CITERAG_MAX_QUEUE`` questions are already admitted (503 with ``Retry-After``).
        ModelNotFound: the answering model failed to load (503).
        InvalidRequest: a history over the configured bounds (422 at ``["body", "history"]``).
    """
    library = service.library
    service.gate.enter()
    if streaming:
        try:  # the history is checked and the model waited for before the stream starts
            events = library.ask(body.question, body.k, body.filters, history, stream=True)
        except BaseException:
            service.gate.leave()
            raise
        return event_stream(stream(answer_events(events)), on_close=service.gate.leave)
    try:
        response = library.ask(body.question, body.k, body.filters, history)
    finally:
        service.gate.leave()
    return render(response)
