"""Probe (issue 27, 2026-12-04; tried and not kept, ``eval/results/qa.md`` fifth round): the 1.5B model judges the
best evidence sentence alone, the packaged Qwen2.5-Coder-0.5B writes the answer from all the evidence; yes/no
questions and which-papers judgements stay with the 1.5B. Each answer is also judged by the shipped judge (the
1.5B over all the evidence, after the answer, untimed), so one run gives both judges' confidences.

Run: ``HF_HUB_OFFLINE=1 python -m eval.probes.split_models`` (about 10 minutes on 2 cores); one JSON line per
question of the shipped dev half, the seed questions and the test half (no threshold applied: ``conf`` is the
best-sentence judge's P(yes), ``p3`` the shipped judge's; ``first`` / ``total`` in ms, ``total`` including the
untimed judge).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from citerag.index.lifecycle import ensure_index
from citerag.service.answering.choice import choose
from citerag.service.answering.compose import Compose
from citerag.service.answering.evidence import SelectEvidence
from citerag.service.answering.judge import Judge, JudgePapers
from citerag.service.answering.prompts import FIXED_MESSAGES, YES_NO_GRAMMAR, judge_messages
from citerag.service.answering.question import Analyse
from citerag.service.answering.retrieve import Retrieve
from citerag.service.answering.runner import AnswerPipeline
from citerag.service.answering.state import Answer, AnswerState
from citerag.service.answering.verify import Verify
from citerag.service.answering.write import Write
from citerag.service.pipeline import (
    decoding,
    generator_path,
    index_setup,
    load_embedder,
    load_generator,
    open_retriever,
)
from citerag.service.settings import Settings
from eval.answers import judge as score
from eval.qa import half
from eval.retrieval import load_devset


class JudgeBest(Judge):
    """The judge over the best-scored evidence sentence alone (the writer still reads all of it)."""

    def judged(self, state: AnswerState) -> tuple[list[dict[str, str]], float]:
        best = max(state.evidence, key=lambda e: e.score)
        choice = choose(self.generator, judge_messages(state.info, [best]), YES_NO_GRAMMAR, ["yes", "no"], pin=True)
        state.add_model_time(choice.completion.prompt_ms, choice.completion.generate_ms, 1)
        return judge_messages(state.info, state.evidence), choice.probabilities["yes"]


class WriteSplit(Write):
    """The small model writes; a yes/no question is decided by the large one."""

    def __init__(self, small, large) -> None:  # noqa: ANN001 - Generator
        super().__init__(small)
        self.large = Write(large)

    def run(self, state: AnswerState) -> None:
        (self.large if state.info.kind == "yes_no" else super()).run(state)


def main() -> None:
    settings = Settings()
    retriever = open_retriever(settings, ensure_index(index_setup(settings), show_progress=False))
    large = load_generator(generator_path(settings), settings.n_ctx, settings.threads, decoding(settings))
    small_settings = settings.model_copy(update={"generator": "qwen2.5-coder-0.5b"})
    small = load_generator(generator_path(small_settings), settings.n_ctx, settings.threads, decoding(small_settings))
    large.fixed_messages = small.fixed_messages = FIXED_MESSAGES
    shipped_judge: list[float | None] = [None]

    class ShippedJudge:
        name = "shipped_judge"

        def run(self, state: AnswerState) -> None:
            if state.evidence and not state.papers_judged:
                choice = choose(large, judge_messages(state.info, state.evidence), YES_NO_GRAMMAR, ["yes", "no"],
                                pin=True)
                shipped_judge[0] = choice.probabilities["yes"]

    pipeline = AnswerPipeline(
        [Analyse(), Retrieve(retriever, settings.min_dense_score), SelectEvidence(load_embedder(settings).encode,
         settings.evidence_sentences), JudgePapers(large), JudgeBest(large, retriever, 0.0, 0.0, False),
         WriteSplit(small, large), Verify(), Compose(), ShippedJudge()],
        retriever, settings.ask_k, large,
    )
    for path, which in (("eval/devset.jsonl", "dev"), ("eval/seed_questions.jsonl", "all"), ("eval/devset.jsonl", "test")):
        for question in half(load_devset(Path(path)), which):
            started, first = time.perf_counter(), [None]
            shipped_judge[0] = None

            def on_event(kind: str, payload: object, started: float = started, first: list = first) -> None:
                if kind == "token" and first[0] is None:
                    first[0] = (time.perf_counter() - started) * 1000

            state = AnswerState(question=question.question, k=settings.ask_k, on_event=on_event)
            pipeline.run(state)
            answer = Answer.of(state)
            record = score(question, answer)
            print(json.dumps({
                "set": f"{Path(path).name}:{which}", "qid": question.qid, "kind": question.kind,
                "correct": record.correct, "abstained": record.abstained, "conf": state.confidence,
                "p3": shipped_judge[0], "first": first[0], "total": state.timings_ms["total"], "answer": answer.answer,
                "answerable": bool(question.qrels), "rel": record.relevant_citations, "cit": record.citations,
            }), flush=True)


if __name__ == "__main__":
    main()
