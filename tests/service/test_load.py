"""Load: 32 concurrent clients against the real app served by uvicorn (real index of the seed corpus, real embedder
and generator), mixing /search, /ask and /health. No 5xx, no transport error, identical answers to identical
requests, and /health served while a generation runs."""

from __future__ import annotations

import random
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from tests.conftest import EDEN, serving

pytestmark = pytest.mark.slow

CLIENTS = 32
SEARCHES: list[dict[str, Any]] = [
    {"query": "LU-KV", "k": 5, "mode": "hybrid"},
    {"query": "KV cache eviction", "k": 10, "mode": "bm25"},
    {"query": "metagenomic foundation model", "k": 10, "mode": "dense"},
    {"query": "gaussian process prior for equivariant flows", "k": 20, "mode": "hybrid"},
    {"query": "robot vision-motion codes", "k": 3, "mode": "bm25", "one_per_doc": True},
    {"query": "How many parameters does the largest metagenomic foundation model have?", "k": 10, "mode": "hybrid"},
    {"query": "diffusion language models", "k": 100, "mode": "dense"},
    {"query": "attention heads budget", "k": 100, "mode": "hybrid", "one_per_doc": True},
]
SEARCH_REPEATS = 16
QUESTIONS = {  # question -> (a fact the answer states, the cited document)
    "How many parameters does the largest metagenomic foundation model have?": ("28 billion", EDEN),
    "What does GP-EquiFlow use to construct its prior distributions?": ("gaussian process", "0e4a7d0dfa0b289b"),
}
ASK_REPEATS = 2
HEALTH_IN_MIX = 16


@pytest.fixture(scope="module")
def server(seed_settings):
    """The app on the seed index, served by uvicorn; room for every question at once (no 503)."""
    from citerag.service.api import create_app

    app = create_app(seed_settings.model_copy(update={"max_queue": 64}))
    with serving(app) as url:
        yield app, url


def test_32_concurrent_clients_get_consistent_answers_and_no_errors(server) -> None:
    app, url = server
    local = threading.local()

    def client() -> httpx.Client:
        if not hasattr(local, "client"):
            local.client = httpx.Client(base_url=url, timeout=httpx.Timeout(900.0))
        return local.client

    def call(kind: str, payload: dict[str, Any] | None) -> tuple[str, str, int, Any]:
        if kind == "health":
            response = client().get("/health")
            return kind, "", response.status_code, response.json()
        response = client().post(f"/{kind}", json=payload)
        key = payload["question"] if kind == "ask" else repr(sorted(payload.items()))
        return kind, key, response.status_code, response.json()

    with httpx.Client(base_url=url, timeout=60.0) as sequential:  # one answer per search before the load
        baseline = {repr(sorted(s.items())): sequential.post("/search", json=s).json()["results"] for s in SEARCHES}

    asks = [("ask", {"question": q}) for q in QUESTIONS for _ in range(ASK_REPEATS)]
    mix = [("search", s) for s in SEARCHES for _ in range(SEARCH_REPEATS)] + [("health", None)] * HEALTH_IN_MIX
    random.Random(0).shuffle(mix)
    lock = app.state.service.answerer.generator._lock
    asks_done = threading.Event()
    during_generation: list[tuple[int, bool]] = []

    def watch_health() -> None:
        """While the questions run: whenever the model is generating, ask /health and note whether the model was
        still generating when the answer came back."""
        with httpx.Client(base_url=url, timeout=60.0) as watcher:
            while not asks_done.is_set():
                if lock.locked():
                    status = watcher.get("/health").status_code
                    during_generation.append((status, lock.locked()))
                asks_done.wait(0.02)

    watcher = threading.Thread(target=watch_health, name="health-watcher")
    watcher.start()
    errors: list[str] = []
    outcomes: list[tuple[str, str, int, Any]] = []
    try:
        with ThreadPoolExecutor(max_workers=CLIENTS) as pool:
            ask_futures = [pool.submit(call, kind, payload) for kind, payload in asks]  # first, so searches overlap
            futures = ask_futures + [pool.submit(call, kind, payload) for kind, payload in mix]
            for future in ask_futures:
                future.exception()  # wait for every question
            asks_done.set()
            for future in futures:
                try:
                    outcomes.append(future.result())
                except httpx.HTTPError as exc:  # a transport error: refused, reset, timed out
                    errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        asks_done.set()
        watcher.join()

    assert errors == []
    assert len(outcomes) == len(asks) + len(mix)
    statuses = defaultdict(int)
    for kind, _, status, _ in outcomes:
        statuses[(kind, status)] += 1
    assert statuses == {
        ("search", 200): len(SEARCHES) * SEARCH_REPEATS,
        ("ask", 200): len(QUESTIONS) * ASK_REPEATS,
        ("health", 200): HEALTH_IN_MIX,
    }

    searches: dict[str, list[Any]] = defaultdict(list)
    answers: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for kind, key, _, body in outcomes:
        if kind == "search":
            searches[key].append(body["results"])
        elif kind == "ask":
            answers[key].append({name: value for name, value in body.items() if name != "timings_ms"})
    for key, runs in searches.items():  # ids, ranks, scores, spans: identical to the sequential answer
        assert len(runs) == SEARCH_REPEATS and all(run == baseline[key] for run in runs), key
        assert baseline[key], key
    for question, runs in answers.items():
        differing = {name for run in runs for name in run if run[name] != runs[0][name]}
        assert len(runs) == ASK_REPEATS and not differing, (question, {n: [r[n] for r in runs] for n in differing})
        fact, doc_id = QUESTIONS[question]
        assert runs[0]["abstained"] is False and fact in runs[0]["answer"].lower(), runs[0]["answer"]
        assert {c["doc_id"] for c in runs[0]["citations"]} == {doc_id}

    assert any(status == 200 and still_generating for status, still_generating in during_generation), during_generation
    assert all(status == 200 for status, _ in during_generation)
    assert 'status="5' not in httpx.get(f"{url}/metrics").text  # the server counted no 5xx either
