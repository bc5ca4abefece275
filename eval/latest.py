"""Where evaluation results live, so that "what does main score today?" has one answer.

* ``eval/results/<set>.json``: the current figures of one evaluation set, one row per ``half/variant`` run (its
  summary, failure attribution, commit, machine and date) and that run's answers, so they can be read;
* ``eval/results/LATEST.md``: generated from those files, one table per set, every row naming its commit, machine
  and date;
* ``eval/results/HISTORY.md``: one line appended per run;
* ``eval/runs/`` (git-ignored): every run's raw per-question output, one JSON file per run.

:func:`record` does all four for one finished run.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from citerag.eval.provenance import commit, machine, today
from citerag.service.settings import PROJECT_ROOT

RESULTS = PROJECT_ROOT / "eval" / "results"
RUNS = PROJECT_ROOT / "eval" / "runs"
LATEST, HISTORY = "LATEST.md", "HISTORY.md"
#: Summary metrics shown in LATEST.md, in this order, where a set's runs have them (others are kept in the JSON).
COLUMNS = (
    "questions", "facts", "fact", "number", "which-paper", "yesno", "two-paper", "both_named", "papers_named",
    "off_corpus_abstained",
    "answer_accuracy", "citation_precision", "readable", "token_f1", "span_hit", "accuracy", "macro_f1",
    "nDCG@10", "Recall@10", "MRR@10", "median_total_ms",
)
_HEADLINE = ("facts", "yesno", "two-paper", "off_corpus_abstained", "answer_accuracy", "citation_precision", "token_f1",
             "span_hit", "accuracy", "macro_f1", "nDCG@10")


@dataclass
class Run:
    """One finished evaluation run.

    Attributes:
        set: the evaluation set's name (:data:`citerag.eval.sets.SETS`).
        half: ``dev``, ``test`` or ``all``.
        variant: what answered (``service``, ``anchor``, an ablation's name).
        summary: metric -> value (accuracies in ``[0, 1]``, times in ms).
        questions: one record per question (dicts; whatever the set's evaluation keeps).
        attribution: stage -> number of questions lost there (:mod:`citerag.eval.attribution`); empty where not
            attributed.
        settings: what was run (k, model, switches).
        description: one line on what the set is.
        commit, machine, date: provenance (:mod:`citerag.eval.provenance`), filled when not given.
    """

    set: str
    half: str
    variant: str
    summary: dict[str, float]
    questions: list[dict[str, Any]] = field(default_factory=list)
    attribution: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    commit: str = ""
    machine: str = ""
    date: str = ""

    def __post_init__(self) -> None:
        self.commit = self.commit or commit()
        self.machine = self.machine or machine()
        self.date = self.date or today()

    @property
    def key(self) -> str:
        """The row's key in its set's file: ``half/variant``."""
        return f"{self.half}/{self.variant}"


def record(run: Run, results: Path = RESULTS, runs: Path | None = RUNS) -> Path:
    """Keep ``run``: its raw output in ``runs`` (``None``: not kept), its row and answers in
    ``results/<set>.json`` (replacing the row of the same half and variant), ``results/LATEST.md`` regenerated and
    a line appended to ``results/HISTORY.md``; returns the set's JSON file."""
    results.mkdir(parents=True, exist_ok=True)
    if runs is not None:
        runs.mkdir(parents=True, exist_ok=True)
        stamp = re.sub(r"\W", "-", f"{run.date}_{run.set}_{run.half}_{run.variant}_{run.commit}")
        (runs / f"{stamp}.json").write_text(json.dumps(asdict(run), indent=1, ensure_ascii=False) + "\n")
    path = results / f"{run.set}.json"
    current = json.loads(path.read_text()) if path.is_file() else {"set": run.set, "rows": {}, "questions": {}}
    current["description"] = run.description or current.get("description", "")
    row = {k: v for k, v in asdict(run).items() if k not in ("questions", "set", "description")}
    current["rows"][run.key] = row
    current["questions"][run.key] = run.questions
    current["rows"] = dict(sorted(current["rows"].items()))
    path.write_text(json.dumps(current, indent=1, ensure_ascii=False) + "\n")
    (results / LATEST).write_text(latest_markdown(results))
    with (results / HISTORY).open("a", encoding="utf-8") as history:
        if history.tell() == 0:
            history.write("# Evaluation history\n\nOne line per `citerag eval` run, oldest first.\n\n")
        history.write(history_line(run) + "\n")
    return path


def record_ablation(run: Run, effects: Sequence[Any], results: Path = RESULTS) -> None:
    """Keep the rule ablation of ``run``'s set and half (:mod:`citerag.eval.ablation`) in the set's file, and
    regenerate LATEST.md."""
    from citerag.eval.ablation import effects_table

    path = results / f"{run.set}.json"
    current = json.loads(path.read_text())
    current.setdefault("ablation", {})[run.half] = {
        "commit": run.commit, "machine": run.machine, "date": run.date, "table": effects_table(effects),
        "effects": [{"rule": e.rule, "acted": e.acted, "with": e.with_rule, "without": e.without_rule}
                    for e in effects],
    }
    path.write_text(json.dumps(current, indent=1, ensure_ascii=False) + "\n")
    (results / LATEST).write_text(latest_markdown(results))


def history_line(run: Run) -> str:
    """One line of HISTORY.md: date, commit, set, half, variant, the headline metrics, machine."""
    figures = ", ".join(f"{name} {_cell(name, run.summary[name])}" for name in _HEADLINE if name in run.summary)
    return f"- {run.date} `{run.commit}` **{run.set}** {run.half}/{run.variant}: {figures} ({run.machine})"


def latest_markdown(results: Path = RESULTS) -> str:
    """LATEST.md from every ``results/*.json`` set file: one table per set (rows ``half/variant``), then its
    failure attribution where it has one."""
    parts = ["# Current results", "",
             "Generated by `citerag eval` from the set files beside it; history in `HISTORY.md`. Accuracies are "
             "shares in [0, 1]; `facts` pools the fact, number and which-paper questions.", ""]
    for path in sorted(results.glob("*.json")):
        data = json.loads(path.read_text())
        rows: Mapping[str, Mapping[str, Any]] = data.get("rows", {}) if isinstance(data, dict) else {}
        if not rows:  # not a set file
            continue
        parts += [f"## {data['set']}", ""]
        if data.get("description"):
            parts += [data["description"], ""]
        parts += [_table(rows), ""]
        attributed = {key: row["attribution"] for key, row in rows.items() if row.get("attribution")}
        if attributed:
            parts += ["Where the wrong answers were lost (questions):", "", _attribution_table(attributed), ""]
        for half, ablation in sorted(data.get("ablation", {}).items()):
            parts += [f"Rule ablation, {half} half (`{ablation['commit']}`, {ablation['machine']}, {ablation['date']}):"
                      " each rule's questions answered again with it off; gain = score with it - score without it"
                      " (right: the grade; readable: no readability rule broken).",
                      "", ablation["table"], ""]
    return "\n".join(parts)


def _table(rows: Mapping[str, Mapping[str, Any]]) -> str:
    present = [c for c in COLUMNS if any(c in row["summary"] for row in rows.values())]
    head = ["run", *present, "commit", "machine", "date"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(present) + "---|---|---|"]
    for key, row in rows.items():
        cells = [_cell(c, row["summary"].get(c)) for c in present]
        lines.append("| " + " | ".join([key, *cells, f"`{row['commit']}`", row["machine"], row["date"]]) + " |")
    return "\n".join(lines)


def _attribution_table(rows: Mapping[str, Mapping[str, int]]) -> str:
    stages: list[str] = []
    for counts in rows.values():
        stages += [stage for stage in counts if stage not in stages]
    lines = ["| run | " + " | ".join(stages) + " |", "|---|" + "---:|" * len(stages)]
    lines += ["| " + " | ".join([key, *(str(counts.get(s, 0)) for s in stages)]) + " |" for key, counts in rows.items()]
    return "\n".join(lines)


def _cell(name: str, value: float | None) -> str:
    """A table cell: counts and times (``questions``, ``*_ms``) whole, shares to 3 decimals, ``-`` when absent."""
    if value is None:
        return "-"
    return f"{value:.0f}" if name == "questions" or name.endswith("_ms") else f"{value:.3f}"


def rows_of(results: Path, set_name: str) -> dict[str, Any]:
    """The current rows of ``set_name`` (``{}`` when it has none)."""
    path = results / f"{set_name}.json"
    return json.loads(path.read_text()).get("rows", {}) if path.is_file() else {}


def keep_questions(records: Sequence[Mapping[str, Any]], keys: Sequence[str]) -> list[dict[str, Any]]:
    """``records`` cut to ``keys`` (the fields worth reading in a set file; the raw run keeps everything)."""
    return [{k: record[k] for k in keys if k in record} for record in records]
