"""``citerag doctor`` prints what the index and each cache use on disk, with each one's bound (issue 54). Nothing
here loads a model: the generator is a small file named by CITERAG_GENERATOR_PATH, the embedding backend torch (its
package is only located), the index a stand-in one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from citerag.index.build import write_index
from citerag.index.embed_cache import CachedEmbedder
from citerag.index.types import Document
from citerag.service.cli import app
from citerag.service.disk import size_text
from tests.conftest import HashEmbedder, StandInIndex

runner = CliRunner()


def doc(i: int) -> Document:
    body = f"Abstract {i} studies topic{i} with method{i} and reports result{i} on dataset{i}."
    return Document(f"d{i}", "", body, body[:20])


def write(s: StandInIndex, upserts: list[Document]) -> Path:
    return write_index(s.store, s.embedder, s.chunker, s.config, upserts)[0]


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_size_text() -> None:
    assert [size_text(n) for n in (0, 12_345, 1024**2 - 1, 3 * 1024**2 // 2, 4 * 1024**3)] == [
        "0 B", "12,345 B", "1,048,575 B", "1.5 MB", "4.00 GB"]


def test_doctor_names_each_cache_with_its_size_and_bound(tokenizer, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    index_dir, cache = tmp_path / "idx", tmp_path / "cache"
    s = StandInIndex(index_dir, tokenizer)
    first = s.build([doc(i) for i in range(3)])
    old = write(s, [doc(3)])
    s.store.quarantine(first, "test: set aside")
    live = write(s, [doc(4)])
    (s.store.versions / ".tmp-v000009-20260101T000000-abcdef").mkdir()
    (s.store.versions / ".tmp-v000009-20260101T000000-abcdef" / "passages.arrow").write_bytes(b"p" * 700)

    with CachedEmbedder(HashEmbedder(), cache / "embeddings") as cached:
        cached.encode(["one passage", "another passage"])
    (shard,) = (cache / "embeddings" / "hash-embedder").glob("*.npy")
    states = cache / "paper-states"
    states.mkdir()
    (states / "paper-aaaa.bin").write_bytes(b"s" * 3000)
    (states / "paper-aaaa.bin.size").write_bytes(b"3000")
    (states / "paper-bbbb.bin").write_bytes(b"s" * 5000)
    models = cache / "models"
    models.mkdir()
    (models / "model.gguf").write_bytes(b"GGUF" + b"\0" * (2 * 1024**2 - 4))  # 2 MB: listed by name
    (models / "model.sha256").write_text("stamp\n")

    monkeypatch.setenv("CITERAG_CACHE_DIR", str(cache))
    monkeypatch.setenv("CITERAG_EMBEDDING_BACKEND", "torch")  # the int8 export would take ~20 s
    monkeypatch.setenv("CITERAG_EMBEDDING_CACHE", "true")
    monkeypatch.setenv("CITERAG_GENERATOR_PATH", str(models / "model.gguf"))  # located, never loaded
    monkeypatch.setenv("CITERAG_STATE_CACHE_MB", "64")
    result = runner.invoke(app, ["doctor", "--index-dir", str(index_dir)])
    assert result.exit_code == 0, result.output
    lines = {line.split(":")[0]: line for line in result.output.splitlines() if line.startswith("ok    disk, ")}

    wal = os.path.getsize(index_dir / "wal.jsonl")
    other = tree_size(index_dir / "sources") + sum(
        os.path.getsize(index_dir / name) for name in ("sources.json", "CURRENT", "write.lock"))
    assert tree_size(index_dir) == (tree_size(live) + tree_size(old) + tree_size(index_dir / "versions" / "damaged")
                                    + 700 + wal + other)
    assert lines["ok    disk, index"] == (
        f"ok    disk, index: {size_text(tree_size(index_dir))} in {index_dir}: live version "
        f"{size_text(tree_size(live))}, 1 old version {size_text(tree_size(old))} (bound: keep_versions=2, the live "
        f"one included), 1 damaged version {size_text(tree_size(index_dir / 'versions' / 'damaged'))} (kept until "
        f"removed by hand), write log {wal:,} B, 1 unfinished version 700 B (removed at the next start when no writer "
        f"runs), other files {other:,} B (source records, versions a restore replaced)"
    )
    assert lines["ok    disk, embedding cache"] == (
        f"ok    disk, embedding cache: {shard.stat().st_size:,} B in 1 shard at {cache / 'embeddings'} "
        "(bound: embedding_cache_mb=1024, 1.00 GB)"
    )
    assert shard.stat().st_size == 2 * 160 + 192
    assert lines["ok    disk, paper-state cache"] == (
        f"ok    disk, paper-state cache: 8,004 B in 2 states at {states} (bound: state_cache_mb=64, 64.0 MB)"
    )
    assert lines["ok    disk, model files"] == (
        f"ok    disk, model files: 2.0 MB at {models}: model.gguf 2.0 MB (no bound: the files the settings use; "
        "leftovers of killed starts are removed at the next start)"
    )
    assert "all checks passed" in result.output


def test_doctor_says_when_nothing_is_on_disk_yet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CITERAG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("CITERAG_EMBEDDING_BACKEND", "torch")
    monkeypatch.setenv("CITERAG_EMBEDDING_CACHE", "false")
    monkeypatch.setenv("CITERAG_GENERATOR_PATH", str(tmp_path / "missing.gguf"))
    result = runner.invoke(app, ["doctor", "--index-dir", str(tmp_path / "none")])
    assert result.exit_code == 1  # no generator file, no index
    out = result.output
    assert f"ok    disk, index: nothing on disk yet at {tmp_path / 'none'}" in out
    assert (f"ok    disk, embedding cache: 0 B in 0 shards at {tmp_path / 'cache' / 'embeddings'} (bound: "
            "embedding_cache_mb=1024, 1.00 GB); not used (embedding_cache=false)") in out
    assert f"ok    disk, paper-state cache: 0 B in 0 states at {tmp_path / 'cache' / 'paper-states'}" in out
    assert f"ok    disk, model files: 0 B at {tmp_path / 'cache' / 'models'} (no bound" in out
