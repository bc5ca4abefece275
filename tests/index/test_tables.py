"""The Arrow passage and document tables: round trips through the mapped files, row access, assembly, and the
search results read from them."""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ThreadPoolExecutor
from dataclasses import FrozenInstanceError
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
from citerag.index.search import search_results
from citerag.index.types import Document, Passage, Ranking

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
    assert passages.passages_at([2, 0]) == [PASSAGES[2], PASSAGES[0]] and passages.passages_at([]) == []
    assert documents.documents_at([1, 0, 1]) == [DOCS[1], DOCS[0], DOCS[1]]
    assert documents.labels_at([2, 0]) == ["", "Équivariant flows"]
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


def test_search_results_over_the_tables_read_rows_on_access(tmp_path: Path) -> None:
    """Results over mapped tables decode their passage and document when read, and equal results built from the
    same passages and documents as objects (the Milvus backend's and the tests' form)."""
    documents, passages = _written(tmp_path)
    chosen = Ranking(np.array([2, 0, 1]), np.array([0.9, 0.5, 0.25]))
    bm25 = Ranking(np.array([0, 2]), np.array([3.5, 1.25], dtype=np.float32))
    dense = Ranking(np.array([1]), np.array([0.75], dtype=np.float32))
    read = search_results(chosen, bm25, dense, passages, documents)
    held = search_results(chosen, bm25, dense, PASSAGES, {d.doc_id: d for d in DOCS})
    assert [r.label for r in read] == ["BRCA1 variants", "Équivariant flows", "Équivariant flows"]
    assert read == held and [r.passage for r in read] == [PASSAGES[2], PASSAGES[0], PASSAGES[1]]
    assert [(r.rank, r.bm25_rank, r.dense_rank, r.bm25_score, r.dense_score) for r in read] == [
        (1, 2, None, 1.25, None), (2, 1, None, 3.5, None), (3, None, 1, None, 0.75)]
    assert read[1].document is read[2].document == DOCS[0]  # one document decoded once per result list
    assert pickle.loads(pickle.dumps(read[0])) == held[0] and copy.copy(read[0]) == held[0]


def test_a_search_result_is_immutable_and_replaced_by_copy(tmp_path: Path) -> None:
    documents, passages = _written(tmp_path)
    result = search_results(Ranking(np.array([1]), np.array([0.5])), Ranking.empty(), Ranking.empty(),
                             passages, documents)[0]
    moved = result.replace(rank=4)
    assert (moved.rank, moved.passage, moved.document, result.rank) == (4, PASSAGES[1], DOCS[0], 1)
    with pytest.raises(FrozenInstanceError):
        result.rank = 2  # type: ignore[misc]
    with pytest.raises(TypeError, match="no field 'row'"):
        result.replace(row=3)
    assert "SearchResult(rank=1, passage=Passage(chunk_id='a#1'" in repr(result)


def test_threads_reading_one_result_list_read_the_same_values(tmp_path: Path) -> None:
    documents, passages = _written(tmp_path)
    chosen = Ranking(np.array([2, 0, 1]), np.array([0.9, 0.5, 0.25]))
    for _ in range(20):  # a fresh list each time: every thread may be the first to read it
        results = search_results(chosen, Ranking.empty(), Ranking.empty(), passages, documents)
        with ThreadPoolExecutor(4) as pool:
            reads = list(pool.map(lambda _: [(r.passage, r.label, r.document) for r in results], range(8)))
        assert all(read == [(PASSAGES[2], DOCS[1].label, DOCS[1]), (PASSAGES[0], DOCS[0].label, DOCS[0]),
                            (PASSAGES[1], DOCS[0].label, DOCS[0])] for read in reads)
