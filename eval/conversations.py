"""Conversational evaluation: follow-up turns answered from the thread vs the same questions written standalone.

The set (``eval/conversations.jsonl``): one thread a line, ``{"id", "corpus", "turns": [{"question", "doc_id",
"expected": [strings], "standalone"?}]}``; every turn after the first has ``standalone``, the question written so
that it needs no thread. Each thread is asked turn by turn as a chat client would through ``/ask``: the history
holds the earlier questions and answers, with the documents each answer cited (``doc_ids``). Each follow-up turn
is also answered

* ``written``: its ``standalone`` form, without history (the reference the follow-ups are held to);

and, for retrieval only (no model call: on 2 shared cores one answer takes 10-30 s): ``alone``, as asked without
history (what citerag did before conversations), and ``openai``, as the OpenAI-compatible endpoint sees it
(history without ``doc_ids``).

Metrics per condition, over the follow-up turns:

* accuracy: share of turns whose answer contains one of ``expected`` (NFKC, case-folded); an abstention is wrong;
* cited-document precision: share of all citations that cite ``doc_id``;
* cited-document recall: share of turns with a citation of ``doc_id``;
* retrieval hit: share of turns whose retrieved passages include ``doc_id``;
* latency: median total answer time (ms), and the median time of making the question standalone (ms) for the
  rewritten turns and for those left as they were.

Run: ``python -m citerag.eval.conversations [--limit N] [--threads ID,...] [--out eval/runs]`` (the shipped corpus,
with the model); ``--corpus pubmedqa --retrieval-only`` for the threads over a benchmark corpus in
``../shared/benchmarks`` (retrieval hit only, no model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from citerag.eval.answers import normalise
from citerag.service.answering import Answer
from citerag.service.conversation import Standalone, Turn, standalone
from citerag.service.settings import PROJECT_ROOT

CONVERSATIONS = PROJECT_ROOT / "eval" / "conversations.jsonl"
CONDITIONS = ("followup", "written")
RETRIEVAL_ONLY = ("alone", "openai")


@dataclass(slots=True)
class TurnRecord:
    """One answered turn under one condition."""

    thread: str
    turn: int
    condition: str
    question: str
    question_used: str
    rewritten: bool
    correct: bool
    cited: list[str]
    relevant_citations: int
    retrieved_hit: bool
    abstained: bool
    answer: str
    total_ms: float
    rewrite_ms: float = 0.0


@dataclass(slots=True)
class Summary:
    """The metrics of one condition over the follow-up turns (module docstring)."""

    turns: int = 0
    accuracy: float = 0.0
    cited_precision: float = 0.0
    cited_recall: float = 0.0
    retrieval_hit: float = 0.0
    median_total_ms: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)


def load_threads(path: Path = CONVERSATIONS) -> list[dict[str, Any]]:
    """The threads of the JSONL set at ``path`` (see module docstring)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _record(thread: str, i: int, condition: str, turn: dict, resolved: Standalone, answer: Answer,
            rewrite_ms: float) -> TurnRecord:
    cited = [c.result.passage.doc_id for c in answer.citations]
    text = normalise(answer.answer)
    return TurnRecord(
        thread, i, condition, turn["question"], resolved.question, resolved.rewritten,
        not answer.abstained and any(normalise(e) in text for e in turn["expected"]), cited,
        sum(d == turn["doc_id"] for d in cited), any(p.passage.doc_id == turn["doc_id"] for p in answer.passages),
        answer.abstained, answer.answer, answer.timings_ms.get("total", 0.0), rewrite_ms,
    )


def _retrieved(thread: str, i: int, condition: str, turn: dict, resolved: Standalone,
               retrieve: Callable[[str, tuple[str, ...]], list[str]], rewrite_ms: float = 0.0) -> TurnRecord:
    """A retrieval-only record: whether ``turn``'s document is among the passages retrieved for ``resolved``."""
    return TurnRecord(thread, i, condition, turn["question"], resolved.question, resolved.rewritten, False, [], 0,
                      turn["doc_id"] in retrieve(resolved.question, resolved.keep), False, "", 0.0, rewrite_ms)


def run_threads(
    ask: Callable[[str, tuple[str, ...]], Answer] | None,
    retrieve: Callable[[str, tuple[str, ...]], list[str]],
    threads: list[dict[str, Any]],
    progress: Callable[[str], None] = lambda line: None,
    on_thread: Callable[[list[TurnRecord], int], None] = lambda records, done: None,
    alone_answers: bool = False,
    conditions: tuple[str, ...] = ("followup", "written", "alone", "openai"),
) -> list[TurnRecord]:
    """Ask every thread turn by turn under each condition.

    Args:
        ask: ``(question, keep) -> Answer``: answer a question, keeping the documents ``keep`` as candidates;
            ``None``: retrieval only (every condition; no answer, so the history holds no ``doc_ids``).
        retrieve: ``(question, keep) -> retrieved doc ids``: retrieval only.
        progress: receives one line per answered turn.
        on_thread: receives the records so far and the number of threads done, after each thread.
        alone_answers: answer the ``alone`` condition with ``ask`` too (else it is retrieval only).
        conditions: the conditions to record; without ``followup`` the follow-ups are not answered (the history
            then holds no ``doc_ids``: only the ``followup`` condition reads them).

    Returns:
        One record per turn and condition; the first turn of a thread is asked once (condition ``followup``); the
        retrieval-only conditions (:data:`RETRIEVAL_ONLY`) have no answer (``answer`` is empty).
    """
    records: list[TurnRecord] = []
    for thread in threads:
        history: list[Turn] = []
        for i, turn in enumerate(thread["turns"]):
            tic = time.perf_counter()
            resolved = standalone(turn["question"], history)
            rewrite_ms = (time.perf_counter() - tic) * 1000
            if ask is None or "followup" not in conditions:
                answer = Answer(resolved.question, "", True, "not asked", [], [])
                followed = _retrieved(thread["id"], i, "followup", turn, resolved, retrieve, rewrite_ms)
            else:
                answer = ask(resolved.question, resolved.keep)
                followed = _record(thread["id"], i, "followup", turn, resolved, answer, rewrite_ms)
            if "followup" in conditions:
                records.append(followed)
            if i and "written" in conditions:
                written = Standalone(turn["standalone"])
                records.append(_retrieved(thread["id"], i, "written", turn, written, retrieve) if ask is None else
                               _record(thread["id"], i, "written", turn, written, ask(written.question, ()), 0.0))
            if i and "alone" in conditions:
                alone = Standalone(turn["question"])
                records.append(_record(thread["id"], i, "alone", turn, alone, ask(alone.question, ()), 0.0)
                               if alone_answers and ask is not None else
                               _retrieved(thread["id"], i, "alone", turn, alone, retrieve))
            if i and "openai" in conditions:
                openai = standalone(turn["question"], [Turn(t.role, t.content) for t in history])
                records.append(_retrieved(thread["id"], i, "openai", turn, openai, retrieve))
            history += [Turn("user", turn["question"]),
                        Turn("assistant", answer.answer, tuple(dict.fromkeys(followed.cited)))]
            progress(f"{thread['id']}#{i}: {resolved.question!r} -> {answer.answer[:80]!r}")
        on_thread(records, len({r.thread for r in records}))
    return records


def summarise(records: list[TurnRecord]) -> dict[str, Summary]:
    """The :class:`Summary` of each condition over the follow-up turns (turn > 0)."""
    out: dict[str, Summary] = {}
    for condition in (*CONDITIONS, *RETRIEVAL_ONLY):
        rows = [r for r in records if r.condition == condition and r.turn > 0]
        if not rows:
            continue
        citations = sum(len(r.cited) for r in rows)
        summary = Summary(
            turns=len(rows),
            accuracy=sum(r.correct for r in rows) / len(rows),
            cited_precision=sum(r.relevant_citations for r in rows) / citations if citations else 0.0,
            cited_recall=sum(r.relevant_citations > 0 for r in rows) / len(rows),
            retrieval_hit=sum(r.retrieved_hit for r in rows) / len(rows),
            median_total_ms=statistics.median(r.total_ms for r in rows),
        )
        if condition == "followup":
            rewritten = [r for r in rows if r.rewritten]
            kept = [r for r in rows if not r.rewritten]
            summary.extra = {
                "rewritten": len(rewritten),
                "median_rewrite_ms_rewritten": statistics.median(r.rewrite_ms for r in rewritten) if rewritten else 0,
                "median_rewrite_ms_not_rewritten": statistics.median(r.rewrite_ms for r in kept) if kept else 0,
                "max_rewrite_ms": max(r.rewrite_ms for r in rows),
            }
        out[condition] = summary
    return out


def paired_latency(records: list[TurnRecord]) -> float:
    """Median over rewritten follow-up turns of (follow-up total ms - the same turn written standalone, ms)."""
    written = {(r.thread, r.turn): r.total_ms for r in records if r.condition == "written"}
    deltas = [r.total_ms - written[(r.thread, r.turn)] for r in records
              if r.condition == "followup" and r.turn > 0 and r.rewritten and (r.thread, r.turn) in written]
    return statistics.median(deltas) if deltas else 0.0


def report(records: list[TurnRecord], threads: int, note: str = "") -> str:
    """The Markdown report of a run."""
    summaries = summarise(records)
    lines = [
        "# Conversations: follow-up turns vs the same questions written standalone",
        "",
        "Produced by `python -m citerag.eval.conversations` over `eval/conversations.jsonl` "
        f"({threads} threads, {sum(1 for r in records if r.condition == 'followup')} turns; the metrics are over "
        "the follow-up turns, turn 2 and 3 of each thread). Definitions: `eval/conversations.py`.",
        "",
    ]
    if note:
        lines += [note, ""]
    lines += [
        "| condition | turns | accuracy | cited-doc precision | cited-doc recall | retrieval hit | median total ms |",
        "|---|---|---|---|---|---|---|",
    ]
    answers = any(r.answer for r in records)
    labels = {"followup": "follow-up with history" + (" (/ask, doc_ids)" if answers else " (no doc_ids)"),
              "written": "written standalone",
              "alone": "follow-up without history (before)",
              "openai": "OpenAI history (no doc_ids), retrieval only"}
    for condition, s in summaries.items():
        answered = any(r.answer for r in records if r.condition == condition)
        lines.append(
            f"| {labels[condition]} | {s.turns} | " + (
                f"{s.accuracy:.3f} | {s.cited_precision:.3f} | {s.cited_recall:.3f} | " if answered else "- | - | - | ")
            + f"{s.retrieval_hit:.3f} | " + (f"{s.median_total_ms:.0f} |" if answered else "- |")
            + ("" if answered or condition == "openai" else " (retrieval only)"))
    follow = summaries.get("followup")
    if follow:
        extra = follow.extra
        lines += [
            "",
            f"Rewritten follow-ups: {extra['rewritten']} of {follow.turns}. Making a question standalone (no model "
            f"call): median {extra['median_rewrite_ms_rewritten']:.3f} ms when rewritten, "
            f"{extra['median_rewrite_ms_not_rewritten']:.3f} ms when not (max {extra['max_rewrite_ms']:.3f} ms)."
            + (f" Paired median (follow-up total - written-standalone total) over rewritten turns: "
               f"{paired_latency(records):.0f} ms (answer-time noise: both run the same model steps)."
               if any(r.answer for r in records) else ""),
        ]
    lines += ["", "## Per turn (follow-up with history)", "",
              "| thread | turn | question used | correct | cited | retrieved the document |",
              "|---|---|---|---|---|---|"]
    for r in records:
        if r.condition == "followup":
            lines.append(f"| {r.thread} | {r.turn + 1} | {r.question_used} | "
                         f"{('yes' if r.correct else 'no') if r.answer else '-'} | {', '.join(r.cited) or '-'} | "
                         f"{'yes' if r.retrieved_hit else 'no'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    """Build (or reuse) an index of the shipped corpus, run the set, write ``conversations.md`` and ``.json``."""
    from citerag.index.lifecycle import ensure_index
    from citerag.service.answering.config import AnswerConfig
    from citerag.service.answering.runner import AnswerPipeline
    from citerag.service.pipeline import index_setup, open_answerer, open_backend
    from citerag.service.settings import Settings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", type=Path, default=CONVERSATIONS)
    parser.add_argument("--limit", type=int, default=0, help="First N threads only (0: all).")
    parser.add_argument("--threads", default="", help="Comma-separated thread ids to run (default: all).")
    parser.add_argument("--index-dir", type=Path, default=Path(tempfile.gettempdir()) / "citerag-conversations")
    parser.add_argument("--out", type=Path, default=PROJECT_ROOT / "eval" / "runs")
    parser.add_argument("--corpus", default="icml2026",
                        help="The threads of this corpus: icml2026 (data/icml2026) or a benchmark's name.")
    parser.add_argument("--benchmarks", type=Path, default=PROJECT_ROOT.parent / "shared" / "benchmarks",
                        help="Where a benchmark corpus lies (<dir>/<name>/corpus.jsonl).")
    parser.add_argument("--retrieval-only", action="store_true", help="No model: retrieval hit only.")
    parser.add_argument("--alone-answers", action="store_true",
                        help="Answer the follow-ups without history with the model too (default: retrieval only).")
    parser.add_argument("--conditions", default="followup,written,alone,openai",
                        help="Conditions to record (comma-separated).")
    parser.add_argument("--merge", type=Path, default=None,
                        help="An earlier run's JSON: its records of the threads and conditions run now are replaced.")
    parser.add_argument("--note", default="", help="A line for the report (e.g. how runs were merged).")
    args = parser.parse_args(argv)

    source = PROJECT_ROOT / "data" / "icml2026" if args.corpus == "icml2026" else (
        args.benchmarks / args.corpus / "corpus.jsonl")
    settings = Settings(index_dir=args.index_dir / args.corpus, corpus=[source])
    backend = open_backend(settings, ensure_index(index_setup(settings), show_progress=False))
    threads = [t for t in load_threads(args.set) if t["corpus"] == args.corpus][: args.limit or None]
    if args.threads:
        threads = [t for t in threads if t["id"] in args.threads.split(",")]

    retriever = AnswerPipeline(backend, None, AnswerConfig.of(settings))  # retrieval only: every answer "not asked"
    answerer = retriever if args.retrieval_only else open_answerer(settings, backend)

    def ask(question: str, keep: tuple[str, ...]) -> Answer:
        return answerer.ask(question, k=settings.ask_k, keep=keep)

    def retrieve(question: str, keep: tuple[str, ...]) -> list[str]:
        return [p.passage.doc_id for p in retriever.ask(question, keep=keep).passages]

    args.out.mkdir(parents=True, exist_ok=True)

    name = "conversations.md" if args.corpus == "icml2026" else f"conversations_{args.corpus}.md"
    of_corpus = len([t for t in load_threads(args.set) if t["corpus"] == args.corpus])

    conditions = tuple(args.conditions.split(","))
    earlier = [TurnRecord(**r) for r in json.loads(args.merge.read_text())] if args.merge else []

    def write(records: list[TurnRecord], done: int) -> None:  # after each thread: a cut-short run leaves a subset
        run = {(r.thread, r.condition) for r in records}
        kept = [r for r in earlier if (r.thread, r.condition) not in run]
        records = sorted(kept + records, key=lambda r: [t["id"] for t in threads].index(r.thread)
                         if r.thread in [t["id"] for t in threads] else -1)
        done = len({r.thread for r in records})
        note = f"Corpus: {args.corpus}" + (" (retrieval only: no model)." if args.retrieval_only else ".")
        if done < of_corpus:
            note += f" Subset: {done} of the set's {of_corpus} threads of this corpus."
        note += f" {args.note}" if args.note else ""
        (args.out / name).write_text(report(records, done, note), encoding="utf-8")
        (args.out / name.replace(".md", ".json")).write_text(json.dumps([asdict(r) for r in records], indent=1),
                                                             encoding="utf-8")

    if args.merge:  # the earlier run's threads, in the set's order; the ones run now replace theirs
        threads = [t for t in load_threads(args.set) if t["corpus"] == args.corpus]
        chosen = set(args.threads.split(",")) if args.threads else {t["id"] for t in threads}
        run = [t for t in threads if t["id"] in chosen]
    else:
        run = threads
    run_threads(None if args.retrieval_only else ask, retrieve, run, progress=lambda line: print(line, flush=True),
                on_thread=write, alone_answers=args.alone_answers, conditions=conditions)
    print((args.out / name).read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
