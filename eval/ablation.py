"""Rule ablation: what each of the service's rules (:class:`~citerag.service.answering.config.Rules`) earns on one
half of an evaluation set.

The questions are answered once with every rule on; each answer records the rules that acted on it
(:attr:`~citerag.service.answering.types.Answer.rules`). A rule can change only the answers it acted on, so each
rule's questions are answered again with that rule alone switched off, and its *gain* is the score with it minus
the score without it over those questions (a question's score: right or wrong for the answer sets, an abstention
for an off-corpus question, token F1 for COVID-QA, the decision for PubMedQA). ``citerag eval --ablate`` prints
the table and records it in the set's results file (:mod:`citerag.eval.latest`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from citerag.service.answering.config import AnswerConfig, Rules

#: A question's score for an answer (higher is better).
Score = Callable[[Any, Any], float]


@dataclass(frozen=True, slots=True)
class RuleEffect:
    """One rule's effect on one half.

    Attributes:
        rule: the rule's name.
        acted: how many questions it acted on (with every rule on).
        with_rule, without_rule: the score summed over those questions, with the rule on and off.
    """

    rule: str
    acted: int
    with_rule: float
    without_rule: float

    @property
    def gain(self) -> float:
        """What the rule earns on this half (score with it minus score without it)."""
        return self.with_rule - self.without_rule


def ablate(questions: Sequence[Any], ask: Callable[[Any, AnswerConfig], Any], score: Score,
           config: AnswerConfig, on_answer: Callable[[], None] | None = None) -> tuple[list[RuleEffect], list[Any]]:
    """Each rule's effect (module docstring) over ``questions``.

    Args:
        questions: the half's questions.
        ask: answers one question under a configuration.
        score: a question's score for an answer.
        config: the configuration with every rule on.
        on_answer: called after each answer (progress).

    Returns:
        ``(effects, answers)``: one :class:`RuleEffect` per rule, in :meth:`Rules.names` order, and the answers with
        every rule on.
    """
    answers = []
    for question in questions:
        answers.append(ask(question, config))
        if on_answer is not None:
            on_answer()
    effects = []
    for rule in Rules.names():
        acted = [i for i, answer in enumerate(answers) if rule in getattr(answer, "rules", ())]
        off = replace(config, rules=config.rules.without(rule))
        without = 0.0
        for i in acted:
            without += score(questions[i], ask(questions[i], off))
            if on_answer is not None:
                on_answer()
        effects.append(RuleEffect(rule, len(acted), sum(score(questions[i], answers[i]) for i in acted), without))
    return effects, answers


def effects_table(effects: Sequence[RuleEffect]) -> str:
    """A Markdown table: rule, questions it acted on, score with and without it, gain."""
    lines = ["| rule | acted on | with | without | gain |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {e.rule} | {e.acted} | {e.with_rule:.2f} | {e.without_rule:.2f} | {e.gain:+.2f} |" for e in effects]
    return "\n".join(lines)
