"""QA metrics: SQuAD exact match / token-F1, gold-token recall, span hit, decision accuracy and macro-F1."""

from __future__ import annotations

import pytest

from citerag.eval import qa_metrics as m


def test_squad_normalisation_drops_case_punctuation_and_articles() -> None:
    assert m.normalize_answer("The Mother-to-child transmission (MTCT).") == "mothertochild transmission mtct"


def test_exact_match_and_f1_against_a_covidqa_gold_answer() -> None:
    gold = ["Mother-to-child transmission (MTCT) is the main cause of HIV-1 infection in children worldwide."]
    assert m.exact_match("mother-to-child transmission (MTCT) is the main cause of HIV-1 infection in children "
                         "worldwide", gold) == 1.0
    # prediction 4 tokens, normalised gold 12 ("the" dropped), 4 shared: P = 1, R = 1/3, F1 = 0.5
    assert m.token_f1("main cause of HIV-1", gold) == pytest.approx(0.5)
    assert m.gold_recall("main cause of HIV-1", gold) == pytest.approx(1 / 3)
    assert m.token_f1("", gold) == 0.0


def test_f1_takes_the_best_gold_answer() -> None:
    assert m.token_f1("bats", ["pangolins", "bats"]) == 1.0


def test_markers_are_stripped_before_scoring() -> None:
    assert m.normalize_answer(m.strip_markers("Yes [1][2]. It is [3, 4].")) == "yes it is"


def test_span_hit_needs_the_gold_document_and_an_overlap() -> None:
    gold = [(100, 150)]
    assert m.span_hit([("d1", 140, 200)], "d1", gold)
    assert not m.span_hit([("d1", 150, 200)], "d1", gold)  # half-open: touching is not overlapping
    assert not m.span_hit([("d2", 100, 150)], "d1", gold)


def test_decision_scores_macro_f1_over_three_classes() -> None:
    scores = m.decision_scores(["yes", "yes", "no", "maybe", None], ["yes", "no", "no", "yes", "maybe"])
    assert scores["accuracy"] == pytest.approx(2 / 5)
    # yes: tp 1 fp 1 fn 1 -> 0.5; no: tp 1 fp 0 fn 1 -> 2/3; maybe: tp 0 -> 0
    assert scores["macro_f1"] == pytest.approx((0.5 + 2 / 3 + 0) / 3)
    with pytest.raises(ValueError):
        m.decision_scores(["yes"], [])


def test_risk_coverage_sorts_by_confidence() -> None:
    curve = m.risk_coverage([0.9, 0.1, 0.8, 0.2], [True, False, True, True], points=2)
    assert curve == [{"coverage": 0.5, "accuracy": 1.0}, {"coverage": 1.0, "accuracy": 0.75}]
