"""One write path: every committed index version comes from :func:`citerag.index.build.write_index`, whatever asked for it
(a full build, ``--add``, the start-up sync with the source files, the HTTP API), and a committed version's files
never change afterwards (source bookkeeping lives in ``sources.json``)."""

from __future__ import annotations

import hashlib
import inspect
import os
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from citerag.index.sources import SourceStates
from citerag.index.store import IndexStore
from citerag.index.lifecycle import add_sources, build, ensure_index
from citerag.service.pipeline import index_setup

pytestmark = pytest.mark.slow


def _version_files(root: Path) -> dict[str, str]:
    """sha256 of every file of every committed version, by path relative to ``root``."""
    return {
        str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted((root / "versions").glob("v*/**/*")) if path.is_file()
    }


def test_build_add_sync_and_api_all_write_through_write_index(
    settings_factory, seed_corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    callers: list[str] = []
    commit = IndexStore.write

    def spy(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202 - IndexStore.write's own signature
        stack = [frame.function for frame in inspect.stack()]
        callers.append("write_index" if "write_index" in stack else "/".join(stack[1:4]))
        return commit(self, *args, **kwargs)

    monkeypatch.setattr(IndexStore, "write", spy)
    settings = settings_factory(corpus=[seed_corpus])
    seed = next(seed_corpus.glob("*.txt"))
    extra = tmp_path / "extra.jsonl"
    extra.write_text('{"id": "x-1", "text": "Quuxify caches halve the latency of retrieval."}\n')

    build(index_setup(settings), [seed_corpus], show_progress=False)  # citerag index PATHS
    add_sources(index_setup(settings), [extra], show_progress=False)  # citerag index --add PATHS
    with seed.open("a", encoding="utf-8") as handle:  # the start-up sync: a record added to a source file
        handle.write("\n\nA new abstract about grounded answers with exact citations.\n")
    synced = ensure_index(index_setup(settings), show_progress=False)
    with TestClient(_app(settings)) as client:  # the HTTP API
        response = client.post("/documents", json=[{"id": "api-1", "text": "Zorblax halves memory."}])
        assert response.status_code == 200, response.text

    assert len(synced.documents) == 19 + 1 + 1  # the seed file, its new record, the --add file
    assert callers == ["write_index"] * 4


def test_committed_versions_are_never_rewritten(
    settings_factory, seed_corpus: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import citerag.index.lifecycle as lifecycle

    settings = settings_factory(corpus=[seed_corpus])
    first = ensure_index(index_setup(settings), show_progress=False)
    root = first.path.parent.parent
    before = _version_files(root)
    key = str(seed_corpus.resolve())
    signature = SourceStates(root).of(first.path)["source_signatures"][key]
    seed = next(seed_corpus.glob("*.txt"))
    stat = seed.stat()
    os.utime(seed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched, records unchanged

    again = ensure_index(index_setup(settings), show_progress=False)

    assert again.path == first.path  # nothing to index: no new version
    assert _version_files(root) == before  # and the live version's files as they were
    assert SourceStates(root).of(again.path)["source_signatures"][key] != signature  # the new signature is kept
    monkeypatch.setattr(lifecycle, "read_sources", lambda *a, **k: pytest.fail("sources read again"))
    assert ensure_index(index_setup(settings), show_progress=False).path == first.path  # so the next start reads no file


def _app(settings):  # noqa: ANN001, ANN202 - Settings -> FastAPI
    from citerag.service.api import create_app

    return create_app(settings.model_copy(update={"api_key": None, "host": "127.0.0.1"}))
