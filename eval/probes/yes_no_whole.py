"""Probe (issue 27, 2026-12-05, eighteenth round of ``eval/results/qa.md``): a yes/no question's conclusion and
decision over the answer's paper read whole, after that paper's start of the yes/no conversation was read and kept
(as a saved state would be), against the shipped conversation over the chosen evidence sentences.

For each yes/no question over the shipped abstracts, the pipeline's analyse, retrieve and select-evidence steps run
(the judge does not run for a yes/no question over this corpus, and the read-paper step skips it); then the write
step (:class:`~citerag.service.answering.write.Write`: the conclusion, then the one-word decision, in the yes/no
slot) runs twice:

* ``A``: over the chosen evidence (shipped);
* ``B``: over every sentence of the best evidence sentence's paper, in its order
  (:func:`~citerag.service.answering.whole_paper.paper_evidence`), after that conversation's start up to the
  question (:func:`~citerag.service.answering.prompts.conclusion_prefix`) was read into the slot and saved
  (``prime_ms``; a temporary state file, removed afterwards);
* ``C``: the same request and decision in the answer conversation (its system prompt and worked examples) over the
  paper read whole, after the read-paper step's saved state of the paper (no second state a paper), in the answer
  slot.

Recorded per variant: the decision, its probabilities, the conclusion as written, the prompt and generation ms
and the write step's wall ms. ``--analyse`` prints decision accuracy and median ms per variant, over all questions
and each half (odd / even question number).

Run: ``HF_HUB_OFFLINE=1 python -m eval.probes.yes_no_whole OUT.jsonl`` (~4 minutes on 2 cores), then
``python -m eval.probes.yes_no_whole --analyse OUT.jsonl``. Recorded: ``eval/results/probe_yes_no_whole.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from eval.probes import before_the_model, open_probe

EVAL = Path(__file__).resolve().parents[1]
#: The shipped-corpus question sets that hold yes/no questions.
SETS = ("seed_questions.jsonl", "fresh_questions.jsonl", "fresh_questions_2.jsonl", "fresh_questions_3.jsonl",
        "fresh_questions_4.jsonl")


def questions() -> list[dict[str, Any]]:
    """Every yes/no question (one with an expected ``decision``) of :data:`SETS`."""
    found = []
    for name in SETS:
        for line in (EVAL / name).read_text(encoding="utf-8").splitlines():
            if line.strip() and (q := json.loads(line)).get("decision"):
                found.append(q)
    return found


def probe(out: Path) -> None:
    """Write one record a question (``qid``, ``expected``, ``A``, ``B``) to ``out``."""
    from citerag.service.answering.prompts import (
        ANSWER_SLOT,
        CONCLUSION_REQUEST,
        DECISION_SLOT,
        conclusion_prefix,
        evidence_prefix,
        quoted,
    )
    from citerag.service.answering.state import AnswerState
    from citerag.service.answering.whole_paper import ReadPaper, paper_evidence
    from citerag.service.answering.write import Write

    settings, answerer = open_probe()
    generator = answerer.generator
    write = Write(generator, settings.max_answer_tokens, min_yes=settings.min_confidence)
    read_paper = next(step for step in answerer.components if isinstance(step, ReadPaper))

    def written(state: AnswerState, messages: list[dict[str, str]] | None = None) -> dict[str, Any]:
        tic = time.perf_counter()
        if messages is None:
            write.run(state)
        else:
            write._decide(state, messages, ANSWER_SLOT, None)  # noqa: SLF001 - the probe's variant C
        return {"decision": state.decision, "p": {k: round(v, 4) for k, v in state.decision_probabilities.items()},
                "written": state.written, "prompt_ms": state.timings_ms.get("prompt", 0.0),
                "generate_ms": state.timings_ms.get("generate", 0.0),
                "write_ms": round((time.perf_counter() - tic) * 1000), "sentences": len(state.evidence)}

    with out.open("w", encoding="utf-8") as sink:
        for q in questions():
            state = before_the_model(answerer, q["question"], settings.ask_k)
            record: dict[str, Any] = {"qid": q["qid"], "question": q["question"], "expected": q["decision"]}
            if state.abstained or state.info is None or state.info.kind != "yes_no":
                record["skipped"] = state.reason or f"analysed as {state.info and state.info.kind}"
                sink.write(json.dumps(record) + "\n")
                continue
            record["A"] = written(replace(state, timings_ms={}))
            best = max(state.evidence, key=lambda e: e.score).result.document
            results = [(n, r) for n, r in enumerate(state.passages, start=1) if r.document.doc_id == best.doc_id]
            whole = paper_evidence(best, results)
            if whole is not None:
                name = f"probe-yes-no-{q['qid']}.bin"
                tic = time.perf_counter()
                generator.read_and_save(conclusion_prefix(whole), name, DECISION_SLOT, fixed=1)
                record["prime_ms"] = round((time.perf_counter() - tic) * 1000)
                (generator.state_dir / name).unlink(missing_ok=True)
                record["B"] = written(replace(state, evidence=whole, timings_ms={}))
                read_paper.ready(whole)  # variant C: the answer conversation's saved state of the paper
                *fixed, user = evidence_prefix(whole)
                asked = [*fixed, {"role": "user", "content": f"{user['content']}Question: {quoted(state.info.text)}"
                                                             f"\n\n{CONCLUSION_REQUEST}"}]
                record["C"] = written(replace(state, evidence=whole, timings_ms={}), asked)
            sink.write(json.dumps(record) + "\n")
            sink.flush()


def analyse(path: Path) -> None:
    """Print decision accuracy and median ms per variant (module docstring)."""
    import re

    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    for part, keep in (("all", lambda n: True), ("odd", lambda n: n % 2 == 1), ("even", lambda n: n % 2 == 0)):
        chosen = [r for r in records if keep(int(re.findall(r"\d+", r["qid"])[-1])) and "B" in r]
        for variant in ("A", "B", "C"):
            right = sum(r[variant]["decision"] == r["expected"] for r in chosen)
            med = {key: statistics.median(r[variant][key] for r in chosen) for key in ("prompt_ms", "write_ms")}
            print(f"{part:4s} {variant}: {right} of {len(chosen)} right; median prompt {med['prompt_ms']:.0f} ms, "
                  f"write step {med['write_ms']:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--analyse", action="store_true", help="analyse a recorded OUT instead of probing")
    args = parser.parse_args()
    analyse(args.out) if args.analyse else probe(args.out)


if __name__ == "__main__":
    main()
