"""A soak of the HTTP service: mixed clients (search, ask, keyed writes and deletes) for up to an hour, with the
service's memory and open files followed, search latency compared with an unloaded baseline, and every acknowledged
write checked afterwards.

    python -m bench.soak --minutes 60 --record            # the record: its own service on the shipped corpus
    python -m bench.soak --seconds 30 --clients 16        # a quick check (prints; RESULTS.md untouched)
    python -m bench.soak --url http://127.0.0.1:8000 --api-key "$CITERAG_API_KEY" --pid PID --minutes 10

Without ``--url`` the bench starts ``citerag serve`` itself on 127.0.0.1 and a free port, over a copy of
``--index-dir`` (so the soak's writes never touch it) or, without one, over a new index of the shipped corpus
(``CITERAG_CORPUS`` when set), in a temporary directory; with a random API key and, unless
``CITERAG_EMBEDDING_CACHE`` is set, no embedding cache (the soak's random texts stay out of the user's); and stops
it by its PID afterwards.
With ``--url`` it drives a running service (``--api-key``, or ``CITERAG_API_KEY``, for the writes; ``--pid`` for
the memory and open-file samples, which need the server on this machine) and deletes its own documents at the end.

The clients (``--clients``, 64) are closed loops with think time, as users are: each waits for its response, then
pauses a random time (exponential, mean ``--think-ms``, 2 s) before its next request, so the soak holds the service
at a steady working load rather than at saturation (``--think-ms 0`` floods it). Each client is of one kind:
``--ask-clients`` (4, under the service's
``CITERAG_MAX_QUEUE`` of 8, so no question is refused with 503) ask questions built from the indexed titles, an
eighth of the clients write (``POST /documents`` with the key: a new document, or a quarter of the time a new text
for one of their acknowledged documents), a sixteenth delete an acknowledged document, the rest search (hybrid,
BM25 or dense over the indexed titles). No two requests about one document are ever in flight at once, so the last
acknowledged one decides what the index must hold.

In one run it reports: requests and their status codes per endpoint; search and ask p50 / p99 per window (a minute;
a sixth of the run when it is shorter than 5 minutes), by when the request was sent; the server's RSS
(``/proc/PID/status``, VmRSS) and open file descriptors (``/proc/PID/fd``) at the start and the end of each window,
their least-squares slopes over the window ends, and the RSS growth from minute 10 to the end (from the first
window's end in a run shorter than 20 minutes); search p99 without load (``--baseline-requests`` sequential
searches before the load) and its ratio under load; and the check of the writes: every document acknowledged by a
2xx write is there with its last acknowledged text unless an acknowledged delete followed, and every acknowledged
delete is gone. A request that failed (5xx, no response) leaves its document unknown, and it is not checked.

Exit status 0; 1 when any response was a 5xx, an acknowledged write was lost, an acknowledged delete came back or
the check could not be made; 2 when the service could not be started or reached. ``--json PATH`` writes the report
(:func:`run_soak`'s dictionary); ``--record`` makes it ``bench/RESULTS.md``'s section (unlike the other benches,
which record unless told ``--no-record``, this one records only when asked: a short check must not replace the
hour's figure).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import secrets
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Awaitable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from bench.common import fmt, load_average, log_tail, markdown_table, percentiles, record, serve

KINDS = ("search", "ask", "write", "delete")
TITLE = "Soak: mixed clients against citerag serve (bench/soak.py)"
REPLACE_SHARE = 0.25  # of a writer's writes: a new text for one of the acknowledged documents
TIMEOUT_S = {"search": 120.0, "ask": 900.0, "write": 600.0, "delete": 600.0, "check": 120.0}
# A pooled connection idle this long is not reused (seconds): well under uvicorn's keep-alive timeout (5 s), so the
# client never sends on a connection the server is closing (a ReadError that would be the bench's, not the service's).
KEEPALIVE_EXPIRY_S = 1.0
FAILURES_KEPT = 20  # failed requests (5xx, no response) described in the report, the first ones
GROWTH_FROM_S = 600.0  # the RSS growth is measured from minute 10 (runs of 20 minutes or more)
THINK_MS = 2000.0  # a client's mean pause between a response and its next request (exponential; --think-ms)
WORDS = (
    "retrieval", "attention", "gradient", "sparse", "dense", "token", "corpus", "benchmark", "latency", "model",
    "transformer", "embedding", "index", "query", "passage", "citation", "answer", "evidence", "encoder", "decoder",
    "training", "inference", "memory", "cache", "kernel", "quantized", "vector", "graph", "policy", "reward",
    "diffusion", "language", "vision", "protein", "genome", "robot", "agent", "planning", "reasoning", "proof",
    "theorem", "bound", "convergence", "stochastic", "sampling", "variance", "estimator", "dataset", "label", "noise",
)


# --- the service under test ----------------------------------------------------------------------------------------


@dataclass(slots=True)
class Target:
    """The service the clients drive.

    Attributes:
        url: base URL (``http://127.0.0.1:PORT``).
        api_key: the write endpoints' bearer key (``None``: sent without one, as a loopback service without a key
            allows).
        pid: the server process's id, for its RSS and open files (``None``: not sampled).
        started_here: the bench started the service itself (on a temporary index).
        log: the started service's output file (``None`` for ``--url``).
    """

    url: str
    api_key: str | None
    pid: int | None
    started_here: bool
    log: Path | None = None


@contextmanager
def started_service(index_dir: Path | None, work: Path, timeout_s: float) -> Iterator[Target]:
    """Start ``citerag serve`` on 127.0.0.1 and a free port over ``work/index`` (a copy of ``index_dir``, or empty:
    the service builds the index of its corpus there), with a random API key and its output in
    ``work/service.log`` (:func:`bench.common.serve`); yield once ``/health`` answers; stop it by its PID.

    Raises:
        RuntimeError: the service exited or did not answer ``/health`` within ``timeout_s`` seconds (the last lines
            of its output are in the message).
    """
    served = work / "index"
    if index_dir is not None:
        shutil.copytree(index_dir, served, ignore=shutil.ignore_patterns("write.lock", "bench.json"))
    api_key = secrets.token_hex(16)
    # the soak's random documents stay out of the user's embedding cache unless CITERAG_EMBEDDING_CACHE says so
    env = {"CITERAG_EMBEDDING_CACHE": os.environ.get("CITERAG_EMBEDDING_CACHE", "false"), "CITERAG_API_KEY": api_key}
    log = work / "service.log"
    with serve(served, timeout_s, env=env, log=log) as running:
        yield Target(running.url, api_key, running.process.pid, True, log)


def wait_until_settled(url: str, need_generator: bool, timeout_s: float) -> dict[str, Any]:
    """Poll ``/health`` until the answering model is loaded and no paper is being read ahead (so the baseline is
    taken on a quiet service); the last ``/health`` body.

    Raises:
        RuntimeError: the model failed to load while questions are to be asked, or ``timeout_s`` seconds passed.
    """
    started = time.monotonic()
    while True:
        health = httpx.get(url + "/health", timeout=30.0).json()
        if health.get("generator") == "failed" and need_generator:
            raise RuntimeError("the service's answering model failed to load (/health: generator failed); "
                               "run with --ask-clients 0 to soak without questions")
        if health.get("generator") in ("ready", "failed") and health.get("papers") not in ("loading", "reading"):
            return health
        if time.monotonic() - started > timeout_s:
            raise RuntimeError(f"the service did not settle within {timeout_s:.0f} s: /health says {health}")
        time.sleep(1.0)


# --- the server process: memory and open files ---------------------------------------------------------------------


def rss_bytes(pid: int) -> int | None:
    """The resident memory of process ``pid`` (``VmRSS`` of ``/proc/PID/status``), in bytes; ``None`` when the
    process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        return None
    return None


def open_fds(pid: int) -> int | None:
    """How many file descriptors process ``pid`` holds open (entries of ``/proc/PID/fd``); ``None`` when it is
    gone or not readable."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def slope_per_minute(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of ``(seconds, value)`` points, in value units per minute; ``None`` for fewer than
    two points or a single time."""
    if len(points) < 2 or len({t for t, _ in points}) < 2:
        return None
    t = np.array([p[0] for p in points], dtype=np.float64) / 60.0
    v = np.array([p[1] for p in points], dtype=np.float64)
    return float(np.polyfit(t, v, 1)[0])


# --- the write ledger ----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class DocState:
    """What the index must hold for one document the soak wrote.

    Attributes:
        state: ``present`` (an acknowledged write is its last certain operation), ``absent`` (an acknowledged
            delete is), ``unknown`` (its last operation failed without an answer or with a 5xx: not checked) or
            ``never`` (not written yet).
        texts: the texts it may hold when present (one after an acknowledged write; two after a replacement that
            failed without an answer).
        busy: a request about it is in flight (no other is sent meanwhile).
    """

    state: str = "never"
    texts: set[str] = field(default_factory=set)
    busy: bool = True


class Ledger:
    """Every document the writers and deleters touched, and which acknowledged ones are free for the next operation
    (a list with swap-removal, so a random pick is O(1))."""

    def __init__(self) -> None:
        self.docs: dict[str, DocState] = {}
        self._free: list[str] = []
        self._at: dict[str, int] = {}
        self.acknowledged_writes = 0  # documents a 2xx write answer listed as stored
        self.acknowledged_deletes = 0
        self.skipped = 0  # documents a 2xx write answer listed as skipped (not stored)
        self.delete_not_found = 0  # 404 to a delete of an acknowledged document

    def new(self, doc_id: str) -> None:
        """A new document, busy until its write is answered."""
        self.docs[doc_id] = DocState()

    def take(self, rng: random.Random) -> str | None:
        """A random present document that no request is about, now busy; ``None`` when there is none."""
        return self.claim(self._free[rng.randrange(len(self._free))]) if self._free else None

    def claim(self, doc_id: str) -> str:
        """Make the present, free document ``doc_id`` busy; ``doc_id``.

        Raises:
            KeyError: it is not present, or a request about it is in flight.
        """
        at = self._at.pop(doc_id)
        last = self._free.pop()
        if last != doc_id:
            self._free[at] = last
            self._at[last] = at
        self.docs[doc_id].busy = True
        return doc_id

    def release(self, doc_id: str) -> None:
        """The request about ``doc_id`` was answered: free it for the next operation when it is present."""
        doc = self.docs[doc_id]
        doc.busy = False
        if doc.state == "present" and doc_id not in self._at:
            self._at[doc_id] = len(self._free)
            self._free.append(doc_id)

    def wrote(self, doc_id: str, text: str, status: int | None, body: Any) -> None:
        """Note the answer to ``POST /documents`` of ``doc_id`` with ``text`` (``status`` ``None``: no answer)."""
        doc = self.docs[doc_id]
        if status is not None and 200 <= status < 300 and isinstance(body, dict):
            stored = {*body.get("added", ()), *body.get("replaced", ()), *body.get("updated", ()),
                      *body.get("unchanged", ())}
            if doc_id in stored:
                doc.state, doc.texts = "present", {text}
                self.acknowledged_writes += 1
            elif doc_id in {s.get("doc_id") for s in body.get("skipped", ())}:
                self.skipped += 1  # refused, nothing written: as before
            else:
                doc.state = "unknown"  # a 2xx that names neither: not checkable
        elif status is not None and 400 <= status < 500:
            pass  # refused, nothing written: as before
        elif doc.state == "present":
            doc.texts.add(text)  # it may or may not have been replaced; it is still there
        else:
            doc.state = "unknown"
        self.release(doc_id)

    def deleted(self, doc_id: str, status: int | None) -> None:
        """Note the answer to ``DELETE /documents/{doc_id}`` (``status`` ``None``: no answer)."""
        doc = self.docs[doc_id]
        if status is not None and 200 <= status < 300:
            doc.state, doc.texts = "absent", set()
            self.acknowledged_deletes += 1
        elif status == 404:
            self.delete_not_found += 1  # an acknowledged document is missing: the check reports it lost
        elif status is None or status >= 500:
            doc.state = "unknown"
        self.release(doc_id)


# --- the clients ---------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Sample:
    """One request of the load: its endpoint kind, when it was sent (seconds since the load began), its latency
    (ms, send to full response) and its status (``"200"``; ``"error:ReadTimeout"`` when no response came)."""

    kind: str
    sent_s: float
    latency_ms: float
    status: str


def document_text(rng: random.Random, doc_id: str) -> str:
    """An abstract-like text of about 40 words, naming ``doc_id`` (single spaces, ASCII: stored as sent)."""
    sentences = [" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(3)]
    return f"We study {doc_id} under load. " + " ".join(sentences)


class Soak:
    """The load: ``roles`` (one kind per client) against ``url`` until ``duration_s`` seconds after
    :meth:`run` starts, then each client's last request is waited for.

    Args:
        url, api_key: the service and its write key (``None``: none sent).
        queries: search queries; questions: /ask questions.
        think_s: each client's mean pause between a response and its next request (seconds; exponentially
            distributed, as a user's think time in a closed-loop load model: Menasce & Almeida 2002, ch. 5), so
            the load is users at work rather than a saturating flood (0: back to back).
        seed: the random choices' seed (queries, modes, texts, which document).
    """

    def __init__(self, url: str, api_key: str | None, queries: Sequence[str], questions: Sequence[str],
                 think_s: float, seed: int) -> None:
        self.url, self.queries, self.questions = url, list(queries), list(questions)
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.think_s = think_s
        self.seed = seed
        self.tag = secrets.token_hex(3)  # document ids of this run: soak-<tag>-<client>-<n>
        self.samples: list[Sample] = []
        self.failures: list[dict[str, Any]] = []  # the first FAILURES_KEPT 5xx or unanswered requests
        self.ledger = Ledger()
        self.started = 0.0
        self.deadline = 0.0

    async def _call(self, http: httpx.AsyncClient, kind: str, method: str, path: str,
                    **kwargs: Any) -> tuple[int | None, Any]:
        """Send one request of the load and record it; ``(status or None, JSON body or None)``."""
        sent = time.perf_counter()
        body: Any = None
        try:
            response = await http.request(method, path, timeout=TIMEOUT_S[kind], **kwargs)
            status: int | None = response.status_code
            try:
                body = response.json()
            except ValueError:
                body = None
            label, detail = str(response.status_code), response.text[:300] if response.status_code >= 500 else ""
        except httpx.HTTPError as exc:
            status, label, detail = None, f"error:{type(exc).__name__}", str(exc)[:300]
        sample = Sample(kind, sent - self.started, (time.perf_counter() - sent) * 1000.0, label)
        self.samples.append(sample)
        if (status is None or status >= 500) and len(self.failures) < FAILURES_KEPT:
            self.failures.append({"kind": kind, "path": path, "sent_s": round(sample.sent_s, 3),
                                  "latency_ms": round(sample.latency_ms, 1), "status": label, "detail": detail})
        return status, body

    async def _search(self, http: httpx.AsyncClient, rng: random.Random, _: int) -> None:
        """One search: a title, k of 5, 10 or 20, hybrid half the time, else BM25 or dense."""
        payload = {"query": rng.choice(self.queries), "k": rng.choice((5, 10, 20)),
                   "mode": rng.choice(("hybrid", "hybrid", "bm25", "dense"))}
        await self._call(http, "search", "POST", "/search", json=payload)

    async def _ask(self, http: httpx.AsyncClient, rng: random.Random, _: int) -> None:
        """One question (JSON, not streamed)."""
        await self._call(http, "ask", "POST", "/ask", json={"question": rng.choice(self.questions)})

    async def _write(self, http: httpx.AsyncClient, rng: random.Random, client: int) -> None:
        """One keyed write of one document: a new one, or (:data:`REPLACE_SHARE`) a new text for a present one."""
        ledger = self.ledger
        doc_id = ledger.take(rng) if rng.random() < REPLACE_SHARE else None
        if doc_id is None:
            doc_id = f"soak-{self.tag}-{client}-{len(ledger.docs)}"
            ledger.new(doc_id)
        text = document_text(rng, doc_id)
        document = {"id": doc_id, "title": f"Soak document {doc_id}", "text": text}
        status, body = await self._call(http, "write", "POST", "/documents", json=[document], headers=self.headers)
        ledger.wrote(doc_id, text, status, body)

    async def _delete(self, http: httpx.AsyncClient, rng: random.Random, _: int) -> None:
        """One keyed delete of a present document (a short wait instead when none is free)."""
        doc_id = self.ledger.take(rng)
        if doc_id is None:  # nothing acknowledged to delete yet
            await asyncio.sleep(0.1)
            return
        status, _body = await self._call(http, "delete", "DELETE", f"/documents/{doc_id}", headers=self.headers)
        self.ledger.deleted(doc_id, status)

    async def _client(self, http: httpx.AsyncClient, kind: str, client: int) -> None:
        """Client number ``client``: requests of ``kind``, one after another, until the deadline."""
        rng = random.Random(self.seed * 100_003 + client)
        step = {"search": self._search, "ask": self._ask, "write": self._write, "delete": self._delete}[kind]
        while True:  # a think time first too, so the clients do not all send their first request at once
            if self.think_s > 0:
                await asyncio.sleep(min(rng.expovariate(1.0 / self.think_s),
                                        max(self.deadline - time.perf_counter(), 0.0)))
            if time.perf_counter() >= self.deadline:
                return
            await step(http, rng, client)

    async def run(self, roles: Sequence[str], duration_s: float, beside: Awaitable[None] | None = None) -> None:
        """Run the clients for ``duration_s`` seconds (then wait for their last requests); ``beside`` (e.g. the
        resource sampler, which reads :attr:`started`) runs with them."""
        limits = httpx.Limits(max_connections=len(roles) + 4, max_keepalive_connections=len(roles) + 4,
                              keepalive_expiry=KEEPALIVE_EXPIRY_S)
        async with httpx.AsyncClient(base_url=self.url, limits=limits) as http:
            self.started = time.perf_counter()
            self.deadline = self.started + duration_s
            tasks = [self._client(http, kind, i) for i, kind in enumerate(roles)]
            await asyncio.gather(*tasks, *([beside] if beside is not None else []))


# --- before and after the load -------------------------------------------------------------------------------------


def corpus_texts(url: str, limit: int = 1000) -> list[str]:
    """The labels (title, or opening words) of up to ``limit`` indexed documents: the search queries.

    Raises:
        RuntimeError: the index holds no document.
    """
    page = httpx.get(url + "/documents", params={"limit": limit}, timeout=60.0)
    page.raise_for_status()
    labels = [" ".join(doc["label"].split()[:12]) for doc in page.json()["documents"] if doc["label"].strip()]
    if not labels:
        raise RuntimeError("the service's index holds no document to search for")
    return labels


def baseline(url: str, queries: Sequence[str], requests: int, seed: int) -> dict[str, Any]:
    """Search latency without load: ``requests`` sequential hybrid/BM25/dense searches (after 10 untimed ones), in
    ms: ``{"requests", "errors", "p50_ms", "p99_ms"}``."""
    rng = random.Random(seed)
    latencies: list[float] = []
    errors = 0
    with httpx.Client(base_url=url, timeout=TIMEOUT_S["search"]) as http:
        for i in range(requests + 10):
            payload = {"query": rng.choice(queries), "k": rng.choice((5, 10, 20)),
                       "mode": rng.choice(("hybrid", "hybrid", "bm25", "dense"))}
            sent = time.perf_counter()
            try:
                ok = http.post("/search", json=payload).status_code == 200
            except httpx.HTTPError:
                ok = False
            if i >= 10:
                latencies.append((time.perf_counter() - sent) * 1000.0)
                errors += not ok
    stats = percentiles(latencies, (50, 99))
    return {"requests": len(latencies), "errors": errors, "p50_ms": stats["p50"], "p99_ms": stats["p99"]}


async def check_writes(url: str, ledger: Ledger, concurrency: int = 8,
                       transport: httpx.AsyncBaseTransport | None = None) -> dict[str, Any]:
    """Read back every document the soak wrote: an acknowledged one must be there with its last acknowledged text
    (unless an acknowledged delete followed), an acknowledged delete must be gone. ``transport``: httpx's (tests).

    Returns:
        ``acknowledged_writes``, ``acknowledged_deletes``, ``checked_present``, ``checked_absent``, ``unknown``
        (documents whose last operation failed: not checked), ``skipped``, ``delete_not_found`` and the doc ids of
        ``lost`` writes (missing, or holding another text), ``resurrected`` deletes and ``check_errors`` (a read
        that was neither 200 nor 404).
    """
    lost: list[str] = []
    resurrected: list[str] = []
    errors: list[str] = []
    counts: Counter[str] = Counter()
    gate = asyncio.Semaphore(concurrency)

    async def check(http: httpx.AsyncClient, doc_id: str, doc: DocState) -> None:
        if doc.state not in ("present", "absent"):
            counts["unknown"] += doc.state == "unknown"
            return
        async with gate:
            try:
                response = await http.get(f"/documents/{doc_id}", timeout=TIMEOUT_S["check"])
            except httpx.HTTPError as exc:
                errors.append(f"{doc_id}: {type(exc).__name__}")
                return
        counts[f"checked_{doc.state}"] += 1
        if doc.state == "present":
            if response.status_code == 404 or (
                    response.status_code == 200 and response.json()["text"] not in doc.texts):
                lost.append(doc_id)
            elif response.status_code != 200:
                errors.append(f"{doc_id}: {response.status_code}")
        elif response.status_code == 200:
            resurrected.append(doc_id)
        elif response.status_code != 404:
            errors.append(f"{doc_id}: {response.status_code}")

    async with httpx.AsyncClient(base_url=url, transport=transport) as http:
        await asyncio.gather(*(check(http, doc_id, doc) for doc_id, doc in ledger.docs.items()))
    return {
        "acknowledged_writes": ledger.acknowledged_writes, "acknowledged_deletes": ledger.acknowledged_deletes,
        "documents": len(ledger.docs), "checked_present": counts["checked_present"],
        "checked_absent": counts["checked_absent"], "unknown": counts["unknown"], "skipped": ledger.skipped,
        "delete_not_found": ledger.delete_not_found, "lost": sorted(lost), "resurrected": sorted(resurrected),
        "check_errors": sorted(errors),
    }


def remove_documents(url: str, api_key: str | None, ledger: Ledger) -> int:
    """Delete the soak's documents that may still be in the index (present or unknown); how many were deleted."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    removed = 0
    with httpx.Client(base_url=url, headers=headers, timeout=TIMEOUT_S["delete"]) as http:
        for doc_id, doc in ledger.docs.items():
            if doc.state in ("present", "unknown"):
                removed += http.delete(f"/documents/{doc_id}").status_code == 200
    return removed


# --- the run and its report ----------------------------------------------------------------------------------------


def roles_of(clients: int, ask_clients: int) -> list[str]:
    """One kind per client: ``ask_clients`` ask, an eighth write, a sixteenth delete (at least one each), the rest
    search.

    Raises:
        ValueError: fewer than one searcher would be left.
    """
    writers, deleters = max(1, clients // 8), max(1, clients // 16)
    searchers = clients - ask_clients - writers - deleters
    if searchers < 1:
        raise ValueError(f"{clients} clients leave no searcher beside {ask_clients} askers, {writers} writers and "
                         f"{deleters} deleters: use more clients or fewer --ask-clients")
    return ["ask"] * ask_clients + ["write"] * writers + ["delete"] * deleters + ["search"] * searchers


def window_length(duration_s: float) -> float:
    """The report's window: a minute, or a sixth of a run shorter than 5 minutes (seconds)."""
    return 60.0 if duration_s >= 300 else duration_s / 6


def _stats(latencies: Sequence[float]) -> dict[str, Any]:
    """``{"n", "p50_ms", "p99_ms"}`` of latencies in ms (``None`` percentiles for none)."""
    p = percentiles(latencies, (50, 99))
    return {"n": len(latencies), "p50_ms": _num(p["p50"]), "p99_ms": _num(p["p99"])}


def _num(value: float | None) -> float | None:
    """``value``, or ``None`` for NaN (JSON has no NaN)."""
    return None if value is None or math.isnan(value) else value


async def run_soak(target: Target, duration_s: float, roles: Sequence[str], window_s: float,
                   baseline_requests: int, think_s: float, seed: int) -> dict[str, Any]:
    """Measure the baseline, run the load, sample the server, check the writes: the report.

    Returns:
        A JSON-serialisable dictionary: ``url``, ``pid``, ``clients`` (per kind), ``duration_s``, ``window_s``,
        ``requests`` (per kind: ``total`` and ``by_status``), ``errors`` (per kind: non-2xx statuses), ``five_xx``,
        ``transport_errors``, ``failures`` (the first 5xx or unanswered requests: ``kind``, ``path``, ``sent_s``,
        ``latency_ms``, ``status``, ``detail``), ``latency`` (per kind: ``n``, ``p50_ms``, ``p99_ms``),
        ``windows`` (``start_s``, ``end_s``, search and ask ``n`` / ``p50_ms`` / ``p99_ms``, ``rss_bytes`` and
        ``fds`` at the window's end), ``resources`` (``samples`` of ``t_s``, ``rss_bytes``, ``fds``;
        ``rss_slope_bytes_per_min``, ``fds_slope_per_min``, ``rss_growth``), ``baseline`` (no load: ``requests``,
        ``errors``, ``p50_ms``, ``p99_ms``; ``under_load_p99_ms``, ``p99_ratio``), ``writes``
        (:func:`check_writes`), ``loads`` (load averages during the run) and ``ok``.
    """
    queries = corpus_texts(target.url)
    questions = [f"What does the paper titled '{q}' propose?" for q in queries]
    base = baseline(target.url, queries, baseline_requests, seed)

    windows = max(1, math.ceil(duration_s / window_s - 1e-9))
    samples: list[dict[str, Any]] = []
    loads: list[str] = []
    soak = Soak(target.url, target.api_key, queries, questions, think_s, seed)

    def sample(at_s: float) -> None:
        loads.append(load_average())
        if target.pid is not None:
            samples.append({"t_s": round(at_s, 3), "rss_bytes": rss_bytes(target.pid), "fds": open_fds(target.pid)})

    async def sampler() -> None:
        sample(0.0)
        for w in range(1, windows + 1):
            at = min(w * window_s, duration_s)
            await asyncio.sleep(max(0.0, soak.started + at - time.perf_counter()))
            sample(at)

    await soak.run(roles, duration_s, sampler())
    writes = await check_writes(target.url, soak.ledger)

    by_kind: dict[str, list[Sample]] = defaultdict(list)
    for s in soak.samples:
        by_kind[s.kind].append(s)
    statuses = {kind: dict(sorted(Counter(s.status for s in by_kind[kind]).items())) for kind in KINDS}
    requests = {kind: {"total": len(by_kind[kind]), "by_status": statuses[kind]} for kind in KINDS}
    errors = {kind: {status: n for status, n in counts.items() if not (status.isdigit() and 200 <= int(status) < 300)}
              for kind, counts in statuses.items()}
    five_xx = sum(n for kind in errors.values() for status, n in kind.items() if status.startswith("5"))
    transport = sum(n for kind in errors.values() for status, n in kind.items() if status.startswith("error:"))
    latency = {kind: _stats([s.latency_ms for s in by_kind[kind]]) for kind in KINDS}

    rows = []
    for w in range(windows):
        start, end = w * window_s, min((w + 1) * window_s, duration_s)
        last = w == windows - 1
        inside = [s for s in soak.samples if start <= s.sent_s < end or (last and s.sent_s >= end)]
        at_end = next((x for x in samples if abs(x["t_s"] - round(end, 3)) < 1e-6), {})
        rows.append({
            "start_s": round(start, 3), "end_s": round(end, 3),
            "search": _stats([s.latency_ms for s in inside if s.kind == "search"]),
            "ask": _stats([s.latency_ms for s in inside if s.kind == "ask"]),
            "rss_bytes": at_end.get("rss_bytes"), "fds": at_end.get("fds"),
        })

    ends = [x for x in samples if x["t_s"] > 0]
    rss_points = [(x["t_s"], x["rss_bytes"]) for x in ends if x["rss_bytes"] is not None]
    fd_points = [(x["t_s"], x["fds"]) for x in ends if x["fds"] is not None]
    growth: dict[str, Any] | None = None
    if len(rss_points) >= 2:
        from_s = GROWTH_FROM_S if duration_s >= 2 * GROWTH_FROM_S else rss_points[0][0]
        first = min(rss_points, key=lambda p: abs(p[0] - from_s))
        final = rss_points[-1]
        growth = {"from_s": first[0], "to_s": final[0], "from_bytes": first[1], "to_bytes": final[1],
                  "bytes": final[1] - first[1], "percent": 100.0 * (final[1] - first[1]) / first[1]}
    resources = {
        "samples": samples,
        "rss_slope_bytes_per_min": slope_per_minute(rss_points),
        "fds_slope_per_min": slope_per_minute(fd_points),
        "rss_growth": growth,
    }
    under = latency["search"]["p99_ms"]
    baseline_report = {**base, "p50_ms": _num(base["p50_ms"]), "p99_ms": _num(base["p99_ms"]),
                       "under_load_p99_ms": under,
                       "p99_ratio": under / base["p99_ms"] if under is not None and _num(base["p99_ms"]) else None}
    ok = (five_xx == 0 and not writes["lost"] and not writes["resurrected"] and not writes["check_errors"]
          and base["errors"] == 0)
    return {
        "url": target.url, "pid": target.pid, "clients": dict(Counter(roles)), "think_ms": think_s * 1000.0,
        "duration_s": duration_s,
        "window_s": window_s, "requests": requests, "errors": errors, "five_xx": five_xx,
        "transport_errors": transport, "failures": soak.failures, "latency": latency, "windows": rows,
        "resources": resources, "baseline": baseline_report, "writes": writes, "loads": loads, "ok": ok,
        "_ledger": soak.ledger,  # removed before the report is written out
    }


def _mib(value: float | None, digits: int = 1) -> str:
    """Bytes as MiB for a table cell (``-`` for none)."""
    return "-" if value is None else fmt(value / 1024**2, digits)


def _ms(value: float | None) -> str:
    """Milliseconds for a table cell (``-`` for none)."""
    return "-" if value is None else fmt(value, 1)


def _duration(seconds: float) -> str:
    """``30 s``, ``3.33 s``, ``60 min``: whole minutes in minutes, anything else in seconds (two decimals at most)."""
    return f"{seconds / 60:g} min" if seconds >= 60 and seconds % 60 == 0 else f"{round(seconds, 2):g} s"


def report_markdown(report: dict[str, Any]) -> tuple[str, list[str]]:
    """The report as ``(tables, notes)`` for :func:`bench.common.record`."""
    names = {"search": "POST /search", "ask": "POST /ask", "write": "POST /documents",
             "delete": "DELETE /documents/{id}"}
    kinds_table = markdown_table(
        ["endpoint", "requests", "by status", "p50 ms", "p99 ms"],
        [[names[k],
          report["requests"][k]["total"],
          ", ".join(f"{s}: {n}" for s, n in report["requests"][k]["by_status"].items()) or "-",
          _ms(report["latency"][k]["p50_ms"]), _ms(report["latency"][k]["p99_ms"])] for k in KINDS],
    )
    window_rows = [[f"{_duration(w['start_s'])} - {_duration(w['end_s'])}", w["search"]["n"],
                    _ms(w["search"]["p50_ms"]), _ms(w["search"]["p99_ms"]), w["ask"]["n"], _ms(w["ask"]["p50_ms"]),
                    _ms(w["ask"]["p99_ms"]), _mib(w["rss_bytes"]), "-" if w["fds"] is None else w["fds"]]
                   for w in report["windows"]]
    windows_table = markdown_table(["window", "searches", "search p50 ms", "search p99 ms", "asks", "ask p50 ms",
                                    "ask p99 ms", "RSS MiB (end)", "open fds (end)"], window_rows)
    res, base, writes = report["resources"], report["baseline"], report["writes"]
    clients = report["clients"]
    notes = [
        f"{sum(clients.values())} clients for {_duration(report['duration_s'])} against {report['url']}: "
        + ", ".join(f"{clients.get(k, 0)} {k}" for k in KINDS)
        + f"; each client pauses a mean {fmt(report['think_ms'] / 1000.0, 1)} s (exponential) between a response "
        f"and its next request; windows of {_duration(report['window_s'])}, each request counted in the window it "
        "was sent in.",
        (f"search without load ({base['requests']} sequential searches before the load): p50 "
         f"{_ms(base['p50_ms'])} ms, p99 {_ms(base['p99_ms'])} ms; under load p99 "
         f"{_ms(base['under_load_p99_ms'])} ms, "
         f"{'-' if base['p99_ratio'] is None else fmt(base['p99_ratio'], 1)}x the baseline."),
    ]
    if report["pid"] is None:
        notes.append("server RSS and open files: not sampled (no --pid for --url).")
    else:
        start: dict[str, Any] = next((s for s in res["samples"] if s["t_s"] == 0), {})
        slope = res["rss_slope_bytes_per_min"]
        g = res["rss_growth"]
        notes.append(
            f"server (pid {report['pid']}) before the load: RSS {_mib(start.get('rss_bytes'))} MiB, "
            f"{start.get('fds', '-')} open fds; least-squares slope over the window ends: RSS "
            f"{'-' if slope is None else fmt(slope / 1024**2, 2)} MiB/min, open fds "
            f"{'-' if res['fds_slope_per_min'] is None else fmt(res['fds_slope_per_min'], 2)}/min"
            + ("" if g is None else f"; RSS growth from {_duration(g['from_s'])} to {_duration(g['to_s'])}: "
               f"{_mib(g['bytes'], 1)} MiB ({fmt(g['percent'], 1)} %)") + ".")
    notes.append(
        f"writes: {writes['acknowledged_writes']} acknowledged (one document each, to "
        f"{writes['documents']} documents), {writes['acknowledged_deletes']} "
        f"acknowledged deletes; read back afterwards: {writes['checked_present']} present as last written, "
        f"{writes['checked_absent']} deleted and gone, {writes['unknown']} unknown (a failed request, not checked); "
        f"lost: {len(writes['lost'])}, back after delete: {len(writes['resurrected'])}, "
        f"unreadable: {len(writes['check_errors'])}.")
    notes += [f"failed: {f['kind']} {f['path']} sent at {fmt(f['sent_s'], 1)} s, {f['status']} after "
              f"{fmt(f['latency_ms'], 0)} ms: {f['detail'][:160] or '-'}" for f in report["failures"][:5]]
    notes.append(f"5xx responses: {report['five_xx']}; requests without a response: {report['transport_errors']}; "
                 f"verdict: {'PASS' if report['ok'] else 'FAIL'}.")
    return kinds_table + "\n\n" + windows_table, notes


def main(argv: Sequence[str] | None = None) -> int:
    """The command line; the exit status (0 pass, 1 fail, 2 could not run)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group()
    where.add_argument("--url", help="a running service's base URL (default: start one on 127.0.0.1)")
    where.add_argument("--index-dir", type=Path,
                       help="serve a copy of this index directory (default: a new index of the shipped corpus)")
    p.add_argument("--api-key", default=os.environ.get("CITERAG_API_KEY"),
                   help="the write key of the --url service (default: $CITERAG_API_KEY)")
    p.add_argument("--pid", type=int, help="the --url service's process id, for its RSS and open files")
    length = p.add_mutually_exclusive_group()
    length.add_argument("--minutes", type=float, help="how long the load runs (minutes; the record: 60)")
    length.add_argument("--seconds", type=float, help="how long the load runs (seconds; default 60)")
    p.add_argument("--clients", type=int, default=64, help="concurrent clients (default 64)")
    p.add_argument("--ask-clients", type=int, default=4,
                   help="of them, asking questions (default 4; keep under the service's CITERAG_MAX_QUEUE)")
    p.add_argument("--window-seconds", type=float, help="the report's window (default: 60, or a sixth of a run "
                   "under 5 minutes)")
    p.add_argument("--baseline-requests", type=int, default=200, help="sequential searches before the load")
    p.add_argument("--think-ms", type=float, default=THINK_MS,
                   help=f"each client's mean pause between a response and its next request (ms, exponential; "
                   f"default {THINK_MS:.0f}; 0: back to back)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--start-timeout", type=float, default=1800.0,
                   help="seconds to wait for a started service to answer and settle (model loaded)")
    p.add_argument("--keep-documents", action="store_true",
                   help="with --url: leave the soak's documents in the index (default: delete them at the end)")
    p.add_argument("--json", type=Path, help="write the report as JSON to this file")
    p.add_argument("--record", action="store_true", help="make the report bench/RESULTS.md's section")
    args = p.parse_args(argv)
    duration_s = args.minutes * 60 if args.minutes is not None else (args.seconds if args.seconds is not None else 60.0)
    if duration_s <= 0:
        p.error("the duration must be positive")
    try:
        roles = roles_of(args.clients, args.ask_clients)
    except ValueError as exc:
        p.error(str(exc))
    window_s = args.window_seconds or window_length(duration_s)

    with tempfile.TemporaryDirectory(prefix="citerag-soak-") as work:
        try:
            with _target(args, Path(work)) as target:
                print(f"soak: {len(roles)} clients for {_duration(duration_s)} against {target.url}"
                      f"{'' if target.pid is None else f' (pid {target.pid})'}; waiting for the service to settle",
                      file=sys.stderr, flush=True)
                wait_until_settled(target.url, "ask" in roles, args.start_timeout)
                report = asyncio.run(run_soak(target, duration_s, roles, window_s, args.baseline_requests,
                                              args.think_ms / 1000.0, args.seed))
                ledger = report.pop("_ledger")
                if not target.started_here and not args.keep_documents:
                    try:
                        removed = remove_documents(target.url, target.api_key, ledger)
                        print(f"soak: removed {removed} of its documents from the service", file=sys.stderr)
                    except httpx.HTTPError as exc:
                        print(f"warning: removing the soak's documents failed: {exc}", file=sys.stderr)
                if not report["ok"] and target.log is not None:
                    print(f"the service's output ends:\n{log_tail(target.log)}", file=sys.stderr)
        except (RuntimeError, httpx.HTTPError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    tables, notes = report_markdown(report)
    record(TITLE, tables, notes, report["loads"], write=args.record)
    return 0 if report["ok"] else 1


@contextmanager
def _target(args: argparse.Namespace, work: Path) -> Iterator[Target]:
    """The service to drive: ``--url``'s, or one started here (stopped on exit)."""
    if args.url:
        yield Target(args.url.rstrip("/"), args.api_key, args.pid, False)
        return
    if args.index_dir is not None and not args.index_dir.is_dir():
        raise RuntimeError(f"--index-dir {args.index_dir} is not a directory")
    with started_service(args.index_dir, work, args.start_timeout) as target:
        yield target


if __name__ == "__main__":
    raise SystemExit(main())
