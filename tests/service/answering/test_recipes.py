"""Each question kind's recipe with fixed model outputs over invented abstracts: what the model is asked, which papers
it reads, what the answer says and the exact span each citation points at; and the rules' switches."""

from __future__ import annotations

from dataclasses import replace

import pytest

from citerag.service.answering import NOT_FOUND
from citerag.service.answering.config import AnswerConfig, Rules
from citerag.service.answering.model import Model
from citerag.service.answering.prompts import SYSTEM
from citerag.service.answering.runner import AnswerPipeline
from citerag.service.answering.states import PaperStates
from tests.service.answering.fixed import KILNS, SEEDS, TRIAL, FixedGenerator, FixedSearcher, about, prompt_of, result


def pipeline(results, generator: FixedGenerator, config: AnswerConfig | None = None) -> AnswerPipeline:
    searcher = FixedSearcher(results)
    return AnswerPipeline(searcher, Model(generator, PaperStates(generator, 10**9), 120), config or AnswerConfig())


def span(text: str, sentence: str) -> tuple[int, int]:
    start = text.index(sentence)
    return start, start + len(sentence)


def cited(answer) -> list[tuple[str, int, int]]:
    return [(c.result.document.doc_id, c.start, c.end) for c in answer.citations]


class TestFact:
    def test_the_best_paper_is_read_whole_and_the_answer_cites_the_sentence_that_says_it(self) -> None:
        generator = FixedGenerator("FrostVault stores seeds at -20 C in sealed foil.")
        answer = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator).ask(
            "At what temperature does the seed protocol store its seeds?")
        assert answer.kind == "fact" and not answer.abstained
        assert answer.answer == "FrostVault stores seeds at -20 C in sealed foil [1]."
        assert cited(answer) == [("seeds", *span(SEEDS, "We propose FrostVault, a protocol that stores seeds at -20 C "
                                                        "in sealed foil."))]
        judge = generator.calls[0]
        assert judge["messages"][0] == {"role": "system", "content": SYSTEM}
        assert judge["grammar"] == 'root ::= "yes" | "no"'
        assert f"Abstract: {SEEDS}" in prompt_of(judge["messages"]) and "EmberLoop" not in prompt_of(judge["messages"])
        assert generator.calls[1]["messages"][-1] == {"role": "assistant", "content": "yes\n"}  # the writer follows

    def test_a_paper_that_does_not_answer_sends_the_model_to_the_next_one(self) -> None:
        generator = FixedGenerator("EmberLoop cuts firewood use by 40%.",
                                   judge=lambda m: 0.9 if about(m, "kilns") else 0.2)
        answer = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator).ask(
            "How much firewood does the flue heat exchanger save?")
        assert answer.answer == "EmberLoop cuts firewood use by 40% [2]." and answer.rules == ("second_paper",)
        off = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator,
                       AnswerConfig(rules=Rules(second_paper=False))).ask(
            "How much firewood does the flue heat exchanger save?")
        assert off.abstained and off.abstained_by == "judge" and off.answer == NOT_FOUND

    def test_below_the_bar_the_service_abstains_and_says_why(self) -> None:
        answer = pipeline([result("seeds", SEEDS)], FixedGenerator("x", judge=0.3)).ask("Which glaze does it use?")
        assert answer.abstained and answer.abstained_by == "judge" and answer.citations == []
        assert answer.reason == "the papers read do not answer the question (confidence 0.30 < 0.65)"
        assert answer.evidence and answer.evidence[0].text == "Seed banks preserve crop diversity."


class TestNumber:
    def test_a_number_is_cited_where_the_paper_states_it(self) -> None:
        generator = FixedGenerator("FrostVault keeps 94.5% of seeds viable after 30 years.")
        answer = pipeline([result("seeds", SEEDS)], generator).ask("How many years do the foil-sealed seeds last?")
        assert answer.kind == "number" and "gives the number with its unit" in prompt_of(generator.calls[0]["messages"])
        assert answer.answer == "FrostVault keeps 94.5% of seeds viable after 30 years [1]."
        assert cited(answer) == [("seeds", *span(SEEDS, "FrostVault keeps 94.5% of seeds viable after 30 years, "
                                                        "against 61% for paper envelopes."))]

    def test_a_number_the_paper_does_not_state_is_not_said(self) -> None:
        generator = FixedGenerator("FrostVault keeps 97% of seeds viable after 30 years.")
        answer = pipeline([result("seeds", SEEDS)], generator).ask("How many years do the foil-sealed seeds last?")
        # the written sentence goes; the answer is the paper's own sentence closest to it
        assert answer.answer == ("FrostVault keeps 94.5% of seeds viable after 30 years, against 61% for paper "
                                 "envelopes [1].")
        assert set(answer.rules) == {"numbers", "extract"}
        config = AnswerConfig(rules=Rules(extract=False))
        assert pipeline([result("seeds", SEEDS)], generator, config).ask(
            "How many years do the foil-sealed seeds last?").abstained


class TestDefinition:
    def test_the_model_is_asked_what_the_thing_is(self) -> None:
        generator = FixedGenerator("EmberLoop is a heat exchanger that returns flue heat to the firing chamber.")
        answer = pipeline([result("kilns", KILNS)], generator).ask("What is EmberLoop?")
        assert answer.kind == "definition"
        assert "Does the paper say what EmberLoop is?" in prompt_of(generator.calls[0]["messages"])
        assert answer.answer == "EmberLoop is a heat exchanger that returns flue heat to the firing chamber [1]."


class TestYesNo:
    def test_the_decision_opens_the_answer_and_the_conclusion_is_cited(self) -> None:
        generator = FixedGenerator("Magnesium did not reduce cramp frequency compared with placebo.",
                                   decision={"yes": 0.1, "no": 0.85, "maybe": 0.05})
        answer = pipeline([result("trial", TRIAL)], generator).ask("Does magnesium relieve night-time leg cramps?")
        assert answer.kind == "yes_no" and answer.decision == "no"
        assert answer.answer == "No. Magnesium did not reduce cramp frequency compared with placebo [1]."
        assert cited(answer) == [("trial", *span(TRIAL, "RESULTS: Magnesium did not reduce cramp frequency compared "
                                                        "with placebo in 120 patients."))]
        conclusion, decision = generator.calls  # not judged first: the decision says whether the paper supports it
        assert conclusion["grammar"] is None and decision["grammar"] == 'root ::= "yes" | "no" | "maybe"'
        assert prompt_of(conclusion["messages"]).endswith(  # the sentences most related, quoted before the request
            "- RESULTS: Magnesium did not reduce cramp frequency compared with placebo in 120 patients.\n"
            "- CONCLUSIONS: Magnesium is not effective for leg cramps.\n\nIn one sentence, state what the paper's "
            "results conclude about the question.")
        assert decision["messages"][-1]["content"].endswith("So the answer to the question, yes, no or maybe, is:")

    def test_an_unsure_yes_is_not_a_yes(self) -> None:
        generator = FixedGenerator("Magnesium helps.", decision={"yes": 0.55, "no": 0.3, "maybe": 0.15})
        question = "Does magnesium relieve night-time leg cramps?"
        answer = pipeline([result("trial", TRIAL)], generator).ask(question)
        assert answer.decision == "no" and "yes_bar" in answer.rules
        config = AnswerConfig(rules=Rules(yes_bar=False))
        assert pipeline([result("trial", TRIAL)], generator, config).ask(question).decision == "yes"


class TestWhichPapers:
    def test_a_paper_asked_for_in_the_singular_is_named(self) -> None:
        generator = FixedGenerator("The paper proposes a protocol that stores seeds at -20 C in sealed foil.")
        answer = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator).ask(
            "Which paper keeps seeds in sealed foil?")
        assert answer.kind == "which_papers"
        assert answer.answer == ("FrostVault: The paper proposes a protocol that stores seeds at -20 C in sealed "
                                 "foil [1].")
        assert "paper_label" in answer.rules

    def test_each_candidate_is_judged_and_those_that_qualify_are_named(self) -> None:
        generator = FixedGenerator(lambda m: "FrostVault stores seeds in sealed foil." if about(m, "seeds")
                                   else "EmberLoop saves firewood.", judge=lambda m: 0.9 if about(m, "seeds") else 0.1)
        answer = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator).ask(
            "Which papers store seeds?")
        judged = [prompt_of(call["messages"]) for call in generator.calls if call["grammar"]]
        assert len(judged) == 2 and all("Question: Does the paper store seeds?" in p for p in judged)
        assert answer.answer == "FrostVault stores seeds in sealed foil [1]."
        assert {c.result.document.doc_id for c in answer.citations} == {"seeds"}


class TestComparison:
    def test_both_papers_are_read_together_and_each_is_named(self) -> None:
        generator = FixedGenerator("FrostVault keeps 94.5% of seeds viable. EmberLoop cuts firewood use by 40%.")
        answer = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator).ask(
            "How do FrostVault and EmberLoop differ in what they save?")
        assert answer.kind == "comparison"
        assert "Paper 1\nTitle: FrostVault" in prompt_of(generator.calls[0]["messages"])
        assert "Paper 2\nTitle: EmberLoop" in prompt_of(generator.calls[0]["messages"])
        assert answer.answer == "FrostVault keeps 94.5% of seeds viable [1]. EmberLoop cuts firewood use by 40% [2]."

    def test_an_answer_about_one_paper_gets_the_other_papers_sentence(self) -> None:
        generator = FixedGenerator("FrostVault keeps 94.5% of seeds viable.")
        question = "How do FrostVault and EmberLoop differ in what they save?"
        answer = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator).ask(question)
        assert answer.answer.startswith("FrostVault keeps 94.5% of seeds viable [1]. ")
        assert {c.result.document.doc_id for c in answer.citations} == {"seeds", "kilns"}
        assert "each_paper" in answer.rules
        off = AnswerConfig(rules=replace(Rules(), each_paper=False))
        only = pipeline([result("seeds", SEEDS), result("kilns", KILNS, rank=2)], generator, off).ask(question)
        assert {c.result.document.doc_id for c in only.citations} == {"seeds"}


@pytest.mark.parametrize("question", ["What temperature is used?", "Does it work?", "Which papers store seeds?"])
def test_every_kind_streams_its_events_in_order(question: str) -> None:
    events: list[str] = []
    generator = FixedGenerator("FrostVault stores seeds at -20 C.")
    pipeline([result("seeds", SEEDS)], generator).ask(question, on_event=lambda kind, _: events.append(kind))
    assert events[:3] == ["question", "passages", "evidence"] and "token" in events


def test_a_stream_stopped_by_its_listener_stops_the_answer() -> None:
    generator = FixedGenerator("FrostVault stores seeds at -20 C in sealed foil.")
    answer = pipeline([result("seeds", SEEDS)], generator).ask(
        "Does FrostVault use foil?", on_event=lambda kind, _: kind == "token")
    assert answer.abstained and answer.abstained_by == "stopped"
