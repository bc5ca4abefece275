"""The search and id rules every backend shares (index/search.py, index/ids.py), as plain functions."""

from __future__ import annotations

import pytest

from citerag.index.ids import MAX_ID_CHARS, check_doc_id
from citerag.index.search import candidate_depth, check_fusion, fusion_depth


def test_candidate_depth_by_mode() -> None:
    assert candidate_depth(100, 10, False, "bm25") == candidate_depth(100, 10, False, "dense") == 10
    assert candidate_depth(100, 10, False, "hybrid") == 100 and candidate_depth(100, 500, False, "hybrid") == 500
    assert candidate_depth(100, 10, True, "bm25") == 100 and candidate_depth(100, 50, True, "dense") == 150
    assert fusion_depth(10, 100, False) == 10 and fusion_depth(10, 100, True) == 200


def test_fusion_is_checked_in_one_place() -> None:
    assert [check_fusion(f) for f in ("bounded", "rrf", "weighted")] == ["bounded", "rrf", "weighted"]
    with pytest.raises(ValueError, match=r"^fusion must be 'bounded', 'rrf' or 'weighted', got 'sum'$"):
        check_fusion("sum")
    unsupported = {"bounded": "needs BM25 document frequencies"}
    with pytest.raises(ValueError, match=r"^fusion 'bounded' needs BM25 document frequencies$"):
        check_fusion("bounded", unsupported)
    with pytest.raises(ValueError, match=r"^fusion must be 'rrf' or 'weighted', got 'sum'$"):
        check_fusion("sum", unsupported)


@pytest.mark.parametrize(
    ("doc_id", "message"),
    [
        ("", "must hold non-space text"),
        (" \t", "must hold non-space text"),
        ("x" * (MAX_ID_CHARS + 1), "must be at most 200 characters, got 201"),
        ("a\nb", "must not contain control characters"),
        ("a\u2028b", "must not contain control characters"),
        ("a\ud800", "must be valid Unicode"),
        (7, "must be a string, got int"),
    ],
)
def test_the_id_rule_refuses(doc_id, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_doc_id(doc_id)


def test_the_id_rule_accepts() -> None:
    for doc_id in ("426b26a7dd0533a9", "odd 'id' ü", "数" * MAX_ID_CHARS, "10.1000/xyz#3"):
        assert check_doc_id(doc_id) == doc_id
