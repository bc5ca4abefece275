"""Incremental ingestion: add 100 new abstracts to the 22,981-abstract index, against rebuilding it.

    .venv/bin/python -m bench.add_documents              # 100 SciFact abstracts into a copy of the 23k index
    .venv/bin/python -m bench.add_documents --new 20 --no-record

The 23k index is the bench one (``.citerag-bench/index-abstracts-all``, built or reused by
:class:`bench.common.BenchIndexes`). Each row works on its own copy of it, so the bench index is never changed.
The new documents are the first ``--new`` abstracts of SciFact's corpus (``benchmarks/scifact/corpus.jsonl`` in the
shared folder): real abstracts the index does not hold, so every one of their passages is embedded (the embedding
cache is off in both rows). Rows:

- ``citerag index --add``: the command a user runs, as a subprocess, wall time from start to exit (Python start-up,
  imports, model load, reading the live version, embedding the new passages, rebuilding BM25 over every passage,
  adding to FAISS, writing and verifying the new version);
- ``add_sources`` in process: :func:`citerag.index.lifecycle.add_sources` with the encoder already loaded: what a running
  service pays for ``POST /documents`` of the same abstracts.

The full rebuild it replaces is quoted from the same run's encoder: the index's passages at the ``add_sources``
row's embedding rate (embedding dominates a rebuild; ``bench/build_throughput.py`` measures a whole build).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import BenchIndexes, fmt, load_average, markdown_table, parser, record, require_shared

SCIFACT_CORPUS = Path("benchmarks") / "scifact" / "corpus.jsonl"


def new_abstracts(shared: Path, n: int, target: Path) -> int:
    """Write the first ``n`` SciFact abstracts to ``target`` (JSONL) under ids the index cannot hold; returns the
    number of words written (for the table)."""
    words = 0
    with (shared / SCIFACT_CORPUS).open(encoding="utf-8") as source, target.open("w", encoding="utf-8") as out:
        for _, line in zip(range(n), source, strict=False):
            record_ = json.loads(line)
            words += len(record_["text"].split())
            out.write(json.dumps({"_id": f"scifact-{record_['_id']}", "title": record_["title"],
                                  "text": record_["text"]}) + "\n")
    return words


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--new", type=int, default=100, help="abstracts to add (default 100)")
    args = p.parse_args(argv)
    shared = require_shared(args.shared)
    if not (shared / SCIFACT_CORPUS).is_file():
        print(f"error: {shared / SCIFACT_CORPUS} not found: pass --shared DIR", file=sys.stderr)
        return 2

    from citerag.index.store import IndexStore
    from citerag.index.lifecycle import add_sources
    from citerag.service.pipeline import index_setup
    from citerag.service.settings import Settings

    indexes = BenchIndexes()
    _, base = indexes.abstracts(shared)
    live = IndexStore(base.directory).load()
    n_passages = len(live.passages)
    loads, rows, notes = [load_average()], [], []
    env = {**os.environ, "CITERAG_EMBEDDING_CACHE": "false", "HF_HUB_OFFLINE": "1"}
    with tempfile.TemporaryDirectory(prefix="citerag-add-") as tmp:
        new = Path(tmp) / "new.jsonl"
        words = new_abstracts(shared, args.new, new)

        cli_copy = Path(tmp) / "cli"
        shutil.copytree(base.directory, cli_copy)
        command = [str(Path(sys.executable).parent / "citerag"), "index", "--add", str(new), "--index-dir", str(cli_copy)]
        started = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
        cli_s = time.perf_counter() - started
        if done.returncode != 0:
            print(done.stdout + done.stderr, file=sys.stderr)
            return 1
        after = IndexStore(cli_copy).load()
        added = len(after.passages) - n_passages
        loads.append(load_average())
        rows.append(["`citerag index --add` (subprocess, cold start)", f"{args.new}", f"{added:,}", fmt(cli_s, 1),
                     f"{len(after.documents):,} documents, {len(after.passages):,} passages"])

        service_copy = Path(tmp) / "service"
        shutil.copytree(base.directory, service_copy)
        settings = Settings(index_dir=service_copy, embedding_cache=False)
        embedder = indexes.embedder  # loaded once, as in a running service
        started = time.perf_counter()
        add_sources(index_setup(settings), [new], show_progress=False)
        build_s = time.perf_counter() - started
        started = time.perf_counter()
        embedder.encode([p.text for p in after.passages[-added:]])  # the same passages, encoder alone
        embed_s = time.perf_counter() - started
        loads.append(load_average())
        rows.append(["`build(add=True)` in process (encoder loaded)", f"{args.new}", f"{added:,}", fmt(build_s, 1),
                     f"of which embedding ~{fmt(embed_s, 1)} s ({fmt(added / embed_s, 0)} passages/s)"])
        rebuild_s = (n_passages + added) / (added / embed_s)
        rows.append(["full rebuild instead (embedding alone, same rate)", f"{len(after.documents):,}",
                     f"{n_passages + added:,}", fmt(rebuild_s, 0), "estimate: all passages at the rate above"])
    notes.append(f"{args.new} new abstracts: SciFact's first {args.new} ({words:,} words); the 23k index is "
                 f"{base.directory.name} ({n_passages:,} passages, {live.manifest.get('dense', {}).get('kind', 'auto')}"
                 " dense index); embedding cache off")
    table = markdown_table(["step", "documents", "passages embedded", "seconds", "detail"], rows)
    record("Adding abstracts to the 22,981-abstract index (bench/add_documents.py)", table, notes, loads,
           write=not args.no_record)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
