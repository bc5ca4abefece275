"""Retrieval parity of the two backends: the embedded one (FAISS + bm25s) and Milvus (Milvus Lite here), on the
dev set and on SciFact, with the same passages and the same vectors on both sides.

    PYTHONPATH=. .venv/bin/python bench/backend_parity.py --scifact ../shared/benchmarks/scifact

The embedded indexes are the ones ``citerag`` builds (the dev-set corpus into ``<work>/seeds-index``, SciFact taken
from ``--scifact-index``, default ``.citerag-bench/scifact`` as ``citerag eval --benchmark`` leaves it); nothing is
re-embedded for Milvus: its passages and vectors are read from the embedded index (``DenseIndex.vectors``)
and written with :meth:`citerag.index.milvus.MilvusBackend.write_passages`. Queries are encoded by the same MiniLM on both
sides. Writes ``<out>/backends.md`` (between the generated markers) and ``<out>/backends.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from datetime import date
from pathlib import Path
from typing import Any

import ir_measures
import numpy as np

from citerag.index.chunking import Chunker
from citerag.index.milvus import Analyzer, MilvusBackend
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexStore, LoadedIndex
from citerag.index.text import fold
from citerag.index.types import FusionMethod, RetrievalMode
from citerag.eval.retrieval import DEPTH, document_run, load_beir, load_devset, metrics_table, score, write_report
from citerag.index.lifecycle import ensure_index
from citerag.service.pipeline import index_setup, load_embedder
from citerag.service.settings import PROJECT_ROOT, Settings

class CachedQueries:
    """The shared MiniLM with a memo of query vectors: every run on both backends encodes the same few hundred
    queries, and the encoder is not what is compared. Passage vectors never go through it here."""

    def __init__(self) -> None:
        self.model = load_embedder()
        self.name, self.dim = self.model.name, self.model.dim
        self.tokenizer, self.max_seq_length = self.model.tokenizer, self.model.max_seq_length
        self._memo: dict[str, np.ndarray] = {}

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        """As :meth:`SentenceTransformerEmbedder.encode` (float32, ``(len(texts), dim)``, L2-normalised)."""
        missing = [t for t in dict.fromkeys(texts) if t not in self._memo]
        if missing:
            self._memo.update(zip(missing, self.model.encode(missing, show_progress=show_progress), strict=True))
        return np.stack([self._memo[t] for t in texts]) if texts else np.zeros((0, self.dim), dtype=np.float32)


EMBEDDER: CachedQueries | None = None


def embedder() -> CachedQueries:
    global EMBEDDER
    if EMBEDDER is None:
        EMBEDDER = CachedQueries()
    return EMBEDDER


MEASURES = {"nDCG@10": ir_measures.nDCG @ 10, "Recall@10": ir_measures.R @ 10, "Recall@100": ir_measures.R @ 100}
# (row name, mode, fusion): the runs measured on both backends.
RUNS: list[tuple[str, RetrievalMode, FusionMethod | None]] = [
    ("bm25", "bm25", None),
    ("dense", "dense", None),
    ("hybrid rrf", "hybrid", "rrf"),
    ("hybrid weighted", "hybrid", "weighted"),
]


def milvus_backend(path: Path, index: LoadedIndex, analyzer: Analyzer) -> tuple[MilvusBackend, float]:
    """A Milvus Lite backend at ``path`` holding ``index``'s passages and vectors (written when the collection is
    empty). Returns it and the write time in seconds (0.0 when reused)."""
    config = index.config
    chunker = Chunker(embedder().tokenizer, embedder().max_seq_length, config.target_tokens, config.overlap_tokens)
    backend = MilvusBackend(
        str(path), embedder(), chunker, analyzer=analyzer, collection=f"citerag_{analyzer}",
        bm25_k1=config.bm25_k1, bm25_b=config.bm25_b,
    )
    if backend.stats()["passages"] == len(index.passages):
        return backend, 0.0
    started = time.perf_counter()
    backend.write_passages(list(index.documents.values()), index.passages, index.dense.vectors())
    return backend, time.perf_counter() - started


def measure(searcher: Any, queries: dict[str, str], qrels: list[ir_measures.Qrel], mode: RetrievalMode,
            fusion: FusionMethod | None) -> dict[str, float]:
    """nDCG@10, Recall@10/100 of one run (documents ranked by their best passage, as ``citerag eval``)."""
    run = document_run(searcher, queries, lambda s, q: s.search(q, k=DEPTH, mode=mode, one_per_doc=True, fusion=fusion))
    return score(qrels, run, MEASURES)


def compare(
    name: str, index: LoadedIndex, queries: dict[str, str], qrels: list[ir_measures.Qrel], work: Path
) -> dict[str, Any]:
    """Every run on both backends (and Milvus's own analyzer, and RRF in the engine) for one corpus."""
    embedder().encode([fold(q) for q in queries.values()])  # once, batched
    embedded = Retriever(index, embedder(), fusion="rrf")
    rows: dict[str, dict[str, float]] = {}
    ingest: dict[str, float] = {}
    for run, mode, fusion in RUNS:
        rows[f"embedded {run}"] = measure(embedded, queries, qrels, mode, fusion)
    rows["embedded hybrid bounded (its default)"] = measure(embedded, queries, qrels, "hybrid", "bounded")
    milvus, ingest["citerag"] = milvus_backend(work / f"{name}.db", index, "citerag")
    for run, mode, fusion in RUNS:
        rows[f"milvus {run}"] = measure(milvus, queries, qrels, mode, fusion)
    milvus.rrf_in_engine = True
    rows["milvus hybrid rrf, in engine (RRFRanker)"] = measure(milvus, queries, qrels, "hybrid", "rrf")
    milvus.close()
    raw, ingest["milvus"] = milvus_backend(work / f"{name}-raw.db", index, "milvus")
    rows["milvus bm25, Milvus analyzer on raw text"] = measure(raw, queries, qrels, "bm25", None)
    rows["milvus hybrid rrf, Milvus analyzer on raw text"] = measure(raw, queries, qrels, "hybrid", "rrf")
    raw.close()
    return {
        "runs": rows,
        "queries": len(queries),
        "documents": len(index.documents),
        "passages": len(index.passages),
        "write_seconds": ingest,
    }


def devset(work: Path) -> dict[str, Any]:
    questions = [q for q in load_devset(PROJECT_ROOT / "eval" / "devset.jsonl") if q.qrels]
    qrels = [ir_measures.Qrel(q.qid, doc_id, grade) for q in questions for doc_id, grade in q.qrels.items()]
    index = ensure_index(index_setup(Settings(index_dir=work / "seeds-index")), show_progress=True)
    return compare("devset", index, {q.qid: q.question for q in questions}, qrels, work)


def scifact(folder: Path, index_dir: Path, work: Path) -> dict[str, Any]:
    bench = load_beir(folder)
    index = IndexStore(index_dir).load()
    return compare("scifact", index, bench.queries, bench.qrels, work)


def gaps(results: dict[str, Any]) -> dict[str, float]:
    """Milvus minus embedded nDCG@10 for each run measured on both."""
    runs = results["runs"]
    return {run: round(runs[f"milvus {run}"]["nDCG@10"] - runs[f"embedded {run}"]["nDCG@10"], 4) for run, _, _ in RUNS}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scifact", type=Path, default=PROJECT_ROOT.parent / "shared" / "benchmarks" / "scifact")
    parser.add_argument("--scifact-index", type=Path, default=Path(".citerag-bench") / "scifact")
    parser.add_argument("--work", type=Path, default=Path(".citerag-bench") / "milvus")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "eval" / "results")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results = {"devset": devset(args.work), "scifact": scifact(args.scifact, args.scifact_index, args.work)}
    for name in results:
        results[name]["gap_ndcg10"] = gaps(results[name])
    results["machine"] = {"date": date.today().isoformat(), "python": platform.python_version()}
    (args.out / "backends.json").write_text(json.dumps(results, indent=2) + "\n")
    blocks = []
    for name in ("devset", "scifact"):
        r = results[name]
        blocks.append(
            f"**{name}** ({r['queries']} queries, {r['documents']} documents in {r['passages']} passages; "
            f"Milvus write {r['write_seconds']['citerag']:.1f} s):\n\n{metrics_table(r['runs'])}"
        )
    generated = "\n\n".join(blocks) + "\n\nProduced by `PYTHONPATH=. python bench/backend_parity.py`."
    write_report(args.out / "backends.md", generated, "Retrieval parity: embedded vs Milvus")
    print(generated)


if __name__ == "__main__":
    main()
