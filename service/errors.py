"""The errors only the HTTP service raises, and how every citerag error becomes an HTTP response.

:class:`Overloaded`, :class:`Unauthorized` and :class:`WritesDisabled` concern admission and API keys, which only
the service has; they derive from :class:`citerag.index.errors.CiteragError` like the index's own errors, so the one
exception handler here (and the CLI, which maps every ``CiteragError`` to exit code 2) treats them all alike.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from citerag.index.errors import (
    BackendUnavailable,
    CiteragError,
    DocumentNotFound,
    IndexMismatch,
    IndexNotFound,
    IngestError,
    ModelNotFound,
)


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
    DocumentNotFound: 404,
    IngestError: 400,
    IndexNotFound: 503,
    IndexMismatch: 503,
    ModelNotFound: 503,
    Overloaded: 503,
    BackendUnavailable: 503,
    Unauthorized: 401,
    WritesDisabled: 403,
}


def status_of(exc: CiteragError) -> int:
    """The HTTP status code of a citerag error (400 for a kind with no code of its own)."""
    return next((code for kind, code in _STATUS.items() if isinstance(exc, kind)), 400)


async def citerag_error(_: Request, exc: CiteragError) -> JSONResponse:
    """Exception handler: ``{"detail": <message>, "error": <class name>}`` with the error's status code, and
    ``Retry-After`` when the service is overloaded."""
    headers = {"Retry-After": str(exc.retry_after)} if isinstance(exc, Overloaded) else None
    return JSONResponse({"detail": str(exc), "error": type(exc).__name__}, status_code=status_of(exc), headers=headers)


async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
    """Exception handler: 422 naming each bad field. The offending input is not echoed back: it may be huge, or
    hold lone surrogates or NaN that cannot be encoded as JSON."""
    detail = [{"loc": list(err["loc"]), "msg": err["msg"], "type": err["type"]} for err in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)
