"""An OpenAI-compatible chat endpoint, so existing OpenAI clients and chat UIs can ask citerag.

``POST /v1/chat/completions``: the last user message is the question, and the user and assistant messages before it
are its history: a follow-up is made standalone from them (:mod:`citerag.service.conversation`; the latest
``CITERAG_HISTORY_MAX_TURNS`` turns that fit ``CITERAG_HISTORY_MAX_CHARS`` are kept). The answer text carries
``[n]`` markers and the response adds a ``citations`` field (the same objects as ``/ask``) and ``question_used``
(the standalone question answered). With ``"stream": true`` the raw model text streams as ``chat.completion.chunk``
deltas; the last chunk (``finish_reason: "stop"``) carries ``citations``, ``question_used`` and ``citerag`` (the
full checked ``/ask`` response, whose ``answer`` is authoritative), then ``data: [DONE]``.
``GET /v1/models`` lists the one model, ``citerag``. Sampling parameters are accepted and ignored (decoding is
greedy for reproducible, grounded answers).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Generator, Iterator
from typing import Annotated, Any, Literal

from fastapi.sse import ServerSentEvent
from pydantic import BaseModel, ConfigDict, Field

from citerag.service.conversation import Turn
from citerag.service.schemas import AskResponse

MODEL_ID = "citerag"


class ContentPart(BaseModel):
    """One OpenAI content part; only ``text`` parts are read, other fields (``image_url`` ...) are ignored."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(max_length=64)
    text: str | None = None


class ChatMessage(BaseModel):
    """One chat message: its role and content, a string or OpenAI content parts (only their text is read)."""

    model_config = ConfigDict(extra="ignore")

    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | Annotated[list[ContentPart], Field(max_length=1000)] | None = None

    def text(self) -> str:
        """The message's text (OpenAI content parts joined)."""
        if isinstance(self.content, list):
            return " ".join(part.text or "" for part in self.content if part.type == "text")
        return self.content or ""


class ChatRequest(BaseModel):
    """The subset of OpenAI's chat-completions request that citerag uses; other fields are accepted and ignored
    (not kept: an ignored field cannot carry an unbounded structure into the service)."""

    model_config = ConfigDict(extra="ignore")

    model: str = MODEL_ID
    messages: list[ChatMessage] = Field(..., min_length=1, max_length=1000)
    stream: bool = False

    def question(self) -> str:
        """The last user message.

        Raises:
            ValueError: no user message with text.
        """
        for message in reversed(self.messages):
            if message.role == "user" and message.text().strip():
                return message.text().strip()
        raise ValueError("messages: no user message with text")

    def history(self) -> list[Turn]:
        """The user and assistant messages with text before the last user message with text, oldest first
        (system, tool and developer messages are left out)."""
        last = max((i for i, m in enumerate(self.messages) if m.role == "user" and m.text().strip()), default=0)
        return [Turn(m.role, m.text().strip()) for m in self.messages[:last]
                if m.role in ("user", "assistant") and m.text().strip()]


def completion(response: AskResponse) -> dict[str, Any]:
    """A ``chat.completion`` object for a checked answer, plus ``citations`` and ``citerag`` extras."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": MODEL_ID,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": response.answer}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "citations": [c.model_dump() for c in response.citations],
        "question_used": response.question_used,
        "citerag": response.model_dump(),
    }


def completion_chunks(events: Generator[ServerSentEvent, None, None]) -> Generator[ServerSentEvent, None, None]:
    """Translate citerag's ``/ask`` event stream into OpenAI ``chat.completion.chunk`` server-sent events (``data:``
    only, no event name), ending with ``data: [DONE]``. The content chunks are the answer as the model writes it;
    the last chunk carries the checked answer (``citerag``) and its ``citations``. Closing this generator closes
    ``events`` (which stops the generation)."""
    try:
        yield from _chunks(events)
    finally:
        events.close()


def _chunks(events: Iterator[ServerSentEvent]) -> Iterator[ServerSentEvent]:
    chunk_id, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())

    def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> ServerSentEvent:
        return ServerSentEvent(data={
            "id": chunk_id, "object": "chat.completion.chunk", "created": created, "model": MODEL_ID,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}], **extra,
        })

    yield chunk({"role": "assistant", "content": ""})
    streamed = False
    for event in events:
        payload = event.data
        if event.event == "token":
            streamed = True
            yield chunk({"content": payload["text"]})
        elif event.event == "answer":
            # an abstention decided before generation streamed no text: send the service's message instead
            delta = {} if streamed else {"content": payload["answer"]}
            yield chunk(delta, "stop", citations=payload["citations"], question_used=payload["question_used"],
                        citerag=payload)
        elif event.event == "error":
            yield chunk({}, "stop", error=payload)
    yield ServerSentEvent(raw_data="[DONE]")
