"""Read documents from source files: the seed abstract-list format, JSONL, and BEIR ``corpus.jsonl``.

Formats, chosen by file name:

* ``*.txt``: an abstract list: an optional header line (e.g. ``ICML 2026 论文列表``) followed by a blank line,
  then one abstract per paragraph, paragraphs separated by blank lines. No titles or ids: ids are derived from
  the normalised text (:func:`text_doc_id`), so they are stable across rebuilds and independent of file order.
* ``*.jsonl`` / ``*.jsonl.gz``: one JSON object per line with ``id`` or ``_id`` (optional, a string or an integer
  read as its decimal string, :func:`given_doc_id`; derived from the text when absent or empty), ``title``
  (optional), ``text`` or ``abstract`` (required), and optional ``venue``, ``year``, ``url``, ``authors``. BEIR's
  ``corpus.jsonl`` (``_id``, ``title``, ``text``) is this format.

Every error names the file and the 1-based line. Rules:

* A source that holds nothing (an empty file, a header line alone, a directory without a supported file) is an
  error: it is almost always a wrong path or a truncated file.
* A record whose text is empty, whitespace or markup alone (a title-only BEIR entry) is skipped, not an error;
  :func:`read_corpus` reports each one as ``file:line``. A corpus may therefore hold no document at all; the index
  built from it is empty and served as such.
* The same ``doc_id`` with the same normalised text is kept once (the first occurrence, with its title and
  metadata); the same ``doc_id`` with a different text is rejected (:class:`IngestError` naming both places).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import unicodedata
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from citerag.index.errors import IngestError
from citerag.index.ids import MAX_ID_CHARS, check_doc_id
from citerag.index.text import display_label, fold
from citerag.index.types import Document

SUPPORTED_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz")
META_FIELDS = ("venue", "year", "url", "authors")
_HEADER_MAX_CHARS = 120


def given_doc_id(value: Any) -> str | None:
    """A document id as a source or an API client gives it: a string, or an integer read as its decimal string
    (``7`` -> ``"7"``); ``None`` when absent (``None``, ``""`` or only spaces: the id is then derived from the text).

    Raises:
        ValueError: another type (a boolean, a float, a list, an object), or an id that breaks the id rule
            (:func:`citerag.index.ids.check_doc_id`: at most :data:`~citerag.index.ids.MAX_ID_CHARS` characters, no control
            character, ...); the message says which.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise ValueError(f"must be a string or an integer, got {type(value).__name__}")
    try:
        doc_id = str(value)
    except ValueError:  # an integer beyond Python's conversion limit (4300 digits)
        raise ValueError(f"must be at most {MAX_ID_CHARS} characters") from None
    return check_doc_id(doc_id)


def text_doc_id(text: str) -> str:
    """A stable document id from the text alone: ``sha256`` of the NFKC-normalised, case-folded,
    whitespace-collapsed text, first 16 hex digits. The same abstract always gets the same id."""
    canonical = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


def make_document(text: str, title: str = "", doc_id: str | None = None, meta: dict[str, Any] | None = None) -> Document:
    """A :class:`Document` from its parts: text and title stripped, the id derived from the text
    (:func:`text_doc_id`) when ``doc_id`` is ``None`` or empty, the label from the title or the opening words."""
    body, title = text.strip(), title.strip()
    return Document(
        doc_id=doc_id or text_doc_id(body),
        title=title,
        text=body,
        label=title or display_label(body),
        meta=dict(meta or {}),
    )


def source_files(paths: Iterable[str | Path]) -> list[Path]:
    """Expand files and directories into the sorted list of supported source files.

    Raises:
        IngestError: a path does not exist, or a directory holds no supported file.
    """
    files: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(SUPPORTED_SUFFIXES))
            if not found:
                raise IngestError(str(path), f"no {', '.join(SUPPORTED_SUFFIXES)} files in this directory")
            files.extend(found)
        elif path.is_file():
            if not path.name.endswith(SUPPORTED_SUFFIXES):
                raise IngestError(str(path), f"unsupported file type; expected one of {', '.join(SUPPORTED_SUFFIXES)}")
            files.append(path)
        else:
            raise IngestError(str(path), "no such file or directory")
    return files


def iter_documents(path: str | Path) -> Iterator[Document]:
    """Yield the records of one source file as documents, in file order. A JSONL record with an empty or
    whitespace text is yielded with ``text == ""`` (:func:`read_corpus` skips and reports it).

    Raises:
        IngestError: invalid UTF-8, empty file, a JSONL line that is not an object, lacks a text field, or has a
            text or title that is not a string.
    """
    path = Path(path)
    text = _read_utf8(path)
    if not text.strip():
        raise IngestError(str(path), "file is empty")
    if path.name.endswith((".jsonl", ".jsonl.gz")):
        yield from _jsonl_documents(path, text)
    else:
        yield from _abstract_list_documents(path, text)


@dataclass(frozen=True, slots=True)
class Corpus:
    """What :func:`read_corpus` read.

    Attributes:
        documents: the unique documents with text, in source order.
        skipped: ``"file:line"`` of each record skipped because it has no text (empty, whitespace or markup alone).
        origins: for each document id, the position in the ``paths`` given to :func:`read_corpus` of the path
            (file or directory) its record was read from.
        shadowed: ``(position, record)`` of each record read but not kept: replaced by a later path's record
            (``later_wins``), or a duplicate (same text) of a kept one.
    """

    documents: list[Document]
    skipped: list[str]
    origins: dict[str, int] = field(default_factory=dict)
    shadowed: list[tuple[int, Document]] = field(default_factory=list)


def read_corpus(paths: Iterable[str | Path], later_wins: bool = False) -> Corpus:
    """Read every document under ``paths`` (files or directories): records without text are skipped and reported,
    duplicates are stored once (rules in the module docstring). An empty ``paths`` gives an empty corpus.

    Args:
        later_wins: an id given again with a different text under a *later path* replaces the earlier record (the
            sources of an index in the order they were added: ``citerag index --add`` of a changed document);
            under one path (a file, or the files of one directory) it is still an error.

    Raises:
        IngestError: any source error (see :func:`source_files`, :func:`iter_documents`) or the same id with a
            different text (under one path, or under two when ``later_wins`` is false).
    """
    by_id: dict[str, Document] = {}
    origins: dict[str, int] = {}
    shadowed: list[tuple[int, Document]] = []
    skipped: list[str] = []
    paths = list(paths)
    source_files(paths)  # every path checked before any is read
    for position, path in enumerate(paths):
        for file in source_files([path]):
            for doc in iter_documents(file):
                if not fold(doc.text):
                    skipped.append(f"{file}:{doc.meta.get('line')}")
                    continue
                seen = by_id.get(doc.doc_id)
                if seen is None or (later_wins and origins[doc.doc_id] != position):
                    if seen is not None:
                        shadowed.append((origins[doc.doc_id], seen))
                    by_id[doc.doc_id], origins[doc.doc_id] = doc, position
                elif text_doc_id(seen.text) == text_doc_id(doc.text):
                    shadowed.append((position, doc))  # a duplicate of a kept record: read, not used
                else:
                    raise IngestError(
                        str(file),
                        f"document id {doc.doc_id!r} appears again with a different text (first at "
                        f"{seen.meta.get('source')}:{seen.meta.get('line')}); ids must be unique: give one of them "
                        "another id or remove it",
                        doc.meta.get("line"),
                    )
    return Corpus(list(by_id.values()), skipped, origins, shadowed)


def load_documents(paths: Iterable[str | Path]) -> list[Document]:
    """The documents of :func:`read_corpus` (records without text skipped, duplicates stored once).

    Raises:
        IngestError: as :func:`read_corpus`.
    """
    return read_corpus(paths).documents


def _read_utf8(path: Path) -> str:
    try:
        raw = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    except OSError as exc:
        raise IngestError(str(path), f"cannot read: {exc.strerror or exc}") from exc
    except (EOFError, zlib.error) as exc:  # a cut-off or corrupt gzip stream
        raise IngestError(str(path), f"the gzip file is truncated or corrupt ({exc}); copy it again") from exc
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise IngestError(str(path), f"invalid UTF-8 at byte {exc.start}; re-save the file as UTF-8", line) from exc


def _abstract_list_documents(path: Path, text: str) -> Iterator[Document]:
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), len(lines))
    has_header = (
        first + 1 < len(lines) and not lines[first + 1].strip() and len(lines[first].strip()) <= _HEADER_MAX_CHARS
    )
    if has_header and not any(line.strip() for line in lines[first + 1 :]):
        raise IngestError(str(path), "only a header line; expected abstracts after it, one per paragraph", first + 1)
    paragraph: list[str] = []
    start_line = 0
    for lineno, line in enumerate(lines[first + 1 if has_header else first :] + [""], start=first + 2 if has_header else first + 1):
        if line.strip():
            if not paragraph:
                start_line = lineno
            paragraph.append(line.strip())
        elif paragraph:
            yield make_document(" ".join(paragraph), meta={"source": path.name, "line": start_line})
            paragraph = []


def _jsonl_documents(path: Path, text: str) -> Iterator[Document]:
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record: Any = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IngestError(str(path), f"not valid JSON: {exc.msg}", lineno) from exc
        except ValueError:  # a number of more than 4300 digits, refused by Python's int conversion
            raise IngestError(str(path), "a number has more than 4300 digits, too long to read", lineno) from None
        if not isinstance(record, dict):
            raise IngestError(str(path), f"expected a JSON object, got {type(record).__name__}", lineno)
        if "text" not in record and "abstract" not in record:
            raise IngestError(str(path), "missing 'text' (or 'abstract') field", lineno)
        body = next((record[key] for key in ("text", "abstract") if record.get(key) not in (None, "")), "")
        if not isinstance(body, str):
            raise IngestError(str(path), f"'text' must be a string, got {type(body).__name__}", lineno)
        title = record.get("title") or ""
        if not isinstance(title, str):
            raise IngestError(str(path), "'title' must be a string", lineno)
        try:
            (body + title).encode("utf-8")
        except UnicodeEncodeError as exc:
            raise IngestError(str(path), f"text holds a character that is not valid Unicode ({exc.reason})", lineno) from exc
        key = "_id" if record.get("id") in (None, "") and "_id" in record else "id"
        try:
            doc_id = given_doc_id(record.get(key))
        except ValueError as exc:
            raise IngestError(str(path), f"'{key}' {exc}", lineno) from None
        meta = {key: record[key] for key in META_FIELDS if record.get(key) not in (None, "")}
        meta.update(source=path.name, line=lineno)
        yield make_document(body, title, doc_id, meta)
