"""Answer one dev half's questions of some kinds under several answering configurations, side by side.

    python -m experiments.variants --set ml --kinds yesno --variant base --variant focus=fact_papers:2

QA benchmark sets (covidqa, pubmedqa) are scored by span hit and by decision. Each ``--variant
NAME[=FIELD:VALUE,...]`` is the default :class:`~citerag.service.answering.config.AnswerConfig`
with those fields changed (``rules.NAME:false`` switches a rule off). Prints each question's outcome under each
variant and each variant's accuracy; nothing is recorded (``citerag eval`` records).
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from typing import Any

from citerag.eval.answers import judge
from citerag.eval.qa import half, load_qa, sample
from citerag.eval.qa import judge as judge_qa
from citerag.eval.retrieval import load_devset
from citerag.eval.runner import open_searcher
from citerag.eval.sets import get_set
from citerag.service.answering.config import AnswerConfig
from citerag.service.pipeline import open_answerer
from citerag.service.settings import Settings


def configured(base: AnswerConfig, spec: str) -> AnswerConfig:
    """``base`` with the changes ``FIELD:VALUE,...`` of ``spec`` (JSON values; ``rules.NAME:false``)."""
    config = base
    for change in filter(None, spec.split(",")):
        field, value = change.split(":", 1)
        parsed: Any = json.loads(value)
        if field.startswith("rules."):
            config = replace(config, rules=replace(config.rules, **{field[6:]: parsed}))
        else:
            config = replace(config, **{field: parsed})
    return config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--set", default="ml")
    p.add_argument("--half", default="dev", choices=("dev", "test"))
    p.add_argument("--kinds", default="", help="comma-separated gold kinds (default: all)")
    p.add_argument("--sample", type=int, default=0, help="QA sets: questions of the half (default: the set's)")
    p.add_argument("--variant", action="append", default=[], help="NAME[=FIELD:VALUE,...]")
    args = p.parse_args()
    chosen = get_set(args.set)
    settings = Settings(index_dir=chosen.index_dir) if chosen.index_dir else Settings()
    if chosen.kind != "answers":  # a QA benchmark: its corpus, a fixed sample of the half
        bench = load_qa(chosen.questions)
        settings = settings.model_copy(update={"corpus": [bench.corpus]})
        questions: list[Any] = sample(half(bench.questions, args.half), args.sample or chosen.sample, 0)
    else:
        if chosen.corpus:
            settings = settings.model_copy(update={"corpus": list(chosen.corpus)})
        questions = half(load_devset(chosen.questions), args.half)
        kinds = set(filter(None, args.kinds.split(",")))
        questions = [q for q in questions if not kinds or q.kind in kinds]
    searcher, _ = open_searcher(settings)
    base = AnswerConfig.of(settings)
    totals: dict[str, list[bool]] = {}
    for spec in args.variant or ["base"]:
        name, _, changes = spec.partition("=")
        answerer = open_answerer(settings, searcher, configured(base, changes))
        started = time.perf_counter()
        for q in questions:
            answer = answerer.ask(q.question)
            if chosen.kind == "answers":
                record = judge(q, answer)
                right = bool(record.correct) if q.qrels else answer.abstained
                lost_at = record.lost_at
            else:
                graded = judge_qa(q, answer)
                right = graded.decision == graded.gold_decision if chosen.kind == "decision" else graded.span_hit
                lost_at = f"f1 {graded.f1:.2f}"
            totals.setdefault(name, []).append(right)
            print(json.dumps({"variant": name, "qid": q.qid, "right": right, "decision": answer.decision,
                              "p": answer.decision_probabilities, "lost_at": lost_at,
                              "answer": answer.answer[:160], "raw": answer.raw[:160]}, ensure_ascii=False),
                  flush=True)
        print(f"# {name}: {sum(totals[name])}/{len(totals[name])} right, "
              f"{(time.perf_counter() - started) / max(1, len(questions)):.1f} s a question", flush=True)
    for name, rights in totals.items():
        print(f"{name}: {sum(rights)}/{len(rights)}")


if __name__ == "__main__":
    main()
