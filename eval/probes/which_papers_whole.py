"""Probe (issue 27, 2026-12-05; built as the which-papers judge's second judgement, ``eval/results/qa.md``
eighteenth round): is a candidate paper of a which-papers question told apart better when the model also reads the
paper whole?

For each which-papers question, the pipeline's own analyse, retrieve and select-evidence steps run; then, for each
candidate paper (each paper with an evidence sentence), the probe records:

* ``ratio``: its best evidence sentence's share of the best one's score;
* ``p_yes``: the shipped judgement, the question asked of one paper ("Does the paper ...?") over that paper's
  evidence sentences in the yes/no slot (:func:`~citerag.service.answering.prompts.paper_messages`);
* ``w_orig``: P(yes) of the shipped judge prompt (:func:`~citerag.service.answering.prompts.judge_messages`, the
  which-papers question as asked) over the paper read whole, after its saved state
  (:meth:`~citerag.service.answering.whole_paper.ReadPaper.ready`);
* ``w_polar``: P(yes) of the question asked of one paper over the paper read whole, after the same state
  (:func:`~citerag.service.answering.prompts.paper_whole_messages`);
* ``grade``: the paper's grade in the question's qrels (0: not listed); ``ms_*``: the model's prompt time.

Sets: dev = the odd half of ``eval/which_papers.jsonl`` and the seed questions' which-papers questions; held out =
its even half and the which-papers questions of ``eval/devset.jsonl`` (all in its test half). ``--analyse`` prints
paper-level precision / recall against every paper in the qrels for several scores, each at the threshold with the
best F1 on dev, and that threshold's figures on the held-out set.

Run: ``HF_HUB_OFFLINE=1 python -m eval.probes.which_papers_whole OUT.jsonl`` (~13 minutes on 2 cores), then
``python -m eval.probes.which_papers_whole --analyse OUT.jsonl``. Recorded:
``eval/results/probe_which_papers_whole.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eval.probes import before_the_model, open_probe

Row = dict[str, Any]
EVAL = Path(__file__).resolve().parents[1]
#: The scores compared (each a function of one candidate's row).
SCORES: dict[str, Callable[[Row], float]] = {
    "ratio * p_yes (shipped)": lambda r: r["ratio"] * r["p_yes"],
    "ratio * w_orig": lambda r: r["ratio"] * r["w_orig"],
    "ratio * w_polar": lambda r: r["ratio"] * r["w_polar"],
    "w_polar": lambda r: r["w_polar"],
    "ratio * sqrt(p_yes * w_polar)": lambda r: r["ratio"] * math.sqrt(r["p_yes"] * r["w_polar"]),
    "ratio * p_yes * w_polar (built)": lambda r: r["ratio"] * r["p_yes"] * r["w_polar"],
}


def question_sets() -> dict[str, list[dict[str, Any]]]:
    """The dev and held-out which-papers questions (module docstring)."""
    from eval.qa import half

    def load(name: str) -> list[dict[str, Any]]:
        return [json.loads(line) for line in (EVAL / name).read_text(encoding="utf-8").splitlines() if line.strip()]

    class Q(dict):
        qid = property(lambda self: self["qid"])

    which = [Q(q) for q in load("which_papers.jsonl")]
    seed = [q for q in load("seed_questions.jsonl") if q["kind"] == "which-papers"]
    devset = [q for q in load("devset.jsonl") if q["kind"] == "multi_doc"]
    return {"dev": [*half(which, "dev"), *seed], "test": [*half(which, "test"), *devset]}


def probe(out: Path) -> None:
    """Write one record a question (``set``, ``qid``, ``polar``, ``needed``, ``rows``) to ``out``."""
    from citerag.service.answering.choice import choose
    from citerag.service.answering.prompts import (
        DECISION_SLOT,
        YES_NO_GRAMMAR,
        judge_messages,
        paper_messages,
        paper_whole_messages,
    )
    from citerag.service.answering.whole_paper import ReadPaper

    settings, answerer = open_probe()
    generator = answerer.generator
    read_paper = next(step for step in answerer.components if isinstance(step, ReadPaper))
    with out.open("w", encoding="utf-8") as sink:
        for name, questions in question_sets().items():
            for q in questions:
                state = before_the_model(answerer, q["question"], settings.ask_k)
                if state.abstained or state.info is None or state.info.polar is None:
                    continue
                polar = state.info.polar
                by_doc: dict[str, list] = {}
                for item in state.evidence:
                    by_doc.setdefault(item.doc_id, []).append(item)
                best = max(item.score for item in state.evidence)
                rows = []
                for doc_id, items in by_doc.items():
                    first = choose(generator, paper_messages(polar, items), YES_NO_GRAMMAR, ["yes", "no"], pin=False,
                                   slot=DECISION_SLOT, fixed=1)
                    row = {"doc": doc_id, "ratio": max(i.score for i in items) / best,
                           "p_yes": first.probabilities["yes"], "grade": q["qrels"].get(doc_id, 0),
                           "ms_sentences": first.completion.prompt_ms}
                    whole = read_paper.read_document(items[0].result.document)
                    if whole is not None:
                        for key, messages in (("orig", judge_messages(state.info, whole)),
                                              ("polar", paper_whole_messages(polar, whole))):
                            read_paper.ready(whole)
                            choice = choose(generator, messages, YES_NO_GRAMMAR, ["yes", "no"], pin=False)
                            row[f"w_{key}"], row[f"ms_{key}"] = choice.probabilities["yes"], choice.completion.prompt_ms
                    rows.append(row)
                generator.pin(paper_messages(polar, []), slot=DECISION_SLOT, fixed=1)
                record = {"set": name, "qid": q["qid"], "polar": polar, "needed": list(q["qrels"]), "rows": rows}
                sink.write(json.dumps(record) + "\n")
                sink.flush()


def precision_recall(records: list[dict[str, Any]], score: Callable[[Row], float], bar: float) -> tuple[float, float]:
    """Paper-level precision and recall of naming every candidate whose ``score`` reaches ``bar``, against every
    paper in the qrels."""
    named = relevant = needed = 0
    for record in records:
        chosen = [row for row in record["rows"] if score(row) >= bar]
        named += len(chosen)
        relevant += sum(row["grade"] > 0 for row in chosen)
        needed += len(record["needed"])
    return relevant / max(1, named), relevant / max(1, needed)


def analyse(path: Path) -> None:
    """Print each score's best-F1 threshold on dev and its figures on dev and held out (module docstring)."""
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    dev = [r for r in records if r["set"] == "dev"]
    test = [r for r in records if r["set"] == "test"]
    for name, score in SCORES.items():
        def f1(bar: float, score: Callable[[Row], float] = score) -> float:
            p, r = precision_recall(dev, score, bar)
            return 2 * p * r / max(1e-9, p + r)

        bar = max((i / 100 for i in range(5, 95)), key=f1)
        d, t = precision_recall(dev, score, bar), precision_recall(test, score, bar)
        print(f"{name:34s} bar {bar:.2f}  dev P/R {d[0]:.3f} / {d[1]:.3f}  held out {t[0]:.3f} / {t[1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--analyse", action="store_true", help="analyse a recorded OUT instead of probing")
    args = parser.parse_args()
    analyse(args.out) if args.analyse else probe(args.out)


if __name__ == "__main__":
    main()
