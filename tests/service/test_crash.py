"""Crash safety: kill -9 in the middle of an ingest, restart, and the previous corpus is served intact."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from citerag.index.ingest import load_documents
from citerag.index.store import IndexStore
from tests.conftest import EDEN, ROOT, SEEDS

pytestmark = pytest.mark.slow
CLI = [sys.executable, "-c", "from service.cli import run; run()"]


def _big_corpus(path: Path, n: int = 1200) -> None:
    seeds = load_documents([SEEDS])
    with path.open("w", encoding="utf-8") as handle:
        for i in range(n):
            doc = seeds[i % len(seeds)]
            handle.write(json.dumps({"id": f"copy-{i}", "text": f"{doc.text} (copy {i})"}) + "\n")


def test_kill_9_during_an_ingest_leaves_the_previous_index_live(tmp_path: Path) -> None:
    index_dir = tmp_path / "idx"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    subprocess.run([*CLI, "index", str(SEEDS), "--index-dir", str(index_dir)], check=True, env=env, cwd=ROOT,
                   capture_output=True)
    store = IndexStore(index_dir)
    before = store.current()
    big = tmp_path / "big.jsonl"
    _big_corpus(big)

    ingest = subprocess.Popen([*CLI, "index", str(big), "--index-dir", str(index_dir)], env=env, cwd=ROOT,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    caught_writing = False
    deadline = time.monotonic() + 600
    while ingest.poll() is None and time.monotonic() < deadline:
        if any(store.versions.glob(".tmp-*")):  # the new version is being written
            ingest.send_signal(signal.SIGKILL)
            caught_writing = True
            break
        time.sleep(0.002)
    ingest.wait()
    assert caught_writing, "the ingest finished before it could be killed mid-write"
    assert ingest.returncode == -signal.SIGKILL

    # "restart": a new process loads the index; the half-written version is not live
    assert store.current() == before
    index = store.load()
    assert len(index.documents) == 38 and EDEN in index.documents
    assert len(index.passages) == index.dense.size == index.bm25.size
    result = subprocess.run([*CLI, "search", "metagenomic foundation model", "--k", "1", "--json",
                             "--index-dir", str(index_dir)], env=env, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["results"][0]["doc_id"] == EDEN
    assert not any(store.versions.glob(".tmp-*"))  # the killed write's temporary version went at that start
