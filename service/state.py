"""What the HTTP handlers share, and the FastAPI dependencies that hand it to them.

:class:`Service` (the retrieval backend, the answerer loading in the background, the admission gate, the write
guard and the metrics) is made once by the app's lifespan (:mod:`citerag.service.api`) and kept on ``app.state``; a
handler asks for it with ``service: ServiceDep`` (:func:`get_service`), never through a closure. Handlers search,
answer, read and write through :attr:`Service.library`, the Python API (:class:`~citerag.service.library.Library`)
over the service's backend and answerer; admission and API keys are the HTTP service's own.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from citerag.index.backend import SearchBackend
from citerag.index.errors import ModelNotFound
from citerag.service.answering import Answer
from citerag.service.answering.runner import AnswerPipeline
from citerag.service.errors import Overloaded, Unauthorized, WritesDisabled
from citerag.service.library import Library
from citerag.service.observability import Activity, Metrics

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
        """Take a slot.

        Raises:
            Overloaded: all ``limit`` slots are taken (``retry_after`` 15 s).
        """
        if not self._slots.acquire(blocking=False):
            raise Overloaded(f"{self.limit} questions are already queued for the model; retry shortly", retry_after=15)
        with self._lock:
            self.admitted += 1

    def leave(self) -> None:
        """Give back a slot taken by :meth:`enter`."""
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


#: Seconds without a request before the model load starts (see :class:`AnswererLoader`), and the longest it waits.
LOAD_WHEN_QUIET_S = 0.5
LOAD_AT_LATEST_S = 10.0


class AnswererLoader:
    """Loads the answerer (the chat model: seconds to a minute on 2 cores) in a background thread, so the service
    answers ``/health`` and ``/search`` at once and ``/health`` says whether the model is ready.

    xllamacpp's model load holds the GIL (2.4 s for the 1.5B model with its file in the page cache, measured on 2
    cores: no other Python thread runs meanwhile), so with an ``activity`` the load starts only once the service
    has served no request for ``quiet_s`` (probes aside), when a caller asks for the answerer (:meth:`get`), or after
    ``at_latest_s``: the searches sent right after a start are answered before it, not behind it.

    Args:
        load: makes the answerer (e.g. :func:`citerag.service.pipeline.open_answerer` over the backend).
        activity: the service's request activity; ``None`` starts the load at once.
        quiet_s: seconds (default :data:`LOAD_WHEN_QUIET_S`).
        at_latest_s: seconds (default :data:`LOAD_AT_LATEST_S`).
    """

    def __init__(self, load: Callable[[], AnswerPipeline], activity: Activity | None = None,
                 quiet_s: float = LOAD_WHEN_QUIET_S, at_latest_s: float = LOAD_AT_LATEST_S) -> None:
        self._load = load
        self._activity = activity
        self._quiet_s, self._at_latest_s = quiet_s, at_latest_s
        self._wanted = threading.Event()
        self._done = threading.Event()
        self._answerer: AnswerPipeline | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._run, name="citerag-model-load", daemon=True).start()

    def _run(self) -> None:
        if self._activity is not None:
            deadline = time.monotonic() + self._at_latest_s
            while not self._wanted.wait(self._quiet_s / 5) and time.monotonic() < deadline:
                if self._activity.quiet_for() >= self._quiet_s:
                    break
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

    def wait(self) -> bool:
        """Block until the load has finished, without hastening it (unlike :meth:`get`); ``True`` when the model
        is ready, ``False`` when it failed to load."""
        self._done.wait()
        return self.ready

    def get(self) -> AnswerPipeline:
        """The answerer, waiting for the load to finish.

        Raises:
            ModelNotFound: the model could not be loaded (HTTP 503; the message says which package to install).
        """
        self._wanted.set()
        self._done.wait()
        if self._answerer is None:
            raise ModelNotFound(f"the answering model failed to load: {self.error}")
        return self._answerer


@dataclass(slots=True)
class Service:
    """What the handlers share: the retrieval backend, the answerer (loading in the background), the admission
    gate, the write guard, the app's metrics, and the settings the routes apply (``ask_k``, the history bounds)."""

    backend: SearchBackend
    loader: AnswererLoader
    gate: AdmissionGate
    writes: WriteGuard
    metrics: Metrics
    default_k: int
    history_max_turns: int
    history_max_chars: int

    @property
    def answerer(self) -> AnswerPipeline:
        """The answering pipeline; a question that comes while the model loads waits for it (:meth:`AnswererLoader.get`).

        Raises:
            ModelNotFound: the model failed to load.
        """
        return self.loader.get()

    @property
    def library(self) -> Library:
        """The Python API over this service's backend and answerer, with its ``ask_k`` and history bounds; every
        answer it gives is counted in the metrics (:meth:`observe`)."""
        return Library(self.backend, lambda: self.answerer, self.default_k, self.history_max_turns,
                       self.history_max_chars, self.observe)

    def observe(self, answer: Answer) -> None:
        """Count a finished answer in the metrics (its stage timings and generated tokens)."""
        self.metrics.observe_answer(answer.timings_ms, answer.completion_tokens)


def get_service(request: Request) -> Service:
    """The :class:`Service` loaded by the lifespan (a FastAPI dependency: use :data:`ServiceDep`)."""
    return request.app.state.service


def get_metrics(request: Request) -> Metrics:
    """The app's :class:`~citerag.service.observability.Metrics`, made with the app (there before the lifespan runs)."""
    return request.app.state.metrics


ServiceDep = Annotated[Service, Depends(get_service)]
MetricsDep = Annotated[Metrics, Depends(get_metrics)]
#: The ``Authorization: Bearer`` credentials when sent (``None`` when not: :meth:`WriteGuard.check` decides).
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(HTTPBearer(auto_error=False))]
