"""The Arrow passage and document tables: round trips through the mapped files, row access, assembly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from citerag.index.tables import (
    DOCUMENT_SCHEMA,
    DocumentTable,
    PassageTable,
    open_table,
    write_table,
)
from citerag.index.types import Document, Passage

DOCS = [
    Document("a", "", "Équivariant flows on $SE(3)$ — **fast**.", "Équivariant flows", {"year": 2026}),
    Document("b", "BRCA1 variants", "The BRCA1 variant was not found in healthy controls.", "BRCA1 variants",
             {"venue": "PubMed", "authors": ["X", "Y"]}),
    Document("c", "", "", "", {}),
]
PASSAGES = [
    Passage("a#0", "a", 0, 0, 20, DOCS[0].text[:20], 9),
    Passage("a#1", "a", 1, 15, 40, DOCS[0].text[15:40], 11),
    Passage("b#0", "b", 0, 0, 53, DOCS[1].text, 14),
]


def _written(tmp_path: Path) -> tuple[DocumentTable, PassageTable]:
    documents = DocumentTable.build(DOCS)
    passages = PassageTable.build(PASSAGES, documents.rows)
    write_table(tmp_path / "documents.arrow", documents.arrow)
    write_table(tmp_path / "passages.arrow", passages.arrow)
    return DocumentTable.open(tmp_path / "documents.arrow"), PassageTable.open(tmp_path / "passages.arrow")


def test_mapped_tables_give_back_every_field(tmp_path: Path) -> None:
    documents, passages = _written(tmp_path)
    assert list(documents) == ["a", "b", "c"] and len(documents) == 3
    assert [documents[d] for d in documents] == DOCS and documents.at(1) == DOCS[1]
    assert "b" in documents and "z" not in documents and documents.get("z") is None
    assert list(passages) == PASSAGES and passages[-1] == PASSAGES[2] and passages[0:2] == PASSAGES[:2]
    assert passages.doc_rows.tolist() == [0, 0, 1] and passages.doc_rows.dtype == np.int32
    assert passages.doc_id(2) == "b" and passages.text(0) == DOCS[0].text[:20]
    assert documents.meta_at(1) == {"venue": "PubMed", "authors": ["X", "Y"]}
    with pytest.raises(IndexError):
        passages[3]


def test_assemble_renumbers_document_rows_from_ids(tmp_path: Path) -> None:
    _, passages = _written(tmp_path)
    new = [Passage("d#0", "d", 0, 0, 4, "Zorb", 3)]
    reordered = {"b": 0, "d": 1, "a": 2}
    table = PassageTable.assemble([passages.take(np.array([2, 0])), new], reordered)
    assert [p.chunk_id for p in table] == ["b#0", "a#0", "d#0"] and table.doc_rows.tolist() == [0, 2, 1]
    with pytest.raises(KeyError):
        PassageTable.assemble([new], {"a": 0})


def test_empty_tables_and_a_wrong_schema(tmp_path: Path) -> None:
    documents = DocumentTable.build([])
    passages = PassageTable.build([], documents.rows)
    assert len(documents) == 0 and len(passages) == 0 and list(passages) == []
    write_table(tmp_path / "p.arrow", passages.arrow)
    with pytest.raises(ValueError, match="schema"):
        open_table(tmp_path / "p.arrow", DOCUMENT_SCHEMA)
    with pytest.raises(ValueError, match="share a doc_id"):
        DocumentTable.build([DOCS[0], DOCS[0]])
