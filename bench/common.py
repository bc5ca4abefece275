"""What the benchmark scripts share: the shared-data location, timing percentiles, machine facts, appending a
table to ``bench/RESULTS.md``, corpus loading and replication, building the bench indexes, and a ``citerag serve``
subprocess.

Run the scripts from the repository root as modules (``python -m bench.search_latency``), so ``bench``,
``index`` and ``service`` import from this checkout. Figures are CPU timings on a machine that may be shared:
each table records ``os.getloadavg()`` next to it.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import random
import re
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from citerag.index.embed import Embedder
from citerag.index.ingest import load_documents
from citerag.index.types import Document, Passage
from citerag.service.settings import PROJECT_ROOT

SHARED_DEFAULT = PROJECT_ROOT.parent / "shared"  # documented as ../shared relative to the repository root
ML_ABSTRACTS = Path("corpora") / "ml_abstracts.jsonl.gz"  # 22,981 abstracts, relative to the shared folder
SEED_CORPUS = PROJECT_ROOT / "data" / "icml2026"  # the 38 shipped abstracts
CACHE_DIR = PROJECT_ROOT / ".citerag-bench"  # git-ignored: embeddings and bench indexes
RESULTS = PROJECT_ROOT / "bench" / "RESULTS.md"
EMBED_STEP = 2048  # passages embedded (and written to the cache) at a time
BENCH_INDEX_FORMAT = 3  # bumped when an index version's files change (2: BM25 tokens kept; 3: Arrow tables), so bench indexes are remade


# --- command line ------------------------------------------------------------------------------------------------


def parser(description: str) -> argparse.ArgumentParser:
    """An argument parser with ``--shared`` (alias ``--corpus``): the shared data folder (default ``../shared``)."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument(
        "--shared", "--corpus", dest="shared", type=Path, default=SHARED_DEFAULT,
        help=f"the shared data folder holding {ML_ABSTRACTS} (default: ../shared from the repository root)",
    )
    p.add_argument("--no-record", action="store_true", help="print the table without appending it to RESULTS.md")
    return p


def require_shared(shared: Path) -> Path:
    """``shared`` resolved; exits with status 2 and one line on stderr when the corpus is not under it."""
    if not (shared / ML_ABSTRACTS).is_file():
        print(f"error: {shared / ML_ABSTRACTS} not found: pass --shared DIR (the shared data folder)", file=sys.stderr)
        raise SystemExit(2)
    return shared.resolve()


# --- timing ------------------------------------------------------------------------------------------------------


def percentiles(samples_ms: Sequence[float], points: Sequence[int] = (50, 95, 99)) -> dict[str, float]:
    """``{"p50": ..., "p95": ..., "p99": ...}`` in ms (numpy's linear interpolation); NaN for no samples."""
    values = np.asarray(samples_ms, dtype=np.float64)
    return {f"p{p}": float(np.percentile(values, p)) if values.size else float("nan") for p in points}


def time_each(call: Callable[[object], object], items: Sequence[object], warmup: int = 5) -> np.ndarray:
    """Wall time of ``call(item)`` for each item, in ms (float64, shape ``(len(items),)``), after ``warmup``
    untimed calls on the first items (page cache, lazy initialisation)."""
    for item in items[:warmup]:
        call(item)
    out = np.empty(len(items), dtype=np.float64)
    for i, item in enumerate(items):
        start = time.perf_counter()
        call(item)
        out[i] = (time.perf_counter() - start) * 1000.0
    return out


def rss_mb() -> float:
    """Resident memory of this process now, in MiB (from ``/proc/self/status``)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def fmt(value: float, digits: int = 2) -> str:
    """A number for a table cell (``-`` for NaN)."""
    return "-" if value != value else f"{value:.{digits}f}"


# --- RESULTS.md --------------------------------------------------------------------------------------------------


def cpu_model() -> str:
    """The CPU model name from ``/proc/cpuinfo`` (``unknown`` when absent)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def load_average() -> str:
    """``os.getloadavg()`` as ``"1.23 / 2.34 / 3.45"`` (1, 5, 15 minutes)."""
    return " / ".join(f"{v:.2f}" for v in os.getloadavg())


def command_line() -> str:
    """How this script was started, as a shell command run from the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        module = ".".join(script.relative_to(PROJECT_ROOT).with_suffix("").parts)
        head = f"python -m {module}"
    except ValueError:
        head = f"python {shlex.quote(sys.argv[0])}"
    return " ".join([head, *map(shlex.quote, sys.argv[1:])])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A GitHub Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def record(title: str, table: str, notes: Sequence[str] = (), loads: Sequence[str] = (), write: bool = True) -> None:
    """Print ``table`` and make it ``bench/RESULTS.md``'s section ``title`` (replacing the bench's earlier figure:
    history lives in git), with the date, the machine (:func:`citerag.eval.provenance.machine`), the commit, the
    load average(s) and the exact command line. ``loads`` are load averages sampled during the run (the current
    one is added)."""
    from citerag.eval.provenance import commit, machine

    loads = [*loads, load_average()]
    lines = [
        f"## {title}",
        "",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %z')}; commit `{commit()}`",
        f"- machine: {machine()}",
        f"- load average (1/5/15 min) while timing: {'; '.join(loads)}",
        f"- command: `{command_line()}`",
        "",
        table,
        "",
        *(f"- {note}" for note in notes),
    ]
    text = "\n".join(lines).rstrip() + "\n"
    print(text)
    if write:
        RESULTS.write_text(with_section(RESULTS.read_text(encoding="utf-8") if RESULTS.exists() else "", title, text),
                           encoding="utf-8")


RESULTS_HEAD = ("# Benchmarks\n\nThe current figure of each bench, one section per bench, each regenerated by its "
                "bench (`python -m bench.<name>`) and naming its command, date, commit and machine. Earlier figures "
                "are in git history.\n")


def with_section(document: str, title: str, section: str) -> str:
    """``document`` (RESULTS.md) with its section ``## title`` replaced by ``section`` (or ``section`` appended),
    sections kept in their order.

    >>> with_section("# B\\n\\n## a\\n\\nold\\n\\n## b\\n\\nx\\n", "a", "## a\\n\\nnew\\n")
    '# B\\n\\n## a\\n\\nnew\\n\\n## b\\n\\nx\\n'
    """
    head, *sections = re.split(r"(?m)^(?=## )", document or RESULTS_HEAD)
    kept = [part for part in sections if part.splitlines()[0] != f"## {title}"]
    at = next((i for i, part in enumerate(sections) if part.splitlines()[0] == f"## {title}"), len(kept))
    kept.insert(at, section)
    return head.rstrip() + "\n\n" + "\n".join(part.rstrip() + "\n" for part in kept)


# --- corpora -----------------------------------------------------------------------------------------------------


def load_abstracts(shared: Path, limit: int | None = None) -> list[Document]:
    """The 22,981 ML abstracts (the first ``limit`` of them when given), in file order."""
    documents = load_documents([shared / ML_ABSTRACTS])
    return documents[:limit] if limit else documents


def sample_titles(documents: Sequence[Document], n: int = 200, seed: int = 0) -> list[str]:
    """``n`` distinct non-empty titles drawn with ``random.Random(seed)``: the benchmark queries."""
    titles = sorted({doc.title for doc in documents if doc.title.strip()})
    return random.Random(seed).sample(titles, min(n, len(titles)))


def replicate(documents: Sequence[Document], passages: Sequence[Passage], copies: int) -> tuple[list[Document], list[Passage]]:
    """``copies`` copies of a corpus with new document and chunk ids (``<doc_id>~r<copy>``; copy 0 keeps the
    original ids). Texts are shared; copy ``c`` of passage ``i`` is row ``c * len(passages) + i``, so its vector is
    ``np.tile(vectors, (copies, 1))``'s row (same text, same vector)."""
    out_docs: list[Document] = []
    out_passages: list[Passage] = []
    for copy in range(copies):
        suffix = f"~r{copy}" if copy else ""
        out_docs.extend(dataclasses.replace(d, doc_id=d.doc_id + suffix) for d in documents)
        out_passages.extend(
            dataclasses.replace(p, doc_id=p.doc_id + suffix, chunk_id=f"{p.doc_id}{suffix}#{p.ordinal}") for p in passages
        )
    return out_docs, out_passages


# --- embeddings --------------------------------------------------------------------------------------------------


class PrecomputedEmbedder:
    """A stand-in for the query encoder that returns vectors computed beforehand, so search timings exclude the
    query embedding (timed separately with the real model). Not a model: it knows only the texts it was given.

    Args:
        name, dim: the real encoder's (the retriever checks them against the index).
        vectors: ``{text: float32 vector of shape (dim,)}``, keyed by the exact text the retriever encodes
            (the folded query, :func:`citerag.index.text.fold`).

    Raises:
        KeyError: ``encode`` got a text that was not precomputed.
    """

    def __init__(self, name: str, dim: int, vectors: dict[str, np.ndarray]) -> None:
        self.name, self.dim, self.vectors = name, dim, vectors
        # one query (what a search encodes) as a ready (1, dim) array: np.stack per call took ~40 us of a timed
        # search at 22,981 abstracts on a loaded machine (load 7), harness time that was counted as citerag's
        self._single = {
            text: np.ascontiguousarray(vector, dtype=np.float32).reshape(1, -1) for text, vector in vectors.items()
        }

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        if len(texts) == 1:
            return self._single[texts[0]]  # shared and not to be written: the retriever only reads it
        return np.stack([self.vectors[text] for text in texts]) if texts else np.zeros((0, self.dim), np.float32)


# --- a citerag service in a subprocess ---------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(slots=True)
class Served:
    """A running ``citerag serve``: its base URL, process, start time (``time.perf_counter()``) and output lines
    as ``(seconds since start, line)``."""

    url: str
    process: subprocess.Popen[str]
    started: float
    lines: list[tuple[float, str]]


def log_tail(path: Path | None, lines: int = 20) -> str:
    """The last ``lines`` lines of a service's output file (empty when there is none)."""
    if path is None or not path.exists():
        return ""
    return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])


@contextmanager
def serve(index_dir: Path, timeout_s: float = 900.0, env: dict[str, str] | None = None,
          log: Path | None = None) -> Iterator[Served]:
    """Start ``citerag serve --index-dir INDEX_DIR`` on 127.0.0.1 and a free port; yield once ``/health`` answers;
    stop the process (by its PID) on exit. Its output is kept in ``Served.lines``, or written to the file ``log``
    (a long run: nothing kept in memory).

    Raises:
        RuntimeError: the service exited or did not answer ``/health`` within ``timeout_s`` (its last output lines
            are in the message).
    """
    import threading

    import httpx

    port = free_port()
    # the venv's console script; PYTHONPATH puts this checkout first
    command = [str(Path(sys.executable).parent / "citerag"), "serve", "--index-dir", str(index_dir), "--port", str(port)]
    started = time.perf_counter()
    lines: list[tuple[float, str]] = []
    with log.open("wb") if log is not None else contextlib.nullcontext() as out:
        process = subprocess.Popen(
            command, cwd=PROJECT_ROOT, text=True, stdout=out or subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(PROJECT_ROOT), **(env or {})},
        )

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            lines.append((time.perf_counter() - started, line.rstrip()))

    if log is None:
        threading.Thread(target=pump, daemon=True).start()
    served = Served(f"http://127.0.0.1:{port}", process, started, lines)
    try:
        while True:
            if process.poll() is not None or time.perf_counter() - started > timeout_s:
                tail = "\n".join(line for _, line in lines[-15:]) if log is None else log_tail(log, 15)
                raise RuntimeError(f"citerag serve did not come up (exit {process.poll()}):\n{tail}")
            try:
                if httpx.get(served.url + "/health", timeout=2.0).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        yield served
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def source_state(paths: Sequence[Path], documents: Sequence[Document]) -> dict[str, object]:
    """The source state (:mod:`citerag.index.sources`) ``citerag serve`` uses to decide whether an index is up to date with
    its sources (see :func:`citerag.index.lifecycle.ensure_index`): a bench index records the files it was built from, so
    serving it never re-indexes. Every record is listed under the last source (they are compared later-wins)."""
    from citerag.index.sources import record_fingerprint, source_state as state_of

    records = {doc.doc_id: record_fingerprint(doc) for doc in documents}
    return state_of(list(paths), {str(Path(paths[-1]).resolve()): records} if paths else {})


def write_jsonl(path: Path, documents: Sequence[Document]) -> None:
    """Write ``documents`` as a JSONL source file ``citerag index`` reads back identically (ids, titles, meta)."""
    with path.open("w", encoding="utf-8") as handle:
        for doc in documents:
            meta = {k: v for k, v in doc.meta.items() if k not in ("source", "line")}
            handle.write(json.dumps({"id": doc.doc_id, "title": doc.title, "text": doc.text, **meta}, ensure_ascii=False) + "\n")


# --- bench indexes -----------------------------------------------------------------------------------------------


@dataclass(slots=True)
class BenchIndex:
    """A bench index directory and how it was built.

    Attributes:
        directory: the :class:`~citerag.index.store.IndexStore` root (serve it with ``citerag serve --index-dir``).
        built_now: whether this run built it (else it was reused).
        timings_s: seconds per build step, as recorded when it was built (``write_version``: BM25 tokenising and
            indexing, FAISS, files and checksums; embedding is not included).
    """

    directory: Path
    built_now: bool
    timings_s: dict[str, float]


def bench_index(
    directory: Path,
    documents: Sequence[Document],
    sources: Sequence[Path],
    make: Callable[[], tuple[list[Passage], np.ndarray, dict[str, float]]],
    config: object,
    dense_kind: str = "auto",
) -> BenchIndex:
    """The index of ``documents`` in ``directory``: reused when it was built from the same documents (by
    :func:`citerag.index.store.corpus_fingerprint`), settings and sources, else built with
    :func:`citerag.index.build.write_version` from ``make()`` = ``(passages, vectors, timings_s so far)``.

    The manifest records ``sources`` (files that hold exactly ``documents``) so ``citerag serve`` serves the index
    as it is instead of re-indexing it from the default corpus.
    """
    from citerag.index.build import write_version
    from citerag.index.dense import choose_kind
    from citerag.index.store import IndexStore, corpus_fingerprint

    key = hashlib.sha256(
        json.dumps([BENCH_INDEX_FORMAT, corpus_fingerprint(documents), dataclasses.asdict(config), dense_kind,  # type: ignore[call-overload]
                    [str(Path(p).resolve()) for p in sources]]).encode()
    ).hexdigest()
    sidecar = directory / "bench.json"
    store = IndexStore(directory)
    if sidecar.exists() and store.current() is not None:
        recorded = json.loads(sidecar.read_text())
        # the kind "auto" gives depends on the size and the threshold in force now
        if recorded.get("key") == key and recorded.get("kind") == choose_kind(recorded.get("passages", 0), dense_kind):
            return BenchIndex(directory, False, recorded["timings_s"])
    passages, vectors, timings = make()
    started = time.perf_counter()
    write_version(
        store, config, list(documents), passages, vectors,  # type: ignore[arg-type]
        sources=source_state(sources, documents), dense_kind=dense_kind,
    )
    timings = {**timings, "write_version": time.perf_counter() - started}
    sidecar.write_text(json.dumps({"key": key, "timings_s": timings, "passages": len(passages),
                                   "kind": choose_kind(len(passages), dense_kind)}, indent=2))
    return BenchIndex(directory, True, timings)


class BenchIndexes:
    """Builds (or reuses) the bench indexes with the service's settings and encoder, embedding through the
    project's :class:`~citerag.index.embed_cache.CachedEmbedder` in the service's own cache
    (``<cache_dir>/embeddings``, what ``citerag index`` fills), so each distinct passage is encoded once across runs,
    sizes and the service.

    Attributes:
        settings, embedder, config, chunker: as ``citerag index`` would use them.
        embedder_load_s: seconds :func:`citerag.service.pipeline.load_embedder` took (imports included).
    """

    def __init__(self) -> None:
        from citerag.index.embed_cache import CachedEmbedder
        from citerag.service.pipeline import index_setup, load_embedder
        from citerag.service.settings import Settings

        self.settings = Settings()
        started = time.perf_counter()
        self.embedder = load_embedder()
        self.embedder_load_s = time.perf_counter() - started  # torch import + model load, in seconds
        setup = index_setup(self.settings)
        self.config = setup.config(self.embedder)
        self.chunker = setup.chunker(self.embedder)
        self.cache = CachedEmbedder(self.embedder, self.settings.cache_dir / "embeddings")

    def embedded(self, documents: Sequence[Document]) -> tuple[list[Passage], np.ndarray, dict[str, float]]:
        """``(passages, vectors, {"chunking": seconds})`` of ``documents``; vectors float32 ``(n, dim)``."""
        from citerag.index.build import chunk_documents, passage_texts

        started = time.perf_counter()
        passages = chunk_documents(list(documents), self.chunker)
        chunk_s = time.perf_counter() - started
        texts = passage_texts(passages, {d.doc_id: d for d in documents})
        vectors = np.zeros((len(texts), self.embedder.dim), dtype=np.float32)
        started = time.perf_counter()
        for at in range(0, len(texts), EMBED_STEP):  # a step at a time, so an interrupted run keeps what it embedded
            vectors[at : at + EMBED_STEP] = self.cache.encode(texts[at : at + EMBED_STEP])
            self.cache.close()
            if len(texts) > EMBED_STEP:
                done = min(at + EMBED_STEP, len(texts))
                print(f"embedded {done:,}/{len(texts):,} passages ({self.cache.misses:,} new, "
                      f"{time.perf_counter() - started:.0f} s)", file=sys.stderr, flush=True)
        return passages, vectors, {"chunking": chunk_s}

    def seed(self) -> tuple[list[Document], BenchIndex]:
        """The 38 shipped abstracts' index (``.citerag-bench/index-seed``)."""
        documents = load_documents([SEED_CORPUS])
        built = bench_index(CACHE_DIR / "index-seed", documents, [SEED_CORPUS], lambda: self.embedded(documents),
                            self.config)
        return documents, built

    def abstracts(self, shared: Path, limit: int | None = None, dense_kind: str = "auto") -> tuple[list[Document], BenchIndex]:
        """The ML abstracts' index (the first ``limit`` only when given: ``.citerag-bench/index-abstracts-<n>``;
        all 22,981: ``index-abstracts-all``; a forced ``dense_kind`` other than ``auto`` gets its own directory). A
        slice is written to a JSONL source file first."""
        documents = load_abstracts(shared, limit)
        tag = str(len(documents)) if limit else "all"
        sources = [shared / ML_ABSTRACTS]
        if limit:
            CACHE_DIR.mkdir(exist_ok=True)
            sources = [CACHE_DIR / f"abstracts-{tag}.jsonl"]
            if not sources[0].exists():
                write_jsonl(sources[0], documents)
        make = lambda: self.embedded(documents)  # noqa: E731
        suffix = ""
        if dense_kind != "auto":  # the same passages and vectors as the auto index, another FAISS kind
            suffix = f"-{dense_kind}"
            make = lambda: _passages_and_vectors(self.abstracts(shared, limit)[1].directory)  # noqa: E731
        built = bench_index(CACHE_DIR / f"index-abstracts-{tag}{suffix}", documents, sources, make, self.config,
                            dense_kind)
        return documents, built


def _passages_and_vectors(directory: Path) -> tuple[list[Passage], np.ndarray, dict[str, float]]:
    """The passages and vectors of the live index in ``directory`` (no chunking, no embedding)."""
    from citerag.index.store import IndexStore

    index = IndexStore(directory).load()
    return index.passages, index.dense.vectors(), {}
