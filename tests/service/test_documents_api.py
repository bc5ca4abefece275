"""Write endpoints: POST /documents and DELETE /documents/{id} change what /search finds, need the API key, and
refuse bad input with 4xx naming the field. Real app, real embedder, a 19-abstract corpus in a temp directory."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.security import HTTPAuthorizationCredentials

from citerag.service.state import WriteGuard
from citerag.service.errors import Unauthorized, WritesDisabled
from tests.conftest import API_KEY

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {API_KEY}"}
ZORBLAX = {"id": "zx-1", "title": "Zorblax", "text": "Zorblax quantisation halves the memory of sparse transformers."}


@pytest.fixture()
def client(settings_factory, seed_corpus: Path) -> Iterator:
    from fastapi.testclient import TestClient

    from citerag.service.api import create_app

    with TestClient(create_app(settings_factory(corpus=[seed_corpus], api_key=API_KEY))) as test_client:
        yield test_client


def _top(client, query: str, mode: str = "bm25") -> list[str]:
    response = client.post("/search", json={"query": query, "k": 3, "mode": mode})
    assert response.status_code == 200
    return [hit["doc_id"] for hit in response.json()["results"]]


def test_add_replace_and_delete_change_what_search_finds(client) -> None:
    response = client.post("/documents", json=[ZORBLAX], headers=AUTH)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["added"] == ["zx-1"] and body["passages_embedded"] == 1 and body["version"]
    assert _top(client, "zorblax")[0] == "zx-1"
    assert _top(client, "zorblax quantisation memory", mode="hybrid")[0] == "zx-1"
    assert client.get("/health").json()["documents"] == 20
    assert client.get("/documents/zx-1").json()["meta"] == {"source": "api"}

    again = client.post("/documents", json=[ZORBLAX], headers=AUTH).json()
    assert again["unchanged"] == ["zx-1"] and again["passages_embedded"] == 0 and again["version"] == body["version"]

    changed = {**ZORBLAX, "title": "Quuxify", "text": "Quuxify lowers the latency of dense retrieval."}
    replaced = client.post("/documents", json=[changed], headers=AUTH).json()
    assert replaced["replaced"] == ["zx-1"]
    assert "zx-1" not in _top(client, "zorblax")  # no stale passage left in BM25
    assert _top(client, "quuxify")[0] == "zx-1"

    deleted = client.delete("/documents/zx-1", headers=AUTH)
    assert deleted.status_code == 200 and deleted.json()["deleted"] == ["zx-1"]
    assert client.get("/documents/zx-1").status_code == 404
    assert "zx-1" not in _top(client, "quuxify", mode="hybrid")
    gone = client.delete("/documents/zx-1", headers=AUTH)
    assert gone.status_code == 404
    assert gone.json() == {"detail": "no document with id 'zx-1'; list ids with GET /documents", "error": "DocumentNotFound"}
    assert client.get("/health").json()["documents"] == 19


def test_an_integer_id_is_read_as_its_decimal_string_like_in_jsonl(client) -> None:
    response = client.post("/documents", json=[{"id": 7, "text": "Quokkanet ranks passages."}], headers=AUTH)
    assert response.status_code == 200 and response.json()["added"] == ["7"]
    assert client.get("/documents/7").json()["doc_id"] == "7"
    assert client.delete("/documents/7", headers=AUTH).json()["deleted"] == ["7"]


def test_writes_need_the_key(client) -> None:
    missing = client.post("/documents", json=[ZORBLAX])
    assert missing.status_code == 401
    assert missing.json() == {
        "detail": "API key missing: send 'Authorization: Bearer <CITERAG_API_KEY>'", "error": "Unauthorized"
    }
    wrong = client.delete("/documents/anything", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["detail"].startswith("API key wrong")
    assert client.get("/health").json()["documents"] == 19  # nothing was written
    assert client.post("/search", json={"query": "EDEN"}).status_code == 200  # reads stay open


@pytest.mark.parametrize(
    ("body", "loc", "message"),
    [
        ([], ["body"], "List should have at least 1 item"),
        ([{"title": "no text"}], ["body", 0, "text"], "Field required"),
        ([{"text": "   "}], ["body", 0, "text"], "must contain non-whitespace text"),
        ([{"text": "x", "year": "2020"}], ["body", 0, "year"], "Input should be a valid integer"),
        ([{"text": "x", "colour": "red"}], ["body", 0, "colour"], "Extra inputs are not permitted"),
        ([{"text": "x", "id": True}], ["body", 0, "id"], "must be a string or an integer, got bool"),
        ([{"text": "x", "id": 1.5}], ["body", 0, "id"], "must be a string or an integer, got float"),
        ([{"text": "x", "id": "a" * 201}], ["body", 0, "id"], "must be at most 200 characters, got 201"),
        ([{"text": "x", "id": "a\tb"}], ["body", 0, "id"], "must not contain control characters"),
        ([ZORBLAX, {**ZORBLAX, "text": "other"}], ["body", 1, "id"], "id 'zx-1' is also item 0 with other content"),
    ],
)
def test_bad_documents_are_422_naming_the_field(client, body, loc, message) -> None:
    response = client.post("/documents", json=body, headers=AUTH)
    assert response.status_code == 422
    detail = response.json()["detail"][0]
    assert detail["loc"] == loc and message in detail["msg"]
    assert client.get("/health").json()["documents"] == 19


def test_without_a_key_writes_are_allowed_only_on_loopback() -> None:
    WriteGuard(None, "127.0.0.1").check(None)
    WriteGuard(None, "::1").check(None)
    WriteGuard(None, "localhost").check(None)
    for host in ("0.0.0.0", "192.168.1.20", "example.org"):
        with pytest.raises(WritesDisabled, match=f"listens on {host} and CITERAG_API_KEY is not set"):
            WriteGuard(None, host).check(None)
    keyed = WriteGuard("s3cret", "0.0.0.0")
    keyed.check(HTTPAuthorizationCredentials(scheme="Bearer", credentials="s3cret"))
    with pytest.raises(Unauthorized, match="API key wrong"):
        keyed.check(HTTPAuthorizationCredentials(scheme="Bearer", credentials="s3cret "))
