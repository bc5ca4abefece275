"""The evaluation sets whose current figures ``eval/results/LATEST.md`` shows, each with the corpus it is asked
over and how it is split into a dev half (for tuning) and a test half (scored at most once a round, never tuned on):

* ``shipped``: ``eval/devset.jsonl``, 72 questions over the 38 shipped abstracts (halves by question id);
* ``shipped-fresh``: ``eval/shipped_fresh_questions.jsonl``, 120 questions over the same abstracts written apart
  from the service (halves by question id);
* ``ml``: ``eval/ml_questions.jsonl``, 221 questions over the 22,981 ML abstracts, written by helpers who read only
  the abstracts (``eval/ml_questions.md``; halves by document);
* ``covidqa``: COVID-QA's expert questions over full COVID-19 papers (gold spans; halves by document; a fixed
  sample of 100 per half);
* ``pubmedqa``: PubMedQA's yes/no/maybe questions over PubMed abstracts (halves by document; 100 per half).

The benchmark sets read ``../shared/`` beside the repository; a fresh clone without it gets a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from citerag.index.errors import CiteragError
from citerag.service.settings import PROJECT_ROOT

SHARED = PROJECT_ROOT.parent / "shared"
BENCH_INDEXES = PROJECT_ROOT / ".citerag-bench"
SetKind = Literal["answers", "span", "decision"]


@dataclass(frozen=True, slots=True)
class EvalSet:
    """One evaluation set.

    Attributes:
        name: its name in ``citerag eval --set`` and in ``eval/results/<name>.json``.
        kind: ``answers`` (a question file graded by :mod:`citerag.eval.answers`), ``span`` or ``decision`` (a QA
            benchmark folder graded by :mod:`citerag.eval.qa`).
        questions: the question file or benchmark folder.
        corpus: the corpus files it is asked over (``()``: the settings' corpus, the shipped abstracts).
        index_dir: where that corpus is indexed (``None``: the settings' index directory).
        sample: a fixed sample of this many questions per half (``None``: all).
        description: one line for LATEST.md.
    """

    name: str
    kind: SetKind
    questions: Path
    corpus: tuple[Path, ...] = ()
    index_dir: Path | None = None
    sample: int | None = None
    description: str = ""

    def check(self) -> None:
        """Raise :class:`~citerag.index.errors.CiteragError` naming what is missing (a fresh clone has no
        ``../shared/``)."""
        for path in (self.questions, *self.corpus):
            if not path.exists():
                raise CiteragError(f"{path}: not found; the {self.name!r} evaluation set needs it "
                                   f"(the benchmark sets read ../shared/ beside the repository)")


_ML_CORPUS = SHARED / "corpora" / "ml_abstracts.jsonl.gz"
SETS: dict[str, EvalSet] = {
    "shipped": EvalSet(
        "shipped", "answers", PROJECT_ROOT / "eval" / "devset.jsonl",
        description="72 questions over the 38 shipped ICML 2026 abstracts (`eval/devset.jsonl`; halves by question "
                    "id)."),
    "shipped-fresh": EvalSet(
        "shipped-fresh", "answers", PROJECT_ROOT / "eval" / "shipped_fresh_questions.jsonl",
        description="120 questions over the 38 shipped abstracts, written apart from the service by four helpers "
                    "who read only the abstracts (`eval/shipped_fresh_questions.jsonl`; halves by question id)."),
    "ml": EvalSet(
        "ml", "answers", PROJECT_ROOT / "eval" / "ml_questions.jsonl", (_ML_CORPUS,), BENCH_INDEXES / "ml",
        description="221 questions over the 22,981 ML abstracts, written apart from the service "
                    "(`eval/ml_questions.jsonl`; halves by document)."),
    "covidqa": EvalSet(
        "covidqa", "span", SHARED / "benchmarks" / "covidqa", index_dir=BENCH_INDEXES / "covidqa", sample=100,
        description="COVID-QA: expert questions over full COVID-19 papers, gold answer spans (halves by document, "
                    "100 questions of each, seed 0)."),
    "pubmedqa": EvalSet(
        "pubmedqa", "decision", SHARED / "benchmarks" / "pubmedqa", index_dir=BENCH_INDEXES / "pubmedqa", sample=100,
        description="PubMedQA: yes/no/maybe questions over PubMed abstracts without their conclusions (halves by "
                    "document, 100 questions of each, seed 0)."),
}


def get_set(name: str) -> EvalSet:
    """The set called ``name``.

    Raises:
        ValueError: no such set (the message lists them).
    """
    try:
        return SETS[name]
    except KeyError:
        raise ValueError(f"unknown evaluation set {name!r}; one of {', '.join(SETS)}") from None
