"""``citerag eval``: the evaluation runner's options (typer), parsed into an
:class:`~citerag.eval.runner.EvalRequest` for :func:`~citerag.eval.runner.run`.

The command joins ``citerag`` through the ``citerag.commands`` entry point (``pyproject.toml``), which the service's
command line (:mod:`citerag.service.cli`) loads, so service/ never imports eval/; ``python -m citerag.eval`` runs it
alone (:mod:`citerag.eval.__main__`). Nothing heavy is imported before the command runs (``citerag --help`` stays
fast).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from citerag.eval.runner import DEVSET, RESULTS, EvalRequest, run


def eval_command(
    set_name: Annotated[
        str | None,
        typer.Option("--set", help="A named evaluation set (shipped, ml, covidqa, pubmedqa): its --half answered by "
                     "--variant, recorded in eval/results/ (LATEST.md, HISTORY.md)."),
    ] = None,
    variant: Annotated[
        str, typer.Option(help="--set: what answers: service (the pipeline) or anchor (one plain prompt over the top "
                          "document read whole).")
    ] = "service",
    ablate: Annotated[
        bool, typer.Option("--ablate", help="--set: also measure what each rule of the service earns (each rule's "
                           "questions answered again with it switched off).")
    ] = False,
    benchmark: Annotated[
        Path | None,
        typer.Option(help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) instead of the dev set."),
    ] = None,
    answers: Annotated[
        bool, typer.Option("--answers", help="Evaluate answers (accuracy, citations, abstention).")
    ] = False,
    qa: Annotated[
        Path | None,
        typer.Option(
            help="A QA benchmark folder (corpus.jsonl, questions.jsonl: COVID-QA spans or PubMedQA decisions)."
        ),
    ] = None,
    sample: Annotated[int | None, typer.Option(min=1, help="--qa: a fixed sample of this many questions.")] = None,
    seed: Annotated[int, typer.Option(help="--qa: the sample's random seed.")] = 0,
    half: Annotated[
        Literal["dev", "test", "all"],
        typer.Option(help="--qa / --answers: odd question ids (dev), even (test), or all."),
    ] = "test",
    label: Annotated[str, typer.Option(help="--qa / --answers: name of this run in the results files.")] = "default",
    k: Annotated[
        int | None, typer.Option(help="Passages per question for --answers (default: CITERAG_ASK_K).")
    ] = None,
    devset: Annotated[Path, typer.Option(help="Dev set JSONL.")] = DEVSET,
    out: Annotated[Path, typer.Option(help="Directory for the results (Markdown, JSON, PNG).")] = RESULTS,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON instead of a table.")] = False,
    index_dir: Annotated[
        Path | None, typer.Option("--index-dir", help="Index directory (default .citerag/ or $CITERAG_INDEX_DIR).")
    ] = None,
    backend: Annotated[
        Literal["embedded", "milvus"] | None,
        typer.Option(help="Retrieval backend (default $CITERAG_BACKEND, else embedded); milvus has no bounded fusion."),
    ] = None,
) -> None:
    """Retrieval quality. Dev set: Recall@1/5/10, MRR@10, nDCG@10 for bm25, dense and hybrid. --benchmark: nDCG@10,
    Recall@10/100, MRR@10 for bm25, dense, hybrid-rrf and hybrid-weighted, indexed into a separate directory."""
    outcome = run(EvalRequest(
        benchmark=benchmark, answers=answers, qa=qa, sample=sample, seed=seed, half=half, label=label, k=k,
        devset=devset, out=out, index_dir=index_dir, backend=backend, set=set_name, variant=variant, ablate=ablate,
    ))
    typer.echo(json.dumps(outcome.data, indent=2) if json_out else outcome.text)
