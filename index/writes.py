"""What a write changes, decided the same way for every backend.

A backend's ``write(upserts, deletes)`` (:class:`~citerag.index.backend.SearchBackend`) reads the stored versions of the
documents it is given, asks :func:`classify` what the write does, then carries the :class:`WritePlan` out in its own
engine and reports ``plan.report(...)``: so the embedded backend and Milvus give the same :class:`WriteReport` for
the same inputs (all but ``version``, each backend's own label). The rules:

* **added**: an id not stored (or deleted by the same write, then given again);
* **replaced**: a stored id whose title or text changed -- all its old passages go, its new ones are indexed;
* **updated**: a stored id whose title and text are the same but whose metadata (or label) changed -- the passages
  and their vectors are kept, only the metadata is rewritten (nothing is embedded);
* **unchanged**: a stored id given again identical -- nothing is written;
* **deleted**: every id of ``deletes`` (each must be stored: :class:`~citerag.index.errors.DocumentNotFound` otherwise);
* **skipped** ``(doc_id, "no text")``: a new or changed document the chunker gives no passage -- nothing is written
  for it, and a stored document with that id is kept as it was.

Passages whose embedded text (:func:`citerag.index.chunking.model_text`) did not change keep their vectors when a document
is replaced (:func:`vectors_for`); ``passages_embedded`` counts the distinct texts sent to the encoder.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from citerag.index.errors import DocumentNotFound, IngestError
from citerag.index.ids import check_doc_id
from citerag.index.types import Document, Passage

log = logging.getLogger(__name__)


@dataclass(slots=True)
class WriteReport:
    """What a write changed (the rules: :mod:`citerag.index.writes`).

    Attributes:
        added: ids of documents that were new.
        replaced: ids of documents whose title or text changed (their old passages are gone).
        updated: ids whose metadata alone changed (passages and vectors kept).
        unchanged: ids given again with identical title, text and metadata (nothing written).
        deleted: ids removed.
        skipped: ``(doc_id, reason)`` for documents not indexed (e.g. no text).
        passages_embedded: distinct passage texts sent to the encoder (passages that kept their stored vector are
            not counted; a caching encoder may still answer some from its cache).
        version: the backend's version label after the write (embedded: the index version directory name).
    """

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    passages_embedded: int = 0
    version: str = ""


@dataclass(slots=True)
class WritePlan:
    """What one write does, before anything is written (:func:`classify`).

    Attributes:
        added, replaced, unchanged, deleted: ids, in the order given.
        updated: the new versions of the metadata-only changes, by id, in the order given.
        skipped: ``(doc_id, "no text")`` of each document left out.
        changed: the added and replaced documents, by id, in the order given (what needs new passages).
        passages: the new passages of each ``changed`` document, by id (never empty).
    """

    added: list[str] = field(default_factory=list)
    replaced: list[str] = field(default_factory=list)
    updated: dict[str, Document] = field(default_factory=dict)
    unchanged: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    changed: dict[str, Document] = field(default_factory=dict)
    passages: dict[str, list[Passage]] = field(default_factory=dict)

    @property
    def writes_nothing(self) -> bool:
        """True when the store stays as it is (every document unchanged or skipped, nothing deleted)."""
        return not (self.changed or self.updated or self.deleted)

    @property
    def new_passages(self) -> list[Passage]:
        """The passages of every ``changed`` document, document after document."""
        return [p for doc_id in self.changed for p in self.passages[doc_id]]

    def report(self, passages_embedded: int, version: str) -> WriteReport:
        """The :class:`WriteReport` of this plan once carried out (lists copied)."""
        return WriteReport(
            added=list(self.added), replaced=list(self.replaced), updated=list(self.updated),
            unchanged=list(self.unchanged), deleted=list(self.deleted), skipped=list(self.skipped),
            passages_embedded=passages_embedded, version=version,
        )


def check_documents(documents: Iterable[Document]) -> list[Document]:
    """``documents`` with exact repeats dropped (the first kept), every id checked against the id rule.

    Raises:
        IngestError: ``documents[i]``: an id that breaks the rule (:func:`citerag.index.ids.check_doc_id`), or one id given
            twice with different content; nothing is written.
    """
    seen: dict[str, Document] = {}
    for i, doc in enumerate(documents):
        try:
            check_doc_id(doc.doc_id)
        except ValueError as exc:
            raise IngestError(f"documents[{i}]", f"doc_id {exc}") from None
        previous = seen.setdefault(doc.doc_id, doc)
        if previous != doc:
            raise IngestError(f"documents[{i}]", f"document id {doc.doc_id!r} appears twice with different content")
    return list(seen.values())


def classify(
    upserts: Iterable[Document],
    existing: Mapping[str, Document],
    deletes: Iterable[str] = (),
    *,
    chunk: Callable[[Document], list[Passage]],
) -> WritePlan:
    """Sort a write into added / replaced / updated / unchanged / deleted / skipped (rules: module docstring).

    Args:
        upserts: documents to insert or replace, by ``doc_id``.
        existing: the stored documents, by id: at least those with the ids of ``upserts`` and ``deletes``.
        deletes: ids to remove (repeats ignored).
        chunk: the backend's chunker (``Chunker.chunk``); called once for each new or changed document.

    Returns:
        The plan; ``plan.passages`` holds the chunks of ``plan.changed``.

    Raises:
        DocumentNotFound: an id of ``deletes`` is not stored.
        IngestError: as :func:`check_documents`, or the chunker refuses a document (a title too long to leave room
            for text).
    """
    documents = check_documents(upserts)
    plan = WritePlan(deleted=list(dict.fromkeys(deletes)))
    if missing := [doc_id for doc_id in plan.deleted if doc_id not in existing]:
        raise DocumentNotFound(f"no document with id {missing[0]!r}; list ids with GET /documents")
    gone = set(plan.deleted)
    for i, doc in enumerate(documents):
        previous = None if doc.doc_id in gone else existing.get(doc.doc_id)
        if previous == doc:
            plan.unchanged.append(doc.doc_id)
        elif previous is not None and (previous.title, previous.text) == (doc.title, doc.text):
            plan.updated[doc.doc_id] = doc
        else:
            try:
                passages = chunk(doc)
            except ValueError as exc:
                raise IngestError(f"documents[{i}]", str(exc)) from exc
            if not passages:
                log.warning("document %s has no text; skipped", doc.doc_id)
                plan.skipped.append((doc.doc_id, "no text"))
                continue
            (plan.added if previous is None else plan.replaced).append(doc.doc_id)
            plan.changed[doc.doc_id] = doc
            plan.passages[doc.doc_id] = passages
    return plan


def vectors_for(
    texts: Sequence[str],
    known: Mapping[str, np.ndarray],
    encode: Callable[[list[str]], np.ndarray],
    dim: int,
) -> tuple[np.ndarray, int]:
    """The vectors of ``texts`` (passages' embedded forms): a text in ``known`` (a stored passage's vector, by its
    text) keeps that vector; the others are encoded, each distinct text once.

    Args:
        encode: the encoder for the missing texts: a list of ``m`` strings -> float32 ``(m, dim)``.
        dim: the vectors' dimension.

    Returns:
        ``(vectors, encoded)``: float32 ``(len(texts), dim)`` in the order of ``texts``, and how many texts were
        sent to ``encode``.
    """
    missing = [text for text in dict.fromkeys(texts) if text not in known]
    fresh = dict(zip(missing, encode(missing), strict=True)) if missing else {}
    vectors = np.zeros((len(texts), dim), dtype=np.float32)
    for row, text in enumerate(texts):
        vectors[row] = fresh[text] if text in fresh else known[text]
    return vectors, len(missing)
