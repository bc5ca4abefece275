"""Corpus edge cases through the HTTP API, with the real embedder and generator: an empty corpus, one document,
every script, and more passages asked for than exist."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest

from citerag.index.chunking import model_text
from citerag.index.ingest import load_documents
from citerag.index.store import IndexStore
from citerag.index.tokenize import tokenize
from citerag.service.answering import NOT_FOUND
from citerag.index.lifecycle import EMPTY_INDEX
from tests.conftest import EDEN, SCRIPTS, SEEDS

pytestmark = pytest.mark.slow
MODES = ("hybrid", "bm25", "dense")


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def sse_events(text: str) -> list[tuple[str, dict]]:
    blocks = [dict(line.split(": ", 1) for line in block.splitlines()) for block in text.strip().split("\n\n")]
    return [(block["event"], json.loads(block["data"])) for block in blocks]


@pytest.fixture(params=["no-sources", "blank-records"])
def empty(request, client_for, tmp_path: Path, caplog: pytest.LogCaptureFixture):
    """An app over an empty index: built from no source at all, or from a file whose records have no text.
    Returns ``(client, source, log messages of the start-up)``."""
    source = None
    if request.param == "blank-records":
        source = write_jsonl(tmp_path / "blank.jsonl", [{"id": "a", "text": "  \n "}, {"id": "b", "title": "T", "text": ""}])
    with caplog.at_level(logging.WARNING, logger="citerag.service.api"):
        client = client_for([source] if source else [])
    return client, source, [r.getMessage() for r in caplog.records if r.name == "citerag.service.api"]


class TestEmptyCorpus:
    def test_health_documents_and_metrics_report_nothing(self, empty) -> None:
        client = empty[0]
        health = client.get("/health").json()
        assert (health["status"], health["documents"], health["passages"]) == ("ok", 0, 0)
        assert client.get("/documents").json() == {"total": 0, "offset": 0, "limit": 100, "documents": []}
        assert client.get(f"/documents/{EDEN}").status_code == 404
        assert "citerag_index_documents 0.0" in client.get("/metrics").text

    def test_search_is_200_with_no_results_in_every_mode(self, empty) -> None:
        client = empty[0]
        for mode in MODES:
            for extra in ({}, {"one_per_doc": True}, {"filters": {"year": {"gte": 2020}}}):
                response = client.post("/search", json={"query": "KV cache", "k": 100, "mode": mode, **extra})
                assert response.status_code == 200, (mode, extra)
                assert response.json() == {"query": "KV cache", "mode": mode, "results": []}

    def test_ask_abstains_plain_streamed_and_openai(self, empty) -> None:
        client = empty[0]
        response = client.post("/ask", json={"question": "What is EDEN?"})
        assert response.status_code == 200
        body = response.json()
        assert (body["abstained"], body["answer"], body["reason"]) == (True, NOT_FOUND, "no passage matched the question")
        assert body["citations"] == [] and body["passages"] == []
        events = sse_events(client.post("/ask", json={"question": "What is EDEN?", "stream": True}).text)
        assert [kind for kind, _ in events] == ["passages", "answer"]
        assert events[0][1] == {"passages": []} and events[1][1]["abstained"] is True
        chat = client.post("/v1/chat/completions", json={"model": "citerag", "messages": [{"role": "user", "content": "What is EDEN?"}]})
        assert chat.status_code == 200 and chat.json()["choices"][0]["message"]["content"] == NOT_FOUND

    def test_the_log_says_the_index_is_empty_and_what_was_skipped(self, empty) -> None:
        _, source, messages = empty
        assert any(m.startswith(EMPTY_INDEX) for m in messages), messages
        if source is not None:
            assert any(m.startswith(f"skipped 2 records without text: {source}:1, {source}:2 (") for m in messages)


@pytest.fixture(scope="module")
def one(tmp_path_factory, settings_factory):
    """An app over a corpus of one document: the EDEN abstract (several passages), id ``eden``."""
    from fastapi.testclient import TestClient

    from citerag.service.api import create_app

    eden = next(d for d in load_documents([SEEDS]) if d.doc_id == EDEN)
    path = write_jsonl(tmp_path_factory.mktemp("one") / "eden.jsonl", [{"id": "eden", "text": eden.text}])
    with TestClient(create_app(settings_factory(corpus=[path]))) as client:
        yield client


class TestOneDocument:
    def test_search_finds_it_in_every_mode_with_finite_scores(self, one) -> None:
        document = one.get("/documents/eden").json()
        assert one.get("/health").json()["documents"] == 1
        query = "metagenomic foundation model"
        matching = sum(bool(set(tokenize(query)) & set(tokenize(document["text"][p["start"] : p["end"]])))
                       for p in document["passages"])
        for mode, expected in (("bm25", matching), ("dense", len(document["passages"])), ("hybrid", len(document["passages"]))):
            results = one.post("/search", json={"query": query, "k": 100, "mode": mode}).json()["results"]
            assert len(results) == expected and {r["doc_id"] for r in results} == {"eden"}, mode
            assert [r["rank"] for r in results] == list(range(1, expected + 1))
            assert all(math.isfinite(r["score"]) and r["score"] > 0 for r in results), mode

    def test_ask_answers_from_it(self, one) -> None:
        question = "How many parameters does the largest metagenomic foundation model have?"
        body = one.post("/ask", json={"question": question}).json()
        assert body["abstained"] is False, body["reason"]
        assert "28 billion" in body["answer"]
        assert {c["doc_id"] for c in body["citations"]} == {"eden"}


def test_a_query_in_each_script_finds_its_document_first(client_for, tmp_path: Path) -> None:
    rows = [{"id": lang, "text": text} for lang, (text, _) in SCRIPTS.items()]
    client = client_for([write_jsonl(tmp_path / "scripts.jsonl", rows)])
    for lang, (_, query) in SCRIPTS.items():
        bm25 = client.post("/search", json={"query": query, "k": 3, "mode": "bm25"}).json()["results"]
        assert [r["doc_id"] for r in bm25] == [lang], (lang, query)
        hybrid = client.post("/search", json={"query": query, "k": 3}).json()["results"]
        assert hybrid[0]["doc_id"] == lang and hybrid[0]["bm25_rank"] == 1, (lang, query)


class TestMorePassagesThanExist:
    """k = 100 on the 38 seed abstracts (127 passages)."""

    def test_bm25_returns_exactly_the_passages_that_match(self, api_client, seed_settings) -> None:
        index = IndexStore(seed_settings.index_dir).load()
        query = "LU-KV eviction"
        matching = sum(
            bool(set(tokenize(query)) & set(tokenize(model_text(p.text, index.documents[p.doc_id].title))))
            for p in index.passages
        )
        results = api_client.post("/search", json={"query": query, "k": 100, "mode": "bm25"}).json()["results"]
        assert 0 < len(results) == matching < 100

    def test_dense_and_hybrid_fill_k_with_distinct_passages(self, api_client, seed_settings) -> None:
        n_passages = len(IndexStore(seed_settings.index_dir).load().passages)
        assert n_passages > 100
        for mode in ("dense", "hybrid"):
            results = api_client.post("/search", json={"query": "KV cache", "k": 100, "mode": mode}).json()["results"]
            assert len(results) == len({r["chunk_id"] for r in results}) == 100, mode
        one_per_doc = api_client.post(
            "/search", json={"query": "KV cache", "k": 100, "mode": "dense", "one_per_doc": True}
        ).json()["results"]
        assert len(one_per_doc) == len({r["doc_id"] for r in one_per_doc}) == 38

    def test_a_filter_to_one_document_returns_only_its_passages(self, api_client) -> None:
        n_passages = len(api_client.get(f"/documents/{EDEN}").json()["passages"])
        for mode in MODES:
            body = {"query": "foundation model", "k": 100, "mode": mode, "filters": {"doc_id": EDEN}}
            results = api_client.post("/search", json=body).json()["results"]
            assert {r["doc_id"] for r in results} == {EDEN}, mode
            assert len(results) == len({r["chunk_id"] for r in results}), mode
            assert len(results) == n_passages or mode == "bm25", mode  # bm25: only passages with a query term
