"""Acknowledged writes survive a damaged index version and kill -9 at every step of a write.

Real app, real embedder, real files and processes: the issue's scenario (3 abstracts indexed, 2 written through
the API, the live version damaged, restart: 5 served), and the kill -9 matrix of a write (``index/faults.py``).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from citerag.index.faults import ENV
from citerag.index.ingest import load_documents
from citerag.index.store import DAMAGED, IndexStore
from tests.conftest import API_KEY, ROOT, SEEDS

pytestmark = pytest.mark.slow
AUTH = {"Authorization": f"Bearer {API_KEY}"}
CLI = [sys.executable, "-c", "from service.cli import run; run()"]
NEW = [
    {"id": "api-1", "title": "Zorblax", "text": "Zorblax quantisation halves the memory of sparse transformers."},
    {"id": "api-2", "title": "Quuxify", "text": "Quuxify lowers the latency of dense retrieval on long inputs."},
]


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture()
def three(tmp_path: Path) -> Path:
    """A source file of 3 seed abstracts."""
    docs = load_documents([SEEDS])[:3]
    return _jsonl(tmp_path / "three.jsonl", [{"id": d.doc_id, "text": d.text} for d in docs])


def _damage(version: Path, name: str) -> None:
    target = version / name if (version / name).exists() else next((version / "bm25").glob("data*.npy"))
    data = target.read_bytes()
    target.write_bytes(data[: len(data) // 2])


def test_a_version_that_fails_the_background_check_is_refused_and_recovered(settings_factory, three: Path) -> None:
    """Bit rot: one byte flipped, size and mtime unchanged, so the start's check passes; the full check in the
    background finds it, the version is moved aside and the service serves the recovered one with every write."""
    import time

    from fastapi.testclient import TestClient

    from citerag.service.api import create_app

    settings = settings_factory(corpus=[three], api_key=API_KEY)
    with TestClient(create_app(settings)) as client:
        assert client.post("/documents", json=NEW, headers=AUTH).status_code == 200
    live = IndexStore(settings.index_dir).current()
    assert live is not None
    target = live / "passages.arrow"
    info = target.stat()
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    os.utime(target, ns=(info.st_atime_ns, info.st_mtime_ns))

    with TestClient(create_app(settings)) as client:
        for _ in range(600):  # the check and the recovery take well under a minute
            health = client.get("/health").json()
            if health["index_check"] == "verified" and health["index_version"] != live.name:
                break
            time.sleep(0.1)
        assert health["index_check"] == "verified" and health["documents"] == 5
        top = client.post("/search", json={"query": "zorblax quantisation", "k": 1, "mode": "bm25"}).json()
        assert top["results"][0]["doc_id"] == "api-1"
    reason = (settings.index_dir / "versions" / DAMAGED / live.name / "REASON.txt").read_text()
    assert "passages.arrow: checksum differs" in reason


@pytest.mark.parametrize("name", ["passages.arrow", "dense.faiss", "bm25 arrays", "manifest.json"])
def test_documents_written_through_the_api_survive_a_damaged_live_version(
    settings_factory, three: Path, name: str
) -> None:
    from fastapi.testclient import TestClient

    from citerag.service.api import create_app

    settings = settings_factory(corpus=[three], api_key=API_KEY)
    with TestClient(create_app(settings)) as client:
        assert client.post("/documents", json=NEW, headers=AUTH).status_code == 200
        health = client.get("/health").json()
        assert health["documents"] == 5
    live = IndexStore(settings.index_dir).current()
    assert live is not None and live.name == health["index_version"]
    _damage(live, name)

    with TestClient(create_app(settings)) as client:  # restart
        health = client.get("/health").json()
        assert health["documents"] == 5 and health["index_version"] != live.name
        top = client.post("/search", json={"query": "zorblax quantisation", "k": 1, "mode": "bm25"}).json()
        assert top["results"][0]["doc_id"] == "api-1"
    assert (settings.index_dir / "versions" / DAMAGED / live.name / "REASON.txt").is_file()


POINTS = ["before-log-append", "after-log-append", "mid-version", "before-current", "after-current"]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An index directory of 3 abstracts plus one acknowledged `index --add` (built once, copied per test)."""
    root = tmp_path_factory.mktemp("durable")
    docs = load_documents([SEEDS])[:3]
    three = _jsonl(root / "three.jsonl", [{"id": d.doc_id, "text": d.text} for d in docs])
    first = _jsonl(root / "first.jsonl", NEW[:1])
    for args in (["index", str(three)], ["index", "--add", str(first)]):
        subprocess.run([*CLI, *args, "--index-dir", str(root / "idx")], check=True, cwd=ROOT, capture_output=True,
                       env={**os.environ, "HF_HUB_OFFLINE": "1"})
    return root


def _ids(index_dir: Path) -> list[str]:
    out = subprocess.run([*CLI, "docs", "--json", "--index-dir", str(index_dir)], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert out.returncode == 0, out.stderr
    return sorted(d["doc_id"] for d in json.loads(out.stdout)["documents"])


@pytest.mark.parametrize("point", POINTS)
def test_kill_9_at_each_step_of_a_write_keeps_every_acknowledged_write(
    indexed: Path, tmp_path: Path, point: str
) -> None:
    index_dir = tmp_path / "idx"
    shutil.copytree(indexed / "idx", index_dir)
    second = _jsonl(tmp_path / "second.jsonl", NEW[1:])
    killed = subprocess.run([*CLI, "index", "--add", str(second), "--index-dir", str(index_dir)], cwd=ROOT,
                            capture_output=True, env={**os.environ, "HF_HUB_OFFLINE": "1", ENV: point})
    assert killed.returncode == -signal.SIGKILL
    acknowledged = sorted([d.doc_id for d in load_documents([SEEDS])[:3]] + ["api-1"])
    # a write killed before its log append never happened; once logged it is durable (replayed at the next start;
    # its client saw no answer, and writes by id are idempotent, so a retry changes nothing)
    expected = acknowledged if point == "before-log-append" else sorted([*acknowledged, "api-2"])
    assert _ids(index_dir) == expected
    assert _ids(index_dir) == expected  # and stays so: nothing left to replay twice
    store = IndexStore(index_dir)
    assert not (store.versions / DAMAGED).exists()
    live = store.load()
    assert len(live.passages) == live.dense.size == live.bm25.size
