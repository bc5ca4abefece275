"""ASGI middleware of the HTTP service: :class:`BodySizeLimit` reads a request body before the app does.

FastAPI 0.165's own ``max_body_size`` (Starlette's ``RequestBodyLimitMiddleware``) refuses oversized bodies too,
but as ``{"detail": "Content Too Large"}`` without the ``error`` field (plain text when the app does not read the
body) and with no depth check; this one answers in the API's error format and turns a JSON body nested past the
parser's recursion limit, or one that is not UTF-8 text, into a 400.
"""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodySizeLimit:
    """ASGI middleware that reads a request body before the app does: over ``max_bytes`` it is refused with 413,
    whether or not it declares its Content-Length (a chunked body is counted as it arrives; nothing past the limit
    is kept), and a JSON body that is not text (invalid UTF-8) or is nested deeper than Python's parser can follow
    gets a 400 that says so (instead of the framework's "There was an error parsing the body"). The app then
    receives the body as it came."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _reject(send, 413, "BodyTooLarge", f"request body larger than {self.max_bytes} bytes")
            return
        chunks: list[bytes] = []
        seen = 0
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":  # the client went away
                return
            chunk = message.get("body", b"")
            seen += len(chunk)
            if seen > self.max_bytes:
                await _reject(send, 413, "BodyTooLarge", f"request body larger than {self.max_bytes} bytes")
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body = b"".join(chunks)
        json_sent = b"json" in headers.get(b"content-type", b"json")
        if json_sent and not _is_text(body):
            await _reject(send, 400, "BodyNotText",
                          "request body: not valid UTF-8 text; send the JSON encoded as UTF-8")
            return
        # only a body with many brackets can nest past the parser: others are not parsed twice
        if json_sent and body.count(b"[") + body.count(b"{") > _PARSE_DEPTH:
            try:
                json.loads(body)
            except RecursionError:
                await _reject(send, 400, "BodyTooDeep",
                              "request body: JSON nested too deeply to parse; flatten the structure")
                return
            except ValueError:
                pass  # malformed JSON: the app answers 422 naming where
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()  # after the body: wait for the disconnect
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


#: A JSON body with at most this many opening brackets cannot nest deep enough to exhaust Python's parser (its
#: recursion limit is 1000 frames), so the middleware parses only bodies with more.
_PARSE_DEPTH = 100


def _is_text(body: bytes) -> bool:
    """Whether a JSON body decodes as text in the encoding :func:`json.detect_encoding` finds (UTF-8, or UTF-16/32
    by their byte order; RFC 8259 section 8.1), as the framework's parser will decode it."""
    try:
        body.decode(json.detect_encoding(body))
    except UnicodeDecodeError:
        return False
    return True


async def _reject(send: Send, status: int, error: str, detail: str) -> None:
    response = JSONResponse({"detail": detail, "error": error}, status_code=status)
    await response({"type": "http"}, _no_receive, send)


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
