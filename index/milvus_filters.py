"""Translate :mod:`citerag.index.filters`' filter objects into Milvus boolean expressions, evaluated inside the engine.

The Milvus backend stores, on every passage row, a case-folded copy of its document's metadata plus ``doc_id`` in
the JSON field ``meta_folded``, and two typed columns: ``venue`` (the folded venue when it is a string) and
``year`` (when it is an integer). A condition becomes:

- on the typed column, for ``eq``/``in``/``gt``/``gte``/``lt``/``lte`` with targets of the column's type (an
  index on the column can serve it on a Milvus server);
- on the JSON path ``meta_folded["field"]`` otherwise,

always guarded by the field's presence, so that, as in :func:`citerag.index.filters.compile_filters`, a document lacking
the field fails every condition on it (``ne`` and ``nin`` included). String targets are case-folded like the
stored values, so comparisons are case-insensitive on both backends. ``in``/``nin`` are written as chains of
``==``/``!=`` (Milvus Lite has no ``in`` on JSON paths). A comparison with a list target (e.g. a whole
``authors`` list) is not expressible on JSON values and raises.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from citerag.index.filters import Filters, compile_filters, fold_value

JSON_FIELD = "meta_folded"
TYPED_COLUMNS: dict[str, type] = {"venue": str, "year": int}
_SYMBOL = {"eq": "==", "ne": "!=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}
_POSITIVE = frozenset({"eq", "in", "gt", "gte", "lt", "lte"})


class Unsatisfiable(Exception):
    """The filter matches no document whatever the corpus (``{"in": []}``, a ``null`` target): search returns
    nothing without asking the engine."""


def typed_columns(meta: Mapping[str, Any]) -> dict[str, Any]:
    """The ``venue``/``year`` column values of a document's metadata (``None`` where the value is missing or not
    of the column's type: a string venue, an integer year)."""
    return {
        name: fold_value(meta[name]) if _is_type(meta.get(name), kind) else None for name, kind in TYPED_COLUMNS.items()
    }


def milvus_expression(filters: Filters | None) -> str:
    """The Milvus expression for ``filters`` (``""`` for none).

    >>> milvus_expression({"venue": "ICML", "year": {"gte": 2018}})
    '(venue is not null and venue == "icml") and (year is not null and year >= 2018)'

    Raises:
        ValueError: malformed filters (same messages as :func:`citerag.index.filters.compile_filters`), or a list target
            outside ``in``/``nin``.
        Unsatisfiable: the filter can match nothing.
    """
    if not filters:
        return ""
    compile_filters(filters)  # validates with the embedded backend's messages
    clauses = []
    for field, condition in filters.items():
        ops = condition if isinstance(condition, Mapping) else {"eq": condition}
        for op, target in ops.items():
            clauses.append(f"({_clause(field, op, target)})")
    return " and ".join(clauses)


def _clause(field: str, op: str, target: Any) -> str:
    targets = list(target) if op in ("in", "nin") else [target]
    if any(isinstance(t, list | tuple | Mapping) for t in targets):
        raise ValueError(f"filters.{field}.{op}: the Milvus backend compares single values; got a list or object")
    if any(t is None or (isinstance(t, float) and not math.isfinite(t)) for t in targets):
        if op in ("in", "nin"):  # a null/NaN option never matches: drop it
            targets = [t for t in targets if t is not None and not (isinstance(t, float) and not math.isfinite(t))]
        else:
            raise Unsatisfiable(f"filters.{field}.{op}: {target!r} matches no stored value")
    if op == "in" and not targets:
        raise Unsatisfiable(f"filters.{field}.in: empty list")
    kind = TYPED_COLUMNS.get(field)
    if kind is not None and op in _POSITIVE and all(_is_type(t, kind) for t in targets):
        ref, present = field, f"{field} is not null"
    else:
        ref = f"{JSON_FIELD}[{_literal(field)}]"
        present = f"exists {ref}"
    values = [_literal(fold_value(t)) for t in targets]
    if op == "in":
        test = "(" + " or ".join(f"{ref} == {v}" for v in values) + ")"
    elif op == "nin":
        test = " and ".join(f"{ref} != {v}" for v in values)
    else:
        test = f"{ref} {_SYMBOL[op]} {values[0]}"
    return f"{present} and {test}" if test else present


def _is_type(value: Any, kind: type) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)


def _literal(value: Any) -> str:
    """A Milvus literal: JSON strings (double quotes, backslash escapes), ``true``/``false``, numbers."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)
