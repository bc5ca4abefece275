"""schemathesis against the OpenAPI schema: generated requests never get a 5xx. /search and /documents get many
cases; the model-backed /ask and /v1/chat/completions a handful."""

from __future__ import annotations

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings

pytestmark = pytest.mark.slow
MODEL_BACKED = {"/ask", "/v1/chat/completions"}


def test_no_operation_answers_5xx(api_client) -> None:
    # the app is already started (its lifespan ran) by the api_client fixture
    schema = schemathesis.openapi.from_asgi("/openapi.json", api_client.app)
    tested = []
    for result in schema.get_all_operations():
        operation = result.ok()

        @given(case=operation.as_strategy())
        @settings(max_examples=4 if operation.path in MODEL_BACKED else 40, deadline=None,
                  suppress_health_check=list(HealthCheck), database=None)
        def check(case) -> None:
            # no read timeout to speak of: a generation on a busy 2-core machine outlasts schemathesis's 10 s
            # default, and the subject is the status, not the latency
            response = case.call(timeout=600)
            assert response.status_code < 500, (case.method, case.path, case.body, response.text[:300])

        check()
        tested.append(operation.path)
    assert {"/search", "/ask", "/documents", "/documents/{doc_id}", "/v1/chat/completions"} <= set(tested)


# Deeply nested and oversized JSON at every field of every POST endpoint (hypothesis): 400 / 413 / 422, never 5xx.
BODIES = {
    "/search": {"query": "LU-KV", "k": 3, "filters": {"venue": "x"}},
    "/ask": {"question": "What does LU-KV evict?", "k": 1, "filters": {"venue": "x"}},
    "/v1/chat/completions": {"messages": [{"role": "user", "content": "What does LU-KV evict?"}]},
    "/documents": [{"id": "fuzz", "title": "T", "text": "x", "venue": "v", "authors": ["a"]}],
}


def _nested(depth: int, leaf: object, kind: str) -> str:
    """``leaf`` inside ``depth`` lists or objects, as JSON text (``json.dumps`` itself cannot encode 3000 levels)."""
    opening, closing = ("[", "]") if kind == "list" else ('{"k": ', "}")
    return opening * depth + json.dumps(leaf) + closing * depth


def test_deep_and_oversized_json_is_never_a_5xx(api_client) -> None:
    from hypothesis import strategies as st

    @given(
        path=st.sampled_from(sorted(BODIES)),
        field=st.integers(min_value=0, max_value=5),
        depth=st.one_of(st.integers(1, 40), st.integers(100, 3000)),
        kind=st.sampled_from(["list", "dict"]),
        leaf=st.one_of(st.none(), st.integers(), st.text(max_size=5), st.just("a" * 200_000)),
    )
    @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def check(path: str, field: int, depth: int, kind: str, leaf: object) -> None:
        body = json.loads(json.dumps(BODIES[path]))
        target = body[0] if isinstance(body, list) else body
        if path == "/v1/chat/completions":
            target = target["messages"][0]
        keys = sorted(target)
        key = keys[field % len(keys)]
        if path == "/ask" and key not in ("filters", "question"):
            key = "filters"  # a valid question would run the model: keep the fuzz on validation
        target[key] = "__NESTED__"
        raw = json.dumps(body).replace('"__NESTED__"', _nested(depth, leaf, kind))
        response = api_client.post(path, content=raw, headers={"content-type": "application/json"})
        assert response.status_code < 500, (path, key, depth, kind, response.text[:300])
        assert response.headers["content-type"].startswith("application/json")

    check()
