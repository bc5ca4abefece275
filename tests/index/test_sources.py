"""Source states per index version: record tables stored once by digest, read only when asked for."""

from __future__ import annotations

import json
from pathlib import Path

from citerag.index.sources import SourceStates


def _versions(root: Path, *names: str) -> list[Path]:
    paths = [root / "versions" / name for name in names]
    for path in paths:
        path.mkdir(parents=True)
    return paths


def test_equal_record_tables_are_stored_once_and_read_only_when_asked(tmp_path: Path) -> None:
    v1, v2 = _versions(tmp_path, "v000001-a", "v000002-b")
    states = SourceStates(tmp_path)
    records = {"/data/a.jsonl": {"d1": "0123456789abcdef", "d2": None}}
    state = {"sources": ["/data/a.jsonl"], "source_signatures": {"/data/a.jsonl": "sig"}, "source_records": records}
    states.put(v1, state)
    states.put(v2, None, inherit=v1)  # a write through the API keeps the sources' state
    assert len(list(states.records_dir.glob("*.json"))) == 1
    assert "source_records" not in json.loads(states.path.read_text())[v2.name]  # only its digest
    assert states.of(v2) == state
    assert states.of(v2, records=False) == {k: v for k, v in state.items() if k != "source_records"}


def test_a_table_no_kept_version_names_is_removed(tmp_path: Path) -> None:
    v1, v2 = _versions(tmp_path, "v000001-a", "v000002-b")
    states = SourceStates(tmp_path)
    states.put(v1, {"sources": [], "source_records": {"a": {"x": "1"}}})
    v1.rmdir()  # pruned
    states.put(v2, {"sources": [], "source_records": {"a": {"y": "2"}}})
    tables = list(states.records_dir.glob("*.json"))
    assert len(tables) == 1 and json.loads(tables[0].read_text()) == {"a": {"y": "2"}}


def test_an_unreadable_table_counts_as_no_records(tmp_path: Path) -> None:
    (v1,) = _versions(tmp_path, "v000001-a")
    states = SourceStates(tmp_path)
    states.put(v1, {"sources": ["s"], "source_records": {"s": {"x": "1"}}})
    next(states.records_dir.glob("*.json")).write_text("{not json")
    assert states.of(v1) == {"sources": ["s"]}
