"""One-token choices: the model's probabilities over a few options (yes/no; yes/no/maybe).

A choice is one greedy completion of one token under a grammar, and what is used is not the token written but
the model's probabilities over the allowed options at that position (llama.cpp's ``top_logprobs``, reported
before the grammar masks the alternatives). Spellings of one option are pooled (``"Yes"``, ``" yes"`` and
``"yes"`` are the option ``yes``); an option absent from the top 20 gets the smallest reported probability (an
upper bound on its own), and the result is renormalised over the options.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from citerag.service.generator import Completion, Generator

TOP_LOGPROBS = 20


@dataclass(frozen=True, slots=True)
class Choice:
    """The model's probabilities over a step's options.

    Attributes:
        probabilities: option -> probability, summing to 1.
        completion: the completion that produced them (timings, token counts, the written token).
    """

    probabilities: dict[str, float]
    completion: Completion

    @property
    def best(self) -> str:
        """The most probable option (ties: the first given)."""
        return max(self.probabilities, key=self.probabilities.__getitem__)


def option_probabilities(alternatives: Mapping[str, float], options: Sequence[str]) -> dict[str, float]:
    """Pool ``alternatives`` (token text -> natural-log probability) by option (case and surrounding space
    ignored) and renormalise over ``options``; an option no alternative spells gets the smallest reported
    probability.

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


def choose(
    generator: Generator, messages: list[dict[str, str]], grammar: str, options: Sequence[str], pin: bool,
    slot: int = 0, fixed: int | None = None,
) -> Choice:
    """The model's probabilities over ``options`` for the one token that answers ``messages`` under ``grammar``.

    Args:
        pin: re-pin the model's cache to the system prompt afterwards (``False`` keeps this prompt cached for a
            next call that shares its prefix).
        slot: the generator's slot (:meth:`~citerag.service.generator.Generator.chat`).
        fixed: the pinned prefix length (leading messages).
    """
    completion = generator.chat(messages, max_tokens=1, grammar=grammar, top_logprobs=TOP_LOGPROBS, pin=pin,
                                slot=slot, fixed=fixed)
    alternatives = completion.top_logprobs[0] if completion.top_logprobs else {completion.text: 0.0}
    return Choice(option_probabilities(alternatives, options), completion)
