"""The HTTP routes, one router a resource; :func:`service.api.create_app` includes them in this order.

* :mod:`~service.routes.operations`: ``GET /health``, ``GET /metrics``;
* :mod:`~service.routes.search`: ``POST /search``;
* :mod:`~service.routes.ask`: ``POST /ask`` (JSON, or server-sent events);
* :mod:`~service.routes.openai`: the OpenAI-compatible ``GET /v1/models`` and ``POST /v1/chat/completions``;
* :mod:`~service.routes.documents`: ``GET``, ``POST /documents`` and ``GET``, ``DELETE /documents/{doc_id}``.

The web page at ``/`` and its assets are mounted by :func:`service.web.mount_web`. Handlers reach the shared
state through dependencies (:data:`service.state.ServiceDep`).
"""

from __future__ import annotations

from service.routes import ask, documents, openai, operations, search

ROUTERS = (operations.router, search.router, ask.router, openai.router, documents.router)
