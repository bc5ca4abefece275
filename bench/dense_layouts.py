"""FAISS layouts for ~1M passages compared: build time, bytes per passage, open time, Recall@10/@100 against exact
search and one-thread search latency, on the real MiniLM vectors of the 22,981 abstracts replicated to ~1M.

    python -m bench.dense_layouts                                   # 1,031,577 passages (17 copies), both variants
    python -m bench.dense_layouts --n 100000 --layouts ivf256-sq8 --no-record   # a quick check
    python -m bench.dense_layouts --layouts citerag --build-rounds 2  # + citerag's build vs the raw FAISS calls

First run at 1M: ~1 h on 2 shared cores (the HNSW builds take 10 min each); later runs reuse the built files and take
a few minutes. ``--filters`` (default 0.5, 0.1, 0.01) adds filtered searches on citerag's ivf-sq8 index.

Data. The 60,681 passage vectors of the 22,981 abstracts (``citerag`` chunking, read from the service's embedding cache,
``settings.cache_dir / "embeddings"``; a miss is embedded with the real model) are repeated ``ceil(n / 60,681)`` times,
as :mod:`bench.search_latency` builds its ~1M set. Two variants:

- ``copies``: the vectors exactly repeated (what the ~1M bench index holds); a passage's copies tie, so recall is
  counted by score, as ann-benchmarks does: a returned row counts when its exact inner product is at least the
  exact k-th minus ``RECALL_EPS``.
- ``noisy``: every row plus seeded Gaussian noise of expected norm ``--noise`` (per dimension ``noise / sqrt(dim)``),
  re-normalised, so copies no longer tie. At the default 0.25 a copy keeps cosine ~0.97 with its original and two
  copies lie ~0.35 apart (L2), nearer than a passage's median nearest other passage in the 60,681 (0.47): a denser
  corpus of near-duplicates, which is what a real million passages would add.

Queries: the 200 title queries of :mod:`bench.search_latency` (seed 0), embedded with the real model. Exact top-100
by ``faiss.knn`` (brute force, float32). Each layout is built with FAISS's default threads (every core), written to
``--work``, opened twice (plain read; memory-mapped) and searched from the memory-mapped copy, one query at a time with
one OpenMP thread (as citerag searches), after 5 untimed queries. Built files and their build seconds are kept in
``--work`` and reused by later runs unless ``--rebuild``.

Layouts (``--layouts``): ``hnsw32`` (today's ``IndexHNSWFlat``, M 32, efConstruction 80), ``hnsw32-sq8``
(``IndexHNSWSQ``, QT_8bit), ``ivf<K>-sq8`` (``IVF<K>,SQ8`` = ``IndexIVFScalarQuantizer``, QT_8bit, by residual, flat
coarse quantizer, k-means on ``TRAIN_PER_LIST * K`` sampled vectors, FAISS's 10 iterations for IVF; ``-i<N>``: N
iterations, ``-t<N>``: N sampled vectors a list, e.g. ``ivf4096-sq8-i5-t39``), ``ivf<K>-pq<M>`` (``IVF<K>,PQ<M>``) and
``citerag`` (``citerag.index.dense.DenseIndex`` with the kind ``choose_kind`` gives at this size, built and searched
through citerag's own calls, to compare with the raw FAISS layout of the same parameters).
"""

from __future__ import annotations

import gc
import json
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from bench.common import (
    CACHE_DIR,
    fmt,
    load_abstracts,
    load_average,
    markdown_table,
    parser,
    percentiles,
    record,
    require_shared,
    rss_mb,
    sample_titles,
)
from citerag.index.dense import IVF_NPROBE, IVF_TRAIN_PER_LIST, DenseIndex, choose_kind, ivf_lists, omp_threads

K_VALUES = (10, 100)  # Recall@10 (the target) and @100 (citerag's candidate depth, settings.candidates)
RECALL_EPS = 1e-5  # as bench/search_latency.py: ties (copies) count
TRAIN_PER_LIST = 64  # k-means sample per IVF list (FAISS warns under 39; its default cap is 256)
HNSW_EF_CONSTRUCTION = 80  # citerag's (index.dense.HNSW_EF_CONSTRUCTION)
DEFAULT_LAYOUTS = "hnsw32,hnsw32-sq8,ivf1024-sq8,ivf2048-sq8,ivf4096-sq8,citerag"


@dataclass(slots=True)
class Built:
    """A layout's file and how it was built (seconds with every core; the load average when it was built)."""

    path: Path
    train_s: float
    add_s: float
    built: str  # "now" or the date it was recorded
    load: str


def base_vectors(shared: Path, work: Path, n_queries: int) -> tuple[np.ndarray, np.ndarray]:
    """The abstracts' passage vectors (float32 ``(60681, 384)``) and the title query vectors (float32
    ``(n_queries, 384)``), cached as ``.npy`` under ``work`` after the first run."""
    from citerag.index.build import chunk_documents, passage_texts
    from citerag.index.embed_cache import CachedEmbedder
    from citerag.index.text import fold
    from citerag.service.pipeline import index_setup, load_embedder
    from citerag.service.settings import Settings

    settings = Settings()
    base_file, query_file = work / "abstract-passages.npy", work / f"title-queries-{n_queries}.npy"
    if base_file.exists() and query_file.exists():
        return np.load(base_file), np.load(query_file)
    embedder = load_embedder(settings)
    documents = load_abstracts(shared)
    if not base_file.exists():
        passages = chunk_documents(documents, index_setup(settings).chunker(embedder))
        texts = passage_texts(passages, {d.doc_id: d for d in documents})
        with CachedEmbedder(embedder, settings.cache_dir / "embeddings") as cached:
            vectors = cached.encode(texts)
            print(f"{len(texts):,} passage vectors: {cached.hits:,} from the cache, {cached.misses:,} embedded")
        np.save(base_file, vectors.astype(np.float32))
    if not query_file.exists():
        np.save(query_file, embedder.encode([fold(q) for q in sample_titles(documents, n_queries)]))
    return np.load(base_file), np.load(query_file)


def corpus(base: np.ndarray, n: int, variant: str, noise: float, seed: int = 0) -> np.ndarray:
    """``ceil(n / len(base))`` copies of ``base`` (float32, C-contiguous); ``noisy`` adds Gaussian noise of expected
    norm ``noise`` to every row (seeded, in blocks) and re-normalises."""
    copies = -(-n // len(base))
    x = np.tile(base, (copies, 1))
    if variant == "noisy":
        rng = np.random.default_rng(seed)
        sigma = np.float32(noise / math.sqrt(x.shape[1]))
        for at in range(0, len(x), 100_000):
            block = x[at : at + 100_000]
            block += sigma * rng.standard_normal(block.shape, dtype=np.float32)
            block /= np.linalg.norm(block, axis=1, keepdims=True)
    return x


def exact_thresholds(queries: np.ndarray, x: np.ndarray) -> dict[int, np.ndarray]:
    """``{k: float32 (n_queries,)}``: the exact k-th best inner product of each query (brute force)."""
    scores, _ = faiss.knn(queries, x, max(K_VALUES), metric=faiss.METRIC_INNER_PRODUCT)
    return {k: scores[:, k - 1] for k in K_VALUES}


def recall(rows: np.ndarray, query: np.ndarray, x: np.ndarray, threshold: float, k: int) -> float:
    """Recall@k by score: returned rows (``-1`` padding dropped) whose exact score is >= the exact k-th - eps."""
    rows = rows[rows >= 0]
    return float(np.sum(x[rows] @ query >= threshold - RECALL_EPS)) / k


def make_index(layout: str, dim: int) -> faiss.Index:
    """The empty raw FAISS index for a layout name (see the module docstring)."""
    ip = faiss.METRIC_INNER_PRODUCT
    if layout == "hnsw32":
        index = faiss.IndexHNSWFlat(dim, 32, ip)
    elif layout == "hnsw32-sq8":
        index = faiss.IndexHNSWSQ(dim, faiss.ScalarQuantizer.QT_8bit, 32, ip)
    elif m := re.fullmatch(r"ivf(\d+)-(sq8|pq\d+)(?:-i(\d+))?(?:-t(\d+))?", layout):
        index = faiss.index_factory(dim, f"IVF{m[1]},{m[2].upper()}", ip)
        ivf = faiss.extract_index_ivf(index)
        ivf.cp.max_points_per_centroid = int(m[4] or TRAIN_PER_LIST)
        ivf.cp.niter = int(m[3] or ivf.cp.niter)
        return index
    else:
        raise ValueError(f"unknown layout {layout!r}")
    index.hnsw.efConstruction = HNSW_EF_CONSTRUCTION
    return index


def build(layout: str, x: np.ndarray, path: Path, rebuild: bool) -> Built:
    """Build (or reuse) ``layout`` over ``x`` into ``path``; the sidecar ``path.json`` keeps its build seconds."""
    sidecar = path.with_suffix(".json")
    if path.exists() and sidecar.exists() and not rebuild:
        meta = json.loads(sidecar.read_text())
        return Built(path, meta["train_s"], meta["add_s"], f"recorded {meta['date']}", meta["load"])
    print(f"building {layout} over {len(x):,} vectors ...", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    if layout == "citerag":
        dense = DenseIndex(x.shape[1], choose_kind(len(x)))
        started = time.perf_counter()
        dense.add(x)  # citerag trains inside add when its kind needs training
        train_s, add_s = 0.0, time.perf_counter() - started
        dense.save(path.parent)  # path is <dir>/dense.faiss for this layout (see main)
        del dense
    else:
        index = make_index(layout, x.shape[1])
        started = time.perf_counter()
        if not index.is_trained:
            index.train(x)
        train_s = time.perf_counter() - started
        started = time.perf_counter()
        index.add(x)
        add_s = time.perf_counter() - started
        faiss.write_index(index, str(path))
        del index
    gc.collect()
    meta = {"train_s": train_s, "add_s": add_s, "date": time.strftime("%Y-%m-%d %H:%M"), "load": load_average()}
    sidecar.write_text(json.dumps(meta))
    return Built(path, train_s, add_s, "now", meta["load"])


MMAP_FLAG = faiss.IO_FLAG_MMAP_IFC  # zero-copy mmap of flat codes, HNSW storage and IVF ArrayInvertedLists


def open_timed(path: Path, flags: int) -> tuple[faiss.Index, float, float]:
    """``faiss.read_index(path, flags)``: the index, seconds, and the RSS growth in MiB (page cache warm: the
    file was just written or read)."""
    gc.collect()
    before = rss_mb()
    started = time.perf_counter()
    index = faiss.read_index(str(path), flags)
    return index, time.perf_counter() - started, rss_mb() - before


def search_params(layout_index: faiss.Index, param: int, k: int) -> faiss.SearchParameters:
    """efSearch (HNSW, at least k as citerag sets it) or nprobe (IVF)."""
    if isinstance(layout_index, faiss.IndexHNSW):
        return faiss.SearchParametersHNSW(efSearch=max(param, k))
    return faiss.SearchParametersIVF(nprobe=param)


def sweep(index: faiss.Index | DenseIndex, params: list[int], queries: np.ndarray, x: np.ndarray,
          thresholds: dict[int, np.ndarray]) -> list[list[str]]:
    """Per search parameter: Recall@10, Recall@100 and p50/p99 ms at k = 10 and k = 100, one query at a time
    with one OpenMP thread (a :class:`DenseIndex` is searched through its own ``search``)."""
    rows = []
    for param in params:
        cells = {}
        for k in K_VALUES:
            if isinstance(index, DenseIndex):
                index.nprobe = param if index.kind == "ivf-sq8" else index.nprobe
                index.ef_search = param if index.kind == "hnsw" else index.ef_search
                call = lambda i: np.array([h.row for h in index.search(queries[i], k)], dtype=np.int64)  # noqa: E731
            else:
                p = search_params(index, param, k)
                call = lambda i: index.search(queries[i : i + 1], k, params=p)[1][0]  # noqa: E731
            with omp_threads(1):
                for i in range(5):
                    call(i)
                ms, found = np.empty(len(queries)), []
                for i in range(len(queries)):
                    started = time.perf_counter()
                    found.append(call(i))
                    ms[i] = (time.perf_counter() - started) * 1000.0
            cells[k] = (np.mean([recall(found[i], queries[i], x, thresholds[k][i], k) for i in range(len(queries))]),
                        percentiles(ms))
        rows.append([str(param), f"{cells[10][0]:.3f}", f"{cells[100][0]:.3f}",
                     fmt(cells[10][1]["p50"]), fmt(cells[10][1]["p99"]),
                     fmt(cells[100][1]["p50"]), fmt(cells[100][1]["p99"])])
    return rows


def flat_row(queries: np.ndarray, x: np.ndarray) -> list[str]:
    """Exact search (``faiss.knn``, brute force over the float32 matrix, one thread), k = 10 and 100."""
    out = []
    for k in K_VALUES:
        with omp_threads(1):
            ms = []
            for i in range(len(queries)):
                started = time.perf_counter()
                faiss.knn(queries[i : i + 1], x, k, metric=faiss.METRIC_INNER_PRODUCT)
                ms.append((time.perf_counter() - started) * 1000.0)
        p = percentiles(ms)
        out += [fmt(p["p50"]), fmt(p["p99"])]
    return ["-", "1.000", "1.000", *out]


def filter_rows(index: DenseIndex, queries: np.ndarray, x: np.ndarray, fractions: list[float]) -> list[list[str]]:
    """Filtered search on citerag's ivf-sq8 index: for each allowed fraction f (a seeded random mask), Recall@10
    against exact search over the allowed rows and one-thread p50/p99 ms, scanning nprobe / f ** e lists for
    e = 0 (no widening), 0.5 (citerag's ``IVF_FILTER_EXPONENT``, through ``DenseIndex.search``) and 1."""
    raw, nlist = index._index, index.nlist
    index.nprobe = IVF_NPROBE  # citerag's default (the sweep before may have left another value)
    rng = np.random.default_rng(5)
    rows = []
    for fraction in fractions:
        allowed = rng.random(len(x)) < fraction
        kept = np.flatnonzero(allowed)
        scores, _ = faiss.knn(queries, x[kept], 10, metric=faiss.METRIC_INNER_PRODUCT)
        threshold = scores[:, 9]
        bits = np.packbits(allowed, bitorder="little")
        selector = faiss.IDSelectorBitmap(len(allowed), faiss.swig_ptr(bits))
        for exponent in (0.0, 0.5, 1.0):
            nprobe = min(nlist, math.ceil(index.nprobe / fraction**exponent))
            if exponent == 0.5:
                call = lambda i: np.array([h.row for h in index.search(queries[i], 10, allowed)])  # noqa: E731
            else:
                params = faiss.SearchParametersIVF(nprobe=nprobe, sel=selector)
                call = lambda i: raw.search(queries[i : i + 1], 10, params=params)[1][0]  # noqa: E731
            with omp_threads(1):
                found, ms = [], []
                for i in range(len(queries)):
                    started = time.perf_counter()
                    found.append(call(i))
                    ms.append((time.perf_counter() - started) * 1000.0)
            assert all(allowed[r[r >= 0]].all() for r in found)
            value = np.mean([recall(found[i], queries[i], x, threshold[i], 10) for i in range(len(queries))])
            p = percentiles(ms)
            how = {0.0: "none (raw FAISS)", 0.5: "1 / sqrt(f) (citerag DenseIndex.search)", 1.0: "1 / f (raw FAISS)"}
            rows.append([f"{fraction:g}", how[exponent], str(nprobe), f"{value:.3f}", fmt(p["p50"]), fmt(p["p99"])])
        del selector, bits
    return rows


def build_rounds(x: np.ndarray, rounds: int) -> list[list[str]]:
    """citerag's build (``DenseIndex(dim, choose_kind(n)).add(x)``) against the raw FAISS calls with the same
    parameters (index_factory, train, add), alternating which goes first, ``rounds`` times each; nothing is saved.

    Returns:
        Table rows: round, raw s, citerag s, ratio, load average after the round.
    """
    kind = choose_kind(len(x))
    if kind != "ivf-sq8":
        return []
    raw_layout = f"ivf{ivf_lists(len(x))}-sq8-t{IVF_TRAIN_PER_LIST}"

    def raw() -> None:
        index = make_index(raw_layout, x.shape[1])
        index.train(x)
        index.add(x)

    def ours() -> None:
        DenseIndex(x.shape[1], kind).add(x)

    rows = []
    for round_number in range(rounds):
        seconds = {}
        for name, call in [("raw", raw), ("citerag", ours)][:: 1 if round_number % 2 == 0 else -1]:
            gc.collect()
            started = time.perf_counter()
            call()
            seconds[name] = time.perf_counter() - started
        rows.append([str(round_number + 1), raw_layout, fmt(seconds["raw"], 1), fmt(seconds["citerag"], 1),
                     fmt(seconds["citerag"] / seconds["raw"]), load_average()])
        print(rows[-1], flush=True)
    return rows


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=1_000_000, help="passages: ceil(n / 60,681) copies (default: 17 copies)")
    p.add_argument("--variants", default="copies,noisy", help="copies and/or noisy")
    p.add_argument("--noise", type=float, default=0.25, help="expected L2 norm of the noise of the noisy variant")
    p.add_argument("--layouts", default=DEFAULT_LAYOUTS, help=f"comma-separated (default {DEFAULT_LAYOUTS})")
    p.add_argument("--ef-search", default="64,128,256,512", help="HNSW efSearch values")
    p.add_argument("--nprobe", default="8,16,32,64,128", help="IVF nprobe values")
    p.add_argument("--queries", type=int, default=200, help="title queries (seed 0)")
    p.add_argument("--work", type=Path, default=CACHE_DIR / "dense-layouts", help="where built files are kept")
    p.add_argument("--rebuild", action="store_true", help="build every layout again (else reuse built files)")
    p.add_argument("--no-flat", action="store_true", help="skip timing exact search")
    p.add_argument("--filters", default="0.5,0.1,0.01",
                   help="allowed fractions for filtered searches on citerag's ivf-sq8 index ('' for none)")
    p.add_argument("--build-rounds", type=int, default=0,
                   help="also time citerag's build against the raw FAISS calls, alternating, this many rounds each")
    args = p.parse_args()
    shared = require_shared(args.shared)
    args.work.mkdir(parents=True, exist_ok=True)
    base, queries = base_vectors(shared, args.work, args.queries)
    layouts = [name.strip() for name in args.layouts.split(",") if name.strip()]
    for name in layouts:
        if name != "citerag":
            make_index(name, base.shape[1])  # fail early on a bad name
    ef_values = [int(v) for v in args.ef_search.split(",")]
    nprobes = [int(v) for v in args.nprobe.split(",")]
    loads = [load_average()]
    search_rows: list[list[str]] = []
    build_rows: list[list[str]] = []
    ratio_rows: list[list[str]] = []
    filtered_rows: list[list[str]] = []
    n = 0
    for variant in [v.strip() for v in args.variants.split(",") if v.strip()]:
        x = corpus(base, args.n, variant, args.noise)
        n = len(x)
        thresholds = exact_thresholds(queries, x)
        label = variant if variant == "copies" else f"noisy {args.noise:g}"
        if not args.no_flat:
            search_rows.append([label, "flat (exact, brute force)", *flat_row(queries, x)])
        for layout in layouts:
            folder = args.work / f"{variant}-{n}"
            path = folder / "citerag" / DenseIndex.FILENAME if layout == "citerag" else folder / f"{layout}.faiss"
            built = build(layout, x, path, args.rebuild)
            size = built.path.stat().st_size
            raw, read_s, read_mb = open_timed(built.path, 0)
            cells = [fmt(read_s, 3), f"{read_mb:,.0f}"]
            del raw
            mapped, map_s, map_mb = open_timed(built.path, MMAP_FLAG)
            cells += [fmt(map_s, 3), f"{map_mb:,.0f}"]
            if layout == "citerag":
                del mapped
                started = time.perf_counter()
                mapped = DenseIndex.load(built.path.parent)
                cells[2:] = [fmt(time.perf_counter() - started, 3), cells[3]]
                kind = mapped.kind
                params = nprobes if kind == "ivf-sq8" else ef_values if kind == "hnsw" else [0]
                name = f"citerag DenseIndex ({mapped.describe()})"
            else:
                kind = layout
                params = ef_values if layout.startswith("hnsw") else nprobes
                name = layout
            build_rows.append([label, name, fmt(built.train_s, 1), fmt(built.add_s, 1),
                               fmt(built.train_s + built.add_s, 1), f"{size / n:,.0f}", f"{size / 2**20:,.0f}",
                               *cells, built.built, built.load])
            param_name = "efSearch" if "hnsw" in kind else "nprobe"
            for row in sweep(mapped, params, queries, x, thresholds):
                search_rows.append([label, name, f"{param_name} {row[0]}", *row[1:]])
            if layout == "citerag" and kind == "ivf-sq8" and args.filters:
                fractions = [float(v) for v in args.filters.split(",")]
                filtered_rows += [[label, *row] for row in filter_rows(mapped, queries, x, fractions)]
            loads.append(load_average())
            del mapped
            gc.collect()
            print(markdown_table(["variant", "layout", "param", "R@10", "R@100", "p50", "p99", "p50", "p99"],
                                 search_rows[-len(params):]), flush=True)
        if args.build_rounds:
            ratio_rows += [[label, *row] for row in build_rounds(x, args.build_rounds)]
        del x
        gc.collect()

    table = markdown_table(
        ["variant", "layout", "search param", "Recall@10", "Recall@100", "p50 ms k=10", "p99 ms k=10",
         "p50 ms k=100", "p99 ms k=100"], search_rows)
    table += "\n\n### Build, size and open time\n\n" + markdown_table(
        ["variant", "layout", "train s", "add s", "build s", "bytes / passage", "file MiB", "open s (read)",
         "RSS MiB (read)", "open s (mmap)", "RSS MiB (mmap)", "built", "load at build"], build_rows)
    if filtered_rows:
        table += ("\n\n### Filtered search on citerag's ivf-sq8 (a seeded random fraction f of the rows allowed)\n\n"
                  + markdown_table(["variant", "allowed f", "nprobe widening", "nprobe", "Recall@10 (vs exact over the "
                                    "allowed rows)", "p50 ms", "p99 ms"], filtered_rows))
    if ratio_rows:
        ratios = [float(row[5]) for row in ratio_rows]
        header = ["variant", "round", "raw layout", "raw FAISS s", "citerag s", "ratio", "load after"]
        table += ("\n\n### citerag build vs the raw FAISS calls (same parameters, alternating, nothing saved)\n\n"
                  + markdown_table(header, ratio_rows)
                  + f"\n\n- ratio citerag / raw: median {np.median(ratios):.2f}, "
                  f"range {min(ratios):.2f}-{max(ratios):.2f}")
    notes = [
        f"{n:,} passages ({-(-args.n // len(base))} copies of the {len(base):,} abstract passages, 384-d MiniLM, "
        f"L2-normalised, inner product); {len(queries)} title queries (seed 0), one at a time, one OpenMP thread.",
        f"Recall@k by score against exact search (a returned row counts when its exact inner product >= the exact "
        f"k-th - {RECALL_EPS}; in 'copies' a passage's copies tie). k = 100 is citerag's candidate depth; HNSW "
        "searches at k = 100 use efSearch >= 100, as citerag sets it.",
        f"open: faiss.read_index with flags 0 (read) and IO_FLAG_MMAP_IFC (mmap: zero-copy views of the file for "
        "flat/SQ codes, HNSW storage and IVF inverted lists); RSS is the growth right after opening (pages come in as "
        "searches touch them); the page cache was warm. Searches ran on the mmap-opened index.",
        f"build: train + add with FAISS's default threads ({faiss.omp_get_max_threads()}); IVF k-means on "
        f"{TRAIN_PER_LIST} sampled vectors per list; HNSW efConstruction {HNSW_EF_CONSTRUCTION}. 'recorded' = built "
        "by an earlier run of this script, its seconds and load average kept from then.",
    ]
    title = f"Dense layouts at {n:,} passages: recall vs exact, latency, memory, build and open time"
    record(f"{title} (bench/dense_layouts.py)", table, notes, loads, write=not args.no_record)


if __name__ == "__main__":
    main()
