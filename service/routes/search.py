"""``POST /search``: ranked passages, no model. A synchronous handler: FastAPI runs it in its thread pool, so
other requests are served meanwhile. (A handler's docstring is its OpenAPI description.)"""

from __future__ import annotations

from fastapi import APIRouter

from citerag.service.schemas import SearchRequest, SearchResponse
from citerag.service.state import ServiceDep

router = APIRouter()


@router.post("/search")
def search(body: SearchRequest, service: ServiceDep) -> SearchResponse:
    """Top-k passages by hybrid (RRF of BM25 and dense), BM25 or dense retrieval."""
    results = service.library.search(body.query, k=body.k, mode=body.mode, filters=body.filters,
                                     one_per_doc=body.one_per_doc)
    return SearchResponse(query=body.query, mode=body.mode, results=results)
