"""The documents resource: ``GET /documents`` (paged), ``GET /documents/{doc_id}``, and the writes
``POST /documents`` and ``DELETE /documents/{doc_id}``, which need the API key (:class:`citerag.service.state.WriteGuard`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query
from fastapi.exceptions import RequestValidationError

from citerag.index.errors import DocumentNotFound
from citerag.index.types import Document
from citerag.service.schemas import (
    MAX_DOCUMENTS_PER_REQUEST,
    DocumentIn,
    DocumentOut,
    DocumentsPage,
    DocumentSummary,
    WriteReportOut,
)
from citerag.service.state import BearerDep, ServiceDep

router = APIRouter()


@router.get("/documents")
async def list_documents(
    service: ServiceDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DocumentsPage:
    """Documents in index order, paged."""
    total = int(service.backend.stats()["documents"])
    page = [DocumentSummary.of(d) for d in service.backend.documents(offset, limit)]
    return DocumentsPage(total=total, offset=offset, limit=limit, documents=page)


@router.get("/documents/{doc_id:path}")
async def get_document(doc_id: str, service: ServiceDep) -> DocumentOut:
    """One document: full text, metadata and its passages' spans."""
    doc = service.backend.get(doc_id)
    if doc is None:
        raise DocumentNotFound(f"no document with id {doc_id!r}; list ids with GET /documents")
    spans = [
        {"chunk_id": p.chunk_id, "ordinal": p.ordinal, "start": p.start, "end": p.end}
        for p in service.backend.passages_of(doc_id)
    ]
    return DocumentOut(**DocumentSummary.of(doc).model_dump(), text=doc.text, passages=spans)


@router.post("/documents", responses={401: {}, 403: {}})
def add_documents(
    service: ServiceDep,
    documents: Annotated[list[DocumentIn], Body(min_length=1, max_length=MAX_DOCUMENTS_PER_REQUEST)],
    credentials: BearerDep,
) -> WriteReportOut:
    """Add documents, or replace them by id (their old passages go). Only new and changed passages are
    embedded; searches keep answering from the previous version until the new one is committed.
    Needs ``Authorization: Bearer <CITERAG_API_KEY>`` when a key is set."""
    service.writes.check(credentials)
    return WriteReportOut.of(service.backend.write(distinct([item.to_document() for item in documents])))


@router.delete("/documents/{doc_id:path}", responses={401: {}, 403: {}, 404: {}})
def delete_document(doc_id: str, service: ServiceDep, credentials: BearerDep) -> WriteReportOut:
    """Remove a document and all its passages. Needs the API key when one is set."""
    service.writes.check(credentials)
    return WriteReportOut.of(service.backend.delete([doc_id]))


def distinct(docs: list[Document]) -> list[Document]:
    """``docs`` with repeats of the same document dropped (the first place of each id kept).

    Raises:
        RequestValidationError: an id stands for two different documents (422 at the second one's ``id``).
    """
    first: dict[str, int] = {}
    for position, doc in enumerate(docs):
        if doc.doc_id in first and docs[first[doc.doc_id]] != doc:
            raise RequestValidationError([{
                "loc": ["body", position, "id"], "type": "value_error",
                "msg": f"id {doc.doc_id!r} is also item {first[doc.doc_id]} with other content; ids must be unique",
            }])
        first.setdefault(doc.doc_id, position)
    return list({d.doc_id: d for d in docs}.values())
