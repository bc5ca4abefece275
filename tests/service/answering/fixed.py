"""Fixed inputs for the answering components' tests: invented abstracts from three domains (seed banks, pottery
kilns, a clinical trial) and a generator with fixed outputs (the real model runs in ``test_answering_e2e.py``)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from pathlib import Path

from citerag.index.search import SearchResult
from citerag.index.types import Document, Passage
from citerag.service.generator import Completion

SEEDS = (
    "Seed banks preserve crop diversity. We propose FrostVault, a protocol that stores seeds at -20 C in sealed foil. "
    "FrostVault keeps 94.5% of seeds viable after 30 years, against 61% for paper envelopes."
)
KILNS = (
    "Wood-fired kilns waste heat through their chimneys. We introduce EmberLoop, a heat exchanger that returns flue "
    "heat to the firing chamber. EmberLoop cuts firewood use by 40% without changing glaze colour."
)
TRIAL = (
    "BACKGROUND: Night-time leg cramps are common in older adults. RESULTS: Magnesium did not reduce cramp frequency "
    "compared with placebo in 120 patients. CONCLUSIONS: Magnesium is not effective for leg cramps."
)


def document(doc_id: str, text: str, title: str = "") -> Document:
    return Document(doc_id, title, text, title or text[:30])


def result(doc_id: str, text: str, rank: int = 1, title: str = "", dense: float = 0.5) -> SearchResult:
    """One retrieved passage holding all of ``text`` (its document's whole text)."""
    passage = Passage(f"{doc_id}#0", doc_id, 0, 0, len(text), text, 50)
    return SearchResult(rank, passage, document(doc_id, text, title), 1.0 / rank, rank, rank, 1.0, dense)


class FixedGenerator:
    """A chat model with fixed outputs: ``written`` is what the writer (or a yes/no question's conclusion) writes,
    streamed in 3-character pieces (a function of the prompt's messages may give it), ``judge`` the probability of
    "yes" of a judgement (or a function of the messages giving it), ``decision`` the yes/no/maybe probabilities."""

    fixed_messages = 1
    model_path = Path("fixed.gguf")
    state_dir = None

    def __init__(self, written: str | Callable[[list], str] = "", judge: float | Callable[[list], float] = 0.9,
                 decision: dict[str, float] | None = None) -> None:
        self.written, self.judge = written, judge
        self.decision = decision or {"yes": 0.8, "no": 0.15, "maybe": 0.05}
        self.calls: list[dict] = []

    def chat(self, messages, max_tokens, on_delta: Callable[[str], bool | None] | None = None, grammar=None,
             top_logprobs=0, pin=True, slot=0, fixed=None) -> Completion:
        self.calls.append({"messages": messages, "grammar": grammar, "pin": pin, "slot": slot})
        if grammar is None:
            text = self.written(messages) if callable(self.written) else self.written
            for i in range(0, len(text), 3):
                if on_delta is not None and on_delta(text[i:i + 3]):
                    break
            return Completion(text, 120, 20, 900.0, 800.0, "stop")
        judge = self.judge(messages) if callable(self.judge) else self.judge
        table = self.decision if "maybe" in grammar else {"yes": judge, "no": 1 - judge}
        logprobs = {token: math.log(max(p, 1e-9)) for token, p in table.items()}
        return Completion(max(table, key=table.get), 130, 1, 150.0, 30.0, "stop", (logprobs,))

    def pin(self, messages, slot=0, fixed=None) -> None:
        pass


def prompt_of(messages: list) -> str:
    """The user turn of a prompt (papers, question and request)."""
    return next(m["content"] for m in messages if m["role"] == "user")


def about(messages: list, word: str) -> bool:
    """Whether the prompt's papers hold ``word``."""
    return bool(re.search(rf"\b{re.escape(word)}\b", prompt_of(messages).split("Question:")[0]))


class FixedSearcher:
    """Returns ``results`` for every query (the first ``k``), and each document's stored passages."""

    def __init__(self, results: list[SearchResult], stored: dict[str, list[Passage]] | None = None) -> None:
        self.results = results
        self.stored = stored or {}
        self.queries: list[str] = []

    def search(self, query, k=10, mode="hybrid", filters=None, **_):
        self.queries.append(query)
        return self.results[:k]

    def passages_of(self, doc_id: str) -> list[Passage]:
        return self.stored.get(doc_id, [r.passage for r in self.results if r.document.doc_id == doc_id])


class StandInRecipe:
    """A recipe standing for the model (no model, no reading): ``say(question)`` gives the answer's one sentence,
    resting on the first retrieved passage (``None``: it abstains); it records each standalone question it answers
    and the documents kept for it (``asked``)."""

    def __init__(self, say: Callable[[object], str | None]) -> None:
        self.say = say
        self.asked: list[tuple[str, tuple[str, ...]]] = []

    def answer(self, question, passages, tools, trace):  # noqa: ANN001, ANN201 - the Recipe protocol
        from citerag.service.answering.types import Evidence, Outcome, Statement

        self.asked.append((question.text, tuple(question.keep)))
        first = passages[0]
        evidence = [Evidence(1, first, first.passage.start, first.passage.end, first.passage.text)]
        text = self.say(question)
        if text is None:
            return passages, Outcome.abstain("judge", "the stand-in does not answer", evidence)
        trace.emit("token", text)
        return passages, Outcome(evidence=evidence, statements=[Statement(text, (0,))], written=text)


def stand_in_pipeline(recipe: StandInRecipe, results: list[SearchResult]):  # noqa: ANN201 - AnswerPipeline
    """The real analyse and retrieve steps over ``results`` (follow-ups made standalone), then ``recipe`` for every
    question kind."""
    from citerag.service.answering.question import KINDS
    from citerag.service.answering.runner import AnswerPipeline

    return AnswerPipeline(FixedSearcher(results), None, recipes=dict.fromkeys(KINDS, recipe))
