"""The passage and document tables of an index version: Arrow IPC files opened memory-mapped.

An index version's text and metadata are the largest thing it holds (1.1 GB at a million passages) and the only part
a search needs just ``k`` rows of. They are stored as two Arrow IPC files (uncompressed, one record batch each), so
opening a version maps them instead of parsing them: ``pyarrow.memory_map`` + ``pyarrow.ipc.open_file`` are
zero-copy, and a row is decoded only when it is read (a search's top-k, a ``GET /documents/{doc_id}``). Any Arrow
reader (pyarrow, polars, DuckDB) opens the files as they are.

``passages.arrow``, row ``i`` == BM25 row ``i`` == FAISS row ``i``::

    chunk_id large_string, doc_id large_string, doc_row int32 (row of its document in documents.arrow),
    ordinal int32, start int64, end int64, text large_string, n_tokens int32

``documents.arrow``, in index order::

    doc_id large_string, title large_string, text large_string, label large_string, meta large_string (JSON object)

Strings use 64-bit offsets (``large_string``), so one column may exceed 2 GB. Row access reads the offsets and bytes
through numpy views of the mapped buffers (about 1 microsecond a field) rather than through ``pyarrow`` scalars.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, overload

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from citerag.index.types import Document, Passage

PASSAGES_FILE = "passages.arrow"
DOCUMENTS_FILE = "documents.arrow"

PASSAGE_SCHEMA = pa.schema([
    ("chunk_id", pa.large_string()),
    ("doc_id", pa.large_string()),
    ("doc_row", pa.int32()),
    ("ordinal", pa.int32()),
    ("start", pa.int64()),
    ("end", pa.int64()),
    ("text", pa.large_string()),
    ("n_tokens", pa.int32()),
])
DOCUMENT_SCHEMA = pa.schema([
    ("doc_id", pa.large_string()),
    ("title", pa.large_string()),
    ("text", pa.large_string()),
    ("label", pa.large_string()),
    ("meta", pa.large_string()),
])


class _Strings:
    """Random access to one ``large_string`` column without pyarrow scalars: ``int64`` offsets and the UTF-8 bytes
    as numpy views of the (possibly memory-mapped) Arrow buffers."""

    __slots__ = ("_offsets", "_data")

    def __init__(self, column: pa.ChunkedArray | pa.Array) -> None:
        if isinstance(column, pa.ChunkedArray):  # combine_chunks copies even one chunk: a mapped column stays mapped
            array = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
        else:
            array = column
        if array.null_count:
            raise ValueError("a string column of an index table holds nulls")
        _, offsets, data = array.buffers()
        self._offsets = np.frombuffer(offsets, dtype=np.int64)[array.offset : array.offset + len(array) + 1]
        self._data = memoryview(data) if data is not None else memoryview(b"")

    def __getitem__(self, row: int) -> str:
        item = self._offsets.item  # a Python int: slicing with it is faster than with numpy scalars
        return str(self._data[item(row) : item(row + 1)], "utf-8")

    def take(self, rows: Sequence[int]) -> list[str]:
        """The strings of ``rows`` (Python ints, each in ``0 .. len - 1``) in that order. Row by row: for a result
        list's ten rows, numpy gathers of the offsets cost more than twenty ``item`` calls."""
        item, data = self._offsets.item, self._data
        return [str(data[item(row) : item(row + 1)], "utf-8") for row in rows]

    def __len__(self) -> int:
        return len(self._offsets) - 1


def _ints(column: pa.ChunkedArray) -> np.ndarray:
    """A numpy view (no copy for a mapped single-chunk column) of an integer column."""
    return (column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)).to_numpy(zero_copy_only=True)


def _single_batch(table: pa.Table) -> pa.Table:
    return table.combine_chunks() if any(column.num_chunks > 1 for column in table.columns) else table


def _passage_arrow(passages: Sequence[Passage]) -> pa.Table:
    """``passages`` as a :data:`PASSAGE_SCHEMA` table whose ``doc_row`` is still 0 (set by
    :meth:`PassageTable.assemble`)."""
    columns: dict[str, list[Any]] = {
        "chunk_id": [p.chunk_id for p in passages],
        "doc_id": [p.doc_id for p in passages],
        "doc_row": [0] * len(passages),
        "ordinal": [p.ordinal for p in passages],
        "start": [p.start for p in passages],
        "end": [p.end for p in passages],
        "text": [p.text for p in passages],
        "n_tokens": [p.n_tokens for p in passages],
    }
    return pa.table(columns, schema=PASSAGE_SCHEMA)


def _document_arrow(documents: Sequence[Document]) -> pa.Table:
    """``documents`` as a :data:`DOCUMENT_SCHEMA` table (``meta`` as JSON text)."""
    columns = {
        "doc_id": [d.doc_id for d in documents],
        "title": [d.title for d in documents],
        "text": [d.text for d in documents],
        "label": [d.label for d in documents],
        "meta": [json.dumps(d.meta, ensure_ascii=False) for d in documents],
    }
    return pa.table(columns, schema=DOCUMENT_SCHEMA)


def write_table(path: Path, table: pa.Table) -> None:
    """Write ``table`` as an uncompressed Arrow IPC file of one record batch (what :func:`open_table` maps)."""
    table = _single_batch(table)
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table, max_chunksize=max(len(table), 1))


def open_table(path: Path, schema: pa.Schema) -> pa.Table:
    """Map an Arrow IPC file written by :func:`write_table` (zero-copy: nothing is parsed).

    Raises:
        ValueError: the file's schema is not ``schema``.
        OSError / pyarrow.ArrowInvalid: the file is missing or not an Arrow IPC file.
    """
    table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()
    if not table.schema.equals(schema):
        raise ValueError(f"{path.name}: schema {table.schema} is not the index table's {schema}")
    return _single_batch(table)


class _ArrowRows:
    """What both tables share: the Arrow table (:attr:`arrow`) and rows taken from it."""

    arrow: pa.Table

    def take(self, rows: np.ndarray) -> pa.Table:
        """The Arrow rows ``rows`` (``(m,)`` int64) of this table in that order, for ``assemble``."""
        return self.arrow.take(pa.array(rows, type=pa.int64()))


class PassageTable(_ArrowRows, Sequence[Passage]):
    """The passages of one index version, row ``i`` being BM25 and FAISS row ``i``.

    ``table[row]`` builds the :class:`~citerag.index.types.Passage` of one row (the table holds none as objects);
    :attr:`doc_rows` gives every row's document row at once, for masks and grouping.

    Args:
        table: a :data:`PASSAGE_SCHEMA` table (mapped by :meth:`open` or built by :meth:`build`).
    """

    def __init__(self, table: pa.Table) -> None:
        self.arrow = table
        self._chunk_id = _Strings(table["chunk_id"])
        self._doc_id = _Strings(table["doc_id"])
        self._text = _Strings(table["text"])
        self.doc_rows: np.ndarray = _ints(table["doc_row"])
        """``(n,)`` int32: the row in the document table of each passage's document."""
        self._ordinal = _ints(table["ordinal"])
        self._start = _ints(table["start"])
        self._end = _ints(table["end"])
        self._n_tokens = _ints(table["n_tokens"])

    @classmethod
    def open(cls, path: Path) -> PassageTable:
        """Map ``passages.arrow`` (see :func:`open_table` for the errors)."""
        return cls(open_table(path, PASSAGE_SCHEMA))

    @classmethod
    def build(cls, passages: Iterable[Passage], doc_rows: Mapping[str, int]) -> PassageTable:
        """An in-memory table of ``passages``; ``doc_rows`` maps each ``doc_id`` to its document's row.

        Raises:
            KeyError: a passage's document is not in ``doc_rows``.
        """
        return cls.assemble([list(passages)], doc_rows)

    @classmethod
    def assemble(cls, parts: Iterable[pa.Table | Sequence[Passage]], doc_rows: Mapping[str, int]) -> PassageTable:
        """One in-memory table of ``parts`` in order: rows taken from a table (:meth:`take`) or new passages; every
        row's ``doc_row`` is set from its ``doc_id`` through ``doc_rows`` (the documents' new order).

        Raises:
            KeyError: a passage's document is not in ``doc_rows``.
        """
        tables = [part if isinstance(part, pa.Table) else _passage_arrow(part) for part in parts]
        table = pa.concat_tables(tables) if tables else _passage_arrow([])
        rows = pa.array([doc_rows[doc_id] for doc_id in table["doc_id"].to_pylist()], type=pa.int32())
        return cls(_single_batch(table.set_column(table.schema.get_field_index("doc_row"), "doc_row", rows)))

    def doc_ids(self) -> list[str]:
        """Every row's ``doc_id``, in row order."""
        return self.arrow["doc_id"].to_pylist()

    def __len__(self) -> int:
        return len(self.doc_rows)

    @overload
    def __getitem__(self, row: int) -> Passage: ...
    @overload
    def __getitem__(self, row: slice) -> list[Passage]: ...
    def __getitem__(self, row: int | slice) -> Passage | list[Passage]:
        if isinstance(row, slice):
            return [self[i] for i in range(*row.indices(len(self)))]
        if row < 0:
            row += len(self)
        if not 0 <= row < len(self):
            raise IndexError(f"passage row {row} out of range (0..{len(self) - 1})")
        return self.passages_at([int(row)])[0]

    def __iter__(self) -> Iterator[Passage]:
        return (self[row] for row in range(len(self)))

    def passages_at(self, rows: Sequence[int]) -> list[Passage]:
        """The passages of ``rows`` (Python ints, each in ``0 .. len - 1``) in that order, without the per-row checks
        of ``table[row]`` (a result list's rows come from a search of this table)."""
        chunk_ids, doc_ids, texts = self._chunk_id.take(rows), self._doc_id.take(rows), self._text.take(rows)
        ordinal, start, end, n_tokens = self._ordinal.item, self._start.item, self._end.item, self._n_tokens.item
        return [Passage(chunk_id, doc_id, ordinal(row), start(row), end(row), text, n_tokens(row))
                for row, chunk_id, doc_id, text in zip(rows, chunk_ids, doc_ids, texts, strict=True)]

    def doc_id(self, row: int) -> str:
        """The ``doc_id`` of one row, without building its passage."""
        return self._doc_id[row]

    def text(self, row: int) -> str:
        """The text of one row, without building its passage."""
        return self._text[row]


class DocumentTable(_ArrowRows, Mapping[str, Document]):
    """The documents of one index version as a read-only ``doc_id -> Document`` mapping, in index order.

    :meth:`at` reads by row (what a search needs); keyed access builds a ``doc_id -> row`` dictionary on first use
    (about 0.3 s at a million documents), once per version.

    Args:
        table: a :data:`DOCUMENT_SCHEMA` table (mapped by :meth:`open` or built by :meth:`build`).
    """

    def __init__(self, table: pa.Table) -> None:
        self.arrow = table
        self._doc_id = _Strings(table["doc_id"])
        self._title = _Strings(table["title"])
        self._text = _Strings(table["text"])
        self._label = _Strings(table["label"])
        self._meta = _Strings(table["meta"])
        self._rows: dict[str, int] | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: Path) -> DocumentTable:
        """Map ``documents.arrow`` (see :func:`open_table` for the errors)."""
        return cls(open_table(path, DOCUMENT_SCHEMA))

    @classmethod
    def build(cls, documents: Iterable[Document]) -> DocumentTable:
        """An in-memory table of ``documents`` in the given order.

        Raises:
            ValueError: two documents share a ``doc_id``.
        """
        return cls.assemble([list(documents)])

    @classmethod
    def assemble(cls, parts: Iterable[pa.Table | Sequence[Document]]) -> DocumentTable:
        """One in-memory table of ``parts`` in order: rows taken from a table (:meth:`take`: no document is built,
        so an update of a large index makes Python objects for its new documents only) or new documents.

        Raises:
            ValueError: two documents share a ``doc_id``.
        """
        tables = [part if isinstance(part, pa.Table) else _document_arrow(part) for part in parts]
        table = _single_batch(pa.concat_tables(tables)) if tables else _document_arrow([])
        built = cls(table)
        if len(built.rows) != len(table):
            raise ValueError("two documents share a doc_id")
        return built

    def rows_without(self, doc_ids: Iterable[str]) -> np.ndarray:
        """The rows whose ``doc_id`` is not in ``doc_ids``, in order: ``(m,)`` int64."""
        gone = pa.array(list(doc_ids), type=pa.large_string())
        keep = pc.invert(pc.is_in(self.arrow["doc_id"], value_set=gone))
        return np.flatnonzero(keep.to_numpy(zero_copy_only=False)).astype(np.int64)

    @property
    def rows(self) -> dict[str, int]:
        """``doc_id -> row``, built on first use."""
        if self._rows is None:
            with self._lock:
                if self._rows is None:
                    ids = self.arrow["doc_id"].to_pylist()
                    self._rows = dict(zip(ids, range(len(ids)), strict=True))
        return self._rows

    def at(self, row: int) -> Document:
        """The document of one row (``0 <= row < len(self)``)."""
        return self.documents_at([row])[0]

    def labels_at(self, rows: Sequence[int]) -> list[str]:
        """The display labels of ``rows`` (Python ints), without building their documents (what a list of search
        results shows)."""
        return self._label.take(rows)

    def documents_at(self, rows: Sequence[int]) -> list[Document]:
        """The documents of ``rows`` (Python ints, each in ``0 .. len - 1``) in that order."""
        return [Document(doc_id, title, text, label, json.loads(meta)) for doc_id, title, text, label, meta in zip(
            self._doc_id.take(rows), self._title.take(rows), self._text.take(rows), self._label.take(rows),
            self._meta.take(rows), strict=True,
        )]

    def meta_at(self, row: int) -> dict[str, Any]:
        """The metadata of one row, without building its document."""
        return json.loads(self._meta[row])

    def id_title_text(self) -> Iterator[tuple[str, str, str]]:
        """``(doc_id, title, text)`` of every row in order, without building documents (no metadata decoded)."""
        return ((self._doc_id[row], self._title[row], self._text[row]) for row in range(len(self)))

    def doc_id_at(self, row: int) -> str:
        """The ``doc_id`` of one row."""
        return self._doc_id[row]

    def __getitem__(self, doc_id: str) -> Document:
        return self.at(self.rows[doc_id])

    def __contains__(self, doc_id: object) -> bool:
        return doc_id in self.rows

    def __iter__(self) -> Iterator[str]:
        return (self._doc_id[row] for row in range(len(self)))

    def __len__(self) -> int:
        return len(self._doc_id)

    def values_in_order(self, offset: int = 0, limit: int | None = None) -> list[Document]:
        """Documents ``offset .. offset + limit`` in index order."""
        stop = len(self) if limit is None else min(len(self), offset + limit)
        return [self.at(row) for row in range(offset, stop)]
