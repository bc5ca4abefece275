"""The HTTP routes, one router a resource; :func:`citerag.service.api.create_app` includes them in this order.

* :mod:`~citerag.service.routes.operations`: ``GET /health``, ``GET /metrics``, ``POST /admin/backup``;
* :mod:`~citerag.service.routes.search`: ``POST /search``;
* :mod:`~citerag.service.routes.ask`: ``POST /ask`` (JSON, or server-sent events);
* :mod:`~citerag.service.routes.openai`: the OpenAI-compatible ``GET /v1/models`` and ``POST /v1/chat/completions``;
* :mod:`~citerag.service.routes.documents`: ``GET``, ``POST /documents`` and ``GET``, ``DELETE /documents/{doc_id}``.

The web page at ``/`` and its assets are mounted by :func:`citerag.service.web.mount_web`. Handlers reach the shared
state through dependencies (:data:`citerag.service.state.ServiceDep`) and search, answer, read and write through the
Python API (:attr:`citerag.service.state.Service.library`, a :class:`citerag.service.library.Library`); admission,
API keys and the stream's framing are theirs.
"""

from __future__ import annotations

from citerag.service.routes import ask, documents, openai, operations, search

ROUTERS = (operations.router, search.router, ask.router, openai.router, documents.router)
