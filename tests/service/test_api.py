"""The HTTP API over the real index, embedder and default generator (FastAPI TestClient, lifespan included)."""

from __future__ import annotations

import pytest

from tests.conftest import EDEN

pytestmark = pytest.mark.slow

LU_KV = "f5bdc4c41e222197"
GP_EQUIFLOW = "0e4a7d0dfa0b289b"
XR_1 = "4f825244cf5bb479"


class TestSearch:
    def test_acronym_query_ranks_its_paper_first_in_every_mode(self, api_client) -> None:
        for mode in ("hybrid", "bm25", "dense"):
            body = api_client.post("/search", json={"query": "LU-KV", "k": 3, "mode": mode}).json()
            assert body["mode"] == mode and len(body["results"]) == 3
            assert body["results"][0]["doc_id"] == LU_KV, mode

    def test_hybrid_results_carry_both_ranks_and_exact_spans(self, api_client) -> None:
        body = api_client.post(
            "/search", json={"query": "How many parameters does the largest metagenomic foundation model have?"}
        ).json()
        top = body["results"][0]
        assert top["doc_id"] == EDEN and top["rank"] == 1
        assert top["bm25_rank"] == 1 and top["dense_rank"] == 1
        # bounded fusion: 0.5 * BM25 share of the query (< 1) + 0.5 * cosine (< 1)
        assert 0.0 < top["score"] < 1.0
        assert top["score"] > body["results"][1]["score"]
        doc = api_client.get(f"/documents/{EDEN}").json()
        for r in body["results"]:
            if r["doc_id"] == EDEN:
                assert doc["text"][r["start"] : r["end"]] == r["text"]

    def test_one_per_doc(self, api_client) -> None:
        body = api_client.post("/search", json={"query": "KV cache", "k": 10, "one_per_doc": True}).json()
        ids = [r["doc_id"] for r in body["results"]]
        assert len(ids) == len(set(ids)) == 10 and ids[0] == LU_KV


class TestAsk:
    @pytest.mark.parametrize(
        ("question", "expected", "doc_id"),
        [
            ("How many parameters does the largest metagenomic foundation model have?", "28 billion", EDEN),
            ("What does GP-EquiFlow use to construct its prior distributions?", "gaussian process", GP_EQUIFLOW),
            ("What discrete latent representation is at the core of XR-1?", "unified vision-motion codes", XR_1),
        ],
    )
    def test_answers_with_the_right_citation(self, api_client, question: str, expected: str, doc_id: str) -> None:
        body = api_client.post("/ask", json={"question": question}).json()
        assert body["abstained"] is False, body["reason"]
        assert expected in body["answer"].lower()
        assert body["citations"], body["answer"]
        assert {c["doc_id"] for c in body["citations"]} == {doc_id}
        for c in body["citations"]:
            assert 1 <= c["n"] <= len(body["passages"])
            assert f"[{c['n']}]" in body["answer"]
            assert body["passages"][c["n"] - 1]["chunk_id"] == c["chunk_id"]
        assert set(body["timings_ms"]) >= {"retrieve", "generate", "total"}

    def test_off_corpus_question_abstains_without_citations(self, api_client) -> None:
        body = api_client.post("/ask", json={"question": "Who won the 2018 FIFA World Cup?"}).json()
        assert body["abstained"] is True
        assert body["answer"] == "Not found in the indexed abstracts."
        assert body["citations"] == [] and body["reason"]


class TestDocumentsAndHealth:
    def test_health(self, api_client) -> None:
        body = api_client.get("/health").json()
        assert body["status"] == "ok" and body["documents"] == 38 and body["passages"] > 38

    def test_paged_listing_and_one_document(self, api_client) -> None:
        page = api_client.get("/documents", params={"offset": 30, "limit": 5}).json()
        assert page["total"] == 38 and len(page["documents"]) == 5
        doc = api_client.get(f"/documents/{EDEN}").json()
        assert "28 billion parameters" in doc["text"] and doc["title"] == ""
        assert doc["label"].startswith("Foundation models for genomics")
        assert [p["ordinal"] for p in doc["passages"]] == list(range(len(doc["passages"])))

    def test_unknown_document_is_a_json_404(self, api_client) -> None:
        response = api_client.get("/documents/nope")
        assert response.status_code == 404
        assert response.json()["detail"] == "no document with id 'nope'; list ids with GET /documents"


class TestBadInput:
    @pytest.mark.parametrize(
        ("path", "body", "field"),
        [
            ("/search", {"query": ""}, "query"),
            ("/search", {"query": "   "}, "query"),
            ("/search", {"query": "x", "k": 0}, "k"),
            ("/search", {"query": "x", "k": 101}, "k"),
            ("/search", {"query": "x", "mode": "sparse"}, "mode"),
            ("/search", {"query": "x", "colour": "red"}, "colour"),
            ("/search", {"query": "x" * 2001}, "query"),
            ("/search", {"query": "a\x00b"}, "query"),
            ("/ask", {"question": ""}, "question"),
            ("/ask", {"question": "x", "k": 21}, "k"),
            ("/ask", {}, "question"),
        ],
    )
    def test_validation_errors_name_the_field(self, api_client, path: str, body: dict, field: str) -> None:
        response = api_client.post(path, json=body)
        assert response.status_code == 422
        assert any(err["loc"][-1] == field for err in response.json()["detail"]), response.json()

    def test_a_json_body_sent_as_a_form_says_to_send_json(self, api_client) -> None:
        # curl -d '{"question": ...}' without a content type sends a form: the body is read as text, not parsed
        form = {"content-type": "application/x-www-form-urlencoded"}
        response = api_client.post("/ask", content=b'{"question": "What is ASMC?"}', headers=form)
        assert response.status_code == 422
        [error] = response.json()["detail"]
        assert error["loc"] == ["body"] and "Content-Type: application/json" in error["msg"]
        sent_as_json = api_client.post("/ask", content=b'["What is ASMC?"]', headers={"content-type": "application/json"})
        assert "Content-Type" not in sent_as_json.json()["detail"][0]["msg"]  # JSON, only the wrong shape

    def test_invalid_json(self, api_client) -> None:
        response = api_client.post("/search", content=b"{not json", headers={"content-type": "application/json"})
        assert response.status_code == 422
        assert response.json()["detail"][0]["type"] == "json_invalid"

    @pytest.mark.parametrize(
        ("raw", "field"),
        [(b'{"query": "\\ud800 KV"}', "query"), (b'{"query": "LU-KV", "k": NaN}', "k"),
         (b'{"query": "LU-KV", "k": 1e400}', "k"), (b'{"query": "LU-KV", "k": true}', "k"),
         (b'{"query": "LU-KV", "k": "3"}', "k"), (b'{"query": "x", "one_per_doc": "yes"}', "one_per_doc")],
    )
    def test_unencodable_or_mistyped_input_is_a_json_422(self, api_client, raw: bytes, field: str) -> None:
        response = api_client.post("/search", content=raw, headers={"content-type": "application/json"})
        assert response.status_code == 422
        body = response.json()
        assert any(err["loc"][-1] == field for err in body["detail"]), body
        assert all("input" not in err for err in body["detail"])  # nothing echoed back

    def test_oversized_body_is_413(self, api_client) -> None:
        huge = b'{"query": "' + b"a" * 2_000_000 + b'"}'
        response = api_client.post("/search", content=huge, headers={"content-type": "application/json"})
        assert response.status_code == 413
        assert response.json() == {"detail": "request body larger than 1048576 bytes", "error": "BodyTooLarge"}

    def test_a_478_deep_filter_is_a_422_naming_the_field(self, api_client) -> None:
        deep = b'{"query": "glacier", "filters": {"venue": {"in": ' + b"[" * 478 + b'"icml"' + b"]" * 478 + b"}}}"
        for path in ("/search", "/ask"):
            response = api_client.post(path, content=deep.replace(b'"query"', b'"question"') if path == "/ask"
                                       else deep, headers={"content-type": "application/json"})
            assert response.status_code == 422, path
            assert any("filters" in [str(part) for part in err["loc"]] for err in response.json()["detail"])

    def test_a_chunked_body_over_the_limit_is_413(self, live_server: str) -> None:
        import httpx

        def chunks():  # no Content-Length: sent chunked, 5 MB
            yield b'{"query": "'
            for _ in range(80):
                yield b"a" * 65536
            yield b'"}'

        response = httpx.post(f"{live_server}/search", content=chunks(), headers={"content-type": "application/json"},
                              timeout=60)
        assert response.status_code == 413
        assert response.json()["error"] == "BodyTooLarge"

    def test_a_body_nested_10000_deep_is_a_400_that_says_so(self, api_client) -> None:
        deep = b'{"query": "x", "filters": {"venue": ' + b"[" * 10_000 + b"]" * 10_000 + b"}}"
        for path in ("/search", "/ask", "/v1/chat/completions", "/documents"):
            response = api_client.post(path, content=deep, headers={"content-type": "application/json"})
            assert response.status_code == 400, path
            assert response.json()["error"] == "BodyTooDeep" and "nested too deeply" in response.json()["detail"]

    def test_a_body_that_is_not_utf8_is_a_400_that_says_so(self, api_client) -> None:
        for path in ("/search", "/ask", "/v1/chat/completions", "/documents"):
            response = api_client.post(path, content=b'{"question": "\xff\xfe LU-KV"}',
                                       headers={"content-type": "application/json"})
            assert response.status_code == 400, path
            assert response.json() == {"detail": "request body: not valid UTF-8 text; send the JSON encoded as UTF-8",
                                       "error": "BodyNotText"}
        utf16 = api_client.post("/search", content='{"query": "LU-KV"}'.encode("utf-16"),
                                headers={"content-type": "application/json"})
        assert utf16.status_code == 200  # RFC 8259 JSON in UTF-16 with its byte order mark is still text

    def test_an_unexpected_error_is_a_json_500_with_the_request_id_counted_in_metrics(
        self, api_client, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        def broken(*args, **kwargs):
            raise RuntimeError("forced failure")

        monkeypatch.setattr(api_client.app.state.service.backend, "search", broken)
        response = api_client.post("/search", json={"query": "LU-KV"}, headers={"X-Request-ID": "req-500-test"})
        assert response.status_code == 500
        assert response.json() == {"detail": "internal error; report it with the request id req-500-test",
                                   "error": "InternalError", "request_id": "req-500-test"}
        assert response.headers["X-Request-ID"] == "req-500-test"
        monkeypatch.undo()
        metrics = api_client.get("/metrics").text
        assert 'citerag_unhandled_errors_total{exception="RuntimeError"} 1.0' in metrics
        assert 'citerag_http_requests_total{method="POST",route="/search",status="500"} 1.0' in metrics

    def test_unicode_queries_work(self, api_client) -> None:
        for query in ("V₁ 🚀 verification", "ما هو", "论文 KV cache"):
            assert api_client.post("/search", json={"query": query}).status_code == 200


def test_health_answers_while_an_ask_is_generating(api_client) -> None:
    """Generation runs in the thread pool: /health is served while /ask is still running (order, not timing)."""
    import threading

    done = threading.Event()

    def ask() -> None:
        api_client.post("/ask", json={"question": "What damping term is added to the dynamics of mSGD and Adam?"})
        done.set()

    worker = threading.Thread(target=ask)
    worker.start()
    try:
        # wait until the generator is busy (its lock is held) so /health really overlaps a generation
        lock = api_client.app.state.service.answerer.generator._lock
        while not lock.locked() and not done.is_set():
            done.wait(0.01)
        assert not done.is_set(), "the ask finished before /health could be sent"
        assert api_client.get("/health").json()["status"] == "ok"
        assert not done.is_set()
    finally:
        worker.join()


def _events(response) -> list[tuple[str, dict]]:
    import json

    events = []
    for block in response.text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


class TestStreaming:
    def test_passages_evidence_tokens_then_the_checked_answer(self, api_client) -> None:
        question = "How many parameters does the largest metagenomic foundation model have?"
        response = api_client.post("/ask", json={"question": question, "stream": True})
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        events = _events(response)
        kinds = [kind for kind, _ in events]
        assert kinds[:2] == ["passages", "evidence"] and kinds[-1] == "answer" and "token" in kinds
        first_text = kinds.index("token")
        assert set(kinds[2:first_text]) <= {"evidence"} and set(kinds[first_text:-1]) == {"token"}
        # the chosen sentences first; over the 38 shipped abstracts a question about one paper is then answered over
        # that paper read whole, sent again before any text: the last evidence sent is what the answer rests on
        chosen, read = events[1][1]["evidence"], events[first_text - 1][1]["evidence"]
        assert {e["doc_id"] for e in read} == {EDEN} and len(read) >= len(chosen)
        assert [e["text"] for e in read] == [e["text"] for e in events[-1][1]["evidence"]]
        streamed = "".join(data["text"] for kind, data in events if kind == "token")
        final = events[-1][1]
        assert "28 billion" in streamed and "28 billion" in final["answer"]
        assert [c["doc_id"] for c in final["citations"]] == [EDEN]
        assert [p["chunk_id"] for p in events[0][1]["passages"]] == [p["chunk_id"] for p in final["passages"]]

    def test_accept_header_selects_streaming(self, api_client) -> None:
        response = api_client.post(
            "/ask", json={"question": "Who won the 2018 FIFA World Cup?"}, headers={"accept": "text/event-stream"}
        )
        events = _events(response)
        kinds = [kind for kind, _ in events]  # each paper read is sent as evidence, judged, and none answers
        assert kinds[0] == "passages" and kinds[-1] == "answer" and set(kinds[1:-1]) == {"evidence"}
        assert events[-1][1]["abstained"] is True and events[-1][1]["citations"] == []


def test_overload_returns_503_with_retry_after(api_client) -> None:
    from citerag.service.state import AdmissionGate

    service = api_client.app.state.service
    saved, service.gate = service.gate, AdmissionGate(1)
    service.gate.enter()  # the one slot is taken
    try:
        response = api_client.post("/ask", json={"question": "What is EDEN?"})
        assert response.status_code == 503
        assert response.headers["retry-after"] == "15"
        assert response.json()["detail"] == "1 questions are already queued for the model; retry shortly"
    finally:
        service.gate.leave()
        service.gate = saved


def test_metrics_and_request_ids(api_client) -> None:
    response = api_client.post("/search", json={"query": "KV cache"}, headers={"x-request-id": "trace-42"})
    assert response.headers["x-request-id"] == "trace-42"
    assert len(api_client.get("/health").headers["x-request-id"]) == 32  # generated when absent
    api_client.post("/ask", json={"question": "Who won the 2018 FIFA World Cup?"})
    text = api_client.get("/metrics").text
    assert 'citerag_http_requests_total{method="POST",route="/search",status="200"}' in text
    assert 'citerag_http_request_seconds_bucket{le="0.001",method="POST",route="/search"}' in text
    assert "citerag_index_documents 38.0" in text
    assert 'citerag_answer_stage_seconds_count{stage="retrieve"}' in text
    for series in ("citerag_generated_tokens_total", "citerag_index_passages", "citerag_ask_queue_depth 0.0"):
        assert series in text
