"""Index build throughput: citerag's whole build against the raw encoders it wraps, on the same passages.

    .venv/bin/python -m bench.build_throughput                     # first ~3,000 passages of the 22,981 abstracts
    .venv/bin/python -m bench.build_throughput --passages 500 --no-record   # a quick check

The passages are those citerag's chunker makes (default settings: ~128 word pieces) from the first abstracts of
``corpora/ml_abstracts.jsonl.gz`` in the shared data folder (``../shared`` from the repository root; ``--corpus``
names another file), taken whole until ``--passages`` are reached. Each run of a row is a fresh process (its peak RSS
is its own), after a warm-up encode of 16 passages; rows run ``--repeat`` times (default 3), interleaved, and the
table shows each row's median run and the range (a shared 2-core machine drifts by 10 % between minutes):

- raw torch: ``SentenceTransformer.encode(texts, batch_size=64, normalize_embeddings=True)``;
- raw onnxruntime int8: an ``InferenceSession`` (one intra-op thread) on the int8 model citerag exports, fed one
  tokenized passage per run from one Python thread per core (as citerag's ``OnnxEmbedder``), mean-pooled and
  normalised in numpy;
- citerag build: ``citerag.index.lifecycle.build`` on a JSONL file of those abstracts (read + chunk + BM25 + embed + FAISS
  + write and verify-load), with an empty embedding cache, on the backend of ``--backend`` (default: the default).

The table's ratio is the build's passages/s over the raw encoder of the same backend (target >= 0.90). The table
is appended to ``bench/RESULTS.md`` with the date, ``nproc``, the CPU model, load averages and the command.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

PROJECT_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CORPUS = PROJECT_ROOT.parent / "shared" / "corpora" / "ml_abstracts.jsonl.gz"
RESULTS = PROJECT_ROOT / "bench" / "RESULTS.md"
WARMUP = 16  # passages encoded before timing (first-call allocations, lazy initialisation)
TORCH_BATCH = 64  # SentenceTransformerEmbedder's batch size


def _timed(fn: Callable[[], int]) -> dict[str, float]:
    started = time.perf_counter()
    n = fn()
    seconds = time.perf_counter() - started
    return {"passages": n, "seconds": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def raw_torch(texts: list[str]) -> dict[str, float]:
    """``SentenceTransformer.encode`` on ``texts`` (the packaged model, CPU)."""
    from sentence_transformers import SentenceTransformer

    from citerag.service.model_files import embedding_model_dir

    model = SentenceTransformer(str(embedding_model_dir()), device="cpu", local_files_only=True)
    model.encode(texts[:WARMUP], batch_size=TORCH_BATCH, normalize_embeddings=True)
    return _timed(lambda: len(model.encode(texts, batch_size=TORCH_BATCH, normalize_embeddings=True)))


def raw_onnx(texts: list[str], model_path: str) -> dict[str, float]:
    """onnxruntime on the int8 model, one passage per run and one run per core at a time (``session.run`` releases the
    GIL), as ``OnnxEmbedder`` does, without citerag around it."""
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import onnxruntime as ort
    from transformers import AutoTokenizer

    from citerag.index.embed_onnx import DISABLED_OPTIMIZERS
    from citerag.service.model_files import embedding_model_dir

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(
        model_path, options, providers=["CPUExecutionProvider"], disabled_optimizers=DISABLED_OPTIMIZERS
    )
    tokenizer = AutoTokenizer.from_pretrained(str(embedding_model_dir()))

    def encode_one(text: str) -> np.ndarray:
        enc = tokenizer([text], truncation=True, max_length=256, return_tensors="np")
        hidden = session.run(None, {k: enc[k].astype(np.int64) for k in enc})[0]
        mask = enc["attention_mask"][..., None].astype(np.float32)
        vector = (hidden * mask).sum(1) / mask.sum(1)
        return vector / np.linalg.norm(vector, axis=1, keepdims=True)

    def encode(batch: list[str]) -> int:
        with ThreadPoolExecutor(len(os.sched_getaffinity(0))) as pool:
            return len(list(pool.map(encode_one, batch)))

    encode(texts[:WARMUP])
    return _timed(lambda: encode(texts))


def citerag_build(corpus: str, workdir: str, backend: str) -> dict[str, float]:
    """``citerag.index.lifecycle.build`` of ``corpus`` into ``workdir`` with an empty embedding cache and no earlier index
    (model loaded first)."""
    from citerag.index.lifecycle import build
    from citerag.service.pipeline import index_setup, load_embedder
    from citerag.service.settings import Settings

    settings = Settings(
        index_dir=Path(workdir) / f"index-{backend}",
        cache_dir=Path(workdir) / "cache",
        embedding_backend=backend,
        embedding_cache=True,
    )
    shutil.rmtree(settings.index_dir, ignore_errors=True)  # an earlier run's index and embeddings
    shutil.rmtree(settings.cache_dir / "embeddings", ignore_errors=True)
    load_embedder(settings).encode(["warm-up"] * WARMUP)
    return _timed(lambda: len(build(index_setup(settings), [Path(corpus)], show_progress=False).passages))


def export_onnx(workdir: str) -> str:
    """The int8 model citerag uses, exported into ``workdir``'s cache (not timed)."""
    from citerag.service.model_files import onnx_int8_model

    return str(onnx_int8_model(Path(workdir) / "cache"))


def in_child(fn: Callable[..., Any], *args: Any) -> Any:
    """Run ``fn(*args)`` in a fresh process (spawned: no state or memory shared with this one)."""
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        return pool.submit(fn, *args).result()


def select_passages(corpus: Path, n: int) -> tuple[list[dict[str, Any]], list[str]]:
    """The first abstracts of ``corpus`` whose passages (citerag's chunker, default settings) reach ``n``:
    ``(JSONL records of those abstracts, the passages' model texts)``."""
    from transformers import AutoTokenizer

    from citerag.index.build import chunk_documents, passage_texts
    from citerag.index.chunking import Chunker
    from citerag.index.ingest import iter_documents
    from citerag.service.model_files import embedding_model_dir
    from citerag.service.settings import Settings

    settings = Settings()
    chunker = Chunker(AutoTokenizer.from_pretrained(str(embedding_model_dir())), 256, settings.chunk_tokens,
                      settings.chunk_overlap)
    documents, texts = [], []
    for doc in iter_documents(corpus):
        passages = chunk_documents([doc], chunker)
        documents.append(doc)
        texts.extend(passage_texts(passages, {doc.doc_id: doc}))
        if len(texts) >= n:
            break
    records = [{"_id": d.doc_id, "title": d.title, "text": d.text, **{k: v for k, v in d.meta.items()
                                                                       if k not in ("source", "line")}}
               for d in documents]
    return records, texts


def _median_run(results: list[dict[str, float]]) -> dict[str, Any]:
    """The run of median passages/s among ``results``, with ``range`` ("min-max" passages/s of all runs)."""
    ordered = sorted(results, key=lambda r: r["passages"] / r["seconds"])
    rates = [r["passages"] / r["seconds"] for r in ordered]
    return {**ordered[len(ordered) // 2], "range": f"{rates[0]:.1f}-{rates[-1]:.1f}"}


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    from citerag.service.settings import DEFAULT_EMBEDDING_BACKEND

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS,
                        help="JSONL(.gz) of abstracts (default: ../shared/corpora/ml_abstracts.jsonl.gz)")
    parser.add_argument("--passages", type=int, default=3000, help="passages to embed (whole abstracts; default 3000)")
    parser.add_argument("--backend", choices=["torch", "onnx-int8"], default=DEFAULT_EMBEDDING_BACKEND,
                        help=f"backend of the citerag build (default: {DEFAULT_EMBEDDING_BACKEND}, the default)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each row, interleaved (default 3); the table shows the median and the range")
    parser.add_argument("--no-record", action="store_true", help="print the table without appending it to RESULTS.md")
    args = parser.parse_args(argv)
    if not args.corpus.is_file():
        print(f"error: {args.corpus} not found: the shared data folder belongs at ../shared from the repository root "
              "(or pass --corpus FILE.jsonl.gz)", file=sys.stderr)
        return 2
    if args.repeat < 1:
        print("error: --repeat must be at least 1", file=sys.stderr)
        return 2
    if args.passages < WARMUP:
        print(f"error: --passages must be at least {WARMUP}", file=sys.stderr)
        return 2

    records, texts = select_passages(args.corpus, args.passages)
    loads = [load_average()]
    with tempfile.TemporaryDirectory(prefix="citerag-build-bench-") as workdir:
        corpus = Path(workdir) / "corpus.jsonl"
        corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
        model_path = in_child(export_onnx, workdir)
        runs: dict[str, tuple[str, list[dict[str, float]]]] = {
            "raw torch (SentenceTransformer.encode)": ("torch", []),
            "raw onnxruntime int8": ("onnx-int8", []),
            f"citerag build ({args.backend})": ("build", []),
        }
        for _ in range(args.repeat):  # interleaved, so a slow spell of a shared machine touches every row alike
            runs["raw torch (SentenceTransformer.encode)"][1].append(in_child(raw_torch, texts))
            runs["raw onnxruntime int8"][1].append(in_child(raw_onnx, texts, model_path))
            runs[f"citerag build ({args.backend})"][1].append(
                in_child(citerag_build, str(corpus), workdir, args.backend)
            )
            loads.append(load_average())
    rows = {name: (kind, _median_run(results)) for name, (kind, results) in runs.items()}

    raw_rate = {backend: r["passages"] / r["seconds"] for backend, r in rows.values() if backend != "build"}
    lines = ["| step | passages | seconds | passages/s (median) | range of runs | ratio to the raw encoder | "
             "peak RSS (MiB) |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, (kind, r) in rows.items():
        rate = r["passages"] / r["seconds"]
        ratio = f"{rate / raw_rate[args.backend]:.2f}" if kind == "build" else "-"
        lines.append(f"| {name} | {r['passages']:,} | {r['seconds']:.1f} | {rate:.1f} | {r['range']} | {ratio} | "
                     f"{r['peak_rss_mb']:,.0f} |")
    built = rows[f"citerag build ({args.backend})"][1]["passages"]
    if built != len(texts):
        lines.append(f"\nwarning: the build made {built} passages, the raw encoders got {len(texts)}")
    command = " ".join(shlex.quote(a) for a in [sys.executable, "-m", "bench.build_throughput",
                                                 *(argv if argv is not None else sys.argv[1:])])
    text = "\n".join([
        "## Index build throughput (bench/build_throughput.py)",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %z')}",
        f"- machine: nproc {os.cpu_count()}, {cpu_model()}",
        f"- load average (1/5/15 min) before the runs and after each round of rows: {'; '.join(loads)}",
        f"- runs: {args.repeat} of each row, interleaved; each row's median run is shown",
        f"- command: `{command}` (niceness {os.nice(0)})",
        f"- passages: the first {len(records):,} abstracts of {args.corpus.name}, {len(texts):,} passages",
        "",
        *lines,
        "",
    ]) + "\n"
    print(text)
    if not args.no_record:
        if not RESULTS.exists():
            RESULTS.write_text("# Benchmark results\n\nEach section is appended by the script named in its command.\n\n",
                               encoding="utf-8")
        with RESULTS.open("a", encoding="utf-8") as handle:
            handle.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
