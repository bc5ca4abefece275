"""The judge, write, verify and compose steps with fixed model outputs, and the runner that joins them."""

from __future__ import annotations

import pytest

from citerag.index.search import SearchResult
from citerag.index.tokenize import tokenize
from citerag.index.types import Document, Passage
from citerag.service.answering.compose import Compose
from citerag.service.answering.evidence import SelectEvidence
from citerag.service.answering.judge import CLOSE_COSINE, Judge
from citerag.service.answering.prompts import (
    DECISION_LEAD,
    DECISION_SLOT,
    DECISION_SYSTEM,
    FIXED_MESSAGES,
    JUDGE_QUESTION,
    YES_PREFILL,
    fixed_messages,
    judge_messages,
    writer_messages,
)
from citerag.service.answering.question import analyse
from citerag.service.answering.runner import evidence_pipeline
from citerag.service.answering.state import AnswerState, Statement
from citerag.service.answering.verify import Verify, check, written_sentences
from citerag.service.answering.write import MarkerStream, Write, first_word_decision
from citerag.service.settings import Settings
from tests.conftest import HashEmbedder
from tests.service.answering.fixed import COVID, ML, ML2, PUBMED, FixedGenerator, FixedSearcher, result


def _state(question: str, passages, sentences: int = 3) -> AnswerState:
    state = AnswerState(question=question, info=analyse(question), passages=passages)
    SelectEvidence(HashEmbedder().encode, sentences=sentences).run(state)
    return state


# --- prompts -------------------------------------------------------------------------------------------------------

def test_the_writer_prompt_extends_the_judge_prompt() -> None:
    state = _state("How much memory does LU-KV keep?", [result("ml", ML), result("covid", COVID, rank=2)])
    writer, judge = writer_messages(state.info, state.evidence), judge_messages(state.info, state.evidence)
    assert len(judge) == FIXED_MESSAGES + 1 and writer[: len(judge)] == judge  # after the judge, few new tokens
    assert judge[-1]["content"].endswith(f"{JUDGE_QUESTION} If yes, answer in one sentence with the number and its unit.")
    # the model's turn, begun as its judgement: llama.cpp continues it, so only these tokens are new
    assert writer[len(judge):] == [{"role": "assistant", "content": YES_PREFILL}]
    assert fixed_messages()[-1]["content"].startswith(YES_PREFILL)  # as the worked example answered
    yes_no = _state("Does LU-KV keep 10% memory?", [result("ml", ML)])
    assert judge_messages(yes_no.info, yes_no.evidence)[-1]["content"].endswith(JUDGE_QUESTION)  # no answer after
    assert "Paper: LU-KV\n[1] " in judge[-1]["content"]  # grouped under the paper's coined name
    assert "10%" in judge[-1]["content"] and "4×" in judge[-1]["content"]  # readable math, not 10\\% or $4\\times$
    assert "LU-KV" not in " ".join(m["content"] for m in judge[:FIXED_MESSAGES])  # the examples are invented


def test_a_question_that_asks_what_x_is_and_more_is_told_to_say_what_x_is_first() -> None:
    state = _state("What is LU-KV, and how much memory does it keep?", [result("ml", ML)])
    assert state.info.kind == "number" and state.info.subject == "LU-KV"
    assert judge_messages(state.info, state.evidence)[-1]["content"].endswith(
        f"{JUDGE_QUESTION} If yes, first say what LU-KV is, then answer the rest of the question.")


# --- judge ---------------------------------------------------------------------------------------------------------

def test_the_judge_abstains_below_the_threshold_and_keeps_its_prefix_cached() -> None:
    # close_cosine=1.0: the close-evidence rule off (the stand-in embedder's cosines are not the model's)
    state = _state("What is the main cause of HIV-1 infection in children?", [result("covid", COVID)])
    generator = FixedGenerator(judge=0.1)
    Judge(generator, close_cosine=1.0).run(state)
    assert state.abstained and "confidence 0.10 < 0.65" in state.reason
    assert generator.calls[0]["pin"] is False and generator.pins == 1  # re-pinned: the writer will not run
    sure = _state("What is the main cause of HIV-1 infection in children?", [result("covid", COVID)])
    Judge(FixedGenerator(judge=0.9), close_cosine=1.0).run(sure)
    assert not sure.abstained and sure.confidence == pytest.approx(0.9)


def test_before_abstaining_the_judge_reads_the_next_best_sentences() -> None:
    # one sentence of evidence: COVID's best sentence for the question; the reserve holds the next best
    question = "What is the main cause of HIV-1 infection in children?"
    passages = [result("covid", COVID), result("ml", ML, rank=2)]
    state = _state(question, passages, sentences=1)
    first, reserve = list(state.evidence), list(state.reserve)
    assert len(first) == 1 and len(reserve) == 1 and reserve[0] not in first
    events: list[str] = []
    state.on_event = lambda kind, _: events.append(kind)
    # the judge says yes only to the reserve's sentence
    generator = FixedGenerator(judge=lambda messages: 0.9 if reserve[0].text[:20] in messages[-1]["content"] else 0.2)
    Judge(generator, close_cosine=1.0).run(state)
    assert not state.abstained and state.evidence == reserve and state.confidence == pytest.approx(0.9)
    assert events == ["evidence"] and len(generator.calls) == 2  # the new evidence is shown
    # when the reserve does not answer either, the abstention rests on the first evidence
    again = _state(question, passages, sentences=1)
    Judge(FixedGenerator(judge=0.2), close_cosine=1.0).run(again)
    assert again.abstained and again.evidence == first and "confidence 0.20" in again.reason
    # off: one judgement
    off = _state(question, passages, sentences=1)
    generator = FixedGenerator(judge=0.2)
    Judge(generator, second_look=False, close_cosine=1.0).run(off)
    assert off.abstained and len(generator.calls) == 1


def test_evidence_close_to_the_question_answers_it_whatever_the_judge_says() -> None:
    question = "What is the main cause of HIV-1 infection in children?"
    state = _state(question, [result("covid", COVID)])
    closest = max(item.dense for item in state.evidence)
    generator = FixedGenerator(judge=0.3)
    Judge(generator, close_cosine=closest).run(state)  # the best sentence is as close as the threshold asks
    assert not state.abstained and state.confidence == 1.0
    assert generator.calls == []  # the evidence score decided: the model is not asked
    farther = _state(question, [result("covid", COVID)])
    Judge(FixedGenerator(judge=0.3), close_cosine=min(closest + 0.01, 1.0)).run(farther)
    assert farther.abstained and "confidence 0.30 < 0.65" in farther.reason


def test_a_count_the_named_paper_states_answers_a_counting_question() -> None:
    tide = "We propose TideNet, a tidal forecaster. TideNet outperforms all 12 baselines on 4 coastal datasets."
    state = _state("How many baselines does TideNet outperform?", [result("tide", tide)])
    generator = FixedGenerator(judge=0.3)
    Judge(generator, close_cosine=1.0).run(state)
    assert not state.abstained and state.confidence == 1.0 and generator.calls == []  # the count is stated
    # a question that names no paper is judged; so is one about something the evidence does not count
    for question in ("How many baselines does the tidal forecaster outperform?", "How many GPUs does TideNet use?"):
        other = _state(question, [result("tide", tide)])
        Judge(FixedGenerator(judge=0.3), close_cosine=1.0).run(other)
        assert other.abstained


def test_the_close_evidence_setting_defaults_to_the_calibrated_threshold() -> None:
    assert Settings.model_fields["close_cosine"].default == CLOSE_COSINE == 0.60


def test_questions_about_several_papers_have_no_reserve() -> None:
    state = _state("Which papers study memory or transmission?", [result("ml", ML), result("covid", COVID, rank=2)])
    assert state.reserve == []


def test_a_yes_no_question_is_not_judged() -> None:
    state = _state("Does telephone counseling increase mammography use?", [result("pubmed", PUBMED)])
    generator = FixedGenerator(judge=0.0)
    Judge(generator).run(state)
    assert not state.abstained and generator.calls == []


class VocabularySearcher(FixedSearcher):
    """A searcher that says which BM25 terms its passages hold, standing for a large corpus."""

    vocabulary_size = 50_000

    def unseen_terms(self, terms):
        held = {t for r in self.results for t in tokenize(r.passage.text)}
        return [t for t in terms if t not in held]


def test_a_word_no_passage_holds_needs_the_higher_confidence() -> None:
    searcher = VocabularySearcher([result("covid", COVID)])
    question = "Which glacier retreat did the HIV-1 mothers study measure?"
    state = _state(question, searcher.results)
    Judge(FixedGenerator(judge=0.8), searcher).run(state)
    assert state.abstained and "no indexed passage mentions 'glacier', 'retreat', 'measure'," in state.reason
    assert "confidence 0.80 < 0.85" in state.reason
    sure = _state(question, searcher.results)
    Judge(FixedGenerator(judge=0.9), searcher).run(sure)
    assert not sure.abstained  # strong evidence makes up for the unseen words (a paraphrase)
    small = VocabularySearcher(searcher.results)
    small.vocabulary_size = 1_608  # the 38 shipped abstracts: an ordinary word's absence means nothing
    few = _state(question, searcher.results)
    Judge(FixedGenerator(judge=0.8), small).run(few)
    assert not few.abstained
    with pytest.raises(ValueError, match="min_confidence"):
        Judge(FixedGenerator(), min_confidence=1.5)


def test_close_evidence_is_still_judged_when_the_question_has_a_word_no_passage_holds() -> None:
    searcher = VocabularySearcher([result("covid", COVID)])
    state = _state("Which glacier retreat did the HIV-1 mothers study measure?", searcher.results)
    generator = FixedGenerator(judge=0.8)
    Judge(generator, searcher, close_cosine=0.0).run(state)  # every sentence counts as close
    assert len(generator.calls) == 1 and state.abstained and "confidence 0.80 < 0.85" in state.reason


def test_a_yes_no_question_with_a_word_no_passage_holds_is_judged() -> None:
    searcher = VocabularySearcher([result("pubmed", PUBMED)])
    held = _state("Does telephone counseling increase mammography use?", searcher.results)
    generator = FixedGenerator(judge=0.0)
    Judge(generator, searcher).run(held)
    assert not held.abstained and generator.calls == []  # every word held: its answer is the decision
    one = _state("Does telephone counseling increase mammography use among Medicare women?", searcher.results)
    Judge(generator, searcher).run(one)
    assert not one.abstained and generator.calls == []  # one unseen word is common in answerable questions
    origami = _state("Does telephone counseling increase foldable origami use?", searcher.results)
    generator = FixedGenerator(judge=0.8)
    Judge(generator, searcher).run(origami)
    assert origami.abstained and "no indexed passage mentions 'foldable', 'origami'" in origami.reason
    assert generator.pins == 1  # the cache goes back to its fixed prefix
    sure = _state("Does telephone counseling increase foldable origami use?", searcher.results)
    Judge(FixedGenerator(judge=0.9), searcher).run(sure)
    assert not sure.abstained and sure.confidence == pytest.approx(0.9)


# --- write ---------------------------------------------------------------------------------------------------------

def test_the_stream_shows_passage_numbers_even_when_a_marker_is_split() -> None:
    state = _state("How much memory does LU-KV keep?", [result("covid", COVID), result("ml", ML, rank=2)])
    i = next(i for i, e in enumerate(state.evidence, start=1) if e.doc_id == "ml")
    shown: list[str] = []
    stream = MarkerStream(state.evidence, lambda text: shown.append(text))
    for piece in [" LU-KV keeps 10% memory [", f"{i}", "][99]."]:
        stream.feed(piece)
    stream.flush()
    assert "".join(shown) == "LU-KV keeps 10% memory [2]."  # evidence [i] is passage 2; [99] is no evidence


def test_a_conclusion_loses_the_echo_of_its_request() -> None:
    state = _state("Does tailored print raise mammography use?", [result("pubmed", PUBMED)])
    shown: list[str] = []
    state.on_event = lambda kind, payload: shown.append(payload) if kind == "token" else None
    Write(FixedGenerator("No, the abstract's results conclude that tailored print had no effect.",
                         decision={"yes": 0.1, "no": 0.8, "maybe": 0.1})).run(state)
    assert state.written == "No, tailored print had no effect." and state.decision == "no"
    assert "".join(shown) == state.written  # the stream never shows the echo either
    state = _state("Does tailored print raise mammography use?", [result("pubmed", PUBMED)])
    Write(FixedGenerator("The evidence shows that tailored print had no effect.")).run(state)
    assert state.written == "Tailored print had no effect."


def test_a_yes_below_the_bar_is_the_likelier_of_no_and_maybe() -> None:
    question = "Does telephone counseling raise mammography use?"
    decided = {}
    for name, probabilities in [("sure", {"yes": 0.80, "no": 0.15, "maybe": 0.05}),
                                ("unsure", {"yes": 0.63, "no": 0.34, "maybe": 0.03}),
                                ("unsettled", {"yes": 0.50, "no": 0.20, "maybe": 0.30})]:
        state = _state(question, [result("pubmed", PUBMED)])
        Write(FixedGenerator("Telephone counseling increased mammography use.", decision=probabilities)).run(state)
        decided[name] = state.decision
        assert state.decision_probabilities == pytest.approx(probabilities)  # what the model said stays on record
    assert decided == {"sure": "yes", "unsure": "no", "unsettled": "maybe"}
    state = _state(question, [result("pubmed", PUBMED)])
    Write(FixedGenerator("Telephone counseling increased it.", decision={"yes": 0.63, "no": 0.34, "maybe": 0.03}),
          min_yes=0.6).run(state)
    assert state.decision == "yes"
    with pytest.raises(ValueError, match="min_yes"):
        Write(FixedGenerator(), min_yes=1.2)


def test_an_unsure_yes_stands_when_the_conclusion_states_the_question_as_true() -> None:
    question = "Does telephone counseling raise mammography use?"
    unsure = {"yes": 0.63, "no": 0.34, "maybe": 0.03}
    decided = {}
    for name, conclusion in [("restated", "The abstract concludes that telephone counseling raises mammography use."),
                             ("hedged", "Telephone counseling may raise mammography use."),
                             ("negated", "Telephone counseling does not raise mammography use."),
                             ("partial", "Telephone counseling raises use.")]:
        state = _state(question, [result("pubmed", PUBMED)])
        Write(FixedGenerator(conclusion, decision=unsure)).run(state)
        decided[name] = state.decision
    assert decided == {"restated": "yes", "hedged": "no", "negated": "no", "partial": "no"}
    state = _state(question, [result("pubmed", PUBMED)])  # the likelier answer is still the model's
    Write(FixedGenerator("Telephone counseling raises mammography use.",
                         decision={"yes": 0.40, "no": 0.45, "maybe": 0.15})).run(state)
    assert state.decision == "no"


def test_a_yes_needs_the_confidence_every_answer_needs() -> None:
    from citerag.service.answering.judge import MIN_CONFIDENCE
    from citerag.service.answering.write import MIN_YES

    assert MIN_YES == MIN_CONFIDENCE == 0.65
    # and a bar the operator sets (CITERAG_MIN_CONFIDENCE) moves both
    pipeline = evidence_pipeline(FixedSearcher([]), FixedGenerator(), HashEmbedder().encode, min_confidence=0.8)
    assert [c.min_yes for c in pipeline.components if isinstance(c, Write)] == [0.8]
    assert [c.min_confidence for c in pipeline.components if isinstance(c, Judge)] == [0.8]


def test_a_conclusion_streams_as_soon_as_it_cannot_be_the_echo() -> None:
    from citerag.service.answering.write import EchoCut

    def sent_after(pieces: list[str]) -> tuple[list[int], str]:
        """The pieces after which something was sent, and all that was sent."""
        shown: list[str] = []
        cut = EchoCut(shown.append)
        after = []
        for i, piece in enumerate(pieces):
            before = len(shown)
            cut.feed(piece)
            if len(shown) > before:
                after.append(i)
        cut.flush()
        return after, "".join(shown)

    # not the echo: sent at the first piece that rules it out (the second: "The" may open "The abstract ...")
    assert sent_after(["The", " defense", " does", " not", " need", " it."]) == ([1, 2, 3, 4, 5],
                                                                            "The defense does not need it.")
    assert sent_after(["Manual", " resuscitators", " fail."]) == ([0, 1, 2], "Manual resuscitators fail.")
    # the echo: held until its end and a character after it, then cut
    pieces = ["No", ",", " the", " abstract", "'s", " results", " conclude", " that", " tailored", " print", "."]
    assert sent_after(pieces) == ([8, 9, 10], "No, tailored print.")


def test_the_writer_streams_and_a_yes_no_decision_follows_the_answer() -> None:
    state = _state("Does telephone counseling increase mammography use?", [result("pubmed", PUBMED)])
    tokens: list[str] = []
    state.on_event = lambda kind, payload: tokens.append(payload) if kind == "token" else None
    generator = FixedGenerator("Telephone counseling increased mammography use by 12% [1].",
                               decision={"yes": 0.7, "no": 0.2, "maybe": 0.1})
    Write(generator).run(state)
    assert state.decision == "yes" and "".join(tokens) == state.written
    assert [c["grammar"] is None for c in generator.calls] == [True, False]  # written, then decided
    assert generator.calls[0]["pin"] is False and generator.calls[1]["pin"] is True
    # the decision continues the model's own turn: its conclusion, then the lead to one word
    assert generator.calls[1]["messages"][-1] == {"role": "assistant",
                                                  "content": f"{generator.written}\n{DECISION_LEAD}"}
    # its own conversation: the decision's system prompt, no worked examples, its own slot and pinned prefix
    assert [m["role"] for m in generator.calls[0]["messages"]] == ["system", "user"]
    assert generator.calls[0]["messages"][0]["content"] == DECISION_SYSTEM
    assert {(c["slot"], c["fixed"]) for c in generator.calls} == {(DECISION_SLOT, 1)}
    assert first_word_decision("Maybe: it depends.") == "maybe" and first_word_decision("Yesterday") is None



def test_a_yes_after_a_conclusion_that_denies_the_question_is_a_no() -> None:
    state = _state("Does telephone counseling increase mammography use?", [result("pubmed", PUBMED)])
    generator = FixedGenerator("Telephone counseling does not increase mammography use [1].",
                               decision={"yes": 0.48, "no": 0.40, "maybe": 0.12})
    Write(generator).run(state)
    assert state.decision == "no" and state.decision_probabilities["yes"] == pytest.approx(0.48)

def test_evidence_that_negates_the_whole_question_makes_a_yes_a_no_in_its_own_words() -> None:
    regret = ("This paper introduces Regret Pre-training, a framework grounded in the Learning Using Privileged "
              "Information (LUPI) paradigm. The framework introduces no additional parameters and requires one extra "
              "forward pass per training step.")
    state = _state("Does Regret Pre-training introduce additional parameters?", [result("regret", regret)])
    generator = FixedGenerator("Regret Pre-training introduces additional parameters [1].",
                               decision={"yes": 0.9, "no": 0.08, "maybe": 0.02})
    Write(generator).run(state)
    denial = next(i for i, e in enumerate(state.evidence) if "no additional parameters" in e.text)
    assert state.decision == "no"
    assert state.written == ("The framework introduces no additional parameters and requires one extra forward pass "
                             f"per training step. [{denial + 1}]")
    # a sentence negating only part of the question ("no" before two of its words, the rest not in it) leaves it be
    partial = _state("Does Regret Pre-training introduce additional parameters to vision transformers?",
                     [result("regret", regret)])
    Write(FixedGenerator("Yes, it does [1].", decision={"yes": 0.9, "no": 0.08, "maybe": 0.02})).run(partial)
    assert partial.decision == "yes"


@pytest.mark.parametrize("question, opening, sentence", [
    # the question's words in other forms: "add" in "additional"; a generic fourth word ("model") not repeated
    ("Does Regret Pre-training add extra parameters to the model?",
     "This paper introduces Regret Pre-training, a self-supervised framework.",
     "The framework introduces no additional parameters and requires one extra forward pass per training step."),
    # a requirement in another word: "need" denied by "does not require"
    ("Does TwinSampler need labelled data?", "We introduce TwinSampler, a sampler for graphs.",
     "The sampler does not require labelled data at any stage."),
])
def test_evidence_that_negates_the_question_in_other_words_makes_a_yes_a_no(question: str, opening: str,
                                                                            sentence: str) -> None:
    state = _state(question, [result("paper", f"{opening} {sentence}")])
    Write(FixedGenerator("Yes [1].", decision={"yes": 0.9, "no": 0.08, "maybe": 0.02})).run(state)
    assert state.decision == "no" and state.written.startswith(sentence)


# --- verify --------------------------------------------------------------------------------------------------------

def test_check_holds_numbers_and_names_to_the_evidence() -> None:
    evidence = ["On MATH500, ASMC attains 80.6% exact-match accuracy with p95 = 73.7s."]
    assert check("ASMC reaches 80.6% exact-match accuracy and a p95 of 73.7s on MATH500", evidence).supported()
    assert check("ASMC reaches 86.0% accuracy on MATH500", evidence).missing_numbers == ("86.0",)
    assert check("ASMC beats GPT-5 on MATH500", evidence).missing_names == ("GPT-5",)
    assert not check("France won the 2018 World Cup final", evidence).supported()


def test_written_sentences_drop_an_unfinished_one_and_keep_markers_with_their_sentence() -> None:
    text = "LU-KV keeps 90% accuracy. [2] It evicts entries [1, 3]. As evidence sentence [2] states, it is"
    assert written_sentences(text, truncated=True) == [("LU-KV keeps 90% accuracy", [2]), ("It evicts entries", [1, 3])]
    assert written_sentences("The evidence sentences do not say [2].", truncated=False) == []  # about the prompt


def test_a_statement_attributed_to_the_prompt_is_kept_without_the_attribution() -> None:
    # what follows "The passage [n] states that" is the statement; its markers stay with it
    assert written_sentences("As evidence sentence [2] states, LU-KV is fast.", truncated=False) == \
        [("LU-KV is fast", [2])]
    assert written_sentences("The evidence sentences answer the question by stating that Wikipedia's disambiguation "
                             "pages were used to collect the documents [2].", truncated=False) == \
        [("Wikipedia's disambiguation pages were used to collect the documents", [2])]
    # a sentence that only says where the one before it stands cites it
    assert written_sentences("Looped transformers recognize all CFLs. This is stated in the passage [1].",
                             truncated=False) == [("Looped transformers recognize all CFLs", [1])]
    # without "that", what follows the frame need not be a statement: talk about the prompt, dropped
    assert written_sentences("The evidence sentences answer the question by mentioning two papers [1].",
                             truncated=False) == []
    # a name that opens with one of the material's words is no attribution
    assert written_sentences("Evidence-based medicine states that trials come first [1].", truncated=False) == \
        [("Evidence-based medicine states that trials come first", [1])]


def _verified(question: str, passages, written: str, truncated: bool = False) -> AnswerState:
    state = _state(question, passages)
    state.written, state.truncated = written, truncated
    Verify().run(state)
    return state


def test_what_an_answer_says_its_subject_is_must_be_in_the_evidence() -> None:
    helix = ("Time series imputation benefits from cross-feature correlations. To address this, we propose HELIX, "
             "which assigns each feature a learnable feature identity, a persistent embedding that captures "
             "intrinsic semantic properties throughout the network. Unlike graph-based "
             "methods, HELIX learns arbitrary feature dependencies from temporal co-variation.")
    # "a graph neural network" is the model's, not the paper's: the sentence goes, and the evidence sentence it
    # rests on (its marker's) says what HELIX is in the paper's words
    state = _verified("What is HELIX?", [result("helix", helix)],
                      "HELIX is a graph neural network that assigns each feature a learnable feature identity, a "
                      "persistent embedding that captures intrinsic semantic properties [1].")
    assert [s.text for s in state.statements] == [
        "HELIX assigns each feature a learnable feature identity, a persistent embedding that captures intrinsic "
        "semantic properties throughout the network"]
    kept = _verified("What is HELIX?", [result("helix", helix)],
                     "HELIX is a persistent embedding that assigns each feature a learnable feature identity [1].")
    assert [s.text for s in kept.statements] == [
        "HELIX is a persistent embedding that assigns each feature a learnable feature identity"]


def test_a_supported_sentence_is_kept_and_a_wrong_citation_is_moved() -> None:
    passages = [result("covid", COVID), result("ml", ML, rank=2)]
    state = _verified("How much memory does LU-KV keep at 90% accuracy?", passages,
                      "LU-KV keeps 90% accuracy at 10% memory [9].")
    [statement] = state.statements
    assert statement.origin == "written" and state.evidence[statement.evidence[0]].doc_id == "ml"


def test_an_altered_number_is_never_stated() -> None:
    state = _verified("How much memory does LU-KV keep at 90% accuracy?", [result("ml", ML)],
                      "LU-KV keeps 90% accuracy at 15% memory [2].")
    [statement] = state.statements
    assert statement.origin == "extract" and "15%" not in statement.text  # the evidence's own sentence instead
    assert "10%" in statement.text


def test_a_sentence_its_source_negates_does_not_cite_it() -> None:
    # fresh i020: "Yes, Regret Pre-training adds extra parameters to the language model [1]." cited "The framework
    # introduces no additional parameters ...": every content word is there, negated
    text = ("This paper introduces Regret Pre-training, a self-supervised framework. The framework introduces no "
            "additional parameters and requires only one extra forward pass per training step.")
    state = _verified("Does Regret Pre-training change the model's size?", [result("rp", text)],
                      "Regret Pre-training adds extra parameters to the model [1].")
    assert all("adds extra parameters" not in s.text for s in state.statements)
    # what the source negates is said negated: supported
    state = _verified("Does Regret Pre-training change the model's size?", [result("rp", text)],
                      "Regret Pre-training introduces no additional parameters [1].")
    assert [s.origin for s in state.statements] == ["written"]


def test_an_amount_the_evidence_lacks_is_not_replaced_by_another_papers_number() -> None:
    # the model gives PolyNeXt an accuracy no evidence sentence states; the closest sentence is another paper's
    state = _verified("What top-1 accuracy does PolyNeXt reach on ImageNet?", [result("ml", ML)],
                      "PolyNeXt reaches a top-1 accuracy of 79.8% on ImageNet [2].")
    assert state.abstained and "(79.8) is not in the evidence" in state.reason
    # the evidence's own sentence about the same thing (LU-KV) still replaces an altered number
    kept = _verified("How much memory does LU-KV keep at 90% accuracy?", [result("ml", ML)],
                     "LU-KV keeps 90% accuracy at 15% memory [2].")
    assert not kept.abstained and kept.statements[0].origin == "extract"


FOREST = ("Gradient Boosted Trees are slow at inference, reaching 420 ms per query on CPU. We propose Compiled "
          "Forest Inference (CFI), which compiles tree ensembles to branch-free code. On CPU, CFI answers a query "
          "in 12 ms.")


def test_a_figure_the_abstract_gives_another_method_is_not_the_subjects() -> None:
    # the follow-up: "Sequential Monte Carlo reaches p95 = 1318s" took the figure of the baseline's
    # background sentence ("Autoregressive Metropolis Hastings ... reaching p95 = 1318s"); the answer is the paper's
    # own sentence that states one
    state = _verified("What latency does Compiled Forest Inference reach on CPU?", [result("cfi", FOREST)],
                      "Compiled Forest Inference reaches 420 ms per query on CPU [1].")
    assert [(s.origin, s.text) for s in state.statements] == [("extract", "On CPU, CFI answers a query in 12 ms")]
    # the baseline's figure said of the baseline, and the method's of the method, stand as written
    for written in ("Gradient Boosted Trees reach 420 ms per query on CPU [1].",
                    "Compiled Forest Inference answers a query in 12 ms on CPU [3]."):
        state = _verified("What latency does Compiled Forest Inference reach on CPU?", [result("cfi", FOREST)], written)
        assert [s.origin for s in state.statements] == ["written"], written


def test_a_figure_of_a_sentence_about_the_subject_is_its_own_in_another_domain() -> None:
    trial = ("Metformin Extended Release lowered HbA1c by 1.2% over 24 weeks in 300 adults with type 2 diabetes. "
             "Adverse events were mild.")
    state = _verified("How much did Metformin Extended Release lower HbA1c?", [result("trial", trial)],
                      "Metformin Extended Release lowered HbA1c by 1.2% over 24 weeks [1].")
    assert [s.origin for s in state.statements] == ["written"]
    # another drug's name given that figure is not supported by a sentence about Metformin Extended Release
    assert check("Insulin Glargine lowered HbA1c by 1.2%", [trial.split(". ")[0]]).borrowed_numbers == ("1.2",)


def test_an_amount_of_another_paper_is_no_answer_about_the_paper_named() -> None:
    from citerag.service.answering.verify import _Context

    # fresh f030: "PMDO beats the previous best ... by 80.6% exact-match accuracy [2]", 80.6% being ASMC's accuracy,
    # and ASMC's sentence the one that would replace it: the number is in the evidence, but not in PMDO's
    texts = ["PMDO enables effective cross-domain adaptation.",
             "On MATH500, ASMC attains 80.6% exact-match accuracy."]
    context = _Context("By how many accuracy points does PMDO beat the previous best method?", texts,
                       ["PMDO", "ASMC"], False, True, ["pmdo", "asmc"], {})
    body = "PMDO beats the previous best method by 80.6% exact-match accuracy"
    assert Verify._invented(body, context, texts[1]) == ("80.6",)
    # a body that names no paper of the evidence is checked against all of it, as before
    assert Verify._invented("EDEN beats it by 80.6% exact-match accuracy", context, texts[1]) == ()


def test_a_count_of_another_paper_is_no_answer_about_the_paper_named() -> None:
    # fresh i029: "By how many percentage points does ExVerus improve ...?" was answered with GlobalRegret's
    # "improves BoolQ performance by 18.1 percentage points", the only evidence sentence stating such a count
    helix = "HELIX surpasses all 16 baselines on imputation."
    state = _state("How many baselines does LU-KV beat?", [result("ml", ML), result("helix", helix, rank=2)],
                   sentences=5)
    assert helix in [e.text for e in state.evidence] and state.named == ["ml"]
    state.written = "LU-KV is a KV cache eviction method [2]."
    Verify().run(state)
    assert state.abstained and "states none" in state.reason
    about_helix = _state("How many baselines does HELIX beat?", [result("ml", ML), result("helix", helix, rank=2)],
                         sentences=5)
    about_helix.written = "HELIX beats many baselines [4]."
    Verify().run(about_helix)
    assert [s.text for s in about_helix.statements] == ["HELIX surpasses all 16 baselines on imputation"]


def test_a_sentence_naming_what_the_evidence_does_not_is_dropped() -> None:
    state = _verified("How much memory does LU-KV keep?", [result("ml", ML)],
                      "LU-KV keeps 90% accuracy at 10% memory [2]. GPT-5 uses LU-KV in production [2].")
    assert [s.text for s in state.statements] == ["LU-KV keeps 90% accuracy at 10% memory"]


def test_a_pronoun_opening_gets_the_papers_name() -> None:
    state = _verified("What does GP-EquiFlow do?", [result("ml2", ML2)],
                      "We introduce GP-EquiFlow, a flow model with Gaussian process priors [1]. "
                      "It lowers error by 31% [2].")
    assert [s.text for s in state.statements] == [
        "GP-EquiFlow is a flow model with Gaussian process priors", "GP-EquiFlow lowers error by 31%"]


def test_a_comparison_says_of_each_paper_only_what_its_own_evidence_says() -> None:
    asmc = ("We propose ASMC, a parallel particle inference method. ASMC targets power shaped trajectory "
            "distributions while adapting particle populations.")
    assimilation = ("Data assimilation with a pretrained diffusion forecaster is hard. We run a particle filter "
                    "whose proposal is the diffusion model, and sample the posterior given the observations.")
    question = "ASMC and the paper on data assimilation with a diffusion forecaster: what does each sample from?"
    passages = [result("asmc", asmc), result("da", assimilation, rank=2)]
    state = _state(question, passages)
    assert state.info.kind == "comparison" and {e.doc_id for e in state.evidence} == {"asmc", "da"}
    targets = next(i for i, e in enumerate(state.evidence) if "targets" in e.text) + 1
    # the second sentence gives ASMC's finding to the paper the question describes (its words are only that
    # paper's): it goes, and that paper's own evidence sentence stands for it
    state = _verified(question, passages,
                      f"ASMC targets power shaped trajectory distributions [{targets}]. The paper on data assimilation "
                      f"with a diffusion forecaster also targets power shaped trajectory distributions [{targets}].")
    texts = [s.text for s in state.statements]
    assert texts[0] == "ASMC targets power shaped trajectory distributions"
    assert len(texts) == 2 and "power shaped" not in texts[1]
    assert {state.evidence[s.evidence[0]].doc_id for s in state.statements} == {"asmc", "da"}


def test_a_comparison_that_names_no_paper_is_answered_from_one_paper() -> None:
    # "the difference between A and B" inside one paper (COVID-QA's comparisons): no second paper is added
    question = "What is the difference between transmission to children and to adults?"
    passages = [result("covid", COVID), result("pubmed", PUBMED, rank=2)]
    state = _state(question, passages)
    assert state.info.kind == "comparison" and not state.named
    i = next(i for i, e in enumerate(state.evidence) if e.doc_id == "covid" and "main cause" in e.text) + 1
    state = _verified(question, passages, f"Mother-to-child transmission (MTCT) is the main cause of HIV-1 "
                                          f"infection in children worldwide [{i}].")
    assert [state.evidence[s.evidence[0]].doc_id for s in state.statements] == ["covid"]


def test_the_dummy_it_of_a_passive_report_becomes_the_paper_reporting() -> None:
    # "It is shown that ..." names no thing called "it": the paper shows it ("GP-EquiFlow is shown that" is no English)
    state = _verified("What does GP-EquiFlow do?", [result("ml2", ML2)],
                      "It is shown that GP-EquiFlow lowers error by 31% [2].")
    assert [s.text for s in state.statements] == ["The paper shows that GP-EquiFlow lowers error by 31%"]


def test_a_sentence_opening_with_a_conjunction_stands_alone() -> None:
    state = _verified("What does GP-EquiFlow do?", [result("ml2", ML2)],
                      "And GP-EquiFlow lowers error by 31% [2].")
    assert [s.text for s in state.statements] == ["GP-EquiFlow lowers error by 31%"]


def test_a_papers_name_is_the_answer_to_a_question_about_one_thing() -> None:
    # "LU-KV" is the paper's coined name (its label), and the answer: the sentence adds nothing else
    question = "What KV cache eviction method is proposed for long contexts?"
    state = _verified(question, [result("ml", ML)], "LU-KV is proposed for long contexts [1].")
    assert [(s.text, s.origin) for s in state.statements] == [("LU-KV is proposed for long contexts", "written")]
    # a which-papers answer must still say what the paper does, not only name it
    which = "Which paper proposes a KV cache eviction method?"
    assert check("LU-KV is proposed", [ML], which, ["LU-KV"]).coverage == 0.0

def test_an_amount_answered_without_a_number_is_no_answer() -> None:
    state = _verified("What accuracy does LU-KV keep?", [result("ml", ML)], "LU-KV, a KV cache eviction method, keeps accuracy [1].")
    assert state.info.amount and state.abstained and "asks for an amount" in state.reason
    kept = _verified("What accuracy does LU-KV keep?", [result("ml", ML)], "LU-KV keeps 90% accuracy [1].")
    assert not kept.abstained and kept.statements[0].text == "LU-KV keeps 90% accuracy"


def test_a_counting_question_is_answered_with_a_number_of_what_it_counts() -> None:
    text = ("We introduce XR-1, a vision-language-action model. XR-1 outperforms pi-0 and GR00T-N1.5 on novel objects. "
            "We validate XR-1 through real-world experiments with more than 12,000 rollouts on six robots.")
    state = _verified("How many real-world rollouts were used to validate XR-1?", [result("ml", text)],
                      "XR-1 outperforms pi-0 and GR00T-N1.5 on novel objects [1].")
    assert state.info.counted == ("real", "world", "rollout")
    [statement] = state.statements  # the written sentence states a number, but not of rollouts
    assert statement.origin == "extract"
    assert statement.text == "XR-1 is validated through real-world experiments with more than 12,000 rollouts on six robots"


def test_a_definition_question_is_answered_with_what_its_subject_is() -> None:
    text = ("Taxonomy expansion places new concepts under parents. We introduce Polaris, a polar hyperspherical "
            "embedding framework for hierarchies. Polaris then combines local constraints and global regularization.")
    written = "Polaris (the taxonomy expansion method) combines local constraints and global regularization [3]."
    state = _verified("What is Polaris (the taxonomy expansion method)?", [result("ml", text)], written)
    assert state.info.kind == "definition" and state.info.subject == "Polaris"
    [statement] = state.statements  # the written sentence is supported, but does not say what Polaris is
    assert statement.origin == "extract"
    assert statement.text == "Polaris is a polar hyperspherical embedding framework for hierarchies"
    # a written sentence that says what it is stays
    kept = _verified("What is Polaris?", [result("ml", text)], "Polaris is a polar hyperspherical embedding framework [2].")
    assert [s.origin for s in kept.statements] == ["written"]


# --- compose -------------------------------------------------------------------------------------------------------

def _composed(question: str, passages, statements: list[Statement], decision: str | None = None) -> AnswerState:
    state = _state(question, passages)
    state.statements, state.decision = statements, decision
    Compose().run(state)
    return state


def test_markers_are_passage_numbers_and_citations_exact_spans() -> None:
    passages = [result("covid", COVID), result("ml", ML, rank=2)]
    state = _state("How much memory does LU-KV keep?", passages)
    i = next(i for i, e in enumerate(state.evidence) if e.doc_id == "ml")
    state.statements = [Statement("LU-KV keeps 90% accuracy at 10% memory", (i,))]
    Compose().run(state)
    assert state.answer == "LU-KV keeps 90% accuracy at 10% memory [2]."
    [citation] = state.citations
    assert citation.n == 2 and ML[citation.start:citation.end] == state.evidence[i].text


def test_a_yes_no_answer_opens_with_its_decision() -> None:
    passages = [result("pubmed", PUBMED)]
    state = _composed("Does tailored print increase mammography use?", passages,
                      [Statement("Tailored print had no effect", (0,))], decision="no")
    assert state.answer.startswith("No. Tailored print had no effect [1].")
    already = _composed("Does tailored print increase mammography use?", passages,
                        [Statement("No, tailored print had no effect", (0,))], decision="no")
    assert already.answer == "No, tailored print had no effect [1]."


def test_an_answer_about_several_papers_names_each_paper_it_cites() -> None:
    passages = [result("ml", ML), result("covid", COVID, rank=2, title="DC-SIGNR in placenta")]
    state = _state("Which papers study memory or transmission?", passages)
    ml = next(i for i, e in enumerate(state.evidence) if e.doc_id == "ml")
    covid = next(i for i, e in enumerate(state.evidence) if e.doc_id == "covid")
    state.statements = [Statement("It keeps 90% accuracy", (ml,)), Statement("MTCT is the main cause", (covid,))]
    Compose().run(state)
    assert state.answer.startswith("LU-KV: It keeps 90% accuracy [1].")
    assert "DC-SIGNR in placenta: MTCT is the main cause [2]." in state.answer


def test_a_paper_named_by_its_title_head_gets_no_label_before_it() -> None:
    passages = [result("ml", ML, title="LU-KV: Eviction for Long Contexts"), result("covid", COVID, rank=2)]
    state = _state("Which papers study memory or transmission?", passages)
    ml = next(i for i, e in enumerate(state.evidence) if e.doc_id == "ml")
    state.statements = [Statement("LU-KV keeps 90% accuracy", (ml,))]
    Compose().run(state)
    assert state.answer == "LU-KV keeps 90% accuracy [1]."


def test_a_paper_called_by_the_name_the_question_gives_it_gets_no_label_before_it() -> None:
    title = "Prediction Under Uncertainty with Error Encoding Networks"
    passages = [result("ml", ML, title=title), result("covid", COVID, rank=2, title="DC-SIGNR in placenta")]
    state = _state("How do Error Encoding Networks and the DC-SIGNR study each work?", passages)
    ml = next(i for i, e in enumerate(state.evidence) if e.doc_id == "ml")
    covid = next(i for i, e in enumerate(state.evidence) if e.doc_id == "covid")
    state.statements = [Statement("Error Encoding Networks keep 90% accuracy", (ml,)),
                        Statement("MTCT is the main cause", (covid,))]
    Compose().run(state)
    assert state.answer == ("Error Encoding Networks keep 90% accuracy [1]. "
                            "DC-SIGNR in placenta: MTCT is the main cause [2].")


def test_a_titled_paper_is_called_by_its_short_name() -> None:
    # ML dev ml003 read "Generating adversarial examples with graph neural networks (AdvGNN) shows that ..."; the
    # name the abstract coins is the subject, unless the title uses it as one word among others (a topic)
    gnn = "We propose AdvGNN, a graph neural network that attacks a network. We reduce the attack time by 65%."
    title = "Generating adversarial examples with graph neural networks"
    state = _verified("How much faster is AdvGNN?", [result("gnn", gnn, title=title)],
                      "We reduce the attack time by 65% [1].")
    Compose().run(state)
    assert state.answer == "AdvGNN reduces the attack time by 65% [1]."
    topic = "Combining Variational Inference and MCMC"
    vcd = "We develop a way to combine Markov chain Monte Carlo (MCMC) and VI. Our method cuts the bias by 65%."
    state = _verified("How much does the variational contrastive method cut the bias?",
                      [result("vcd", vcd, title=topic)], "Our method cuts the bias by 65% [1].")
    Compose().run(state)
    assert state.answer == f"{topic} cuts the bias by 65% [1]."


# --- runner --------------------------------------------------------------------------------------------------------

def test_the_pipeline_runs_each_step_once_in_order_and_streams() -> None:
    searcher = FixedSearcher([result("covid", COVID), result("ml", ML, rank=2)])
    generator = FixedGenerator("We propose LU-KV, a KV cache eviction method [1]. It keeps 90% accuracy at 10% memory [2].")
    pipeline = evidence_pipeline(searcher, generator, HashEmbedder().encode, default_k=2)
    events: list[str] = []
    # (not "How much memory ...?": the count stated by the paper named would answer it unjudged)
    answer = pipeline.ask("What share of memory does LU-KV keep?", on_event=lambda kind, _: events.append(kind))
    assert events[:3] == ["question", "passages", "evidence"] and set(events[3:]) == {"token"}
    assert not answer.abstained and answer.answer.startswith("LU-KV is a KV cache eviction method [2].")
    assert list(answer.timings_ms)[:2] == ["analyse", "retrieve"] and answer.timings_ms["total"] > 0
    assert {"judge", "write", "verify", "compose", "prompt", "generate"} <= set(answer.timings_ms)
    assert [c["grammar"] is not None for c in generator.calls] == [True, False]  # judged once, written once


def test_the_pipeline_stops_at_an_abstention() -> None:
    far = FixedSearcher([result("covid", COVID, dense=0.05)])
    generator = FixedGenerator("unused")
    answer = evidence_pipeline(far, generator, HashEmbedder().encode).ask("Who won the 2018 FIFA World Cup?")
    assert answer.abstained and "no passage is close enough" in answer.reason and generator.calls == []
    assert "evidence" not in answer.timings_ms and answer.citations == []


def test_a_name_the_question_gives_is_closer_than_any_cosine() -> None:
    from citerag.service.answering.retrieve import Retrieve

    # "What does BAPO stand for?" is close to no passage (cosine 0.135 over the shipped abstracts) but its name
    bapo = "We extend the bounded attention prefix oracle (BAPO) model to chain-of-thought tokens."
    state = AnswerState(question="What does BAPO stand for?", info=analyse("What does BAPO stand for?"))
    Retrieve(FixedSearcher([result("bapo", bapo, dense=0.13)])).run(state)
    assert not state.abstained and [p.document.doc_id for p in state.passages] == ["bapo"]
    off = AnswerState(question="What does FIFA stand for?", info=analyse("What does FIFA stand for?"))
    Retrieve(FixedSearcher([result("bapo", bapo, dense=0.13)])).run(off)
    assert off.abstained and "no passage is close enough" in off.reason


def test_an_abbreviation_the_question_spells_out_is_spelled_out_in_the_answer() -> None:
    # fresh i026: "Divergence Decoding and the zero-shot jailbreak defense ... Which one steers the model's output
    # logits?" was answered "DD steers ..."; the reader asked by the long form
    dd = "We introduce **Divergence Decoding (DD)**, a mechanism that steers the logits of the LLM."
    asked = _composed("Which one steers the logits, Divergence Decoding or the jailbreak defense?", [result("dd", dd)],
                      [Statement("DD steers the logits of the LLM", (0,))])
    assert asked.answer == "DD (Divergence Decoding) steers the logits of the LLM [1]."
    short = _composed("Does DD steer the logits?", [result("dd", dd)], [Statement("DD steers the logits", (0,))],
                      decision="yes")
    assert short.answer == "Yes. DD steers the logits [1]."


def test_a_contrary_opening_word_gives_way_to_the_decision() -> None:
    state = _composed("Does tailored print increase mammography use?", [result("pubmed", PUBMED)],
                      [Statement("No, tailored print raised it", (0,))], decision="yes")
    assert state.answer == "Yes. Tailored print raised it [1]."


def test_a_which_papers_answer_falls_back_to_each_papers_own_sentence() -> None:
    passages = [result("ml", ML), result("ml2", ML2, rank=2)]
    state = _state("Which papers propose a method with a lower error or less memory?", passages)
    state.written = "LU-KV and GP-EquiFlow [1][2]."  # names only: says nothing
    Verify().run(state)
    assert [s.origin for s in state.statements] == ["extract", "extract"]
    assert {state.evidence[s.evidence[0]].doc_id for s in state.statements} == {"ml", "ml2"}


def test_a_comparison_whose_answer_fails_still_answers_from_the_evidence() -> None:
    # the named paper is retrieved but its sentences are not evidence: nothing written survives, yet the answer
    # is each evidence paper's own sentence, never empty
    passages = [result("covid", COVID), result("ml", ML, rank=2)]
    state = _state("How do LU-KV and the placenta study each cut costs?", passages)
    state.evidence = [e for e in state.evidence if e.doc_id == "covid"]
    state.written = "HydroGraph forecasts river floods [1]."
    Verify().run(state)
    assert state.info.kind == "comparison" and [s.origin for s in state.statements] == ["extract"]


class _ByQuery:
    """Returns ``table[query]`` for each query (the first ``k``), and records the queries."""

    def __init__(self, table) -> None:  # noqa: ANN001 - dict[str, list[SearchResult]]
        self.table, self.queries = table, []

    def search(self, query, k=10, mode="hybrid", filters=None, **_):
        self.queries.append(query)
        return self.table.get(query, [])[:k]


def test_a_comparison_gets_each_paper_it_names_even_when_retrieval_missed_one() -> None:
    from citerag.service.answering.retrieve import Retrieve

    question = "What do LU-KV and GP-EquiFlow each improve?"
    searcher = _ByQuery({question: [result("ml", ML, dense=0.6)], "GP-EquiFlow": [result("ml2", ML2)]})
    state = AnswerState(question=question, k=8)
    state.info = analyse(question)
    Retrieve(searcher).run(state)
    assert state.info.kind == "comparison"
    assert [p.document.doc_id for p in state.passages] == ["ml", "ml2"] and searcher.queries == [question, "GP-EquiFlow"]
    alone = _ByQuery({"What does LU-KV improve?": [result("ml", ML, dense=0.6)]})
    state = AnswerState(question="What does LU-KV improve?", k=8)
    state.info = analyse(state.question)
    Retrieve(alone).run(state)
    assert alone.queries == ["What does LU-KV improve?"]  # one name: no extra search


class _Passages:
    """Returns ``results`` for a query, and the passages of the documents a ``doc_id`` filter names from
    ``documents``, best first; records the filters."""

    def __init__(self, results, documents) -> None:  # noqa: ANN001 - list[SearchResult], dict[str, list[...]]
        self.results, self.documents, self.filters = results, documents, []

    def search(self, query, k=10, mode="hybrid", filters=None, **_):
        self.filters.append(filters)
        if filters and "doc_id" in filters:
            return [r for d in filters["doc_id"]["in"] for r in self.documents.get(d, [])][:k]
        return self.results[:k]


class _Stored(_Passages):
    """:class:`_Passages` with a backend's ``passages_of``."""

    def passages_of(self, doc_id: str) -> list[Passage]:
        return [r.passage for r in self.documents.get(doc_id, [])]


def _split(doc_id: str, text: str, cut: int, dense: float = 0.6) -> tuple[SearchResult, SearchResult]:
    """``text`` as one document of two passages that touch at ``cut``."""
    document = Document(doc_id, "", text, doc_id)
    first = Passage(f"{doc_id}#0", doc_id, 0, 0, cut, text[:cut], 20)
    second = Passage(f"{doc_id}#1", doc_id, 1, cut, len(text), text[cut:], 20)
    return (SearchResult(1, first, document, 1.0, 1, 1, 1.0, dense),
            SearchResult(2, second, document, 0.5, 2, 2, 0.5, dense - 0.2))


def test_the_paper_an_answer_is_about_is_read_whole() -> None:
    from citerag.service.answering.retrieve import WHOLE_DOCUMENT_CHARS, Retrieve

    # fresh ML m003: the question retrieves the passage that introduces AdsSe-GAN; the dataset it was evaluated on
    # is named in the abstract's other passage, which another paper's passage outranks
    text = ("We propose AdsSe-GAN for photo-to-caricature generation. It adapts its normalization. "
            "Experimental results on a public caricature dataset, WebCaricature, show it is effective.")
    first, second = _split("gan", text, text.index("Experimental"))
    other = result("other", "Our metrics for GANs scale to large popular datasets.", rank=2)
    searcher = _Passages([first, other], {"gan": [first, second]})
    question = "What caricature dataset was AdsSe-GAN evaluated on?"
    state = AnswerState(question=question, k=8, info=analyse(question))
    Retrieve(searcher).run(state)
    assert [(p.passage.chunk_id, p.rank) for p in state.passages] == [("gan#0+1", 1), ("other#0", 2)]
    assert state.passages[0].passage.text == text and searcher.filters[-1] == {"doc_id": {"in": ["gan"]}}
    assert state.retrieved == [("gan", 0, text.index("Experimental")), ("other", 0, len(other.document.text))]
    # what the question did not retrieve is no evidence of its own (it would crowd out other papers when the best
    # passage's paper is the wrong one), but it states what a rule asks for: here the dataset, by its class
    SelectEvidence(HashEmbedder().encode, sentences=2).run(state)
    assert [e.text for e in state.evidence][-1].startswith("Experimental results on a public caricature dataset")
    state.info = analyse("How is AdsSe-GAN evaluated?")  # asks for no class: the sentence stays out
    SelectEvidence(HashEmbedder().encode, sentences=2).run(state)
    assert not any(e.text.startswith("Experimental") for e in state.evidence)
    # a backend gives a document's stored passages without a search
    backend = _Stored([first, other], {"gan": [first, second]})
    state = AnswerState(question=question, k=8, info=analyse(question))
    Retrieve(backend).run(state)
    assert [(p.passage.chunk_id, p.rank) for p in state.passages] == [("gan#0+1", 1), ("other#0", 2)]
    assert backend.filters == [None] and state.passages[0].passage.text == text
    # a document longer than an abstract (a full paper) is left to retrieval: no search for its other passages
    long_text = text + " More." * (WHOLE_DOCUMENT_CHARS // 6)
    first, second = _split("paper", long_text, text.index("Experimental"))
    searcher = _Passages([first, other], {"paper": [first, second]})
    state = AnswerState(question=question, k=8, info=analyse(question))
    Retrieve(searcher).run(state)
    assert [p.passage.chunk_id for p in state.passages] == ["paper#0", "other#0"] and searcher.filters == [None]


def test_a_name_no_retrieved_passage_mentions_is_searched_with_bm25() -> None:
    from citerag.service.answering.retrieve import Retrieve

    question = "What does GGF stand for?"
    defining = "Reassembly is invariant. First, a Global Gauge Fixing (GGF) step aligns the fragments."
    searcher = _ByQuery({question: [result("ml", ML, dense=0.6)], "GGF": [result("ml2", ML2), result("frag", defining)]})
    state = AnswerState(question=question, k=8)
    state.info = analyse(question)
    Retrieve(searcher).run(state)
    # the BM25 hit that mentions the name (not the one that does not) comes after the question's own passages
    assert [(p.document.doc_id, p.rank) for p in state.passages] == [("ml", 1), ("frag", 2)]
    assert searcher.queries == [question, "GGF"] and not state.abstained


# --- judge papers --------------------------------------------------------------------------------------------------

def test_each_candidate_paper_of_a_which_papers_question_is_judged_and_named_ones_answer() -> None:
    from citerag.service.answering.judge import JudgePapers
    from citerag.service.answering.prompts import DECISION_SYSTEM

    question = "Which papers propose a method with a lower error or less memory?"
    state = AnswerState(question=question, info=analyse(question),
                        passages=[result("ml", ML), result("ml2", ML2, rank=2), result("covid", COVID, rank=3)])
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(state)
    candidates = {e.doc_id for e in state.evidence}
    assert {"ml", "ml2"} <= candidates
    # the model says yes for the paper whose evidence names GP-EquiFlow only
    generator = FixedGenerator(judge=lambda messages: 0.9 if "GP-EquiFlow" in messages[-1]["content"] else 0.05)
    events = []
    state.on_event = lambda kind, payload: events.append((kind, payload))
    JudgePapers(generator).run(state)
    asked = [c["messages"] for c in generator.calls]
    assert len(asked) == len(candidates)  # one judgement a paper
    assert all(m[0]["content"] == DECISION_SYSTEM and "Question: Does the paper propose a method with a lower error "
               "or less memory?" in m[-1]["content"] for m in asked)
    assert [e.doc_id for e in state.evidence] == ["ml2"] and state.papers_judged
    assert [kind for kind, _ in events] == ["token", "evidence"]  # the named paper's sentence, as soon as named
    assert state.evidence[0].text == "We introduce GP-EquiFlow, a flow model with Gaussian process priors."
    Judge(generator).run(state)
    Write(generator).run(state)
    assert len(generator.calls) == len(candidates) and state.written == ""  # no single judgement, no writing
    Verify().run(state)
    Compose().run(state)
    assert state.answer.startswith("GP-EquiFlow is a flow model with Gaussian process priors [2].")
    assert events[0][1] == state.answer  # what was streamed is the checked answer
    nobody = AnswerState(question=question, info=analyse(question), passages=[result("covid", COVID)])
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(nobody)
    JudgePapers(FixedGenerator(judge=0.1)).run(nobody)
    assert nobody.abstained and "no retrieved paper" in nobody.reason


def test_each_named_paper_is_streamed_as_soon_as_named_and_the_stream_reads_as_the_checked_answer() -> None:
    from citerag.service.answering.judge import JudgePapers

    question = "Which papers propose a method with a lower error or less memory?"
    state = AnswerState(question=question, info=analyse(question),
                        passages=[result("ml", ML), result("ml2", ML2, rank=2), result("covid", COVID, rank=3)])
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(state)
    events: list[tuple[str, object, int]] = []
    generator = FixedGenerator(judge=lambda messages: 0.05 if "HIV-1" in messages[-1]["content"] else 0.9)
    state.on_event = lambda kind, payload: events.append((kind, payload, len(generator.calls)))
    JudgePapers(generator).run(state)
    tokens = [(text, calls) for kind, text, calls in events if kind == "token"]
    assert [e.doc_id for e in state.evidence] == ["ml", "ml2"]
    # one piece a named paper, each sent right after that paper's judgement (not after the last one's)
    assert [calls for _, calls in tokens] == [1, 2] and [kind for kind, *_ in events][-1] == "evidence"
    Verify().run(state)
    Compose().run(state)
    assert "".join(text for text, _ in tokens) == state.answer
    assert state.answer == ("LU-KV is a KV cache eviction method [1]. "
                            "GP-EquiFlow is a flow model with Gaussian process priors [2].")
    stopped = AnswerState(question=question, info=analyse(question),
                          passages=[result("ml", ML), result("ml2", ML2, rank=2)])
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(stopped)
    stopped.on_event = lambda kind, payload: kind == "token"  # the listener stops at the first piece
    JudgePapers(FixedGenerator(judge=0.9)).run(stopped)
    assert stopped.stopped and [e.doc_id for e in stopped.evidence] == ["ml"]


def test_papers_without_a_name_are_told_apart_in_a_which_papers_answer() -> None:
    from citerag.service.answering.judge import JudgePapers

    # two abstracts that coin no name: "The paper ... The paper ..." would not say that two papers are meant
    smc = "We perform Sequential Monte Carlo over diffusion trajectories. Data assimilation is hard."
    filters = "We use Sequential Monte Carlo to track cells in microscopy videos. Tracking is noisy."
    question = "Which papers use Sequential Monte Carlo?"
    state = AnswerState(question=question, info=analyse(question),
                        passages=[result("smc", smc), result("cells", filters, rank=2), result("ml", ML, rank=3)])
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(state)
    tokens: list[str] = []
    state.on_event = lambda kind, payload: tokens.append(payload) if kind == "token" else None
    in_evidence = lambda messages: "Monte Carlo" in messages[-1]["content"].split("Question:")[0]  # noqa: E731
    JudgePapers(FixedGenerator(judge=lambda messages: 0.9 if in_evidence(messages) else 0.05), min_score=0.1).run(state)
    Verify().run(state)
    Compose().run(state)
    assert state.answer == ("One paper uses Sequential Monte Carlo to track cells in microscopy videos [2]. "
                            "Another paper performs Sequential Monte Carlo over diffusion trajectories [1].")
    assert "".join(tokens) == state.answer  # streamed as checked
    alone = _composed("What does the paper perform?", [result("smc", smc)],
                      [Statement("We perform Sequential Monte Carlo over diffusion trajectories", (0,))])
    assert alone.answer == "We perform Sequential Monte Carlo over diffusion trajectories [1]."  # compose only
    one = _state("What does the paper perform over diffusion trajectories?", [result("smc", smc)])
    one.written = "We perform Sequential Monte Carlo over diffusion trajectories [1]."
    Verify().run(one)
    assert [s.text for s in one.statements] == ["The paper performs Sequential Monte Carlo over diffusion trajectories"]


def test_the_first_person_inside_an_answer_is_the_papers() -> None:
    # the abstract's authors say "we" and "our"; the answer speaks of them, whether the model wrote it or it is an extract
    state = _state("How much memory does LU-KV keep?", [result("ml", ML)])
    state.written = "At 10% memory, we keep 90% accuracy with our LU-KV method [1]."
    Verify().run(state)
    assert [s.text for s in state.statements] == ["At 10% memory, the authors keep 90% accuracy with the paper's LU-KV method"]


def test_a_gerund_fragment_copied_from_the_authors_act_is_said_as_the_papers_act() -> None:
    revsi = "We introduce ReVSI, a benchmark. To this end, we re-annotate object labels across 413 scenes from 5 datasets."
    state = _state("How many scenes were re-annotated to build ReVSI?", [result("revsi", revsi)])
    state.written = "Re-annotating object labels across 413 scenes from 5 datasets [1]."  # no main verb
    Verify().run(state)
    Compose().run(state)
    assert state.answer == "ReVSI re-annotates object labels across 413 scenes from 5 datasets [1]."
