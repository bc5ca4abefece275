"""Probe (issue 27, 2026-12-05; the latency design built as the read-paper step, ``eval/results/qa.md``
seventeenth round): the model reads the answer's paper whole, so that the prompt up to the question is the same for
every question about that paper and llama.cpp can keep it cached (cache-augmented generation: Chan et al. 2024,
"Don't Do RAG"), against the shipped prompt over the chosen evidence sentences.

For each question of a half of a dev set, the pipeline's own analyse, retrieve and select-evidence steps run; then
the model judges and writes twice, with the same prompts (:func:`~citerag.service.answering.prompts.judge_messages`,
:func:`~citerag.service.answering.prompts.writer_messages`):

* ``A``: over the chosen evidence (the shipped prompt, its tail read in full);
* ``B``: over every sentence of the best evidence sentence's paper, numbered in the paper's order, after that
  prompt's part up to the question ("Evidence: ... \\n\\n") was read and kept in the slot (``prime_ms``), as a
  cached paper would be; ``judge_ms`` is then what a question costs on top of the cached paper;
* ``C`` (``--variants C``): ``B`` with a line naming the chosen sentences' numbers in the paper ("The evidence
  sentences most about the question: [3], [5].") between the question and the request.

``hit``: the model's written text (after "yes", before verification) holds one of the question's expected answer
strings; ``p``: the judge's P(yes). No threshold is applied.

``--cache`` checks instead whether llama.cpp's host-memory prompt cache (``cache_ram_mib``, 8,192 MiB by default)
brings a paper's prefix back after other prompts took the slot, with and without a one-token completion on the slot
before each prompt (printing wall ms, tokens evaluated and tokens restored per call).

Run: ``HF_HUB_OFFLINE=1 python -m eval.probes.whole_abstract eval/devset.jsonl dev OUT.jsonl`` (about 5 minutes
per half on 2 cores). Recorded: ``eval/results/probe_whole_abstract_{dev,test}.jsonl`` (A and B) and
``probe_whole_abstract_dev_hint.jsonl`` (C). Built from it: :mod:`citerag.service.answering.whole_paper`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from citerag.index.text import split_sentences
from citerag.service.answering import prompts
from citerag.service.answering.choice import choose
from citerag.service.answering.evidence import Evidence
from citerag.service.answering.question import QuestionInfo
from citerag.service.answering.state import AnswerState
from citerag.service.generator import Generator
from eval.answers import normalise
from eval.probes import STEPS_BEFORE_THE_MODEL, open_probe
from eval.qa import half
from eval.retrieval import load_devset

def whole_paper(state: AnswerState) -> list[Evidence]:
    """Every sentence of the best evidence sentence's paper, in its order."""
    best = max(state.evidence, key=lambda e: e.score)
    text = best.result.document.text
    return [Evidence(best.n, best.result, a, b, text[a:b], 0.0, 0.0) for a, b in split_sentences(text)]


def paper_prefix(evidence: list[Evidence]) -> list[dict[str, str]]:
    """The messages whose tokens every question about this paper shares: the fixed messages and the evidence."""
    return prompts.evidence_prefix(evidence)


def one_token(generator: Generator, messages: list[dict[str, str]]) -> dict[str, Any]:
    """A one-token completion in slot 0 (leaves ``messages`` in its cache): wall ms, tokens evaluated, restored."""
    tic = time.perf_counter()
    response = generator._server.handle_chat_completions(  # noqa: SLF001 - the probe drives the slot directly
        {"messages": messages, "max_tokens": 1, "temperature": 0.0, "seed": 0, "cache_prompt": True, "id_slot": 0})
    timings = response["timings"]
    return {"ms": round((time.perf_counter() - tic) * 1000), "evaluated": timings["prompt_n"],
            "restored": timings.get("cache_n")}


def hinted(messages: list[dict[str, str]], numbers: list[int]) -> list[dict[str, str]]:
    """``messages`` with a line naming the chosen evidence sentences' ``numbers`` between the question and the
    request (variant ``C``)."""
    user = messages[-1]["content"]
    at = user.rindex("\n\n") + 2
    line = "The evidence sentences most about the question: " + ", ".join(f"[{n}]" for n in numbers) + ".\n\n"
    return [*messages[:-1], {"role": "user", "content": user[:at] + line + user[at:]}]


def judge_and_write(generator: Generator, info: QuestionInfo, evidence: list[Evidence],
                    prefix: list[dict[str, str]] | None = None, hint: list[int] | None = None) -> dict[str, Any]:
    """P(yes), the judge's prompt ms and the written text over ``evidence``; with ``prefix``, that prefix is read
    into the slot first and kept there (the slot counts as pinned, so the judge reads only the rest); with ``hint``,
    the chosen sentences' numbers are named (:func:`hinted`)."""
    if prefix is not None:
        generator.settle()
        one_token(generator, prefix)
        generator._pinned.add(0)  # noqa: SLF001 - keep the paper in the cache instead of re-pinning
    judge, writer = prompts.judge_messages(info, evidence), prompts.writer_messages(info, evidence)
    if hint is not None:
        judge, writer = hinted(judge, hint), [*hinted(writer[:-1], hint), writer[-1]]
    choice = choose(generator, judge, prompts.YES_NO_GRAMMAR, ["yes", "no"], pin=False)
    written = generator.chat(writer, max_tokens=90, pin=True)
    return {"p": round(choice.probabilities["yes"], 3), "judge_ms": round(choice.completion.prompt_ms),
            "text": written.text, "write_prompt_ms": round(written.prompt_ms), "gen_ms": round(written.generate_ms)}


def compare(devset: str, which: str, out: str, variants: str = "AB") -> None:
    settings, answerer = open_probe()
    generator = answerer.generator
    assert generator is not None
    with open(out, "w", encoding="utf-8") as sink:
        for question in half(load_devset(Path(devset)), which):
            state = AnswerState(question=question.question, history=(), k=settings.ask_k, filters=None, keep=(),
                                on_event=None)
            for step in answerer.components[:STEPS_BEFORE_THE_MODEL]:
                step.run(state)
            if not state.evidence or state.info is None:
                sink.write(json.dumps({"qid": question.qid, "evidence": 0}) + "\n")
                continue
            whole = whole_paper(state)
            record: dict[str, Any] = {"qid": question.qid, "kind": question.kind, "answerable": bool(question.qrels),
                                      "n_whole": len(whole)}
            if "A" in variants:
                record["A"] = judge_and_write(generator, state.info, state.evidence)
            generator.settle()
            prime_ms = one_token(generator, paper_prefix(whole))["ms"]
            if "B" in variants:
                record["B"] = {"prime_ms": prime_ms,
                               **judge_and_write(generator, state.info, whole, paper_prefix(whole))}
            if "C" in variants:
                chosen = [i for i, item in enumerate(whole, start=1)
                          if any(e.doc_id == item.doc_id and e.start < item.end and item.start < e.end
                                 for e in state.evidence)]
                record["C"] = {"prime_ms": prime_ms, "hint": chosen,
                               **judge_and_write(generator, state.info, whole, paper_prefix(whole), chosen)}
            for side in variants:
                text = normalise(record[side]["text"])
                record[side]["hit"] = (any(normalise(a) in text for a in question.answer) if question.answer
                                       else None)
            sink.write(json.dumps(record) + "\n")
            sink.flush()


def cache_check(questions: list[str]) -> None:
    """Read each question's paper into slot 0, then ask each question (module docstring, ``--cache``)."""
    settings, answerer = open_probe()
    generator = answerer.generator
    assert generator is not None
    papers = []
    for question in questions:
        state = AnswerState(question=question, history=(), k=settings.ask_k, filters=None, keep=(), on_event=None)
        for step in answerer.components[:STEPS_BEFORE_THE_MODEL]:
            step.run(state)
        assert state.info is not None
        papers.append((state.info, whole_paper(state)))

    def nudge() -> None:  # a one-token prompt sharing nothing: the slot's state is saved to the host cache
        generator._server.handle_completions(  # noqa: SLF001
            {"prompt": "x", "n_predict": 1, "temperature": 0.0, "cache_prompt": True, "id_slot": 0})

    for nudged in (False, True):
        for i, (_, whole) in enumerate(papers):
            nudged and nudge()
            print("nudge" if nudged else "plain", "read paper", i, one_token(generator, paper_prefix(whole)))
        for i, (info, whole) in [*enumerate(papers), *reversed(list(enumerate(papers)))]:
            nudged and nudge()
            asked = one_token(generator, prompts.judge_messages(info, whole))
            print("nudge" if nudged else "plain", "question", i, asked)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("devset", nargs="?", default="eval/devset.jsonl")
    parser.add_argument("half", nargs="?", default="dev", choices=["dev", "test", "all"])
    parser.add_argument("out", nargs="?", default="probe_whole_abstract.jsonl")
    parser.add_argument("--variants", default="AB", help="which of A, B, C (B with the chosen sentences named)")
    parser.add_argument("--cache", action="store_true", help="check llama.cpp's host-memory prompt cache instead")
    args = parser.parse_args()
    if args.cache:
        cache_check(["How many parameters does the largest metagenomic foundation model have?",
                     "What kind of verification does V1 rely on instead of scoring candidates independently?",
                     "Which optimizer gives every parameter its own momentum coefficient?"])
    else:
        compare(args.devset, args.half, args.out, args.variants)


if __name__ == "__main__":
    main()
