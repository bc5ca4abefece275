"""Every error citerag raises on purpose, in one place: each derives from :class:`CiteragError`, and its message
says what to do. The HTTP service answers each with a status code (:func:`citerag.service.errors.status_of`):

* :class:`InvalidRequest` (422): bad input to :class:`citerag.Library` -- a blank question, ``k`` out of range, an
  unknown mode or filter operator, a history over its bounds, a malformed document; ``errors`` lists each field as
  the HTTP 422 body's ``detail`` does (without its leading ``"body"``), with the same messages;
* :class:`DocumentNotFound` (404), :class:`IngestError` (400: a bad source file or document);
* :class:`IndexNotFound`, :class:`IndexMismatch`, :class:`IndexUnrecoverable`, :class:`WriteLogDamaged`,
  :class:`ModelNotFound`, :class:`BackendUnavailable` (503 from the service);
* :class:`DiskFull` (507): a write refused for space or quota; nothing was written, the live index still serves
  (also an ``OSError``; its fields say where and how much is free);
* :class:`Overloaded`, :class:`Unauthorized`, :class:`WritesDisabled`: the HTTP service's admission and API keys.
"""

from __future__ import annotations

from citerag.index.diskspace import DiskFull
from citerag.index.errors import BackendUnavailable, CiteragError, DocumentNotFound, IndexMismatch, IndexNotFound
from citerag.index.errors import IngestError, ModelNotFound
from citerag.index.recovery import IndexUnrecoverable
from citerag.index.wal import WriteLogDamaged
from citerag.service.errors import InvalidRequest, Overloaded, Unauthorized, WritesDisabled

__all__ = [
    "BackendUnavailable", "CiteragError", "DiskFull", "DocumentNotFound", "IndexMismatch", "IndexNotFound",
    "IndexUnrecoverable", "IngestError", "InvalidRequest", "ModelNotFound", "Overloaded", "Unauthorized",
    "WriteLogDamaged", "WritesDisabled",
]
