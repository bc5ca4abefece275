"""The documents resource: ``GET /documents`` (paged), ``GET /documents/{doc_id}``, and the writes
``POST /documents`` and ``DELETE /documents/{doc_id}``, which need the API key (:class:`citerag.service.state.WriteGuard`)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Query

from citerag.service.schemas import MAX_DOCUMENTS_PER_REQUEST, DocumentIn, DocumentOut, DocumentsPage, WriteReportOut
from citerag.service.state import BearerDep, ServiceDep

router = APIRouter()


@router.get("/documents")
async def list_documents(
    service: ServiceDep,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> DocumentsPage:
    """Documents in index order, paged."""
    return service.library.documents(offset, limit)


@router.get("/documents/{doc_id:path}")
async def get_document(doc_id: str, service: ServiceDep) -> DocumentOut:
    """One document: full text, its display form, metadata and its passages' spans."""
    return service.library.document(doc_id)


@router.post("/documents", responses={401: {}, 403: {}, 507: {}})
def add_documents(
    service: ServiceDep,
    documents: Annotated[list[DocumentIn], Body(min_length=1, max_length=MAX_DOCUMENTS_PER_REQUEST)],
    credentials: BearerDep,
) -> WriteReportOut:
    """Add documents, or replace them by id (their old passages go). Only new and changed passages are
    embedded; searches keep answering from the previous version until the new one is committed.
    Needs ``Authorization: Bearer <CITERAG_API_KEY>`` when a key is set. A full disk is a 507 naming the file
    system, the bytes free and what to free; nothing is written and searches go on."""
    service.writes.check(credentials)
    return service.library.add(documents)


@router.delete("/documents/{doc_id:path}", responses={401: {}, 403: {}, 404: {}, 507: {}})
def delete_document(doc_id: str, service: ServiceDep, credentials: BearerDep) -> WriteReportOut:
    """Remove a document and all its passages. Needs the API key when one is set."""
    service.writes.check(credentials)
    return service.library.delete(doc_id)
