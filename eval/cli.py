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
        typer.Option("--set", help="A named evaluation set (shipped, shipped-fresh, ml, covidqa, pubmedqa): its --half "
                     "answered by --variant, recorded in eval/results/ (LATEST.md, HISTORY.md)."),
    ] = None,
    variant: Annotated[
        str, typer.Option(help="--set: what answers: service (the pipeline), two-papers (the pipeline reading the "
                          "best two papers together) or anchor (one plain prompt over the top document read whole).")
    ] = "service",
    ablate: Annotated[
        bool, typer.Option("--ablate", help="--set: also measure what each rule of the service earns (each rule's "
                           "questions answered again with it switched off).")
    ] = False,
    half: Annotated[
        Literal["dev", "test", "all"], typer.Option(help="--set: the dev half (for tuning), the test half, or all.")
    ] = "test",
    seed: Annotated[int, typer.Option(help="--set: a QA benchmark's sample's random seed.")] = 0,
    k: Annotated[int | None, typer.Option(help="--set: passages per question (default: CITERAG_ASK_K).")] = None,
    benchmark: Annotated[
        Path | None,
        typer.Option(help="A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv): its retrieval."),
    ] = None,
    devset: Annotated[Path, typer.Option(help="The dev set whose retrieval is measured (no --set).")] = DEVSET,
    out: Annotated[Path, typer.Option(help="Directory for the results (LATEST.md, HISTORY.md, set files).")] = RESULTS,
    json_out: Annotated[bool, typer.Option("--json", help="Print the results as JSON instead of a table.")] = False,
    index_dir: Annotated[
        Path | None, typer.Option("--index-dir", help="Index directory (default .citerag/ or $CITERAG_INDEX_DIR).")
    ] = None,
    backend: Annotated[
        Literal["embedded", "milvus"] | None,
        typer.Option(help="Retrieval backend (default $CITERAG_BACKEND, else embedded); milvus has no bounded fusion."),
    ] = None,
) -> None:
    """Evaluate and record the figures in eval/results/. --set NAME --half dev|test: answers (accuracy by question
    kind, citations, abstention, failure attribution; --ablate: each rule's gain). Without --set: retrieval
    (Recall@1/5/10, MRR@10, nDCG@10 by mode) on the dev set, or on a BEIR --benchmark."""
    outcome = run(EvalRequest(
        set=set_name, variant=variant, ablate=ablate, half=half, seed=seed, k=k, benchmark=benchmark,
        devset=devset, out=out, index_dir=index_dir, backend=backend,
    ))
    typer.echo(json.dumps(outcome.data, indent=2) if json_out else outcome.text)
