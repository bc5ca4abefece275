"""The HTTP JSON API (FastAPI). OpenAPI docs at ``/docs``; the web page at ``/`` (:mod:`citerag.service.web`).

:func:`create_app` only assembles the app: settings, the lifespan that opens the shared state
(:class:`citerag.service.state.Service`), middleware, exception handlers (:mod:`citerag.service.errors`) and the routers, one a
resource (:mod:`citerag.service.routes`). The index loads in the lifespan and the answering model in a background thread
(/health says when it is ready); ``/ask`` and ``/search`` are synchronous handlers, which FastAPI runs in its
thread pool, so ``/health`` answers while a generation is running.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware

from citerag.index.backend import SearchBackend
from citerag.index.errors import CiteragError
from citerag.index.lifecycle import ensure_index, index_notes, recover_damaged
from citerag.index.store import LoadedIndex
from citerag.service.errors import citerag_error, validation_error
from citerag.service.middleware import BodySizeLimit
from citerag.service.answering.runner import AnswerPipeline
from citerag.service.observability import Metrics, RequestContext
from citerag.service.pipeline import index_setup, open_answerer, open_backend, open_milvus_backend, read_papers_ahead
from citerag.service.routes import ROUTERS
from citerag.service.runtime import freeze_heap_when
from citerag.service.settings import Settings, get_settings
from citerag.service.state import AdmissionGate, AnswererLoader, Service, WriteGuard
from citerag.service.web import mount_web

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None, index: LoadedIndex | None = None, *,
               server_process: bool = False) -> FastAPI:
    """Build the app.

    Args:
        settings: effective settings (default :func:`get_settings`).
        index: an index the caller already loaded (``citerag serve`` builds/loads it before starting); when
            ``None`` the lifespan builds it on first start (or when the corpus/settings changed) and loads it.
        server_process: the process serves this app alone (``citerag serve``): once the index, then the model,
            is loaded, their objects are moved out of the garbage collector's reach
            (:func:`citerag.service.runtime.freeze_heap_when`).

    Raises:
        RuntimeError: the web page's files are missing (:func:`citerag.service.web.mount_web`).
    """
    settings = settings or get_settings()
    app = FastAPI(
        title="citerag",
        version="0.1.0",
        summary="Cited answers over scientific paper abstracts: hybrid BM25 + dense retrieval, local model.",
        lifespan=_lifespan(settings, index, server_process),
    )
    app.state.metrics = Metrics()
    if settings.cors_origins:  # CORS is off unless origins are configured
        app.add_middleware(
            CORSMiddleware, allow_origins=settings.cors_origins, allow_methods=["GET", "POST"], allow_headers=["*"]
        )
    app.add_middleware(RequestContext, metrics=app.state.metrics)
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_body_bytes)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(CiteragError, citerag_error)
    for router in ROUTERS:
        app.include_router(router)
    mount_web(app)
    return app


def _lifespan(
    settings: Settings, index: LoadedIndex | None, server_process: bool = False
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's lifespan: opens the :class:`Service` (:func:`open_service`) and keeps it on ``app.state``."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        app.state.service = open_service(settings, index, app.state.metrics)
        if server_process:
            freeze_heap_when(app.state.service.loader.wait)
        yield

    return lifespan


def open_service(settings: Settings, index: LoadedIndex | None, metrics: Metrics) -> Service:
    """Open the retrieval backend (building the embedded index when it is missing or stale, unless ``index`` is
    given), start loading the answering model, point the index and queue gauges of ``metrics`` at them, and log
    what is served.

    Raises:
        CiteragError: the index cannot be built or loaded, or the Milvus backend cannot be reached.
    """
    if settings.backend == "milvus":
        backend: SearchBackend = open_milvus_backend(settings, show_progress=False)
        notes: list[str] = []
    else:
        setup = index_setup(settings)
        live = index or ensure_index(setup, show_progress=False)
        embedded = open_backend(settings, live)
        if settings.verify_in_background:
            embedded.verify_in_background(lambda path, reason: recover_damaged(setup, path, reason))
        backend, notes = embedded, index_notes(live)
    key = settings.api_key.get_secret_value() if settings.api_key else None
    service = Service(
        backend, AnswererLoader(lambda: _answerer(settings, backend), metrics.activity),
        AdmissionGate(settings.max_queue),
        WriteGuard(key, settings.host), metrics, settings.ask_k, settings.history_max_turns,
        settings.history_max_chars,
    )
    metrics.documents.set_function(lambda: int(backend.stats()["documents"]))
    metrics.passages.set_function(lambda: int(backend.stats()["passages"]))
    metrics.queue_depth.set_function(lambda: service.gate.admitted)
    stats = backend.stats()
    log.info("serving %s documents, %s passages (%s backend, %s)", stats["documents"], stats["passages"],
             backend.name, stats["version"])
    if not service.writes.enabled:
        log.warning("write endpoints disabled: listening on %s without CITERAG_API_KEY", settings.host)
    for note in notes:  # records skipped at ingest; an empty index
        log.warning("%s (%s)", note, stats["version"])
    return service


def _answerer(settings: Settings, backend: SearchBackend) -> AnswerPipeline:
    """The answering pipeline over ``backend``, reading the corpus's papers ahead when ``settings`` say so
    (:func:`~citerag.service.pipeline.read_papers_ahead`)."""
    answerer = open_answerer(settings, backend)
    return read_papers_ahead(answerer) if settings.read_papers_ahead else answerer
