"""The evaluation runner: opens what an evaluation needs through the service's wiring
(:mod:`citerag.service.pipeline`), runs it, and writes its reports. ``citerag eval`` (:mod:`citerag.eval.cli`) and
``python -m citerag.eval`` parse their options into an :class:`EvalRequest` and call :func:`run`.

Four evaluations, one per request:

* the dev set's retrieval (:func:`run_devset`): ``devset[-BACKEND].md`` and ``.json``;
* a BEIR benchmark's retrieval (:func:`run_benchmark`), indexed into ``.citerag-bench/<name>/``: ``<name>.md``,
  ``.json`` and a bar chart ``.png``;
* answers on a dev set (:func:`run_answers`): ``answers_<devset>_<half>_<label>.md`` and ``.json``;
* a QA benchmark (:func:`run_qa`: COVID-QA spans, PubMedQA decisions), indexed into ``.citerag-bench/<name>/``:
  ``qa_<name>_<label>.json``.

Answers come from the answerer :func:`citerag.service.pipeline.open_answerer` makes, used only through
``answerer.ask(question, k=k)`` and the attributes of what it returns (:class:`citerag.eval.answers.AnswerLike`).
The conversational evaluation has its own entry point (``python -m citerag.eval.conversations``).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from citerag.eval.qa import Half
from citerag.service.settings import PROJECT_ROOT, Settings

DEVSET = PROJECT_ROOT / "eval" / "devset.jsonl"
RESULTS = PROJECT_ROOT / "eval" / "results"
BENCH_INDEXES = Path(".citerag-bench")  # where benchmark corpora are indexed, one directory each

Backend = Literal["embedded", "milvus"]


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation, as ``citerag eval``'s options give it.

    Attributes:
        benchmark: a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``): its retrieval instead
            of the dev set's.
        answers: evaluate answers on ``devset`` (accuracy, citations, abstention) instead of retrieval.
        qa: a QA benchmark folder (``corpus.jsonl``, ``questions.jsonl``): answers to its questions.
        sample, seed: ``qa``: a fixed sample of this many questions, drawn with this seed (``None``: all).
        half: ``qa`` and ``answers``: the odd question ids (``dev``), the even ones (``test``) or ``all``.
        label: ``qa`` and ``answers``: the run's name in the results files.
        k: passages per question for ``qa`` and ``answers`` (``None``: the settings' ``ask_k``).
        devset: the dev set (JSONL).
        out: the results directory (created when missing).
        index_dir: the index (default: the settings' for the dev set, ``.citerag-bench/<name>`` for a benchmark;
            not used by ``qa``).
        backend: the retrieval backend for retrieval runs (``None``: the settings').
    """

    benchmark: Path | None = None
    answers: bool = False
    qa: Path | None = None
    sample: int | None = None
    seed: int = 0
    half: Half = "test"
    label: str = "default"
    k: int | None = None
    devset: Path = DEVSET
    out: Path = RESULTS
    index_dir: Path | None = None
    backend: Backend | None = None
    set: str | None = None
    variant: str = "service"
    ablate: bool = False


@dataclass(frozen=True)
class EvalOutcome:
    """What an evaluation prints: ``data`` as JSON (``--json``), else ``text`` (a table or a summary)."""

    data: dict[str, Any]
    text: str


def run(request: EvalRequest) -> EvalOutcome:
    """Run the evaluation ``request`` asks for (module docstring) and write its reports into ``request.out``.

    Raises:
        ValueError: the dev set does not exist.
        CiteragError: a benchmark folder or its files are missing or malformed, or the index cannot be opened.
    """
    request.out.mkdir(parents=True, exist_ok=True)
    if request.set is not None:
        return run_set(request)
    if request.qa is not None:
        return run_qa(request)
    if request.answers:
        return run_answers(request)
    if request.benchmark is not None:
        return run_benchmark(request)
    return run_devset(request)


def _settings(index_dir: Path | None) -> Settings:
    return Settings(index_dir=index_dir) if index_dir else Settings()


def open_searcher(settings: Settings) -> tuple[Any, dict[str, Any]]:
    """The retrieval backend ``settings.backend`` names (the embedded index built or brought up to date first;
    Milvus with its first-run ingest), and what it holds: ``index`` (config or Milvus stats), ``documents``,
    ``passages``."""
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup, open_milvus_backend, open_retriever

    if settings.backend == "milvus":
        milvus = open_milvus_backend(settings)
        stats = milvus.stats()
        return milvus, {"index": stats, "documents": stats["documents"], "passages": stats["passages"]}
    index = ensure_index(index_setup(settings), show_progress=True)
    held = {"index": index.manifest["config"], "documents": len(index.documents), "passages": len(index.passages)}
    return open_retriever(settings, index), held


#: The answerers ``--variant`` can name: the service's pipeline as configured (``service``) or with a configuration
#: changed (its :class:`~citerag.service.answering.config.AnswerConfig` fields), and the plain-prompt anchor
#: (:mod:`citerag.eval.anchor`).
VARIANTS: dict[str, dict[str, Any]] = {"service": {}, "two-papers": {"fact_papers": 2}, "anchor": {}}


def open_variant(variant: str, settings: Settings, searcher: Any) -> Any:
    """The answerer ``variant`` names (:data:`VARIANTS`) over ``searcher``.

    Raises:
        ValueError: an unknown variant.
    """
    from citerag.service.pipeline import decoding, generator_path, load_generator, open_answerer

    if variant in VARIANTS and variant != "anchor":
        from dataclasses import replace

        from citerag.service.answering.config import AnswerConfig

        return open_answerer(settings, searcher, replace(AnswerConfig.of(settings), **VARIANTS[variant]))
    if variant == "anchor":
        from citerag.eval.anchor import PlainPrompt

        state_dir = settings.cache_dir / "paper-states" if settings.whole_paper_documents else None
        generator = load_generator(generator_path(settings), settings.n_ctx, settings.threads, decoding(settings),
                                   state_dir)
        return PlainPrompt(searcher, generator)
    raise ValueError(f"unknown variant {variant!r}; one of {', '.join(VARIANTS)}")


def run_set(request: EvalRequest) -> EvalOutcome:
    """One half of a named evaluation set (:mod:`citerag.eval.sets`) answered by ``request.variant``; the run is
    recorded (:func:`citerag.eval.latest.record`: the set's JSON, LATEST.md, HISTORY.md, the raw run). With
    ``request.ablate`` (the service only), each rule's effect is measured too (:mod:`citerag.eval.ablation`) and
    recorded beside it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from citerag.eval.answers import evaluate_answers
    from citerag.eval.latest import Run, record, record_ablation
    from citerag.eval.qa import evaluate_qa, half, load_qa, sample
    from citerag.eval.retrieval import load_devset
    from citerag.eval.sets import get_set

    assert request.set is not None
    chosen = get_set(request.set)
    chosen.check()
    if request.ablate and request.variant != "service":
        raise ValueError("--ablate measures the service's rules: use it with --variant service")
    settings = _settings(chosen.index_dir or request.index_dir)
    bench = None
    if chosen.kind != "answers":
        bench = load_qa(chosen.questions)
        settings = settings.model_copy(update={"corpus": [bench.corpus]})
        questions: list[Any] = sample(half(bench.questions, request.half), chosen.sample, request.seed)
    else:
        if chosen.corpus:
            settings = settings.model_copy(update={"corpus": list(chosen.corpus)})
        questions = half(load_devset(chosen.questions), request.half)
    k = request.k or settings.ask_k
    searcher, _ = open_searcher(settings)
    answerer = open_variant(request.variant, settings, searcher)
    label = f"{chosen.name} {request.half}/{request.variant}"
    effects = None
    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  transient=not sys.stderr.isatty(), disable=not sys.stderr.isatty()) as progress:
        task = progress.add_task("eval", total=len(questions))
        if request.ablate:
            from citerag.eval.ablation import ablate

            effects, answers = _ablated(chosen.kind, questions, settings, searcher, k,
                                        lambda: progress.advance(task))
            answerer = _Replay({q.question: a for q, a in zip(questions, answers, strict=True)})
            progress.update(task, total=len(questions), completed=0)
        if chosen.kind == "answers":
            results = evaluate_answers(answerer, questions, k=k, on_record=lambda _: progress.advance(task))
        else:
            results = evaluate_qa(lambda q: answerer.ask(q, k=k), bench, questions,
                                  search=lambda q: searcher.search(q, k=20, mode="hybrid"),
                                  on_record=lambda *_: progress.advance(task))
    summary = {key: round(value, 4) for key, value in results["summary"].items()}
    run_record = Run(chosen.name, request.half, request.variant, summary, results["questions"],
                     results.get("attribution", {}), {"k": k, "generator": settings.generator, "seed": request.seed},
                     chosen.description)
    record(run_record, request.out)
    lines = [f"{label}: " + ", ".join(f"{key} {value}" for key, value in summary.items())]
    if run_record.attribution:
        lines.append("lost at: " + ", ".join(f"{stage} {n}" for stage, n in run_record.attribution.items()))
    if effects is not None:
        from citerag.eval.ablation import effects_table

        record_ablation(run_record, effects, request.out)
        lines += ["", effects_table(effects)]
    return EvalOutcome({"summary": summary, "attribution": run_record.attribution}, "\n".join(lines))


class _Replay:
    """An answerer that returns answers already made (an ablation's run with every rule on)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers

    def ask(self, question: str, k: int | None = None) -> Any:  # noqa: ARG002 - the answer was made with k
        return self.answers[question]


def _ablated(kind: str, questions: list[Any], settings: Settings, searcher: Any, k: int,
             on_answer: Any) -> tuple[list[Any], list[Any]]:
    """Each rule's effect over ``questions`` (:func:`citerag.eval.ablation.ablate`), scored as ``kind``'s set
    scores a question, and the answers with every rule on."""
    from citerag.eval.ablation import ablate
    from citerag.eval.answers import judge as judge_answer
    from citerag.eval.qa import judge as judge_qa
    from citerag.service.answering.config import AnswerConfig
    from citerag.service.pipeline import open_answerer

    pipelines: dict[Any, Any] = {}

    def ask(question: Any, config: AnswerConfig) -> Any:
        if config not in pipelines:
            pipelines[config] = open_answerer(settings, searcher, config)
        return pipelines[config].ask(question.question, k=k)

    def score(question: Any, answer: Any) -> float:
        if kind == "answers":
            return float(bool(judge_answer(question, answer).correct)) if question.qrels else float(answer.abstained)
        graded = judge_qa(question, answer)
        return graded.f1 if kind == "span" else float(graded.decision == graded.gold_decision)

    return ablate(questions, ask, score, AnswerConfig.of(settings), on_answer)


def run_devset(request: EvalRequest) -> EvalOutcome:
    """Recall@1/5/10, MRR@10 and nDCG@10 of bm25, dense and hybrid on the dev set, by mode and by question kind.

    Raises:
        ValueError: the dev set does not exist.
    """
    from citerag.eval.retrieval import evaluate_devset, load_devset, markdown_table

    if not request.devset.is_file():
        raise ValueError(f"{request.devset}: dev set not found")
    settings = _settings(request.index_dir)
    settings = settings.model_copy(update={"backend": request.backend or settings.backend})
    suffix = "" if settings.backend == "embedded" else f"-{settings.backend}"
    results = evaluate_devset(open_searcher(settings)[0], load_devset(request.devset))
    table = markdown_table(results)
    (request.out / f"devset{suffix}.md").write_text(
        f"# Retrieval on the dev set ({results['questions']} answerable questions, document-level, "
        f"{settings.backend} backend)\n\n{table}\n"
    )
    (request.out / f"devset{suffix}.json").write_text(json.dumps(results, indent=2) + "\n")
    return EvalOutcome(results, table)


def run_benchmark(request: EvalRequest) -> EvalOutcome:
    """nDCG@10, Recall@10/100 and MRR@10 of bm25, dense, hybrid-rrf, hybrid-weighted and hybrid-bounded (not on
    Milvus) on a BEIR benchmark, its corpus indexed into ``request.index_dir`` or ``.citerag-bench/<name>``."""
    from citerag.eval.retrieval import (
        BENCHMARK_RUNS, bar_chart, evaluate_benchmark, load_beir, metrics_table, write_report,
    )

    assert request.benchmark is not None
    bench = load_beir(request.benchmark)
    settings = Settings(index_dir=request.index_dir or BENCH_INDEXES / bench.name, corpus=[bench.corpus])
    settings = settings.model_copy(update={"backend": request.backend or settings.backend})
    suffix = "" if settings.backend == "embedded" else f"-{settings.backend}"
    started = time.perf_counter()
    searcher, held = open_searcher(settings)
    runs = {
        name: run for name, run in BENCHMARK_RUNS.items() if settings.backend == "embedded" or name != "hybrid-bounded"
    }
    results = evaluate_benchmark(searcher, bench, runs)
    results["settings"] = {
        **held,
        "backend": settings.backend,
        "candidates": settings.candidates,
        "rrf_k": settings.rrf_k,
        "weights": [settings.weight_bm25, settings.weight_dense],
        "default_fusion": settings.fusion,
        "seconds": round(time.perf_counter() - started, 1),
    }
    table = metrics_table(results["runs"])
    generated = (
        f"{table}\n\n{results['queries']} queries, {held['documents']} documents in {held['passages']} "
        f"passages; document score = best passage (MaxP). Settings: `{json.dumps(results['settings'])}`. "
        f"Produced by `citerag eval --benchmark {request.benchmark}"
        f"{' --backend ' + settings.backend if suffix else ''}`."
    )
    name = f"{bench.name}{suffix}"
    write_report(request.out / f"{name}.md", generated, f"Retrieval on {bench.name} ({settings.backend} backend)")
    (request.out / f"{name}.json").write_text(json.dumps(results, indent=2) + "\n")
    bar_chart(results["runs"], f"{bench.name} ({results['queries']} queries)", request.out / f"{name}.png")
    return EvalOutcome(results, table)


def run_answers(request: EvalRequest) -> EvalOutcome:
    """Answer accuracy, citation precision and recall, abstention and latency on one half of the dev set, each
    question asked through the ``/ask`` code path with ``request.k`` passages."""
    from citerag.eval.answers import evaluate_answers
    from citerag.eval.qa import half
    from citerag.eval.retrieval import load_devset, metrics_table, write_report
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup, open_answerer, open_retriever

    devset, which, label = request.devset, request.half, request.label
    settings = _settings(request.index_dir)
    k = request.k or settings.ask_k
    index = ensure_index(index_setup(settings), show_progress=True)
    answerer = open_answerer(settings, open_retriever(settings, index))
    results = evaluate_answers(answerer, half(load_devset(devset), which), k=k)
    summary = {key: round(value, 3) for key, value in results["summary"].items()}
    model = settings.generator_path.name if settings.generator_path else settings.generator
    lines = [f"Model {model}, k = {k}, {which} half of `{devset.name}`; "
             f"produced by `citerag eval --answers --devset {devset.name} --half {which} --k {k} --label {label}`.",
             "", metrics_table({label: summary}, "setting"), "",
             "| qid | kind | correct | abstained | relevant/citations | answer |", "|---|---|---|---|---|---|"]
    for q in results["questions"]:
        answer = q["answer"].replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {q['qid']} | {q['kind']} | {q['correct']} | {q['abstained']} | "
                     f"{q['relevant_citations']}/{q['citations']} | {answer} |")
    name = f"answers_{devset.stem}_{which}_{label}"
    write_report(request.out / f"{name}.md", "\n".join(lines), f"Answers on {devset.name} ({which} half)")
    (request.out / f"{name}.json").write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return EvalOutcome(results["summary"], metrics_table({"default": summary}, "setting"))


def run_qa(request: EvalRequest) -> EvalOutcome:
    """A QA benchmark's questions (``request.half``, sampled) asked through the ``/ask`` code path over an index of
    its corpus in ``.citerag-bench/<name>``; writes ``qa_<name>_<label>.json`` (token F1 and span hit for span
    benchmarks, decision accuracy for yes/no ones, risk-coverage)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    from citerag.eval.qa import evaluate_qa, half, load_qa, sample
    from citerag.index.lifecycle import ensure_index
    from citerag.service.pipeline import index_setup, open_answerer, open_retriever

    assert request.qa is not None
    which, n, seed = request.half, request.sample, request.seed
    bench = load_qa(request.qa)
    questions = sample(half(bench.questions, which), n, seed)
    settings = _settings(None).model_copy(update={"index_dir": BENCH_INDEXES / bench.name, "corpus": [bench.corpus]})
    k = request.k or settings.ask_k
    retriever = open_retriever(settings, ensure_index(index_setup(settings), show_progress=True))
    answerer = open_answerer(settings, retriever)
    key = "token_f1" if bench.kind == "span" else "accuracy"
    with Progress(
        TextColumn(f"{bench.name} {which}"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[score]}"),
        TimeRemainingColumn(), transient=not sys.stderr.isatty(), disable=not sys.stderr.isatty(),
    ) as progress:
        task = progress.add_task("qa", total=len(questions), score="")

        def on_record(_: Any, running: dict[str, float]) -> None:
            progress.update(task, advance=1, score=f"{key} {running[key]:.3f}")

        results = evaluate_qa(
            lambda q: answerer.ask(q, k=k), bench, questions,
            search=lambda q: retriever.search(q, k=20, mode="hybrid"), on_record=on_record,
        )
    results["settings"] = {
        "k": k, "half": which, "sample": n, "seed": seed,
        "evidence_sentences": settings.evidence_sentences, "min_confidence": settings.min_confidence,
        "generator": settings.generator_path.name if settings.generator_path else settings.generator,
    }
    out = request.out / f"qa_{bench.name}_{request.label}.json"
    out.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    summary = {name: round(value, 3) for name, value in results["summary"].items()}
    return EvalOutcome(summary, "\n".join(f"{name}: {value}" for name, value in summary.items()))
