"""Ingest rate and /search-style latency of the two retrieval backends on the 23k-abstract corpus, in one run.

    PYTHONPATH=. .venv/bin/python bench/milvus_vs_embedded.py [--corpus ../shared/corpora/ml_abstracts.jsonl.gz]

What is measured, on the same passages (citerag's chunker, real MiniLM word pieces) and the same vectors:

- ingest: passages/s from chunked passages with their vectors already computed -- the embedded backend's BM25
  tokenisation + bm25s index + FAISS + versioned write (:func:`citerag.index.store.IndexStore.write`), Milvus's
  :meth:`~citerag.index.milvus.MilvusBackend.write_passages` (BM25 tokenisation, upserts, flush). Chunking and encoding
  are the same code for both and are not timed.
- latency: ``search(query, k=10)`` per mode, ms per query (p50/p95/p99) over ``--queries`` queries after 5
  warm-up queries, the way the API's /search calls it.

The vectors are NOT MiniLM embeddings: encoding ~60k passages with torch takes tens of minutes on 2 cores, so every
passage and query gets a deterministic random unit vector (384-d, seeded by the text's sha256). Ingest and latency
depend on the dimension and the count, not on what the vectors mean; retrieval quality is measured elsewhere
(``eval/results/backends.md``). Queries are the titles of documents drawn with a fixed seed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import platform
import random
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from citerag.index.bm25 import BM25Index
from citerag.index.build import chunk_documents
from citerag.index.chunking import Chunker, model_text
from citerag.index.dense import DenseIndex
from citerag.index.ingest import load_documents
from citerag.index.milvus import MilvusBackend
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexConfig, IndexStore
from citerag.index.tokenize import tokenize_many
from citerag.index.types import Document, Passage
from citerag.service.model_files import embedding_model_dir
from citerag.service.settings import PROJECT_ROOT

DIM = 384  # all-MiniLM-L6-v2's dimension
MODES = ("bm25", "dense", "hybrid")


class RandomUnitEmbedder:
    """Deterministic random unit vectors (float32, ``(n, 384)``), seeded by each text's sha256: a stand-in for the
    encoder where only the vectors' count and dimension matter."""

    name = "random-unit-384"
    dim = DIM

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            rng = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))
            vector = rng.standard_normal(self.dim)
            out[i] = vector / np.linalg.norm(vector)
        return out


def drain_lite_maintenance(backend: MilvusBackend) -> float:
    """Wait for Milvus Lite's background compaction and index builds after a bulk write; returns the seconds waited.

    Timing searches while they run measures the GIL contention, not the search. pymilvus's ``compact`` and
    ``get_compaction_state`` are no-ops on Milvus Lite 3.2, so this reaches the in-process engine (private API of
    milvus-lite 3.2: its server registry and ``Collection._wait_for_bg``).
    """
    from milvus_lite import server_manager_instance

    started = time.perf_counter()
    _, db, _ = server_manager_instance._servers[os.path.abspath(backend.uri)]  # noqa: SLF001
    for name in (backend.passages_collection, backend.documents_collection):
        db.get_collection(name)._wait_for_bg()  # noqa: SLF001
    return time.perf_counter() - started


def percentiles(samples_ms: list[float]) -> tuple[float, float, float]:
    """p50, p95, p99 of ``samples_ms`` (ms), by linear interpolation (numpy's default)."""
    p50, p95, p99 = np.percentile(np.asarray(samples_ms), [50, 95, 99])
    return float(p50), float(p95), float(p99)


def latencies(searcher, queries: list[str], mode: str) -> list[float]:
    """ms per ``search(query, k=10, mode=mode)`` over ``queries`` (after 5 warm-up queries)."""
    for query in queries[:5]:
        searcher.search(query, k=10, mode=mode, fusion="rrf")
    samples = []
    for query in queries:
        started = time.perf_counter()
        searcher.search(query, k=10, mode=mode, fusion="rrf")
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def embedded_ingest(root: Path, documents: list[Document], passages: list[Passage], vectors: np.ndarray,
                    config: IndexConfig) -> float:
    """Seconds to build and commit the embedded index from chunked passages and their vectors."""
    started = time.perf_counter()
    titles = {doc.doc_id: doc.title for doc in documents}
    bm25 = BM25Index(k1=config.bm25_k1, b=config.bm25_b, method=config.bm25_method)
    bm25.build(tokenize_many([model_text(p.text, titles[p.doc_id]) for p in passages]))
    dense = DenseIndex(config.embedding_dim)
    dense.add(vectors)
    IndexStore(root).write(config, documents, passages, bm25, dense)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_corpus = PROJECT_ROOT.parent / "shared" / "corpora" / "ml_abstracts.jsonl.gz"
    parser.add_argument("--corpus", type=Path, default=default_corpus)
    parser.add_argument("--queries", type=int, default=100, help="timed queries per mode and backend")
    parser.add_argument("--results", type=Path, default=PROJECT_ROOT / "bench" / "RESULTS.md")
    args = parser.parse_args()
    if not args.corpus.is_file():
        raise SystemExit(f"error: {args.corpus}: corpus not found (it is in the project's shared/corpora folder)")

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(embedding_model_dir()))
    chunker = Chunker(tokenizer, 256, 128, 64)
    embedder = RandomUnitEmbedder()
    documents = load_documents([args.corpus])
    started = time.perf_counter()
    passages = chunk_documents(documents, chunker)
    chunk_s = time.perf_counter() - started
    with_text = {p.doc_id for p in passages}
    documents = [doc for doc in documents if doc.doc_id in with_text]
    vectors = embedder.encode([model_text(p.text, "") for p in passages])
    queries = [doc.title for doc in random.Random(13).sample(documents, args.queries) if doc.title]
    config = IndexConfig(embedder.name, DIM, 256, 128, 64)
    print(f"{len(documents)} documents, {len(passages)} passages (chunked in {chunk_s:.0f} s)", flush=True)

    work = Path(tempfile.mkdtemp(prefix="citerag-bench-"))
    try:
        rows: dict[str, dict[str, object]] = {}
        seconds = embedded_ingest(work / "embedded", documents, passages, vectors, config)
        embedded = Retriever(IndexStore(work / "embedded").load(), embedder, fusion="rrf")
        rows["embedded"] = {"ingest": len(passages) / seconds}
        print(f"embedded ingest {seconds:.1f} s", flush=True)

        milvus = MilvusBackend(str(work / "milvus.db"), embedder, chunker)
        started = time.perf_counter()
        milvus.write_passages(documents, passages, vectors)
        seconds = time.perf_counter() - started
        rows["milvus"] = {"ingest": len(passages) / seconds, "background (s)": drain_lite_maintenance(milvus)}
        background = rows["milvus"]["background (s)"]
        print(f"milvus ingest {seconds:.1f} s, then {background:.1f} s of background work", flush=True)
        started = time.perf_counter()
        milvus.search(queries[0], k=10, mode="bm25")
        rows["milvus"]["first bm25 search (s)"] = time.perf_counter() - started  # builds each segment's BM25 index

        for name, searcher in (("embedded", embedded), ("milvus", milvus)):
            for mode in MODES:
                rows[name][mode] = percentiles(latencies(searcher, queries, mode))
                print(name, mode, rows[name][mode], flush=True)
        milvus.rrf_in_engine = True  # one hybrid_search request with RRFRanker(60) instead of two searches
        rows["milvus, hybrid RRF in engine"] = {"hybrid": percentiles(latencies(milvus, queries, "hybrid"))}
        milvus.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    load = os.getloadavg()
    header = (
        "\n## Embedded vs Milvus Lite: ingest and /search latency "
        f"({datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC)\n\n"
        f"`PYTHONPATH=. python bench/milvus_vs_embedded.py --queries {args.queries}` on {os.cpu_count()} cores "
        f"(nproc), Python {platform.python_version()}, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} "
        f"(1/5/15 min; the cores are shared). {len(documents):,} documents of `{args.corpus.name}` in "
        f"{len(passages):,} passages (citerag's chunker). **Vectors are random unit vectors (384-d), not MiniLM "
        "embeddings**: encoding the corpus with torch would take tens of minutes here, and ingest and latency "
        "depend on the vectors' count and dimension only. Ingest starts from chunked passages with their "
        "vectors; latency is `search(query, k=10, mode)` (hybrid = RRF, k=60, 100 candidates per retriever) over "
        f"{len(queries)} document titles, query encoding included (a hash, ~0 ms), after 5 warm-ups.\n\n"
    )
    table = ["| backend | ingest (passages/s) | " + " | ".join(f"{m} p50 / p95 / p99 (ms)" for m in MODES) + " |",
             "|---|---:|" + "---:|" * len(MODES)]
    for name, row in rows.items():
        cells = " | ".join(
            "{:.1f} / {:.1f} / {:.1f}".format(*row[m]) if m in row else "" for m in MODES  # type: ignore[str-format]
        )
        ingest = f"{row['ingest']:,.0f}" if "ingest" in row else ""
        table.append(f"| {name} | {ingest} | {cells} |")
    note = (
        f"\n\nNot included above: after the write, Milvus Lite compacted and indexed in the background for "
        f"{rows['milvus']['background (s)']:.1f} s (waited for before timing searches), and it builds each "
        f"segment's BM25 inverted index at the first BM25 search ({rows['milvus']['first bm25 search (s)']:.1f} s "
        "here). Milvus Lite is pure Python (milvus-lite 3.2); a Milvus server's numbers differ.\n"
    )
    text = header + "\n".join(table) + note
    with args.results.open("a", encoding="utf-8") as handle:
        handle.write(text)
    print(text)


if __name__ == "__main__":
    main()
