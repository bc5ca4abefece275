"""HTTP throughput of ``POST /search`` (hybrid, the real query embedding) with 1, 8 and 32 concurrent clients.

    python -m bench.http_throughput                          # the 38 shipped abstracts and the 22,981 abstracts
    python -m bench.http_throughput --sizes seed --requests 50 --no-record   # a quick check

For each index, ``citerag serve --index-dir`` runs in a subprocess on 127.0.0.1; a bounded asyncio loop of
``httpx.AsyncClient`` requests (``concurrency`` requests in flight at once, ``--requests`` in all) sends title queries
of the 22,981-abstract corpus (seed 0). Latency is per request, from send to the full response; an error is any
exception or non-200 status.
"""

from __future__ import annotations

import asyncio
import time

import httpx

from bench.common import (
    BenchIndexes,
    fmt,
    load_abstracts,
    load_average,
    markdown_table,
    parser,
    percentiles,
    record,
    require_shared,
    sample_titles,
    serve,
)

SIZES = ("seed", "abstracts")
K = 10


async def run_level(url: str, queries: list[str], concurrency: int, total: int) -> dict[str, float]:
    """Send ``total`` hybrid ``/search`` requests, at most ``concurrency`` in flight.

    Returns:
        ``requests``, ``errors``, ``seconds``, ``rps`` (requests per second) and latency ``p50``/``p99`` (ms).
    """
    latencies: list[float] = []
    errors = 0
    sent = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal errors, sent
        while sent < total:
            query = queries[sent % len(queries)]
            sent += 1
            start = time.perf_counter()
            try:
                response = await http.post("/search", json={"query": query, "k": K, "mode": "hybrid"})
                if response.status_code != 200 or not response.json()["results"]:
                    errors += 1
            except httpx.HTTPError:
                errors += 1
            latencies.append((time.perf_counter() - start) * 1000.0)

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=120.0) as http:
        started = time.perf_counter()
        await asyncio.gather(*(client(http) for _ in range(concurrency)))
        seconds = time.perf_counter() - started
    return {"requests": len(latencies), "errors": errors, "seconds": seconds, "rps": len(latencies) / seconds,
            **percentiles(latencies, (50, 99))}


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--sizes", default=",".join(SIZES), help=f"comma-separated subset of {', '.join(SIZES)}")
    p.add_argument("--limit", type=int, help="use only the first N abstracts instead of 22,981")
    p.add_argument("--concurrency", default="1,8,32", help="concurrent clients, comma-separated")
    p.add_argument("--requests", type=int, default=200, help="requests per concurrency level")
    args = p.parse_args()
    shared = require_shared(args.shared)
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    if unknown := [s for s in sizes if s not in SIZES]:
        p.error(f"unknown size {unknown[0]!r}; choose from {', '.join(SIZES)}")
    levels = [int(c) for c in args.concurrency.split(",")]

    queries = sample_titles(load_abstracts(shared, args.limit), 200)
    indexes = BenchIndexes()
    encoder = indexes.embedder.name
    targets = []
    for size in sizes:
        documents, built = indexes.seed() if size == "seed" else indexes.abstracts(shared, args.limit)
        targets.append((f"{len(documents):,} abstracts", built.directory))
    del indexes  # the service loads its own embedder

    rows, loads = [], []
    for label, directory in targets:
        with serve(directory) as served:
            asyncio.run(run_level(served.url, queries[:10], 2, 20))  # warm-up: first-call costs, page cache
            for concurrency in levels:
                loads.append(load_average())
                stats = asyncio.run(run_level(served.url, queries, concurrency, args.requests))
                rows.append([label, concurrency, int(stats["requests"]), fmt(stats["rps"], 1), fmt(stats["p50"], 1),
                             fmt(stats["p99"], 1), int(stats["errors"])])
                print(rows[-1], flush=True)
    table = markdown_table(["index", "clients", "requests", "requests/s", "p50 ms", "p99 ms", "errors"], rows)
    errors = sum(int(row[-1]) for row in rows)
    notes = [
        f"POST /search {{query, k: {K}, mode: hybrid}} with the real query embedding ({encoder} on the "
        f"server's CPU); {len(queries)} title queries of the ML abstracts (seed 0) in turn; client and server share "
        "the machine's cores.",
        f"errors in all: {errors} ({'none' if errors == 0 else 'SOME REQUESTS FAILED'}).",
    ]
    record("HTTP throughput: POST /search (hybrid)", table, notes, loads, write=not args.no_record)
    if errors:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
