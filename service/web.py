"""The web page at ``/``: plain HTML, CSS and vanilla JS from ``service/static/`` (no CDN, no build step).

The page asks ``POST /ask`` with ``"stream": true`` and renders its server-sent events; citations open the cited
span inside the full abstract (``GET /documents/{id}``). The page and ``/static`` are left out of the OpenAPI
schema: they are not part of the JSON API.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().with_name("static")

# Everything from this origin only: no inline script or style, no third-party requests, no framing. A second line
# of defence behind the page's rule of building the DOM with textContent only.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)


def mount_web(app: FastAPI) -> None:
    """Serve the page at ``GET /`` and its assets under ``/static``.

    Raises:
        RuntimeError: ``service/static`` is missing (an install without the package data).
    """
    if not (STATIC_DIR / "index.html").is_file():
        raise RuntimeError(f"{STATIC_DIR / 'index.html'} is missing: reinstall citerag with its package data")
    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        """The question page."""
        return FileResponse(
            STATIC_DIR / "index.html",
            headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY, "X-Content-Type-Options": "nosniff"},
        )
