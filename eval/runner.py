"""The evaluation runner: opens what an evaluation needs through the service's wiring
(:mod:`citerag.service.pipeline`), runs it, and records it (:mod:`citerag.eval.latest`: ``eval/results/``).
``citerag eval`` (:mod:`citerag.eval.cli`) and ``python -m citerag.eval`` parse their options into an
:class:`EvalRequest` and call :func:`run`.

Three evaluations, one per request:

* one half of a named evaluation set (:mod:`citerag.eval.sets`) answered by a variant (:func:`run_set`): the
  service, the service with a setting changed, or the plain-prompt anchor; optionally with each rule's ablation;
* the shipped dev set's retrieval (:func:`run_devset`) and a BEIR benchmark's (:func:`run_benchmark`), indexed into
  ``.citerag-bench/<name>/``: rows of the ``retrieval`` set.

Answers come from the answerer :func:`citerag.service.pipeline.open_answerer` makes, used only through
``answerer.ask(question, k=k)`` and the attributes of what it returns (:class:`citerag.eval.answers.AnswerLike`).
The conversational evaluation has its own entry point (``python -m citerag.eval.conversations``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from citerag.eval.latest import RESULTS, RUNS
from citerag.eval.qa import Half
from citerag.service.settings import PROJECT_ROOT, Settings

DEVSET = PROJECT_ROOT / "eval" / "devset.jsonl"
BENCH_INDEXES = Path(".citerag-bench")  # where benchmark corpora are indexed, one directory each

Backend = Literal["embedded", "milvus"]


@dataclass(frozen=True)
class EvalRequest:
    """One evaluation, as ``citerag eval``'s options give it.

    Attributes:
        set: a named evaluation set (:data:`citerag.eval.sets.SETS`) whose ``half`` is answered; ``None``: a
            retrieval evaluation (``benchmark`` or the dev set).
        variant: what answers ``set`` (:data:`VARIANTS`).
        ablate: also measure each rule's effect (:mod:`citerag.eval.ablation`; the service only).
        half: ``dev``, ``test`` or ``all`` (how each set splits: :func:`citerag.eval.qa.half`).
        seed: a QA set's sample's random seed.
        k: passages per question (``None``: the settings' ``ask_k``).
        benchmark: a BEIR folder (``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``): its retrieval.
        devset: the dev set (JSONL) whose retrieval is measured when neither ``set`` nor ``benchmark`` is given.
        out: the results directory (created when missing).
        index_dir: the index (default: the settings' for the dev set, ``.citerag-bench/<name>`` for a benchmark).
        backend: the retrieval backend for retrieval runs (``None``: the settings').
    """

    set: str | None = None
    variant: str = "service"
    ablate: bool = False
    half: Half = "test"
    seed: int = 0
    k: int | None = None
    benchmark: Path | None = None
    devset: Path = DEVSET
    out: Path = RESULTS
    index_dir: Path | None = None
    backend: Backend | None = None

    @property
    def runs(self) -> Path:
        """Where raw per-question outputs go: ``eval/runs/`` for the repository's results, else ``runs/`` beside
        ``out``."""
        return RUNS if self.out == RESULTS else self.out.parent / "runs"


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
    from citerag.eval.provenance import commit

    measured = commit()  # the code that answers: the checkout as the run starts, whatever is committed meanwhile
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
                     chosen.description, commit=measured)
    record(run_record, request.out, request.runs)
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

    def score(question: Any, answer: Any) -> dict[str, float]:
        if kind == "answers":
            record = judge_answer(question, answer)
            right = float(bool(record.correct)) if question.qrels else float(answer.abstained)
            return {"right": right, "readable": float(not record.readability)}
        graded = judge_qa(question, answer)
        return {"right": graded.f1 if kind == "span" else float(graded.decision == graded.gold_decision)}

    return ablate(questions, ask, score, AnswerConfig.of(settings), on_answer)


def run_devset(request: EvalRequest) -> EvalOutcome:
    """Recall@1/5/10, MRR@10 and nDCG@10 of bm25, dense and hybrid on the dev set's answerable questions (the
    shipped corpus), recorded as rows of the ``retrieval`` set (:func:`_record_retrieval`).

    Raises:
        ValueError: the dev set does not exist.
    """
    from citerag.eval.retrieval import evaluate_devset, load_devset, markdown_table

    if not request.devset.is_file():
        raise ValueError(f"{request.devset}: dev set not found")
    settings = _settings(request.index_dir)
    settings = settings.model_copy(update={"backend": request.backend or settings.backend})
    results = evaluate_devset(open_searcher(settings)[0], load_devset(request.devset))
    _record_retrieval(request, request.devset.stem, settings.backend, results["modes"],
                      f"{results['questions']} answerable questions of `{request.devset.name}`")
    return EvalOutcome(results, markdown_table(results))


def run_benchmark(request: EvalRequest) -> EvalOutcome:
    """nDCG@10, Recall@10/100 and MRR@10 of bm25, dense, hybrid-rrf, hybrid-weighted and hybrid-bounded (not on
    Milvus) on a BEIR benchmark, its corpus indexed into ``request.index_dir`` or ``.citerag-bench/<name>``; recorded
    as rows of the ``retrieval`` set."""
    from citerag.eval.retrieval import BENCHMARK_RUNS, evaluate_benchmark, load_beir, metrics_table

    assert request.benchmark is not None
    bench = load_beir(request.benchmark)
    settings = Settings(index_dir=request.index_dir or BENCH_INDEXES / bench.name, corpus=[bench.corpus])
    settings = settings.model_copy(update={"backend": request.backend or settings.backend})
    searcher, held = open_searcher(settings)
    runs = {
        name: run for name, run in BENCHMARK_RUNS.items() if settings.backend == "embedded" or name != "hybrid-bounded"
    }
    results = evaluate_benchmark(searcher, bench, runs)
    _record_retrieval(request, bench.name, settings.backend, results["runs"],
                      f"{results['queries']} queries, {held['documents']} documents in {held['passages']} passages")
    return EvalOutcome(results, metrics_table(results["runs"]))


def _record_retrieval(request: EvalRequest, dataset: str, backend: str, runs: dict[str, dict[str, float]],
                      what: str) -> None:
    """One row of the ``retrieval`` set per retrieval mode (``all/<dataset>-<mode>[-<backend>]``), documents ranked
    by their best passage (MaxP)."""
    from citerag.eval.latest import Run, record

    suffix = "" if backend == "embedded" else f"-{backend}"
    description = ("Document-level retrieval (a document ranked by its best passage, MaxP; ir-measures): the "
                   "shipped dev set and BEIR benchmarks, by mode.")
    for mode, metrics in runs.items():
        record(Run("retrieval", "all", f"{dataset}-{mode}{suffix}", {k: round(v, 4) for k, v in metrics.items()},
                   settings={"what": what, "backend": backend}, description=description), request.out, request.runs)
