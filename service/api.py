"""The HTTP JSON API (FastAPI). OpenAPI docs at ``/docs``; the web page at ``/`` (:mod:`service.web`).

The index loads in the lifespan and the answering model in a background thread (/health says when it is ready); ``/ask`` and ``/search`` are synchronous handlers, which FastAPI
runs in its thread pool, so ``/health`` answers while a generation is running.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Body, Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import ValidationError

from index.errors import CiteragError, DocumentNotFound, ModelNotFound
from index.backend import SearchBackend
from index.store import LoadedIndex
from service.answer import Answer, Answerer
from service.middleware import BodySizeLimit
from service.errors import Overloaded, Unauthorized, WritesDisabled, citerag_error, validation_error
from service.pipeline import ensure_index, index_notes, open_answerer, open_backend, open_milvus_backend
from service.schemas import (
    MAX_DOCUMENTS_PER_REQUEST,
    AskRequest,
    AskResponse,
    DocumentIn,
    DocumentOut,
    DocumentsPage,
    DocumentSummary,
    Health,
    PassageOut,
    SearchRequest,
    SearchResponse,
    WriteReportOut,
)
from service.observability import Metrics, RequestContext
from service.openai_compat import MODEL_ID, ChatRequest, completion, stream_of
from service.settings import Settings, get_settings
from service.streaming import answer_events
from service.web import mount_web

log = logging.getLogger(__name__)

class AdmissionGate:
    """Bounds the questions admitted at once (running + waiting for the single model slot).

    Args:
        limit: most questions admitted at once; one more raises :class:`Overloaded` (HTTP 503 + Retry-After).
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._slots = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self.admitted = 0

    def enter(self) -> None:
        if not self._slots.acquire(blocking=False):
            raise Overloaded(f"{self.limit} questions are already queued for the model; retry shortly", retry_after=15)
        with self._lock:
            self.admitted += 1

    def leave(self) -> None:
        with self._lock:
            self.admitted -= 1
        self._slots.release()


class WriteGuard:
    """Who may call the write endpoints: reads are open, writes need the API key.

    Args:
        api_key: the configured key; requests must send ``Authorization: Bearer <key>`` (compared in constant
            time, :func:`hmac.compare_digest`). ``None``: no key is asked for, and writes are enabled only when
            ``host`` is a loopback address (a service reachable from other machines never takes unkeyed writes).
        host: the address the service listens on.
    """

    def __init__(self, api_key: str | None, host: str) -> None:
        self.api_key = api_key
        self.host = host
        self.enabled = api_key is not None or _is_loopback(host)

    def check(self, credentials: HTTPAuthorizationCredentials | None) -> None:
        """Raises :class:`WritesDisabled` (403) or :class:`Unauthorized` (401); returns when the write may go."""
        if not self.enabled:
            raise WritesDisabled(
                f"writes are disabled: the service listens on {self.host} and CITERAG_API_KEY is not set; "
                "set it and send 'Authorization: Bearer <key>'"
            )
        if self.api_key is None:
            return
        given = credentials.credentials if credentials is not None else ""
        if not hmac.compare_digest(given.encode(), self.api_key.encode()):
            what = "missing" if credentials is None else "wrong"
            raise Unauthorized(f"API key {what}: send 'Authorization: Bearer <CITERAG_API_KEY>'")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class AnswererLoader:
    """Loads the answerer (the chat model: seconds to a minute on 2 cores) in a background thread, so the service
    answers ``/health`` and ``/search`` at once and ``/health`` says whether the model is ready.

    Args:
        load: makes the answerer (e.g. :func:`service.pipeline.open_answerer` over the backend).
    """

    def __init__(self, load: Callable[[], Answerer]) -> None:
        self._load = load
        self._done = threading.Event()
        self._answerer: Answerer | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._run, name="citerag-model-load", daemon=True).start()

    def _run(self) -> None:
        try:
            self._answerer = self._load()
        except BaseException as exc:  # noqa: BLE001 - kept and raised to every caller of get()
            self.error = exc
            log.error("the answering model failed to load: %s", exc)
        finally:
            self._done.set()

    @property
    def state(self) -> str:
        """``loading``, ``ready`` or ``failed``."""
        if not self._done.is_set():
            return "loading"
        return "ready" if self._answerer is not None else "failed"

    @property
    def ready(self) -> bool:
        """True once the model is loaded (False while loading, or when loading failed)."""
        return self._done.is_set() and self._answerer is not None

    def get(self) -> Answerer:
        """The answerer, waiting for the load to finish.

        Raises:
            ModelNotFound: the model could not be loaded (HTTP 503; the message says which package to install).
        """
        self._done.wait()
        if self._answerer is None:
            raise ModelNotFound(f"the answering model failed to load: {self.error}")
        return self._answerer


@dataclass(slots=True)
class Service:
    """What the handlers share: the retrieval backend, the answerer (loading in the background), the admission
    gate and the write guard."""

    backend: SearchBackend
    loader: AnswererLoader
    gate: AdmissionGate
    writes: WriteGuard
    default_k: int = 5

    @property
    def answerer(self) -> Answerer:
        """The answerer; a question that comes while the model loads waits for it (:meth:`AnswererLoader.get`)."""
        return self.loader.get()


def get_service(request: Request) -> Service:
    """The :class:`Service` loaded by the lifespan."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(get_service)]
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False))]


def create_app(settings: Settings | None = None, index: LoadedIndex | None = None) -> FastAPI:
    """Build the app.

    Args:
        settings: effective settings (default :func:`get_settings`).
        index: an index the caller already loaded (``citerag serve`` builds/loads it before starting); when
            ``None`` the lifespan builds it on first start (or when the corpus/settings changed) and loads it.
    """

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        effective = settings or get_settings()
        if effective.backend == "milvus":
            backend: SearchBackend = open_milvus_backend(effective, show_progress=False)
            notes: list[str] = []
        else:
            live = index or ensure_index(effective, show_progress=False)
            backend, notes = open_backend(effective, live), index_notes(live)
        key = effective.api_key.get_secret_value() if effective.api_key else None
        writes = WriteGuard(key, effective.host)
        app.state.service = Service(
            backend, AnswererLoader(lambda: open_answerer(effective, backend)), AdmissionGate(effective.max_queue),
            writes, effective.ask_k,
        )
        metrics.documents.set_function(lambda: int(backend.stats()["documents"]))
        metrics.passages.set_function(lambda: int(backend.stats()["passages"]))
        metrics.queue_depth.set_function(lambda: app.state.service.gate.admitted)
        stats = backend.stats()
        log.info("serving %s documents, %s passages (%s backend, %s)", stats["documents"], stats["passages"],
                 backend.name, stats["version"])
        if not writes.enabled:
            log.warning("write endpoints disabled: listening on %s without CITERAG_API_KEY", effective.host)
        for note in notes:  # records skipped at ingest; an empty index
            log.warning("%s (%s)", note, stats["version"])
        yield

    app = FastAPI(
        title="citerag",
        version="0.1.0",
        summary="Cited answers over scientific paper abstracts: hybrid BM25 + dense retrieval, local model.",
        lifespan=lifespan,
    )

    metrics = Metrics()
    app.state.metrics = metrics
    origins = (settings or get_settings()).cors_origins
    if origins:  # CORS is off unless origins are configured
        app.add_middleware(CORSMiddleware, allow_origins=origins, allow_methods=["GET", "POST"], allow_headers=["*"])
    app.add_middleware(RequestContext, metrics=metrics)
    app.add_middleware(BodySizeLimit, max_bytes=(settings or get_settings()).max_body_bytes)

    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(CiteragError, citerag_error)

    @app.get("/health")
    async def health(service: ServiceDep) -> Health:
        """Liveness, index size and whether the answering model is loaded yet; never waits for the model."""
        stats = service.backend.stats()
        return Health(
            status="ok",
            documents=int(stats["documents"]),
            passages=int(stats["passages"]),
            index_version=str(stats["version"]),
            generator_loaded=service.loader.ready,
            generator=service.loader.state,
        )

    @app.post("/search")
    def search(body: SearchRequest, service: ServiceDep) -> SearchResponse:
        """Top-k passages by hybrid (RRF of BM25 and dense), BM25 or dense retrieval."""
        results = service.backend.search(
            body.query, k=body.k, mode=body.mode, one_per_doc=body.one_per_doc, filters=body.filters
        )
        return SearchResponse(query=body.query, mode=body.mode, results=[PassageOut.of(r) for r in results])

    @app.post("/ask", response_model=AskResponse, responses={200: {"content": {"text/event-stream": {}}}})
    def ask(body: AskRequest, request: Request, service: ServiceDep) -> AskResponse | StreamingResponse:
        """Answer from the top-k passages with checked [n] citations, or abstain.

        With ``"stream": true`` (or ``Accept: text/event-stream``) the answer comes as server-sent events:
        ``passages``, then ``token`` events, then ``answer`` (the checked response). Beyond ``CITERAG_MAX_QUEUE``
        questions at once: 503 with ``Retry-After``.
        """
        streaming = body.stream or "text/event-stream" in request.headers.get("accept", "")
        body = body.model_copy(update={"k": body.k or service.default_k})
        return respond(
            service, body, streaming,
            lambda: answer_events(service.answerer, body.question, body.k, body.filters, on_done=_observe),
            lambda response: response,
        )

    def respond(
        service: Service,
        body: AskRequest,
        streaming: bool,
        events: Callable[[], Generator[str, None, None]],
        render: Callable[[AskResponse], Any],
    ) -> Any:
        """Admit the question (or 503), then stream ``events()`` or answer at once and ``render`` the response;
        the admission slot is held until the answer or the stream ends."""
        service.gate.enter()
        if streaming:
            return StreamingResponse(
                _released(events(), service.gate),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            answer = service.answerer.ask(body.question, k=body.k, filters=body.filters)
        finally:
            service.gate.leave()
        _observe(answer)
        return render(AskResponse.of(answer))

    def _observe(answer: Answer) -> None:
        metrics.observe_answer(answer.timings_ms, answer.completion_tokens)

    @app.get("/v1/models")
    async def openai_models() -> dict:
        """OpenAI-compatible model list: the one model, ``citerag``."""
        return {"object": "list", "data": [{"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "citerag"}]}

    @app.post("/v1/chat/completions", response_model=None)
    def openai_chat(body: ChatRequest, service: ServiceDep) -> dict | StreamingResponse:
        """OpenAI-compatible chat: the last user message is the question (see ``service/openai_compat.py``)."""
        try:
            request = AskRequest(question=body.question(), k=service.default_k)
        except ValidationError as exc:
            raise RequestValidationError([{**err, "loc": ("body", "messages")} for err in exc.errors()]) from exc
        except ValueError as exc:
            raise RequestValidationError(
                [{"loc": ("body", "messages"), "msg": str(exc), "type": "value_error"}]
            ) from exc
        return respond(
            service, request, body.stream,
            lambda: stream_of(service.answerer, request.question, request.k, on_done=_observe),
            completion,
        )

    @app.get("/metrics", include_in_schema=False)
    async def prometheus_metrics() -> Response:
        """Prometheus text format: requests, latency, answering stages, tokens, index size, queue depth."""
        return metrics.render()

    @app.get("/documents")
    async def list_documents(
        service: ServiceDep,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> DocumentsPage:
        """Documents in index order, paged."""
        total = int(service.backend.stats()["documents"])
        page = [DocumentSummary.of(d) for d in service.backend.documents(offset, limit)]
        return DocumentsPage(total=total, offset=offset, limit=limit, documents=page)

    @app.get("/documents/{doc_id:path}")
    async def get_document(doc_id: str, service: ServiceDep) -> DocumentOut:
        """One document: full text, metadata and its passages' spans."""
        doc = service.backend.document(doc_id)
        if doc is None:
            raise DocumentNotFound(f"no document with id {doc_id!r}; list ids with GET /documents")
        spans = [
            {"chunk_id": p.chunk_id, "ordinal": p.ordinal, "start": p.start, "end": p.end}
            for p in service.backend.passages_of(doc_id)
        ]
        return DocumentOut(**DocumentSummary.of(doc).model_dump(), text=doc.text, passages=spans)

    @app.post("/documents", responses={401: {}, 403: {}})
    def add_documents(
        service: ServiceDep,
        documents: Annotated[list[DocumentIn], Body(min_length=1, max_length=MAX_DOCUMENTS_PER_REQUEST)],
        credentials: BearerDep,
    ) -> WriteReportOut:
        """Add documents, or replace them by id (their old passages go). Only new and changed passages are
        embedded; searches keep answering from the previous version until the new one is committed.
        Needs ``Authorization: Bearer <CITERAG_API_KEY>`` when a key is set."""
        service.writes.check(credentials)
        docs = [item.to_document() for item in documents]
        first: dict[str, int] = {}
        for position, doc in enumerate(docs):
            if doc.doc_id in first and docs[first[doc.doc_id]] != doc:
                raise RequestValidationError([{
                    "loc": ["body", position, "id"], "type": "value_error",
                    "msg": f"id {doc.doc_id!r} is also item {first[doc.doc_id]} with other content; ids must be unique",
                }])
            first.setdefault(doc.doc_id, position)
        return WriteReportOut.of(service.backend.add_documents(list({d.doc_id: d for d in docs}.values())))

    @app.delete("/documents/{doc_id:path}", responses={401: {}, 403: {}, 404: {}})
    def delete_document(doc_id: str, service: ServiceDep, credentials: BearerDep) -> WriteReportOut:
        """Remove a document and all its passages. Needs the API key when one is set."""
        service.writes.check(credentials)
        return WriteReportOut.of(service.backend.delete_documents([doc_id]))

    mount_web(app)
    return app


def _released(events: Generator[str, None, None], gate: AdmissionGate) -> Iterator[str]:
    """Pass ``events`` through, leaving ``gate`` when the stream ends or the client goes away."""
    try:
        yield from events
    finally:
        events.close()
        gate.leave()
