"""``POST /search``: ranked passages, no model. A synchronous handler: FastAPI runs it in its thread pool, so
other requests are served meanwhile. (A handler's docstring is its OpenAPI description.)"""

from __future__ import annotations

from fastapi import APIRouter

from citerag.service.schemas import PassageOut, SearchRequest, SearchResponse
from citerag.service.state import ServiceDep

router = APIRouter()


@router.post("/search")
def search(body: SearchRequest, service: ServiceDep) -> SearchResponse:
    """Top-k passages by hybrid (RRF of BM25 and dense), BM25 or dense retrieval."""
    results = service.backend.search(
        body.query, k=body.k, mode=body.mode, one_per_doc=body.one_per_doc, filters=body.filters
    )
    return SearchResponse(query=body.query, mode=body.mode, results=[PassageOut.of(r) for r in results])
