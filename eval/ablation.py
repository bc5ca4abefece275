"""Rule ablation: what each of the service's rules (:class:`~citerag.service.answering.config.Rules`) earns on one
half of an evaluation set.

The questions are answered once with every rule on; each answer records the rules that acted on it
(:attr:`~citerag.service.answering.types.Answer.rules`). A rule can change only the answers it acted on, so each
rule's questions are answered again with that rule alone switched off, and its *gain* is the score with it minus
the score without it over those questions, by measure: ``right`` (right or wrong for the answer sets, an abstention
for an off-corpus question, token F1 for COVID-QA, the decision for PubMedQA) and, for the answer sets,
``readable`` (no readability rule broken: a rule may exist for the reader, not the grade). ``citerag eval --ablate`` prints
the table and records it in the set's results file (:mod:`citerag.eval.latest`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from citerag.service.answering.config import AnswerConfig, Rules

#: A question's scores for an answer, by measure (higher is better): ``right`` (its correctness), and for answer
#: sets ``readable`` (whether it breaks no readability rule).
Score = Callable[[Any, Any], dict[str, float]]


@dataclass(frozen=True, slots=True)
class RuleEffect:
    """One rule's effect on one half.

    Attributes:
        rule: the rule's name.
        acted: how many questions it acted on (with every rule on).
        with_rule, without_rule: each measure's score summed over those questions, with the rule on and off.
    """

    rule: str
    acted: int
    with_rule: dict[str, float]
    without_rule: dict[str, float]

    def gain(self, measure: str = "right") -> float:
        """What the rule earns on this half in ``measure`` (score with it minus score without it)."""
        return self.with_rule.get(measure, 0.0) - self.without_rule.get(measure, 0.0)


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
        with_rule: dict[str, float] = {}
        without: dict[str, float] = {}
        for i in acted:
            for totals, answer in ((with_rule, answers[i]), (without, ask(questions[i], off))):
                for measure, value in score(questions[i], answer).items():
                    totals[measure] = totals.get(measure, 0.0) + value
            if on_answer is not None:
                on_answer()
        effects.append(RuleEffect(rule, len(acted), with_rule, without))
    return effects, answers


def effects_table(effects: Sequence[RuleEffect]) -> str:
    """A Markdown table: rule, questions it acted on, then for each measure the score with and without it and the
    gain."""
    measures = list(dict.fromkeys(m for e in effects for m in e.with_rule)) or ["right"]
    head = "| rule | acted on | " + " | ".join(f"{m} with | without | gain" for m in measures) + " |"
    lines = [head, "|---|---:|" + "---:|---:|---:|" * len(measures)]
    for e in effects:
        cells = [f"{e.with_rule.get(m, 0):.2f} | {e.without_rule.get(m, 0):.2f} | {e.gain(m):+.2f}" for m in measures]
        lines.append(f"| {e.rule} | {e.acted} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
