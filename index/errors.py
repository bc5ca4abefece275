"""The exceptions the index and the answering pipeline raise. The HTTP service maps them to status codes in one
handler (:mod:`citerag.service.errors`, which adds the errors only the service raises); the CLI to exit code 2."""

from __future__ import annotations


class CiteragError(Exception):
    """Base class: every error citerag raises on purpose. The message says what to do."""


class IngestError(CiteragError):
    """A source file cannot be read: bad encoding, malformed line, missing field, empty file.

    The message names the file and, where it applies, the 1-based line number.
    """

    def __init__(self, path: str, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = str(path)
        self.line = line


class IndexNotFound(CiteragError):
    """No built index in the index directory."""


class IndexMismatch(CiteragError):
    """The index on disk is inconsistent (counts or checksums differ from its manifest) and is refused."""


class ModelNotFound(CiteragError):
    """A model package is not installed or its assembled file fails verification."""


class BackendUnavailable(CiteragError):
    """The retrieval engine (a Milvus server, or a Milvus Lite file) cannot be reached or refused a request."""


class DocumentNotFound(CiteragError):
    """No document with the requested id."""
