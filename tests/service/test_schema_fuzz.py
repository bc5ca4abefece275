"""schemathesis against the OpenAPI schema: generated requests never get a 5xx. /search and /documents get many
cases; the model-backed /ask and /v1/chat/completions a handful."""

from __future__ import annotations

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
