"""The citation checker and refusal detection on fixed model outputs (no model involved)."""

from __future__ import annotations

import pytest

from citerag.service.answer import build_messages, check_citations, is_refusal

PASSAGES = [
    "EDEN is a family of metagenomic foundation models scaled up to 28 billion parameters.",
    "LU-KV reduces KV cache size by 80% with minimal performance degradation.",
    "Momentum SGD relies on a fixed momentum coefficient.",
    "Conformal prediction provides distribution-free prediction sets.",
    "XR-1 was validated with 12,000 real-world rollouts.",
]


class TestCheckCitations:
    def test_out_of_range_numbers_are_removed(self) -> None:
        assert check_citations("Yes [2][8].", PASSAGES) == ("Yes [2].", [2])
        assert check_citations("Yes [0] [6].", PASSAGES) == ("Yes.", [])

    def test_citation_without_shared_content_terms_is_dropped(self) -> None:
        text = "EDEN has 28 billion parameters [1][3]."
        assert check_citations(text, PASSAGES) == ("EDEN has 28 billion parameters [1].", [1])

    def test_lists_and_order_of_first_appearance(self) -> None:
        text = "LU-KV cuts the KV cache by 80% [2, 1]. EDEN reaches 28 billion parameters [1]."
        clean, cited = check_citations(text, PASSAGES)
        assert cited == [2, 1]  # [1] does not support the first sentence; it does support the second
        assert clean == "LU-KV cuts the KV cache by 80% [2]. EDEN reaches 28 billion parameters [1]."

    def test_each_sentence_is_checked_against_its_own_citations(self) -> None:
        text = "EDEN has 28 billion parameters [1]. XR-1 used 12,000 rollouts [5]."
        assert check_citations(text, PASSAGES) == (text, [1, 5])

    def test_a_sentence_without_a_marker_is_attributed_to_the_passage_that_supports_it(self) -> None:
        assert check_citations("EDEN has 28 billion parameters.", PASSAGES) == ("EDEN has 28 billion parameters [1].", [1])
        assert check_citations("80%", PASSAGES) == ("80% [2]", [2])  # a bare number: the one passage stating it

    def test_a_wrong_marker_is_replaced_by_the_supporting_passage(self) -> None:
        assert check_citations("XR-1 used 12,000 rollouts [2].", PASSAGES) == ("XR-1 used 12,000 rollouts [5].", [5])

    def test_a_sentence_no_passage_supports_gets_no_citation(self) -> None:
        # the model's own memory: no passage holds these terms or this number
        assert check_citations("France won the 2018 World Cup.", PASSAGES) == ("France won the 2018 World Cup.", [])
        # half the content terms are not enough when the stated number is missing
        assert check_citations("EDEN has 30 billion parameters.", PASSAGES) == ("EDEN has 30 billion parameters.", [])
        assert check_citations("Passage [9]", PASSAGES) == ("", [])  # the reference goes with its marker


@pytest.mark.parametrize(
    ("text", "refusal"),
    [("NOT FOUND", True), ("Not found.", True), ("The passages do not contain this information.", True),
     ("The learning rate was not specified in the given passage.", True),
     ("Labels are not provided; the safeguard is label-free [1].", False),
     ("EDEN has 28 billion parameters [1].", False)],
)
def test_refusal_detection(text: str, refusal: bool) -> None:
    assert is_refusal(text) is refusal


class TestNumberCheck:
    def test_a_number_absent_from_the_cited_passages_unsupports_the_sentence(self) -> None:
        assert check_citations("EDEN has 30 billion parameters [1].", PASSAGES) == ("EDEN has 30 billion parameters.", [])

    def test_numbers_may_come_from_any_cited_passage(self) -> None:
        text = "XR-1 used 12000 rollouts and LU-KV cut the KV cache by 80% [5][2]."
        assert check_citations(text, PASSAGES) == (text, [5, 2])

    def test_numbers_are_read_after_folding(self) -> None:
        from citerag.service.answer import numbers_in

        assert numbers_in("12,000 rollouts, 80\\% and 1.19$\\times$, V₁") == ["12000", "80", "1.19", "1"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [("Passage [1]", False), ("[1] and [5]", False), ("Yes [2].", True), ("EDEN has 28 billion parameters [1].", True)],
)
def test_an_answer_must_state_something(text: str, expected: bool) -> None:
    from citerag.service.answer import states_something

    assert states_something(text) is expected


@pytest.mark.parametrize(
    ("question", "answer", "gap"),
    [
        ("How many GPUs were used to train XR-1?", "XR-1 was validated with 12,000 rollouts [5].",
         "the passages do not mention the GPUs the question counts"),
        ("How many real-world rollouts were used to validate XR-1?", "12,000 rollouts [5].", ""),
        ("What fraction of its parameters does EDEN update?", "EDEN is scaled up to billions of parameters [1].",
         "the question asks for a quantity and the answer gives none"),
        ("By how much does LU-KV reduce the KV cache?", "By 80% [2].", ""),
        ("Which method reduces the KV cache?", "LU-KV [2].", ""),  # not a quantity question
    ],
)
def test_a_quantity_question_needs_the_quantity(question: str, answer: str, gap: str) -> None:
    from citerag.service.answer import quantity_gap

    assert quantity_gap(question, answer, [PASSAGES[1], PASSAGES[4]]) == gap


def test_digits_inside_names_are_not_quantities() -> None:
    from citerag.service.answer import quantity_gap

    answer = "PolyNeXt matches its counterparts on ImageNet-1K and ADE20K [1]."
    assert quantity_gap("What percentage of top-1 labels does PolyNeXt get right?", answer, [answer]) == (
        "the question asks for a quantity and the answer gives none"
    )
