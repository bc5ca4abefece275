"""citerag as a Python library: open or build an index of abstracts, search it, ask it for cited answers, and add
or delete documents, in a notebook or a script.

>>> import citerag                                                    # doctest: +SKIP
>>> papers = citerag.open(".citerag")                                 # the index `make serve` built
>>> papers.search("KV cache eviction", k=3)[0].doc_id
>>> answer = papers.ask("What does LU-KV evict?")
>>> answer.answer_display.text, answer.references[0].label            # ('LU-KV ... [1].', 'LU-KV')
>>> for event in papers.ask("What is EDEN?", stream=True):            # passages, evidence, token..., answer
...     print(event.kind)

:func:`open` and :func:`build` return a :class:`Library` (:class:`citerag.service.library.Library`), the object the
HTTP service's routes and the ``citerag`` command call for every search, answer, read and write; its results are
the HTTP API's response objects (``.model_dump()`` is the JSON the API sends). Bad input raises
:class:`citerag.errors.InvalidRequest` with the messages of the HTTP 422 bodies (:mod:`citerag.errors`).

This package is the ``library/`` folder of the repository; ``citerag.index``, ``citerag.service`` and
``citerag.eval`` are the ``index/``, ``service/`` and ``eval/`` folders.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from citerag import errors
from citerag.service.library import HistoryItem, Library, StreamEvent
from citerag.service.schemas import (
    AskResponse,
    CitationOut,
    DisplayOut,
    DocumentOut,
    DocumentsPage,
    EvidenceOut,
    PassageOut,
    QuoteOut,
    ReferenceOut,
    WriteReportOut,
)

if TYPE_CHECKING:
    from citerag.service.settings import Settings

__all__ = [
    "AskResponse", "CitationOut", "DisplayOut", "DocumentOut", "DocumentsPage", "EvidenceOut", "HistoryItem",
    "Library", "PassageOut", "QuoteOut", "ReferenceOut", "StreamEvent", "WriteReportOut", "build", "errors", "open",
]


def open(index_dir: str | Path | None = None, settings: Settings | None = None) -> Library:  # noqa: A001
    """The index in ``index_dir`` (default ``.citerag/`` or ``$CITERAG_INDEX_DIR``), recovered, never built
    (:meth:`Library.open`).

    Raises:
        citerag.errors.IndexNotFound: there is no index in ``index_dir``.
    """
    return Library.open(index_dir, settings)


def build(
    index_dir: str | Path, sources: Iterable[str | Path], *, add: bool = False, progress: bool = True,
    settings: Settings | None = None,
) -> Library:
    """Index ``sources`` (files or directories: JSONL with ``id``/``title``/``text``/..., ``*.jsonl.gz``, or the seed
    format's ``*.txt`` abstract lists) into ``index_dir`` with progress bars, and open it (:meth:`Library.build`;
    what changed is ``library.built``).

    Raises:
        citerag.errors.IngestError: a source is bad (``file:line: reason``); nothing is written.
    """
    return Library.build(index_dir, sources, add=add, progress=progress, settings=settings)
