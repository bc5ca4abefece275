"""Metadata filters on documents, compiled to a boolean row mask that retrieval applies *before* top-k.

Grammar (a JSON object; all conditions must hold)::

    {"venue": "icml"}                          equality (strings compare case-insensitively)
    {"year": {"gte": 2018, "lt": 2020}}        gt, gte, lt, lte, eq, ne
    {"venue": {"in": ["icml", "neurips"]}}     membership (also "nin")

Fields are the document's metadata (``venue``, ``year``, ``url``, ``authors``, ``source``) plus ``doc_id``. A
document lacking the field fails every condition on it.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from citerag.index.tables import DocumentTable, PassageTable
from citerag.index.types import Document

Filters = Mapping[str, Any]
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": operator.eq,
    "ne": operator.ne,
    "gt": operator.gt,
    "gte": operator.ge,
    "lt": operator.lt,
    "lte": operator.le,
    "in": lambda value, options: value in options,
    "nin": lambda value, options: value not in options,
}
OPERATORS = tuple(_COMPARE)
_SCALARS = (str, int, float, bool, type(None))


def fold_value(value: Any) -> Any:
    """The compared form of a metadata value or filter target: strings case-folded, lists element-wise."""
    if isinstance(value, str):
        return value.casefold()
    if isinstance(value, list | tuple):
        return [fold_value(v) for v in value]
    return value


def compile_filters(filters: Filters) -> Callable[[Document], bool]:
    """A predicate on documents for ``filters`` (:func:`compile_conditions` applied to a document's id and metadata).

    Raises:
        ValueError: as :func:`compile_conditions`.
    """
    matches = compile_conditions(filters)
    return lambda doc: matches(doc.doc_id, doc.meta)


def compile_conditions(filters: Filters) -> Callable[[str, Mapping[str, Any]], bool]:
    """A predicate ``(doc_id, meta) -> bool`` for ``filters`` (no document text is needed to filter).

    Raises:
        ValueError: ``filters`` is not an object, an operator is unknown, ``in``/``nin`` is not given a list, or a
            target is not a scalar (a list of scalars for ``in``/``nin``): nothing nested is folded, so no input
            depth can exhaust the stack.
    """
    if not isinstance(filters, Mapping):
        raise ValueError(f"filters must be a JSON object, got {type(filters).__name__}")
    checks: list[tuple[str, str, Any]] = []
    for field, condition in filters.items():
        ops = condition if isinstance(condition, Mapping) else {"eq": condition}
        for op, target in ops.items():
            if op not in _COMPARE:
                raise ValueError(f"filters.{field}: unknown operator {op!r}; use one of {', '.join(OPERATORS)}")
            if op in ("in", "nin") and not isinstance(target, list | tuple):
                raise ValueError(f"filters.{field}.{op}: expected a list")
            options = target if op in ("in", "nin") else [target]
            if not all(isinstance(v, _SCALARS) for v in options):
                raise ValueError(
                    f"filters.{field}.{op}: expected {'a list of ' if op in ('in', 'nin') else ''}strings, numbers, "
                    "booleans or null (nested lists and objects cannot match a metadata value)"
                )
            checks.append((field, op, fold_value(target)))

    def matches(doc_id: str, meta: Mapping[str, Any]) -> bool:
        for field, op, target in checks:
            value = doc_id if field == "doc_id" else meta.get(field)
            if value is None:
                return False
            try:
                if not _COMPARE[op](fold_value(value), target):
                    return False
            except TypeError:  # e.g. comparing a string year with a number
                return False
        return True

    return matches


def filter_key(filters: Filters | None) -> str:
    """A canonical string for caching masks (``""`` for no filter)."""
    return json.dumps(filters, sort_keys=True, default=str) if filters else ""


def passage_mask(filters: Filters, documents: DocumentTable, passages: PassageTable) -> np.ndarray:
    """Boolean array of shape ``(len(passages),)``: True where the passage's document matches ``filters`` (each
    document's id and metadata read once; no text is decoded).

    Raises:
        ValueError: malformed filters.
    """
    matches = compile_conditions(filters)
    allowed = np.fromiter(
        (matches(documents.doc_id_at(row), documents.meta_at(row)) for row in range(len(documents))),
        dtype=bool, count=len(documents),
    )
    return allowed[passages.doc_rows]
