"""The model's steps: judge each evidence sentence, decide a yes/no question (after a free one-sentence draft).

Each judgement is one greedy completion of one token under a grammar (:mod:`citerag.service.answering.prompt`), and what is used is
not the token written but the model's probabilities over the allowed options at that position (llama.cpp's
``top_logprobs``, reported before the grammar masks the alternatives). Spellings of one option are pooled
(``"Yes"``, ``" yes"`` and ``"yes"`` are the option ``yes``); an option absent from the top 20 gets the smallest
reported probability (an upper bound on its own), and the result is renormalised over the options.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from citerag.service.answering.evidence import Evidence
from citerag.service.answering.prompt import (
    DECISION_GRAMMAR,
    RELEVANCE_GRAMMAR,
    decision_after_draft,
    draft_messages,
    relevance_messages,
)
from citerag.service.generator import Completion, Generator

TOP_LOGPROBS = 20
#: Token limit of the decision's draft (one sentence; ~10 tokens/s on 2 cores).
DRAFT_TOKENS = 48


@dataclass(frozen=True, slots=True)
class Choice:
    """The model's probabilities over a step's options.

    Attributes:
        probabilities: option -> probability, summing to 1 (``yes``/``no`` for a judgement, ``yes/no/maybe``).
        completion: the completion that produced them (timings, token counts, the written token).
    """

    probabilities: dict[str, float]
    completion: Completion


def option_probabilities(alternatives: Mapping[str, float], options: Sequence[str]) -> dict[str, float]:
    """Pool ``alternatives`` (token text -> logprob) by option (case and surrounding space ignored) and
    renormalise over ``options``; an option no alternative spells gets the smallest reported probability.

    >>> p = option_probabilities({"Yes": math.log(0.6), " no": math.log(0.2), "The": math.log(0.2)}, ["yes", "no"])
    >>> round(p["yes"], 2), round(p["no"], 2)
    (0.75, 0.25)
    """
    mass = dict.fromkeys(options, 0.0)
    for token, logprob in alternatives.items():
        key = token.strip().lower()
        if key in mass:
            mass[key] += math.exp(logprob)
    floor = min((math.exp(v) for v in alternatives.values()), default=1.0)
    mass = {k: v if v > 0 else floor for k, v in mass.items()}
    total = sum(mass.values())
    return {k: v / total for k, v in mass.items()}


def _run(generator: Generator, messages: list[dict[str, str]], grammar: str, options: Sequence[str], pin: bool) -> Choice:
    completion = generator.chat(messages, max_tokens=1, grammar=grammar, top_logprobs=TOP_LOGPROBS, pin=pin)
    alternatives = completion.top_logprobs[0] if completion.top_logprobs else {completion.text: 0.0}
    return Choice(option_probabilities(alternatives, options), completion)


def decide(generator: Generator, question: str, context: str) -> tuple[Choice, Completion]:
    """Draft-then-decide: the model first writes, unconstrained, one sentence stating what ``context`` concludes
    about ``question`` (at most :data:`DRAFT_TOKENS` tokens), then its probabilities of ``yes``, ``no`` and
    ``maybe`` are read after that draft. Constraining a small model from its first token hurts it; the free draft
    is the remedy the issue names, and on PubMedQA's dev half it lifted accuracy from 0.41 to 0.56.

    Returns:
        ``(choice, draft)``: the decision's probabilities and the draft's completion (its text and timings).
    """
    messages = draft_messages(question, context)
    draft = generator.chat(messages, max_tokens=DRAFT_TOKENS, pin=False)
    choice = _run(generator, decision_after_draft(messages, draft.text.strip()), DECISION_GRAMMAR,
                  ["yes", "no", "maybe"], True)
    return choice, draft


def relevance(generator: Generator, question: str, evidence: Sequence[Evidence]) -> list[Choice]:
    """Pointwise: for each evidence sentence alone, the model's probability that it answers ``question``
    (options ``yes``/``no``). The question comes first in each prompt, so llama.cpp keeps it cached and
    evaluates only each sentence and the instruction; the cache is re-pinned after the last one."""
    out = []
    for i, item in enumerate(evidence):
        out.append(_run(generator, relevance_messages(question, item), RELEVANCE_GRAMMAR, ["yes", "no"],
                        pin=i == len(evidence) - 1))
    return out
