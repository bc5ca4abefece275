"""The OpenAI-compatible routes, ``GET /v1/models`` and ``POST /v1/chat/completions``; the request model and the
translation of answers into OpenAI objects are in :mod:`citerag.service.openai_compat`."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.exceptions import RequestValidationError
from fastapi.sse import EventSourceResponse
from pydantic import ValidationError

from citerag.service.conversation import latest_turns
from citerag.service.openai_compat import MODEL_ID, ChatRequest, completion, completion_chunks
from citerag.service.routes.ask import answer_or_stream
from citerag.service.schemas import AskRequest
from citerag.service.state import ServiceDep

router = APIRouter()


@router.get("/v1/models")
async def openai_models() -> dict:
    """OpenAI-compatible model list: the one model, ``citerag``."""
    return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "citerag"}]}


@router.post("/v1/chat/completions", response_model=None)
def openai_chat(body: ChatRequest, service: ServiceDep) -> dict | EventSourceResponse:
    """OpenAI-compatible chat: the last user message is the question, made standalone from the messages before it
    (see ``service/openai_compat.py``)."""
    request = ask_request(body, service.default_k)
    history = latest_turns(body.history(), service.history_max_turns, service.history_max_chars)
    return answer_or_stream(service, request, history, body.stream, completion, completion_chunks)


def ask_request(body: ChatRequest, k: int) -> AskRequest:
    """The ``/ask`` request a chat request stands for: its last user message, ``k`` passages.

    Raises:
        RequestValidationError: no user message with text, or one that is not a valid question (422 at
            ``["body", "messages"]``).
    """
    try:
        return AskRequest(question=body.question(), k=k)
    except ValidationError as exc:
        raise RequestValidationError([{**err, "loc": ("body", "messages")} for err in exc.errors()]) from exc
    except ValueError as exc:
        raise RequestValidationError([{"loc": ("body", "messages"), "msg": str(exc), "type": "value_error"}]) from exc
