"""``POST /ask`` latency next to the raw model's time in the same run, over the shipped corpus and over the 22,981
ML abstracts.

    python -m bench.ask_latency                  # both
    python -m bench.ask_latency --over shipped   # eval/devset.jsonl and eval/seed_questions.jsonl, 38 abstracts
    python -m bench.ask_latency --over abstracts --questions 20   # 20 ML questions, cold then warm paper cache
    python -m bench.ask_latency --questions 6 --no-record   # a quick check

``citerag serve`` runs in a subprocess on 127.0.0.1 with its default settings. Over the shipped abstracts, once it
has answered one question and read the corpus's papers ahead (``/health`` ``papers``: done), each question is asked
once. Over the 22,981 ML abstracts, the dev half of ``eval/ml_questions.jsonl`` is asked with an empty paper-state
cache (cold: each paper read on its first question), then again (warm). Every question is asked with ``"stream":
true``; from the request's start, the client records the time to the ``evidence`` event, to the first ``token``
event (the first answer text) and to the final ``answer`` event (the total). The **raw model time** is the shipped GGUF run plainly by llama.cpp in this process (xllamacpp, all cores):
a fixed 250-token prompt read without cache and 40 tokens generated (:func:`bench.generator_speed.run_fixed`),
measured three times (before, between and after the questions, while the service is idle) and taken as the median.

Printed: median and p90 of the total over all questions and over the answered ones, the yes/no questions' median
total, the median time to the evidence and to the first answer text, each also as a ratio to the raw time, the
targets beside them (shipped: median total <= 0.6x raw, first answer text <= 0.4x; ML abstracts: cold median total
<= 1.0x, warm <= 0.6x).
"""

from __future__ import annotations

import json
import statistics
import time

import httpx
import numpy as np

from bench.common import BenchIndexes, fmt, load_average, markdown_table, parser, record, require_shared, serve
from citerag.eval.retrieval import load_devset
from citerag.service.settings import PROJECT_ROOT

DEVSETS = [PROJECT_ROOT / "eval" / "devset.jsonl", PROJECT_ROOT / "eval" / "seed_questions.jsonl"]
TARGETS = {"total": 0.6, "first_text": 0.4}
#: Over the 22,981 ML abstracts (issue 52): a question whose paper is read on first use, and one whose paper's state
#: is saved.
COLD_TARGETS = {"total": 1.0}
WARM_TARGETS = {"total": 0.6}


def ask_streamed(http: httpx.Client, question: str) -> dict[str, float | dict]:
    """Ask with ``"stream": true``: ms from the request to the first ``evidence`` event, the first ``token`` event
    (the ``answer`` event for an answer that streamed no token, as a which-papers answer made of the papers' own
    sentences; NaN for an abstention) and the ``answer`` event, and the answer event's data.

    Raises:
        RuntimeError: the stream ended with an ``error`` event, a non-200 status, or no ``answer`` event.
    """
    marks = {"evidence": float("nan"), "first_text": float("nan")}
    event = ""
    started = time.perf_counter()
    with http.stream("POST", "/ask", json={"question": question, "stream": True}) as response:
        if response.status_code != 200:
            raise RuntimeError(f"/ask answered {response.status_code}: {response.read()[:200]!r}")
        for line in response.iter_lines():
            now = (time.perf_counter() - started) * 1000.0
            if line.startswith("event: "):
                event = line[len("event: "):]
                if event == "evidence" and marks["evidence"] != marks["evidence"]:  # the first one
                    marks["evidence"] = now
                elif event == "token" and marks["first_text"] != marks["first_text"]:
                    marks["first_text"] = now
            elif line.startswith("data: ") and event in ("answer", "error"):
                data = json.loads(line[len("data: "):])
                if event == "error":
                    raise RuntimeError(f"/ask stream error: {data}")
                if marks["first_text"] != marks["first_text"] and not data.get("abstained"):
                    marks["first_text"] = now  # an answer made of evidence sentences (which papers) streams no token
                return {**marks, "total": now, "answer": data}
    raise RuntimeError("/ask stream ended without an answer event")


def papers_read(http: httpx.Client, timeout_s: float = 1800.0) -> str:
    """Wait until the service has read the corpus's papers ahead (``/health`` ``papers``: done or off), as a
    service that has run a while has; what it reported."""
    deadline = time.monotonic() + timeout_s
    while True:
        papers = http.get("/health").json().get("papers", "off")
        if papers in ("done", "off") or time.monotonic() > deadline:
            return papers
        time.sleep(2.0)


def raw_model_ms() -> float:
    """One raw model run (module docstring), in ms of wall time."""
    from bench.generator_speed import fixed_prompt, run_fixed

    generator = _raw_generator()
    started = time.perf_counter()
    run_fixed(generator, fixed_prompt(generator))
    return (time.perf_counter() - started) * 1000.0


_GENERATOR = None


def _raw_generator():  # noqa: ANN202 - a Generator with plain decoding
    global _GENERATOR
    if _GENERATOR is None:
        from citerag.service.generator import Generator
        from citerag.service.pipeline import generator_path
        from citerag.service.settings import Settings

        _GENERATOR = Generator(generator_path(Settings()))
    return _GENERATOR


def _median(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return statistics.median(values) if values else float("nan")


def _p90(values: list[float]) -> float:
    values = [v for v in values if v == v]
    return float(np.percentile(values, 90)) if values else float("nan")


def _figures(runs: list[dict], raw: float, targets: dict[str, float]) -> list[tuple[str, float, float | None]]:
    """The median and p90 figures of ``runs`` (name, ms, target x raw)."""
    answered = [r for r in runs if not r["abstained"]]
    yes_no = [r for r in runs if r["kind"] in ("yes_no", "yesno")]
    return [
        ("median total, all questions", _median([r["total"] for r in runs]), targets.get("total")),
        ("p90 total, all questions", _p90([r["total"] for r in runs]), None),
        ("median total, answered", _median([r["total"] for r in answered]), targets.get("total")),
        ("median time to the evidence", _median([r["evidence"] for r in runs]), None),
        ("median time to the first answer text", _median([r["first_text"] for r in runs]), targets.get("first_text")),
        (f"median total, yes/no ({len(yes_no)})", _median([r["total"] for r in yes_no]), targets.get("yes_no_total")),
    ]


def _ask_all(http: httpx.Client, questions: list, rows: list, loads: list, label: str) -> list[dict]:
    """Ask every question once (streamed); its timings, kind and outcome; a table row each."""
    runs = []
    for q in questions:
        loads.append(load_average())
        run = ask_streamed(http, q.question)
        answer = run["answer"]
        runs.append({**run, "kind": answer.get("decision") and "yes_no" or q.kind, "abstained": answer["abstained"]})
        rows.append([label, q.qid, q.kind, fmt(run["evidence"], 0), fmt(run["first_text"], 0), fmt(run["total"], 0),
                     "abstained" if answer["abstained"] else "answered"])
        print(rows[-1], flush=True)
    return runs


def _summary(sections: list[tuple[str, list[tuple[str, float, float | None]]]], raw: float) -> str:
    rows = [[f"{label}: {name}", fmt(ms, 0), f"{ms / raw:.2f}", f"<= {target}x" if target else ""]
            for label, figures in sections for name, ms, target in figures]
    rows.append(["raw model: 250-token prompt + 40 tokens", fmt(raw, 0), "1.00", ""])
    return markdown_table(["figure", "ms", "x raw", "target"], rows)


def shipped(args) -> None:  # noqa: ANN001 - argparse.Namespace
    """The shipped corpus: its dev questions, papers read ahead (module docstring)."""
    questions = [q for path in DEVSETS for q in load_devset(path)]
    questions = questions[: args.questions or None]
    _, built = BenchIndexes().seed()
    raws = [raw_model_ms(), raw_model_ms()]  # the first run warms the model up: counted, but the median decides
    loads, rows = [], []
    with serve(built.directory) as served, httpx.Client(base_url=served.url, timeout=600.0) as http:
        ask_streamed(http, "What is EDEN?")  # warm-up: the first answer pays one-off costs
        papers_read(http)
        runs = _ask_all(http, questions[: len(questions) // 2], rows, loads, "shipped")
        time.sleep(2.0)  # the service's work after its last answer is over
        raws.append(raw_model_ms())
        runs += _ask_all(http, questions[len(questions) // 2:], rows, loads, "shipped")
    raws.append(raw_model_ms())
    raw = statistics.median(raws[1:])
    table = _summary([("shipped", _figures(runs, raw, TARGETS))], raw) + "\n\n" + markdown_table(
        ["corpus", "question", "kind", "evidence ms", "first text ms", "total ms", "outcome"], rows)
    notes = [
        f"{len(questions)} questions of eval/devset.jsonl and eval/seed_questions.jsonl over the 38 shipped "
        f"abstracts; {sum(not r['abstained'] for r in runs)} answered; `citerag serve` with its default settings, its "
        "papers read ahead; times from the client (request sent -> the event read).",
        f"raw model runs (ms): {', '.join(fmt(r, 0) for r in raws)} (the first warms up; the median of the rest is "
        "the raw time).",
    ]
    record("/ask latency next to the raw model: the shipped corpus", table, notes, loads, write=not args.no_record)


def abstracts(args) -> None:  # noqa: ANN001 - argparse.Namespace
    """The 22,981 ML abstracts: the ML questions' dev half asked with an empty paper-state cache (cold: each
    question's paper read on first use), then again (warm: its saved state restored), next to the raw model."""
    import os
    import tempfile
    from pathlib import Path

    from citerag.eval.qa import half
    from citerag.service.settings import Settings

    shared = require_shared(args.shared)
    questions = half(load_devset(PROJECT_ROOT / "eval" / "ml_questions.jsonl"), "dev")
    questions = questions[: args.questions or None]
    _, built = BenchIndexes().abstracts(shared)
    raws = [raw_model_ms(), raw_model_ms()]
    loads, rows = [], []
    with tempfile.TemporaryDirectory(prefix="citerag-ask-latency-") as cache:
        models = Settings().cache_dir / "models"  # the assembled model is shared; the paper states start empty
        os.symlink(models, Path(cache) / "models")
        env = {"CITERAG_CACHE_DIR": cache}
        with serve(built.directory, env=env) as served, httpx.Client(base_url=served.url, timeout=600.0) as http:
            ask_streamed(http, "What is a support vector machine?")  # warm-up: one-off costs, one paper read
            cold = _ask_all(http, questions, rows, loads, "cold")
            time.sleep(2.0)
            raws.append(raw_model_ms())
            warm = _ask_all(http, questions, rows, loads, "warm")
    raws.append(raw_model_ms())
    raw = statistics.median(raws[1:])
    table = _summary([("cold", _figures(cold, raw, COLD_TARGETS)), ("warm", _figures(warm, raw, WARM_TARGETS))],
                     raw) + "\n\n" + markdown_table(
        ["cache", "question", "kind", "evidence ms", "first text ms", "total ms", "outcome"], rows)
    notes = [
        f"{len(questions)} questions of the dev half of eval/ml_questions.jsonl over the 22,981 ML abstracts "
        f"({sum(not r['abstained'] for r in cold)} answered); `citerag serve` with its default settings and an empty "
        "paper-state cache: each question is asked once cold (its paper read on first use and saved), then once "
        "warm (its paper's state restored).",
        f"raw model runs (ms): {', '.join(fmt(r, 0) for r in raws)} (the first warms up; the median of the rest is "
        "the raw time).",
    ]
    record("/ask latency next to the raw model: 22,981 ML abstracts, cold and warm paper cache", table, notes, loads,
           write=not args.no_record)


def main() -> None:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--questions", type=int, default=0, help="the first N questions only (0: all)")
    p.add_argument("--over", choices=("shipped", "abstracts", "both"), default="both",
                   help="the shipped corpus, the 22,981 ML abstracts, or both (default)")
    args = p.parse_args()
    if args.over in ("shipped", "both"):
        shipped(args)
    if args.over in ("abstracts", "both"):
        abstracts(args)


if __name__ == "__main__":
    main()
