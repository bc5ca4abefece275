"""Evidence selection: candidate sentences with exact spans, their scores, and the select-evidence step."""

from __future__ import annotations

from dataclasses import replace

import pytest

from citerag.service.answering.evidence import (
    SelectEvidence,
    candidate_sentences,
    findings_first,
    grouped,
    select_evidence,
    sentence_scores,
)
from citerag.service.answering.question import analyse
from citerag.service.answering.state import AnswerState
from tests.conftest import HashEmbedder
from tests.service.answering.fixed import COVID, ML, ML2, PUBMED, result


def test_candidate_sentences_have_exact_document_spans() -> None:
    passages = [result("covid", COVID), result("pubmed", PUBMED, rank=2)]
    candidates = candidate_sentences(passages)
    texts = [passages[n - 1].document.text[s:e] for n, s, e in candidates]
    assert texts[0] == "Mother-to-child transmission (MTCT) is the main cause of HIV-1 infection in children worldwide."
    assert texts[-1] == "CONCLUSIONS: Tailored print had no effect."
    assert len(candidates) == 6


def test_a_sentence_in_two_overlapping_passages_is_one_candidate() -> None:
    whole = result("covid", COVID)
    second_start = COVID.index("DC-SIGNR")
    tail = whole.replace(passage=replace(whole.passage, chunk_id="covid#1", start=second_start,
                                         text=COVID[second_start:]), rank=2)
    assert len(candidate_sentences([whole, tail])) == 3


def test_overlong_sentences_are_cut_at_clause_boundaries() -> None:
    long = "Risk factors included " + ", ".join(f"factor number {i} in the cohort" for i in range(40)) + "."
    candidates = candidate_sentences([result("d", long)])
    assert len(candidates) > 1
    assert all(e - s <= 310 for _, s, e in candidates)
    assert candidates[0][1] == 0 and candidates[-1][2] == len(long)


def test_the_sentence_holding_the_question_terms_scores_best() -> None:
    question = "What is the main cause of HIV-1 infection in children?"
    sentences = ["The study enrolled 197 mothers in Zimbabwe.",
                 "Mother-to-child transmission is the main cause of HIV-1 infection in children worldwide."]
    scores, cosines = sentence_scores(question, sentences, [1, 1], HashEmbedder().encode)
    assert scores.shape == (2,) and scores[1] > scores[0]
    assert cosines[1] > cosines[0]


def test_a_web_address_does_not_make_a_sentence_match_the_question() -> None:
    question = "What top-1 accuracy does PolyNeXt reach on ImageNet?"
    sentences = ["Our code is available at https://github.com/example/PolyNeXt.",
                 "The polynomial backbones reach 83.1% top-1 accuracy on ImageNet."]
    scores, cosines = sentence_scores(question, sentences, [1, 1], HashEmbedder().encode)
    assert scores[1] > scores[0]
    # the address's words count for nothing: the sentence scores as its words without it do
    bare, bare_cosines = sentence_scores(question, ["Our code is available at", sentences[1]], [1, 1],
                                         HashEmbedder().encode)
    assert scores.tolist() == pytest.approx(bare.tolist()) and cosines.tolist() == pytest.approx(bare_cosines.tolist())


def test_a_question_word_counts_in_a_longer_word_it_begins() -> None:
    # "data" is held by "dataset" (BM25's stems keep them apart); a 3-letter stem is not ("use" in "users")
    question = "Where did the ranking paper get the data for its evaluation?"
    sentences = ["Evaluations on a large-scale dataset built from STRING releases show large gains.",
                 "Evaluations with practitioners show large gains for the users."]
    scores, _ = sentence_scores(question, sentences, [1, 1], HashEmbedder().encode, weights=(0.0, 0.0, 1.0, 0.0))
    assert scores[0] > scores[1]


def test_select_evidence_keeps_the_best_and_grouped_restores_text_order() -> None:
    passages = [result("ml", ML), result("covid", COVID, rank=2)]
    evidence = select_evidence("How much memory does LU-KV use at 90% accuracy?", passages, HashEmbedder().encode, keep=3)
    assert evidence[0].text.startswith("LU-KV keeps 90% accuracy")
    assert evidence[0].n == 1
    assert evidence[0].result.document.text[evidence[0].start:evidence[0].end] == evidence[0].text
    in_order = grouped(evidence)
    assert [e.doc_id for e in in_order][0] == "ml"
    assert [e.start for e in in_order if e.doc_id == "ml"] == sorted(e.start for e in in_order if e.doc_id == "ml")
    with pytest.raises(ValueError):
        select_evidence("q", passages, HashEmbedder().encode, keep=0)


def _selected(question: str, passages, **settings) -> AnswerState:
    state = AnswerState(question=question, info=analyse(question), passages=passages)
    events = []
    state.on_event = lambda kind, payload: events.append(kind)
    SelectEvidence(HashEmbedder().encode, **settings).run(state)
    assert events == ["evidence"]
    return state


def test_the_step_keeps_the_best_sentences_within_the_character_budget() -> None:
    passages = [result("covid", COVID), result("pubmed", PUBMED, rank=2), result("ml", ML, rank=3)]
    state = _selected("What is the main cause of HIV-1 infection in children?", passages, sentences=3)
    assert len(state.evidence) == 3
    assert "main cause of HIV-1" in " ".join(e.text for e in state.evidence)
    short = _selected("What is the main cause of HIV-1 infection in children?", passages, sentences=3, max_chars=120)
    assert len(short.evidence) == 1  # the best sentence always; the next would pass 120 characters


def test_a_which_papers_question_gets_each_qualifying_papers_best_sentence() -> None:
    passages = [result("ml", ML), result("ml2", ML2, rank=2), result("covid", COVID, rank=3)]
    state = _selected("Which papers propose a method with a lower error or less memory?", passages, sentences=1,
                      paper_ratio=0.0, max_papers=2)
    assert {e.doc_id for e in state.evidence} == {"ml", "ml2"}
    one = _selected("What lowers the error?", passages, sentences=1)
    assert len({e.doc_id for e in one.evidence}) == 1
    singular = _selected("Which paper proposes a method with a lower error or less memory?", passages, sentences=1,
                         paper_ratio=0.0, max_papers=2)
    assert singular.info.kind == "which_papers" and singular.info.one_paper
    assert len(singular.evidence) == 1 and singular.evidence[0].doc_id in {"ml", "ml2"}  # the paper that fits best


def test_a_question_naming_two_papers_gets_two_sentences_of_each_and_none_of_other_papers() -> None:
    passages = [result("covid", COVID, title="DC-SIGNR in placenta"), result("pubmed", PUBMED, rank=2),
                result("ml", ML, rank=3)]
    state = _selected("What did the DC-SIGNR study and LU-KV each find?", passages, sentences=1, max_chars=2000)
    assert [e.doc_id for e in state.evidence] == ["covid", "covid", "ml", "ml"]  # the unnamed pubmed paper: none
    short = _selected("What did the DC-SIGNR study and LU-KV each find?", passages, sentences=1, max_chars=10)
    assert [e.doc_id for e in short.evidence] == ["covid"]  # within the character budget, in turn from the first


def test_a_yes_no_question_reads_what_a_structured_abstract_found_before_what_it_asked() -> None:
    text = ("OBJECTIVE: This study evaluated whether manual resuscitators deliver accurate tidal volume. "
            "METHODS: Forty nurses ventilated a test lung. "
            "RESULTS: Manual resuscitators gave a tidal volume far above the target volume with two hands.")
    question = "Can you deliver accurate tidal volume by manual resuscitator?"
    ranked = select_evidence(question, [result("pm", text)], HashEmbedder().encode)
    assert ranked[0].text.startswith("OBJECTIVE")  # the restated question scores best
    assert findings_first(ranked)[0].text.startswith("RESULTS")  # at half its score, the finding comes first
    state = _selected(question, [result("pm", text)], sentences=1)
    assert state.info.kind == "yes_no" and state.evidence[0].text.startswith("RESULTS")
    assert _selected("What did the study evaluate?", [result("pm", text)], sentences=1).evidence[0].text.startswith(
        "OBJECTIVE")  # only a yes/no question: other kinds ask what is stated
    unstructured = [result("ml", ML)]  # no section labels: the order stands
    assert findings_first(select_evidence(question, unstructured, HashEmbedder().encode)) == select_evidence(
        question, unstructured, HashEmbedder().encode)


def test_no_sentence_to_answer_from_abstains() -> None:
    state = AnswerState(question="Why?", info=analyse("Why?"), passages=[result("x", "Too short.")])
    SelectEvidence(HashEmbedder().encode).run(state)
    assert state.abstained and "no sentence" in state.reason
    with pytest.raises(ValueError, match="sentences"):
        SelectEvidence(HashEmbedder().encode, sentences=0)


def test_a_quantity_question_gets_a_sentence_that_states_a_number() -> None:
    text = ("Telephone counseling was offered to women of the HMO who used mammography. Counseling and print were "
            "both studied for mammography use. Counseling raised mammography use by 12% in the trial.")
    passages = [result("pubmed", text)]
    state = _selected("How much did counseling raise mammography use among HMO women?", passages, sentences=1)
    assert [e.text for e in state.evidence] == ["Counseling raised mammography use by 12% in the trial."]


def test_an_abbreviation_asked_about_gets_the_sentence_that_defines_it() -> None:
    text = ("Reassembling fragments in the plane is a shape reconstruction task invariant to rigid motions. Our "
            "invariant reassembly framework improves accuracy on jigsaw puzzle benchmarks. First, a Global Gauge "
            "Fixing (GGF) step aligns the fragments.")
    state = _selected("What does GGF stand for in the invariant reassembly framework?", [result("ml", text)],
                      sentences=1)
    assert state.info.kind == "definition"
    assert [e.text for e in state.evidence] == [  # the best sentence, and the one that defines it
        "Our invariant reassembly framework improves accuracy on jigsaw puzzle benchmarks.",
        "First, a Global Gauge Fixing (GGF) step aligns the fragments."]


def test_a_name_asked_about_gets_the_sentence_that_says_what_it_is() -> None:
    # "What is Polaris?": the sentences that mention Polaris most are not the one that says what it is
    text = ("Taxonomy expansion places new concepts under parents. We introduce **Polaris**, a polar hyperspherical "
            "embedding framework. Polaris then combines local constraints and global regularization for Polaris.")
    state = _selected("What is Polaris?", [result("ml", text)], sentences=1)
    assert state.info.kind == "definition" and state.info.names == ()  # a plain word: no name-shaped token
    assert [e.text for e in state.evidence] == [  # the best sentence, and the one that says what it is (text order)
        "We introduce **Polaris**, a polar hyperspherical embedding framework.",
        "Polaris then combines local constraints and global regularization for Polaris."]


def test_a_question_asking_what_x_is_and_more_gets_the_sentence_that_says_what_x_is() -> None:
    text = ("Taxonomy expansion places new concepts under parents. We introduce **Polaris**, a polar hyperspherical "
            "embedding framework. Polaris then combines local constraints and global regularization for Polaris.")
    state = _selected("What is Polaris and what does it combine?", [result("ml", text)], sentences=1)
    assert (state.info.kind, state.info.subject) == ("fact", "Polaris")
    assert [e.text for e in state.evidence] == [  # the best sentence for the rest, and what Polaris is
        "We introduce **Polaris**, a polar hyperspherical embedding framework.",
        "Polaris then combines local constraints and global regularization for Polaris."]


def test_a_question_asking_for_a_thing_by_its_class_gets_a_sentence_that_names_one() -> None:
    # "What base model architecture ...?" asks for a name of an architecture: the sentences that share the most
    # words with the question name none ("a dual-view architecture" is a description, not a name)
    text = ("This paper introduces Regret Pre-training, a self-supervised pre-training framework for base models. "
            "The framework employs a dual-view architecture in which one model generates two distributions. "
            "We investigate two teacher configurations on the OLMoE-1B-7B architecture.")
    question = "What base model architecture were the Regret Pre-training experiments run on?"
    state = _selected(question, [result("ml", text)], sentences=1)
    assert state.info.kind == "fact"
    assert len(state.evidence) == 2  # the best sentence, and the one that names an architecture
    assert state.evidence[-1].text == "We investigate two teacher configurations on the OLMoE-1B-7B architecture."
    # evidence that already holds the class noun and a name the question does not hold keeps its place
    listed = text.replace("a dual-view architecture", "the dual-view LUPI architecture")
    state = _selected(question, [result("ml", listed)], sentences=1)
    assert "OLMoE-1B-7B" not in " ".join(item.text for item in state.evidence)


def test_a_thing_asked_by_its_class_comes_from_the_paper_the_answer_is_about() -> None:
    # fresh ML m003: another paper's "popular datasets" is no answer to "What caricature dataset was AdsSe-GAN
    # evaluated on?"; the named paper's sentence with the class noun and a name, anywhere in it, is
    gan = ("We propose AdsSe-GAN, a method for photo-to-caricature generation with a new normalization. "
           "Experimental results on a public caricature dataset, WebCaricature, show the method is effective.")
    other = "Our metrics for GANs scale to large popular datasets such as CIFAR and ImageNet."
    question = "What caricature dataset was AdsSe-GAN evaluated on?"
    state = _selected(question, [result("gan", gan), result("other", other, rank=2)], sentences=2)
    assert state.info.asked_for == "dataset"
    assert "WebCaricature" in " ".join(item.text for item in state.evidence if item.doc_id == "gan")


def test_a_thing_asked_by_its_class_without_a_name_gets_the_sentence_that_holds_the_class_noun() -> None:
    # fresh ML m020: "What prior process ...?" is answered by "a gamma process", not a name
    text = ("We develop a Bayesian nonparametric extension of the Plackett-Luce choice model for ranked data. "
            "Our framework is based on random atomic measures, with the prior specified by a gamma process. "
            "We derive a Gibbs sampler for the extension of the Plackett-Luce model.")
    question = "What prior process does the Bayesian nonparametric extension of the Plackett-Luce model use?"
    state = _selected(question, [result("pl", text)], sentences=2)
    assert state.info.asked_for == "process"
    assert any("gamma process" in item.text for item in state.evidence)
    # a sentence of the paper that holds the class noun already answers: nothing is replaced
    held = text.replace("for ranked data", "as a prior process over ranked data")
    state = _selected(question, [result("pl", held)], sentences=2)
    assert not any("gamma process" in item.text for item in state.evidence)


def test_the_reserve_is_the_next_best_sentences() -> None:
    passages = [result("covid", COVID), result("pubmed", PUBMED, rank=2), result("ml", ML, rank=3)]
    ranked = select_evidence("What is the main cause of HIV-1 infection in children?", passages, HashEmbedder().encode)
    step = SelectEvidence(HashEmbedder().encode, sentences=2, max_chars=10_000)
    assert step.chosen(ranked, []) == ranked[:2]
    assert step.following(ranked, ranked[:2]) == ranked[2:4]  # the judge's reserve: as many, the next best
    state = _selected("What is the main cause of HIV-1 infection in children?", passages, sentences=2)
    assert len(state.reserve) == 2 and not any(item in state.evidence for item in state.reserve)


def test_a_judged_paper_is_shown_by_its_own_work_at_a_lower_share_of_its_best() -> None:
    from citerag.service.answering.evidence import JUDGED_OWN_SCORE_RATIO, own_work_first

    [base] = select_evidence("How much memory does LU-KV keep?", [result("ml", ML)], HashEmbedder().encode, keep=1)
    background = replace(base, text="Long contexts make every cache costly.", score=1.0)
    own = replace(base, text="We evict cache entries by their marginal utility.", score=0.5, start=base.start + 1)
    assert own_work_first([background, own]) is background  # 0.5 of the best: below OWN_SCORE_RATIO
    assert own_work_first([background, own], JUDGED_OWN_SCORE_RATIO) is own
