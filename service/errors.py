"""The errors the service raises beside the index's own, and how every citerag error becomes an HTTP response.

:class:`InvalidRequest` is bad input to the Python API (:class:`citerag.service.library.Library`), which the HTTP
routes call: the same field errors, with the same messages, as the 422 bodies FastAPI writes for a bad request
body. :class:`Overloaded`, :class:`Unauthorized` and :class:`WritesDisabled` concern admission and API keys, which
only the HTTP service has. All derive from :class:`citerag.index.errors.CiteragError` like the index's own errors,
so the one exception handler here (and the CLI, which maps every ``CiteragError`` to exit code 2) treats them all
alike; a full disk (:class:`~citerag.index.diskspace.DiskFull`) is a 507 saying what to free. ``citerag.errors``
re-exports them all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from citerag.index.diskspace import DiskFull
from citerag.index.errors import (
    BackendUnavailable,
    CiteragError,
    DocumentNotFound,
    IndexMismatch,
    IndexNotFound,
    IngestError,
    ModelNotFound,
)


class InvalidRequest(CiteragError, ValueError):
    """Bad input to the Python API: a question, query, ``k``, filter, history or document that the HTTP API would
    answer with 422.

    Attributes:
        errors: one entry per bad field, as in the HTTP 422 body's ``detail`` without its leading ``"body"``:
            ``{"loc": [...], "msg": ..., "type": ...}`` (the message is pydantic's, the same as the HTTP one).

    The message is one line per field, ``field: message`` (``k: Input should be less than or equal to 100``).
    """

    def __init__(self, errors: Sequence[dict[str, Any]]) -> None:
        self.errors = [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]
        super().__init__("\n".join(f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in self.errors))

    @classmethod
    def of(cls, exc: Any, prefix: Sequence[str | int] = ()) -> InvalidRequest:
        """The error for a pydantic ``ValidationError`` ``exc``, each location after ``prefix``."""
        return cls([{**e, "loc": [*prefix, *e["loc"]]} for e in exc.errors()])

    @classmethod
    def at(cls, loc: Sequence[str | int], message: str) -> InvalidRequest:
        """One bad field at ``loc``, with ``message`` (a ``value_error``, as a pydantic validator raises)."""
        return cls([{"loc": list(loc), "msg": message, "type": "value_error"}])


class Overloaded(CiteragError):
    """Too many questions are waiting for the model; retry after ``retry_after`` seconds."""

    def __init__(self, message: str, retry_after: int = 10) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Unauthorized(CiteragError):
    """A write endpoint was called without the right API key (``Authorization: Bearer <CITERAG_API_KEY>``)."""


class WritesDisabled(CiteragError):
    """Writes are off: the service listens on a non-loopback address and no API key is configured."""


_STATUS: dict[type[CiteragError], int] = {
    InvalidRequest: 422,
    DocumentNotFound: 404,
    IngestError: 400,
    IndexNotFound: 503,
    IndexMismatch: 503,
    ModelNotFound: 503,
    Overloaded: 503,
    BackendUnavailable: 503,
    Unauthorized: 401,
    WritesDisabled: 403,
    DiskFull: 507,
}


def status_of(exc: CiteragError) -> int:
    """The HTTP status code of a citerag error (400 for a kind with no code of its own)."""
    return next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)


async def citerag_error(_: Request, exc: Exception) -> JSONResponse:
    """Exception handler of :class:`CiteragError`: ``{"detail": <message>, "error": <class name>}`` with the error's
    status code, and ``Retry-After`` when the service is overloaded. A full disk (:class:`DiskFull`, 507 Insufficient
    Storage) adds where and how much is free: ``part``, ``path``, ``filesystem``, ``free_bytes``, ``quota`` and
    ``free`` (what to free)."""
    assert isinstance(exc, CiteragError), "registered for CiteragError"
    if isinstance(exc, InvalidRequest):  # a field error found past FastAPI's own validation: its 422 shape
        detail = [{**error, "loc": ["body", *error["loc"]]} for error in exc.errors]
        return JSONResponse({"detail": detail}, status_code=422)
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Overloaded) else None
    body: dict[str, Any] = {"detail": str(exc), "error": type(exc).__name__}
    if isinstance(exc, DiskFull):
        body |= {**exc.as_dict(), "free": exc.advice}
    return JSONResponse(body, status_code=status_of(exc), headers=headers)


#: Added to a 422 whose body is not an object when the request did not say it is JSON (``curl -d`` without ``-H
#: 'content-type: application/json'`` sends a form): the body was read as text, not parsed.
JSON_CONTENT_HINT = "send the body as JSON with the header 'Content-Type: application/json'"


async def validation_error(request: Request, exc: Exception) -> JSONResponse:
    """Exception handler of FastAPI's ``RequestValidationError``: 422 naming each bad field. The offending input is not echoed back: it may be huge, or
    hold lone surrogates or NaN that cannot be encoded as JSON. A body that is not an object, sent without a JSON
    content type, gets :data:`JSON_CONTENT_HINT` in its message."""
    assert isinstance(exc, RequestValidationError), "registered for RequestValidationError"
    json_sent = "json" in request.headers.get("content-type", "").lower()
    detail = []
    for err in exc.errors():
        msg = err["msg"]
        if not json_sent and list(err["loc"]) == ["body"] and err["type"] in ("model_attributes_type", "dict_type"):
            msg = f"{msg}: {JSON_CONTENT_HINT}"
        detail.append({"loc": list(err["loc"]), "msg": msg, "type": err["type"]})
    return JSONResponse({"detail": detail}, status_code=422)
