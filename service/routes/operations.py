"""Operations routes: ``GET /health`` (liveness, index size, the answering model's state) and ``GET /metrics``."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Response

from citerag.service.pipeline import papers_read_ahead
from citerag.service.schemas import Health
from citerag.service.state import MetricsDep, Service, ServiceDep

router = APIRouter()


@router.get("/health")
async def health(service: ServiceDep) -> Health:
    """Liveness, index size and whether the answering model is loaded yet; never waits for the model."""
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
    )


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
