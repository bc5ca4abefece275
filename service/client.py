"""A client of a running citerag service: ``citerag ask --server URL`` (and ``citerag chat --server URL``) asks the
service that ``make serve`` started instead of loading the index and the model in the command's own process (a
cold ``citerag ask`` takes ~15 s on 2 cores, most of it loading and reading the fixed prompt once; a served
question ~3 s).

:class:`RemoteLibrary` has :class:`~citerag.service.library.Library`'s ``ask`` (plain or streamed), over
``POST {url}/ask`` (httpx; the stream's server-sent events read with httpx-sse), and returns the same types
(:class:`~citerag.service.schemas.AskResponse`, :class:`~citerag.service.library.StreamEvent`), so the CLI prints a
served answer as it prints its own.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Literal, overload

import httpx
from httpx_sse import connect_sse

from citerag.index.errors import CiteragError
from citerag.service.conversation import Turn
from citerag.service.library import StreamEvent
from citerag.service.schemas import AskResponse, EvidenceOut, PassageOut

#: Seconds to wait for the service: a question queued behind others on 2 cores can take minutes.
TIMEOUT_S = 600.0


class ServiceError(CiteragError):
    """The service could not be reached, or it refused or failed the request (its own message)."""


class RemoteLibrary:
    """Ask a running citerag service (module docstring).

    Args:
        url: the service's base URL, e.g. ``http://127.0.0.1:8000``.
        timeout_s: seconds to wait for an answer (:data:`TIMEOUT_S`).
    """

    def __init__(self, url: str, timeout_s: float = TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    @overload
    def ask(self, question: str, k: int | None = None, stream: Literal[False] = False,
            history: Sequence[Turn] = ()) -> AskResponse: ...

    @overload
    def ask(self, question: str, k: int | None = None, *, stream: Literal[True],
            history: Sequence[Turn] = ()) -> Iterator[StreamEvent]: ...

    def ask(self, question: str, k: int | None = None, stream: bool = False,
            history: Sequence[Turn] = ()) -> AskResponse | Iterator[StreamEvent]:
        """``POST /ask``: the checked answer, or with ``stream=True`` the stream's events as they come (``passages``,
        ``evidence``, ``token``..., ``answer``); ``history``: the conversation's earlier turns, oldest first (a
        follow-up is made standalone from them, as the service's ``history`` does).

        Raises:
            ServiceError: no service answers at :attr:`url`, or it answered with an error (4xx/5xx, or the stream's
                ``error`` event): its message, e.g. ``question: String should have at least 1 character``.
        """
        body: dict[str, Any] = {"question": question, "k": k}
        if history:
            body["history"] = [{"role": t.role, "content": t.content, "doc_ids": list(t.doc_ids)} for t in history]
        if stream:
            return self._events({**body, "stream": True})
        with self._client() as client:
            response = self._checked(lambda: client.post("/ask", json=body))
            return AskResponse.model_validate(response.json())

    def _client(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=httpx.Timeout(self.timeout_s, connect=5.0))

    def _checked(self, send: Any) -> httpx.Response:
        """``send()``'s response, its error status raised as :class:`ServiceError` with the service's message."""
        try:
            response = send()
        except httpx.TransportError as exc:
            raise self._unreachable(exc) from exc
        if response.is_error:
            response.read()
            raise ServiceError(f"the service at {self.url} answered {response.status_code}: {_detail(response)}")
        return response

    def _events(self, body: dict[str, Any]) -> Iterator[StreamEvent]:
        with self._client() as client:
            try:
                source = connect_sse(client, "POST", "/ask", json=body)
                with source as events:
                    self._checked(lambda: events.response)
                    for sse in events.iter_sse():
                        data = json.loads(sse.data) if sse.data else {}
                        if sse.event == "error":
                            raise ServiceError(f"the service at {self.url} failed: {data.get('detail', data)}")
                        yield _event(sse.event, data)
            except httpx.TransportError as exc:
                raise self._unreachable(exc) from exc

    def _unreachable(self, exc: httpx.TransportError) -> ServiceError:
        """The error for a service that does not answer, saying how to start one."""
        return ServiceError(f"no citerag service answers at {self.url} ({type(exc).__name__}); start one with "
                            "`make serve` or `citerag serve`, or leave out --server")


def _event(kind: str, data: dict[str, Any]) -> StreamEvent:
    """A server-sent event of ``/ask`` as the Python API's :class:`StreamEvent` (the inverse of its ``json``)."""
    if kind == "answer":
        return StreamEvent("answer", AskResponse.model_validate(data))
    if kind == "token":
        return StreamEvent("token", data["text"])
    if kind == "passages":
        return StreamEvent("passages", [PassageOut.model_validate(p) for p in data["passages"]])
    if kind == "evidence":
        return StreamEvent("evidence", [EvidenceOut.model_validate(e) for e in data["evidence"]])
    raise ServiceError(f"unexpected event {kind!r} in the answer stream")


def _detail(response: httpx.Response) -> str:
    """The error body's message: a 422's first field error as ``field: message``, else its ``detail``."""
    try:
        detail = response.json().get("detail", response.text)
    except (ValueError, AttributeError):
        return response.text.strip()[:200] or response.reason_phrase
    if isinstance(detail, list) and detail:
        first = detail[0]
        field = ".".join(str(part) for part in first.get("loc", ())[1:]) or "input"
        return f"{field}: {first.get('msg', first)}"
    return str(detail)
