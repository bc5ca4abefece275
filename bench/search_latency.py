"""Search latency of citerag against the raw libraries it wraps, at three corpus sizes; at ~1M passages also HNSW
Recall@10 against exact search, memory per passage, build times and the service's start-up time.

    python -m bench.search_latency      # 38 abstracts, 22,981 abstracts (auto, and flat forced), ~1M passages
    python -m bench.search_latency --sizes seed,abstracts --limit 2000 --no-record   # a quick check
    python -m bench.search_latency --embed-only            # only fill the embedding cache

What is timed, one query at a time (200 titles of the 22,981-abstract corpus drawn with seed 0; k = 10):

- citerag: ``Retriever.search(query, k=10, mode=...)`` over the index loaded as the service loads it (verified,
  memory-mapped). Tokenising, fusion and result assembly are included; the query *embedding* is not: the retriever
  gets a :class:`~bench.common.PrecomputedEmbedder` holding the query vectors computed beforehand with the real
  model, and that encoding is timed on its own row. A result decodes its passage and document when they are first
  read (``citerag.index.search.SearchResult``), so two more hybrid rows read them: every result's passage and label
  (what ``GET /search`` returns), and every passage and document (what ``/ask`` reads).
- raw bm25s: ``BM25.get_scores(token ids)`` on the same index files and query tokens + a plain numpy top-k
  (``bm25s.selection.topk``, which is slower here, is timed on its own row).
- raw FAISS: ``citerag.index.search`` on the same ``dense.faiss`` (same kind; HNSW at the same efSearch) with one OpenMP
  thread, as citerag searches (FAISS's default, every core, is timed on its own row).
- raw hybrid: raw bm25s top-100 + raw FAISS top-100 (citerag's candidate depth), without fusion.

citerag and raw calls alternate per query (their order flips every query), so changes of machine load hit both.
Indexes and embeddings are cached under ``.citerag-bench/`` (git-ignored); the ~1M set is the 22,981 abstracts'
passages copied with new document and chunk ids (same text, same vector).
"""

from __future__ import annotations

import cProfile
import gc
import json
import os
import pstats
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import bm25s
import faiss
import httpx
import numpy as np

from bench.common import (
    CACHE_DIR,
    BenchIndexes,
    PrecomputedEmbedder,
    bench_index,
    fmt,
    load_abstracts,
    load_average,
    markdown_table,
    parser,
    percentiles,
    record,
    replicate,
    require_shared,
    rss_mb,
    sample_titles,
    serve,
    time_each,
    write_jsonl,
)
from citerag.index.build import passage_texts
from citerag.index.dense import HNSW_EF_SEARCH, DenseIndex, omp_threads
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexConfig, LoadedIndex, load_version
from citerag.index.text import fold
from citerag.index.tokenize import tokenize, tokenize_many
from citerag.index.types import Document

SIZES = ("seed", "abstracts", "abstracts-flat", "replicated")
K = 10
RECALL_EPS = 1e-5  # a returned hit counts when its exact score is >= the 10th exact score - eps (ties: copies)


class Raw:
    """The raw libraries over one index version's files: bm25s loaded memory-mapped, FAISS read from the same
    ``dense.faiss``. ``tokens``: the query tokens as bm25s token ids (computed before timing)."""

    def __init__(self, path: Path, ef_search: int = HNSW_EF_SEARCH) -> None:
        self.bm25 = bm25s.BM25.load(str(path / "bm25"), mmap=True, show_progress=False)
        self.faiss = faiss.read_index(str(path / DenseIndex.FILENAME), faiss.IO_FLAG_MMAP)
        if isinstance(self.faiss, faiss.IndexHNSW):
            self.faiss.hnsw.efSearch = ef_search
        if isinstance(self.faiss, faiss.IndexIVF):  # citerag's lists scanned per query
            from citerag.index.dense import IVF_NPROBE

            self.faiss.nprobe = IVF_NPROBE

    def token_ids(self, query: str) -> list[int]:
        return self.bm25.get_tokens_ids(tokenize(query))

    def bm25_top(self, ids: list[int], k: int) -> object:
        """bm25s scores + a plain numpy top-k (argpartition of the negated scores, then argsort of the k)."""
        if not ids:
            return None
        scores = self.bm25.get_scores(ids)
        top = np.argpartition(-scores, min(k, scores.size) - 1)[:k]
        return top[np.argsort(-scores[top])]

    def bm25_top_bm25s(self, ids: list[int], k: int) -> object:
        """bm25s scores + bm25s's own top-k (``bm25s.selection.topk``, numpy backend: no JAX here)."""
        if not ids:
            return None
        return bm25s.selection.topk(self.bm25.get_scores(ids), min(k, self.bm25.scores["num_docs"]), backend="numpy")

    def dense_top(self, vector: np.ndarray, k: int) -> object:
        """FAISS search with the library's default OpenMP threads (all cores)."""
        return self.faiss.search(vector, k)

    def dense_top_one_thread(self, vector: np.ndarray, k: int) -> object:
        """FAISS search with one OpenMP thread, as citerag searches (``citerag.index.dense.SEARCH_THREADS``)."""
        with omp_threads(1):
            return self.faiss.search(vector, k)


def interleaved(pairs: dict[str, tuple[Callable[[int], object], Callable[[int], object]]], n: int) -> dict:
    """Time ``citerag(i)`` and ``raw(i)`` of every mode for queries ``0..n-1``, alternating which goes first.

    Returns:
        ``{(mode, "citerag" | "raw"): float64 ms array of shape (n,)}``.
    """
    for i in range(min(5, n)):  # warm-up: page cache, lazy initialisation
        for ours, raw in pairs.values():
            ours(i), raw(i)
    times = {(mode, side): np.empty(n) for mode in pairs for side in ("citerag", "raw")}
    for i in range(n):
        for mode, (ours, raw) in pairs.items():
            calls = [("citerag", ours), ("raw", raw)]
            for side, call in calls if i % 2 == 0 else calls[::-1]:
                start = time.perf_counter()
                call(i)
                times[(mode, side)][i] = (time.perf_counter() - start) * 1000.0
    return times


def mode_label(mode: str, kind: str) -> str:
    """A table's mode cell: the dense index kind after the mode's first word when it runs the dense index."""
    head, comma, tail = mode.partition(",")
    return mode if head == "bm25" else f"{head} ({kind}){comma}{tail}"


def latency_rows(label: str, index: LoadedIndex, retriever: Retriever, raw: Raw, queries: list[str],
                 vectors: np.ndarray) -> tuple[list[list[str]], dict]:
    """Table rows (bm25, dense, hybrid) for one size, and the percentiles by ``(mode, side)``."""
    ids = [raw.token_ids(q) for q in queries]
    depth = retriever.candidates

    def raw_hybrid(i: int) -> object:
        return raw.bm25_top(ids[i], depth), raw.dense_top_one_thread(vectors[i : i + 1], depth)

    pairs = {
        "bm25": (lambda i: retriever.search(queries[i], K, "bm25"), lambda i: raw.bm25_top(ids[i], K)),
        "dense": (lambda i: retriever.search(queries[i], K, "dense"),
                  lambda i: raw.dense_top_one_thread(vectors[i : i + 1], K)),
        "hybrid": (lambda i: retriever.search(queries[i], K, "hybrid"), raw_hybrid),
        # results are read on access (SearchResult): what GET /search then reads, and what /ask reads besides
        "hybrid, passages + labels read": (
            lambda i: [(r.passage, r.label) for r in retriever.search(queries[i], K, "hybrid")], raw_hybrid,
        ),
        "hybrid, passages + documents read": (
            lambda i: [(r.passage, r.document) for r in retriever.search(queries[i], K, "hybrid")], raw_hybrid,
        ),
    }
    times = interleaved(pairs, len(queries))
    stats = {key: percentiles(value) for key, value in times.items()}
    own_topk = percentiles(time_each(lambda i: raw.bm25_top_bm25s(ids[i], K), list(range(len(queries)))))
    all_threads = percentiles(time_each(lambda i: raw.dense_top(vectors[i : i + 1], K), list(range(len(queries)))))
    rows = []
    for mode in pairs:
        ours, theirs = stats[(mode, "citerag")], stats[(mode, "raw")]
        rows.append([
            label, f"{len(index.passages):,}", mode_label(mode, index.dense.kind),
            fmt(ours["p50"]), fmt(ours["p95"]), fmt(ours["p99"]),
            fmt(theirs["p50"]), fmt(theirs["p95"]), fmt(theirs["p99"]),
            fmt(ours["p50"] / theirs["p50"]), fmt(ours["p95"] / theirs["p95"]),
        ])
    rows.append([label, f"{len(index.passages):,}", "bm25, raw with bm25s.selection.topk", "", "", "",
                 fmt(own_topk["p50"]), fmt(own_topk["p95"]), fmt(own_topk["p99"]), "", ""])
    rows.append([label, f"{len(index.passages):,}", f"dense ({index.dense.kind}), raw with FAISS's default threads",
                 "", "", "", fmt(all_threads["p50"]), fmt(all_threads["p95"]), fmt(all_threads["p99"]), "", ""])
    return rows, stats


def profiled_load(path: Path) -> tuple[LoadedIndex, dict[str, float]]:
    """:func:`citerag.index.store.load_version` under cProfile: the index and seconds per step (file checks: sizes and
    mtimes, hashing only a changed file; mapping the Arrow tables; bm25s load, FAISS load; the rest)."""
    profile = cProfile.Profile()
    started = time.perf_counter()
    index = profile.runcall(load_version, path)
    total = time.perf_counter() - started
    steps = {"total (under cProfile)": total}
    wanted = {"verify_files": "file checks (size + mtime; sha256 of changed files)", "_tables": "Arrow tables (mapped)",
              "load": None}
    for (filename, _, name), row in pstats.Stats(profile).stats.items():  # type: ignore[attr-defined]
        if name not in wanted:
            continue
        label = wanted[name]
        if name == "load":
            label = "bm25s load" if filename.endswith("bm25.py") and "index" in filename else None
            label = label or ("FAISS load" if filename.endswith("dense.py") else None)
        if label:
            steps[label] = steps.get(label, 0.0) + row[3]  # cumulative time
    steps["other"] = total - sum(v for k, v in steps.items() if k != "total (under cProfile)")
    return index, steps


def recall_sweep(raw: Raw, flat: faiss.Index, vectors: np.ndarray, queries: np.ndarray,
                 ef_values: list[int]) -> tuple[list[list[str]], dict[int, float]]:
    """Recall@10 of the HNSW index against exact flat search, and raw HNSW latency, for each efSearch.

    Replicated passages have identical vectors, so recall is counted by score, as ann-benchmarks does: a returned
    row counts when its exact inner product is at least the 10th exact one minus ``RECALL_EPS``. Searches use one
    OpenMP thread, as citerag's.
    """
    flat_ms = np.empty(len(queries))
    exact = np.empty((len(queries), K), dtype=np.float32)
    for i in range(len(queries)):
        start = time.perf_counter()
        with omp_threads(1):  # as citerag searches (index.dense.SEARCH_THREADS)
            scores, _ = flat.search(queries[i : i + 1], K)
        flat_ms[i] = (time.perf_counter() - start) * 1000.0
        exact[i] = scores[0]
    flat_p = percentiles(flat_ms)
    rows = [["flat (exact)", "-", "1.000", fmt(flat_p["p50"]), fmt(flat_p["p95"]), fmt(flat_p["p99"])]]
    recalls = {}
    for ef in ef_values:
        raw.faiss.hnsw.efSearch = ef
        found = []
        ms = time_each(lambda i: found.append(raw.dense_top_one_thread(queries[i : i + 1], K)[1][0]),
                       list(range(len(queries))), 0)
        hits = []
        for i, rows_found in enumerate(found):
            rows_found = rows_found[rows_found >= 0]
            true_scores = vectors[rows_found] @ queries[i]
            hits.append(np.sum(true_scores >= exact[i, K - 1] - RECALL_EPS) / K)
        recalls[ef] = float(np.mean(hits))
        p = percentiles(ms)
        rows.append([f"HNSW32", str(ef), f"{recalls[ef]:.3f}", fmt(p["p50"]), fmt(p["p95"]), fmt(p["p99"])])
    raw.faiss.hnsw.efSearch = HNSW_EF_SEARCH
    return rows, recalls


def raw_build_seconds(texts: list[str], copies: int, vectors: np.ndarray, config: IndexConfig,
                      kind: str = "ivf-sq8") -> dict[str, float]:
    """Seconds the raw libraries take to index the replicated set: bm25s ``index`` over citerag's tokens (the
    distinct texts tokenised once, the lists repeated ``copies`` times), FAISS ``add`` into an empty flat index, and
    the replicated index's own ``kind``: an HNSW32 (citerag's M and efConstruction), or a raw ``IVF<nlist>,SQ8``
    (``faiss.index_factory``, the same nlist and training sample size as citerag's ivf-sq8): ``train`` + ``add``."""
    started = time.perf_counter()
    tokens = tokenize_many(texts) * copies
    out = {f"citerag tokenize of the {len(texts):,} distinct texts": time.perf_counter() - started}
    started = time.perf_counter()
    model = bm25s.BM25(k1=config.bm25_k1, b=config.bm25_b, method=config.bm25_method)
    model.index(tokens, show_progress=False)
    out["raw bm25s index"] = time.perf_counter() - started
    saved = CACHE_DIR / "raw-build-save"  # same disk as the index citerag writes
    shutil.rmtree(saved, ignore_errors=True)
    started = time.perf_counter()
    model.save(str(saved / "bm25"), show_progress=False)
    save_s = time.perf_counter() - started
    del model, tokens
    gc.collect()
    for raw_kind in ("hnsw", "flat") if kind == "hnsw" else ("flat",):
        dense = DenseIndex(vectors.shape[1], raw_kind)
        started = time.perf_counter()
        dense.add(vectors)
        out[f"raw FAISS {raw_kind} add"] = time.perf_counter() - started
        del dense
    if kind != "ivf-sq8":
        return out
    from citerag.index.dense import IVF_TRAIN_PER_LIST, ivf_lists

    nlist = ivf_lists(len(vectors))
    started = time.perf_counter()
    ivf = faiss.index_factory(vectors.shape[1], f"IVF{nlist},SQ8", faiss.METRIC_INNER_PRODUCT)
    ivf.cp.max_points_per_centroid = IVF_TRAIN_PER_LIST
    ivf.train(vectors)
    ivf.add(vectors)
    out[f"raw FAISS IVF{nlist},SQ8 train + add"] = time.perf_counter() - started
    started = time.perf_counter()
    faiss.write_index(ivf, str(saved / "dense.faiss"))
    out["raw save (bm25s save + faiss.write_index)"] = save_s + time.perf_counter() - started
    shutil.rmtree(saved, ignore_errors=True)
    return out


def build_ratio(citerag_s: float, raw: dict[str, float]) -> str:
    """citerag's ``write_version`` seconds against the raw libraries' build of the same kind (tokenise + bm25s index
    + FAISS train/add), without and with the raw libraries saving what they built (citerag's time includes writing
    the tables, checksums and fsync)."""
    build = sum(v for k, v in raw.items() if "tokenize" in k or "bm25s index" in k or "IVF" in k or "hnsw" in k)
    saved = build + sum(v for k, v in raw.items() if k.startswith("raw save"))
    return (f"citerag {citerag_s:.1f} s / raw build {build:.1f} s = {citerag_s / build:.2f}x; "
            f"/ raw build + save {saved:.1f} s = {citerag_s / saved:.2f}x")


def startup(directory: Path, query: str, cold: bool = False) -> tuple[list[list[str]], list[str]]:
    """``citerag serve`` on ``directory`` in a subprocess: seconds from process start to its log lines, to the
    first ``/health`` 200, to the first ``/search`` answered, to the generator loaded and to the background full
    check of the index files done; and its RSS then (the generator loaded). ``cold``: the page cache is dropped
    first (``/proc/sys/vm/drop_caches``, needs root; skipped with a note otherwise)."""
    notes = []
    if cold:
        try:
            os.sync()
            Path("/proc/sys/vm/drop_caches").write_text("3\n")
        except OSError as exc:
            notes.append(f"page cache not dropped ({exc}): this is a warm start")
    with serve(directory) as served:
        health_s = time.perf_counter() - served.started
        response = httpx.post(served.url + "/search", json={"query": query, "k": K}, timeout=120)
        search_s = time.perf_counter() - served.started
        status = response.status_code
        ready = {}
        while len(ready) < 2 and time.perf_counter() - served.started < 600:
            health = httpx.get(served.url + "/health", timeout=10).json()
            if health["generator"] != "loading" and "generator" not in ready:
                ready["generator"] = (time.perf_counter() - served.started, health["generator"])
            if health.get("index_check") in ("verified", "failed", "not-applicable") and "check" not in ready:
                ready["check"] = (time.perf_counter() - served.started, health.get("index_check"))
            time.sleep(0.1)
        rss = next(
            (int(line.split()[1]) / 1024 for line in Path(f"/proc/{served.process.pid}/status").read_text().splitlines()
             if line.startswith("VmRSS:")), float("nan"),
        )
        lines = list(served.lines)
    marks = []
    for at, line in lines:
        if line.startswith("index:"):
            marks.append(["`index: ...` printed (ensure_index done: index opened, files checked)", fmt(at, 1)])
        elif "serving" in line and "passages" in line:
            marks.append(["lifespan: backend + embedder open (the generator loads in the background)", fmt(at, 1)])
    rows = [*marks, ["first /health 200", fmt(health_s, 1)], [f"first /search answered (status {status})", fmt(search_s, 1)]]
    if "generator" in ready:
        rows.append([f"generator {ready['generator'][1]} (/health)", fmt(ready["generator"][0], 1)])
    if "check" in ready:
        rows.append([f"background full check of the index files: {ready['check'][1]}", fmt(ready["check"][0], 1)])
    return rows, [*notes, f"service RSS with the generator loaded and the files checked: {rss:,.0f} MiB"]


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated subset of {', '.join(SIZES)}")
    p.add_argument("--limit", type=int, help="use only the first N abstracts (a quick slice) instead of 22,981")
    p.add_argument("--replicate-to", type=int, default=1_000_000, help="passages of the replicated set")
    p.add_argument("--queries", type=int, default=200, help="title queries (seed 0)")
    p.add_argument("--ef-search", default="32,64,128,256,512", help="efSearch values for the HNSW recall sweep")
    p.add_argument("--replicated-kind", choices=("auto", "flat", "hnsw", "ivf-sq8"), default="auto",
                   help="FAISS index kind of the replicated set (auto: HNSW from 50,000 passages, as the service)")
    p.add_argument("--embed-only", action="store_true", help="only chunk and embed the abstracts into the cache")
    p.add_argument("--no-startup", action="store_true", help="skip the service start-up measurement")
    p.add_argument("--no-raw-build", action="store_true", help="skip timing the raw libraries' build at ~1M")
    args = p.parse_args()
    shared = require_shared(args.shared)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if unknown := [s for s in sizes if s not in SIZES]:
        p.error(f"unknown size {unknown[0]!r}; choose from {', '.join(SIZES)}")

    indexes = BenchIndexes()
    settings, embedder = indexes.settings, indexes.embedder
    if args.embed_only:
        passages, _, _ = indexes.embedded(load_abstracts(shared, args.limit))
        print(f"{len(passages)} passages embedded; cache {indexes.cache.directory}")
        return
    abstracts = load_abstracts(shared, args.limit)
    tag = f"{len(abstracts)}" if args.limit else "all"

    queries = sample_titles(abstracts, args.queries)
    folded = [fold(q) for q in queries]
    loads = [load_average()]
    embed_ms = percentiles(time_each(lambda text: embedder.encode([text]), folded))
    query_vectors = embedder.encode(folded)
    retriever_of = lambda index: Retriever(  # noqa: E731 - the service's settings, the precomputed query vectors
        index, PrecomputedEmbedder(embedder.name, embedder.dim, dict(zip(folded, query_vectors))),
        candidates=settings.candidates, rrf_k=settings.rrf_k, fusion=settings.fusion,
        weights=(settings.weight_bm25, settings.weight_dense),
    )
    rows = [["query embedding (1 query, real model)", "-", "-", fmt(embed_ms["p50"]), fmt(embed_ms["p95"]),
             fmt(embed_ms["p99"]), "", "", "", "", ""]]
    notes = [
        f"{len(queries)} title queries of the {len(abstracts):,}-abstract corpus (seed 0), k = {K}, one at a time; "
        "citerag times exclude the query embedding (first row); raw bm25 = bm25s get_scores on the same index files "
        "and query tokens + a plain numpy top-k (argpartition of -scores, argsort of the k); raw dense = FAISS "
        "citerag.index.search on the same dense.faiss with one OpenMP thread, as citerag searches (index.dense."
        "SEARCH_THREADS), HNSW at citerag's efSearch; raw hybrid = raw bm25 top-100 + raw dense top-100 (citerag's "
        "candidate depth) without fusion; ratio = citerag / raw. Timed apart: 'bm25s.selection.topk' = bm25s's own "
        "top-k (numpy backend; bm25s uses JAX when installed, not here) after the same get_scores; 'FAISS's default "
        "threads' = raw dense with every core (OpenMP), the library's default.",
    ]
    build_rows: list[list[str]] = []
    extra_tables: list[tuple[str, str]] = []

    if "abstracts" in sizes or "replicated" in sizes:
        _, abstracts_index = indexes.abstracts(shared, args.limit)
        abstracts_dir = abstracts_index.directory
        build_rows.append([f"{len(abstracts):,} abstracts",
                           *(f"{k} {v:.1f}" for k, v in abstracts_index.timings_s.items())])

    for size in sizes:
        if size == "seed":
            documents, seed_index = indexes.seed()
            directory, label = seed_index.directory, f"{len(documents)} abstracts"
        elif size == "abstracts":
            directory, label = abstracts_dir, f"{len(abstracts):,} abstracts"
        elif size == "abstracts-flat":  # the same passages and vectors, exact search forced (auto: HNSW from 50k)
            _, forced = indexes.abstracts(shared, args.limit, dense_kind="flat")
            directory, label = forced.directory, f"{len(abstracts):,} abstracts, flat forced"
            build_rows.append([label, *(f"{k} {v:.1f}" for k, v in forced.timings_s.items())])
        else:
            directory, label = replicated_index(args, abstracts_dir, indexes.config, build_rows, tag)
        print(f"timing {label} ...", flush=True)
        path = (directory / "versions" / (directory / "CURRENT").read_text().strip())
        index, load_steps = profiled_load(path)
        loads.append(load_average())
        size_rows, _ = latency_rows(label, index, retriever_of(index), raw := Raw(path), queries, query_vectors)
        rows += size_rows
        if index.dense.kind == "hnsw":
            extra_tables += hnsw_extras(args, index, raw, query_vectors, path)
        if size == "replicated":
            del index, raw
            gc.collect()
            if not args.no_startup:
                start_rows, start_notes = startup(directory, queries[0])
                start_notes.append(f"in the bench process, load_embedder() (imports + encoder) took "
                                   f"{indexes.embedder_load_s:.1f} s and load_version() of this index "
                                   f"{load_steps['total (under cProfile)']:.1f} s under cProfile (next table)")
                extra_tables.append((
                    f"Start-up, warm page cache: `citerag serve --index-dir` on the {label} index (seconds from "
                    "process start)",
                    markdown_table(["event", "s"], start_rows) + "\n\n" + "\n".join(f"- {n}" for n in start_notes),
                ))
                cold_rows, cold_notes = startup(directory, queries[0], cold=True)
                extra_tables.append((
                    f"Start-up, cold page cache (dropped first): the same (seconds from process start)",
                    markdown_table(["event", "s"], cold_rows) + "\n\n" + "\n".join(f"- {n}" for n in cold_notes),
                ))
                extra_tables.append((
                    f"Where loading the {label} index goes (`load_version` under cProfile, in the bench process)",
                    markdown_table(["step", "s"], [[k, fmt(v, 1)] for k, v in load_steps.items()]),
                ))

    header = ["corpus", "passages", "mode", "citerag p50 ms", "p95", "p99", "raw p50 ms", "p95", "p99",
              "ratio p50", "ratio p95"]
    table = markdown_table(header, rows)
    for title, extra in extra_tables:
        table += f"\n\n### {title}\n\n{extra}"
    if build_rows:
        table += "\n\n### Build times (s; embedding excluded: vectors come from the cache)\n\n" + "\n".join(
            f"- {row[0]}: {', '.join(row[1:])}" for row in build_rows
        )
    record(f"Search latency: citerag vs raw bm25s / FAISS ({', '.join(sizes)})", table, notes, loads,
           write=not args.no_record)


def replicated_index(args, abstracts_dir: Path, config: IndexConfig, build_rows: list, tag: str) -> tuple[Path, str]:
    """The ~1M-passage index (built from the abstracts index when missing): its directory and table label."""
    base = load_version(abstracts_dir / "versions" / (abstracts_dir / "CURRENT").read_text().strip())
    copies = -(-args.replicate_to // len(base.passages))
    documents, passages = replicate(list(base.documents.values()), base.passages, copies)
    directory = CACHE_DIR / f"index-replicated-{tag}-{args.replicate_to}-{args.replicated_kind}"
    source = CACHE_DIR / f"replicated-{tag}-{args.replicate_to}.jsonl"

    def make() -> tuple[list, np.ndarray, dict[str, float]]:
        started = time.perf_counter()
        write_jsonl(source, documents)
        return passages, np.tile(base.dense.vectors(), (copies, 1)), {"write source JSONL": time.perf_counter() - started}

    CACHE_DIR.mkdir(exist_ok=True)
    built = bench_index(directory, documents, [source], make, config, dense_kind=args.replicated_kind)
    n_passages = len(passages)
    del documents, passages
    build_rows.append([f"{n_passages:,} passages (citerag write_version{'' if built.built_now else ', recorded at build'})",
                       *(f"{k} {v:.1f}" for k, v in built.timings_s.items())])
    sidecar = directory / "bench.json"
    recorded = json.loads(sidecar.read_text())
    if "raw_timings_s" not in recorded and not args.no_raw_build:
        texts = passage_texts(base.passages, base.documents)
        raw = raw_build_seconds(texts, copies, np.tile(base.dense.vectors(), (copies, 1)), config,
                                kind=recorded.get("kind", "ivf-sq8"))
        sidecar.write_text(json.dumps({**recorded, "raw_timings_s": raw}, indent=2))
        recorded["raw_timings_s"] = raw
    if "raw_timings_s" in recorded:
        build_rows.append([f"{n_passages:,} passages (raw libraries)",
                           *(f"{k} {v:.1f}" for k, v in recorded["raw_timings_s"].items())])
        build_rows.append([f"{n_passages:,} passages, full build ratio",
                           build_ratio(built.timings_s["write_version"], recorded["raw_timings_s"])])
    return directory, f"{n_passages:,} passages ({copies} copies)"


def hnsw_extras(args, index: LoadedIndex, raw: Raw, query_vectors: np.ndarray, path: Path) -> list[tuple[str, str]]:
    """HNSW recall/latency by efSearch against exact search, and memory per passage, for an HNSW index."""
    storage = faiss.downcast_index(raw.faiss.storage)  # the HNSW index's own float32 vectors (row order kept)
    vectors = faiss.rev_swig_ptr(storage.get_xb(), storage.ntotal * storage.d).reshape(storage.ntotal, storage.d)
    flat = faiss.IndexFlatIP(storage.d)
    rss_before = rss_mb()
    flat.add(vectors)
    flat_mb = rss_mb() - rss_before
    ef_values = [int(v) for v in args.ef_search.split(",")]
    sweep_rows, recalls = recall_sweep(raw, flat, vectors, query_vectors, ef_values)
    n = index.dense.size
    hnsw_bytes = (path / DenseIndex.FILENAME).stat().st_size
    bm25_bytes = sum(f.stat().st_size for f in (path / "bm25").iterdir())
    jsonl_bytes = sum((path / f).stat().st_size for f in ("passages.arrow", "documents.arrow"))
    memory = markdown_table(["structure", "bytes per passage", "total MiB"], [
        ["FAISS flat (IndexFlatIP, 384-d float32)", f"{4 * storage.d}", f"{4 * storage.d * n / 2**20:,.0f} "
         f"(RSS grew {flat_mb:,.0f} MiB on add)"],
        ["FAISS HNSW32 (dense.faiss file: vectors + graph)", f"{hnsw_bytes / n:,.0f}", f"{hnsw_bytes / 2**20:,.0f}"],
        ["bm25s arrays (bm25/ files)", f"{bm25_bytes / n:,.0f}", f"{bm25_bytes / 2**20:,.0f}"],
        ["passages.arrow + documents.arrow", f"{jsonl_bytes / n:,.0f}", f"{jsonl_bytes / 2**20:,.0f}"],
    ])
    chosen = next((ef for ef in ef_values if recalls[ef] >= 0.95), None)
    sweep_note = (
        f"\n\n- Recall@10 by score (a hit counts when its exact inner product >= the exact 10th - {RECALL_EPS}, as "
        "ann-benchmarks counts it: in the replicated set a passage's copies tie). citerag's default efSearch is "
        f"{HNSW_EF_SEARCH} (recall {recalls.get(HNSW_EF_SEARCH, float('nan')):.3f}); the smallest measured efSearch "
        f"with recall >= 0.95 is {chosen}."
    )
    del flat
    return [
        (f"HNSW Recall@10 vs exact search at {n:,} passages (raw FAISS, one query at a time, ms)",
         markdown_table(["index", "efSearch", "Recall@10", "p50 ms", "p95", "p99"], sweep_rows) + sweep_note),
        (f"Memory per passage at {n:,} passages", memory),
    ]


if __name__ == "__main__":
    main()
