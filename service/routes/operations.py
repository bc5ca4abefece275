"""Operations routes: ``GET /health`` (liveness, index size, the answering model's state, a full disk),
``GET /metrics`` and ``POST /admin/backup`` (a backup of the live index, :mod:`citerag.index.backup`; needs the API
key like the writes)."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Response

from citerag.index.backup import BackupError, BadDestination, backup
from citerag.index.diskspace import WATCH, free_bytes
from citerag.index.store import IndexStore
from citerag.service.errors import InvalidRequest
from citerag.service.pipeline import papers_read_ahead
from citerag.service.schemas import BackupOut, BackupRequest, DiskCondition, DiskHealth, Health
from citerag.service.state import BearerDep, MetricsDep, Service, ServiceDep

router = APIRouter()


@router.get("/health")
async def health(service: ServiceDep) -> Health:
    """Liveness, index size, whether the answering model is loaded yet, and whether writes fail for lack of space
    (``disk``); never waits for the model."""
    stats = service.library.stats()
    return Health(
        status="ok",
        documents=int(stats["documents"]),
        passages=int(stats["passages"]),
        index_version=str(stats["version"]),
        generator_loaded=service.loader.ready,
        generator=service.loader.state,
        index_check=str(stats.get("verification", "not-applicable")),
        decoding=_decoding(service),
        papers=papers_read_ahead(service.loader.get()) if service.loader.ready else "loading",
        disk=disk_health(),
    )


def disk_health() -> DiskHealth:
    """What :data:`citerag.index.diskspace.WATCH` holds: ``ok``, or ``full`` with every place whose last write failed
    for space (the oldest first; free bytes read now)."""
    conditions = [
        DiskCondition(
            part=c.error.part, path=c.error.path, filesystem=c.error.filesystem,
            free_bytes=free_bytes(Path(c.error.filesystem)), quota=c.error.quota,
            since=datetime.fromtimestamp(c.since, timezone.utc).isoformat(timespec="seconds"),
            failures=c.failures, detail=str(c.error),
        )
        for c in WATCH.conditions()
    ]
    if not conditions:
        return DiskHealth()
    first = conditions[0]
    return DiskHealth(status="full", part=first.part, path=first.path, filesystem=first.filesystem,
                      free_bytes=first.free_bytes, since=first.since, detail=first.detail, conditions=conditions)


def _decoding(service: Service) -> dict[str, Any]:
    """The loaded answering model's decoding (``{}`` until it is loaded; never waits for it)."""
    if not service.loader.ready:
        return {}
    generator = getattr(service.loader.get(), "generator", None)
    report = getattr(generator, "decoding_report", None)
    return report() if callable(report) else {}


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics(metrics: MetricsDep) -> Response:
    """Prometheus text format: requests, latency, answering stages, tokens, index size, queue depth."""
    return metrics.render()


@router.post("/admin/backup", responses={400: {}, 401: {}, 403: {}, 503: {}, 507: {}})
def backup_index(body: BackupRequest, service: ServiceDep, credentials: BearerDep) -> BackupOut:
    """Back up the live index version and its write log into ``dest``, a new directory on the server, while the
    service goes on serving and writing (``citerag backup DEST`` does the same; ``citerag restore DEST`` restores
    it). Needs ``Authorization: Bearer <CITERAG_API_KEY>`` when a key is set, like the writes. A ``dest`` that
    exists or lies inside the index directory is a 422 naming the field; the Milvus backend is a 400."""
    service.writes.check(credentials)
    store = getattr(service.backend, "store", None)
    if not isinstance(store, IndexStore):
        raise BackupError("backups cover the embedded index; back up the Milvus data with Milvus's own tools")
    try:
        report = backup(store, Path(body.dest))
    except BadDestination as exc:
        raise InvalidRequest.at(["dest"], str(exc)) from exc
    return BackupOut(dest=str(report.path), version=report.version, wal_seq=report.wal_seq, wal_last=report.wal_last,
                     documents=report.documents, passages=report.passages, files=report.files, bytes=report.bytes,
                     created_at=report.created_at)
