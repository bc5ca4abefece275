"""``POST /ask``: a cited answer, or an abstention; as JSON, or as server-sent events (:mod:`citerag.service.streaming`).

:func:`answer_or_stream` (admission, then an answer or a stream) is shared with the OpenAI-compatible route.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.sse import EventSourceResponse, ServerSentEvent

from citerag.service.schemas import AskRequest, AskResponse
from citerag.service.state import Service, ServiceDep
from citerag.service.streaming import answer_events, event_stream

router = APIRouter()


@router.post("/ask", response_model=AskResponse, responses={200: {"content": {"text/event-stream": {}}}})
def ask(body: AskRequest, request: Request, service: ServiceDep) -> AskResponse | EventSourceResponse:
    """Answer from the top-k passages with checked [n] citations, or abstain.

    With ``"stream": true`` (or ``Accept: text/event-stream``) the answer comes as server-sent events:
    ``passages``, then ``token`` events, then ``answer`` (the checked response). Beyond ``CITERAG_MAX_QUEUE``
    questions at once: 503 with ``Retry-After``.
    """
    streaming = body.stream or "text/event-stream" in request.headers.get("accept", "")
    body = body.model_copy(update={"k": body.k or service.default_k})
    return answer_or_stream(
        service, body, streaming,
        lambda: answer_events(service.answerer, body.question, body.k, body.filters, on_done=service.observe),
        lambda response: response,
    )


def answer_or_stream(
    service: Service,
    body: AskRequest,
    streaming: bool,
    events: Callable[[], Generator[ServerSentEvent, None, None]],
    render: Callable[[AskResponse], Any],
) -> Any:
    """Admit the question, then stream ``events()`` or answer at once and ``render`` the response; the admission
    slot is held until the answer or the stream ends (or its client goes away).

    Raises:
        Overloaded: ``CITERAG_MAX_QUEUE`` questions are already admitted (503 with ``Retry-After``).
        ModelNotFound: the answering model failed to load (503).
    """
    service.gate.enter()
    if streaming:
        try:
            stream = events()  # waits for the model to load
        except BaseException:
            service.gate.leave()
            raise
        return event_stream(stream, on_close=service.gate.leave)
    try:
        answer = service.answerer.ask(body.question, k=body.k, filters=body.filters)
    finally:
        service.gate.leave()
    service.observe(answer)
    return render(AskResponse.of(answer))
