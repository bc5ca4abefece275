"""``POST /ask``: a cited answer, or an abstention; as JSON, or as server-sent events (:mod:`citerag.service.streaming`).

:func:`answer_or_stream` (admission, then an answer or a stream) is shared with the OpenAI-compatible route.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.sse import EventSourceResponse, ServerSentEvent

from citerag.service.conversation import Standalone, check_history, standalone
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

    With ``history`` (earlier turns), a follow-up is made standalone first (:mod:`citerag.service.conversation`)
    and ``question_used`` says what was answered; a history over the configured bounds is a 422 at
    ``["body", "history"]``.
    """
    streaming = body.stream or "text/event-stream" in request.headers.get("accept", "")
    body = body.model_copy(update={"k": body.k or service.default_k})
    turns = [turn.to_turn() for turn in body.history]
    try:
        check_history(turns, service.history_max_turns, service.history_max_chars)
    except ValueError as exc:
        raise RequestValidationError([{"loc": ("body", "history"), "msg": str(exc), "type": "value_error"}]) from exc
    resolved = standalone(body.question, turns)
    return answer_or_stream(
        service, body, resolved, streaming,
        lambda: answer_events(service.answerer, resolved.question, body.k, body.filters, on_done=service.observe,
                              keep=resolved.keep, asked=body.question),
        lambda response: response,
    )


def answer_or_stream(
    service: Service,
    body: AskRequest,
    resolved: Standalone,
    streaming: bool,
    events: Callable[[], Generator[ServerSentEvent, None, None]],
    render: Callable[[AskResponse], Any],
) -> Any:
    """Admit the question, then stream ``events()`` or answer ``resolved.question`` (the standalone form of
    ``body.question``) at once and ``render`` the response; the admission slot is held until the answer or the
    stream ends (or its client goes away).

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
        answer = service.answerer.ask(resolved.question, k=body.k, filters=body.filters, keep=resolved.keep)
    finally:
        service.gate.leave()
    service.observe(answer)
    return render(AskResponse.of(answer, asked=body.question))
