"""Evidence-first answering, stage by stage, with fixed model outputs (the real model is exercised end to end in
``test_answering_e2e.py``). Sentences come from two domains: the shipped ML abstracts and COVID-19 / PubMed text."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from citerag.index.tokenize import tokenize
from citerag.index.types import Document, Passage
from citerag.index.search import SearchResult
from citerag.service.answering import EvidenceAnswerer
from citerag.service.answering.compose import compose
from citerag.service.answering.evidence import (
    candidate_sentences,
    grouped,
    named_documents,
    question_names,
    select_evidence,
    sentence_scores,
)
from citerag.service.answering.generate import option_probabilities
from citerag.service.answering.prompt import (
    asks_which_papers,
    decision_after_draft,
    draft_messages,
    is_yes_no,
    relevance_messages,
)
from citerag.service.answering.verify import calibrated_decision, content_terms
from citerag.service.generator import Completion
from tests.conftest import HashEmbedder

COVID = (
    "Mother-to-child transmission (MTCT) is the main cause of HIV-1 infection in children worldwide. "
    "DC-SIGNR plays a crucial role in MTCT of HIV-1 [12, 13]. The study enrolled 197 mothers in Zimbabwe."
)
PUBMED = (
    "BACKGROUND: Mammography use is low among HMO women. RESULTS: Telephone counseling increased mammography "
    "use by 12% compared to usual care. CONCLUSIONS: Tailored print had no effect."
)
ML = "Long contexts are costly. We propose LU-KV, a KV cache eviction method. LU-KV keeps 90% accuracy at 10% memory."


def result(doc_id: str, text: str, rank: int = 1, title: str = "", dense: float = 0.5) -> SearchResult:
    document = Document(doc_id, title, text, title or text[:30])
    passage = Passage(f"{doc_id}#0", doc_id, 0, 0, len(text), text, 50)
    return SearchResult(rank, passage, document, 1.0, rank, rank, 1.0, dense)


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


def test_select_evidence_keeps_the_best_and_grouped_restores_text_order() -> None:
    passages = [result("ml", ML), result("covid", COVID, rank=2)]
    evidence = select_evidence("How much memory does LU-KV use at 90% accuracy?", passages, HashEmbedder().encode, keep=3)
    assert evidence[0].text == "LU-KV keeps 90% accuracy at 10% memory."
    assert evidence[0].result.document.text[evidence[0].start:evidence[0].end] == evidence[0].text
    in_order = grouped(evidence)
    assert [e.doc_id for e in in_order][0] == "ml"
    assert [e.start for e in in_order if e.doc_id == "ml"] == sorted(e.start for e in in_order if e.doc_id == "ml")
    with pytest.raises(ValueError):
        select_evidence("q", passages, HashEmbedder().encode, keep=0)


def test_option_probabilities_pool_spellings_and_floor_missing_options() -> None:
    p = option_probabilities({"Yes": math.log(0.5), " yes": math.log(0.1), "No": math.log(0.3),
                              "The": math.log(0.1)}, ["yes", "no", "maybe"])
    assert p["yes"] == pytest.approx(0.6 / 1.0)
    assert p["maybe"] == pytest.approx(0.1 / 1.0)  # absent: the smallest reported probability
    assert sum(p.values()) == pytest.approx(1.0)


def test_decision_calibration() -> None:
    assert calibrated_decision({"yes": 0.5, "no": 0.3, "maybe": 0.2}, {}) == "yes"
    assert calibrated_decision({"yes": 0.5, "no": 0.3, "maybe": 0.2}, {"no": math.log(2)}) == "no"


@pytest.mark.parametrize(
    ("question", "yes_no"),
    [("Does telephone counseling increase mammography use?", True), ("Is DC-SIGNR expressed in placenta?", True),
     ("Can tailored interventions increase mammography use among HMO women?", True),
     ("Double balloon enteroscopy: is it efficacious and safe in a community setting?", True),
     ("Metered-dose inhalers. Do health care providers know what to teach?", True),
     ("Very high serum CA 19-9 levels: a contraindication to pancreaticoduodenectomy?", True),  # verbless
     ("Is A or B faster?", False), ("What cells are infected by PEDV?", False), ("Why do levels drop?", False)],
)
def test_yes_no_questions(question: str, yes_no: bool) -> None:
    assert is_yes_no(question) is yes_no


def test_which_papers_questions() -> None:
    assert asks_which_papers("Which studies measured viral load in children?")
    assert asks_which_papers("Which papers use Sequential Monte Carlo, and for what?")
    assert not asks_which_papers("Which virus causes COVID-19?")


def test_prompts_quote_the_evidence_and_put_the_question_first() -> None:
    evidence = select_evidence("cause of HIV-1 in children", [result("covid", COVID)], HashEmbedder().encode, keep=2)
    judged = relevance_messages("What causes HIV-1 in children?", evidence[0])[1]["content"]
    assert judged.startswith("Question: What causes HIV-1 in children?")
    assert f"<<<{evidence[0].text}>>>" in judged
    drafted = draft_messages("Is MTCT the main cause?", COVID)
    assert f"<<<\n{COVID}\n>>>" in drafted[1]["content"] and "Question: Is MTCT the main cause?" in drafted[1]["content"]
    decided = decision_after_draft(drafted, "MTCT is the main cause.")
    assert [m["role"] for m in decided] == ["system", "user", "assistant", "user"]
    assert decided[2]["content"] == "MTCT is the main cause." and "yes, no, or maybe" in decided[3]["content"]


def test_compose_states_evidence_with_exact_citations_and_the_decision() -> None:
    passages = [result("pubmed", PUBMED, title="Can tailored interventions increase mammography use?")]
    evidence = select_evidence("Does telephone counseling increase mammography use?", passages,
                               HashEmbedder().encode, keep=3)
    best = next(i for i, e in enumerate(evidence) if "Telephone" in e.text)
    text, citations = compose(evidence, [best], decision="yes")
    assert text == "Yes. RESULTS: Telephone counseling increased mammography use by 12% compared to usual care [1]."
    assert citations[0].n == 1
    assert PUBMED[citations[0].start:citations[0].end] == evidence[best].text
    named, _ = compose(evidence, [best], name_papers=True)
    assert named.startswith("Can tailored interventions increase mammography use?: RESULTS")
    with pytest.raises(ValueError):
        compose(evidence, [])


def test_the_documents_own_reference_brackets_never_read_as_citations() -> None:
    evidence = select_evidence("role of DC-SIGNR in MTCT", [result("covid", COVID)], HashEmbedder().encode, keep=1)
    text, _ = compose(evidence, [0])
    assert text == "DC-SIGNR plays a crucial role in MTCT of HIV-1 [1]."


def test_coined_names_are_written_only_when_the_cited_passage_holds_them() -> None:
    passages = [result("ml", ML)]
    evidence = select_evidence("Which papers evict KV cache entries?", passages, HashEmbedder().encode, keep=3)
    text, _ = compose(evidence, [0], name_papers=True)
    assert text.startswith("LU-KV: ")


class FixedGenerator:
    """Fixed model outputs: ``relevance[i]`` is P(yes) for the i-th judged sentence (in evidence order),
    ``decision`` the yes/no/maybe probabilities."""

    def __init__(self, relevance: list[float], decision: dict[str, float] | None = None) -> None:
        self.relevance, self.decision, self.calls, self.judged = relevance, decision or {}, 0, 0

    def chat(self, messages, max_tokens, on_delta=None, grammar=None, top_logprobs=0, pin=True) -> Completion:
        self.calls += 1
        if grammar is None:  # the decision's free draft
            return Completion("The results conclude it.", 300, 5, 100.0, 5.0, "stop", ())
        if "maybe" in grammar:
            table = self.decision
        else:
            yes = self.relevance[self.judged] if self.judged < len(self.relevance) else 1e-3
            self.judged += 1
            table = {"yes": min(yes, 1 - 1e-9), "no": max(1 - yes, 1e-9)}
        logprobs = {token: math.log(p) for token, p in table.items()}
        return Completion(max(table, key=table.get), 300, 1, 100.0, 1.0, "stop", (logprobs,))


class FixedRetriever:
    def __init__(self, results: list[SearchResult]) -> None:
        self.results = results

    def search(self, query, k=10, mode="hybrid", filters=None, **_):
        return self.results[:k]


def answerer(relevance: list[float], decision: dict[str, float] | None = None, results=None) -> EvidenceAnswerer:
    results = results or [result("covid", COVID), result("pubmed", PUBMED, rank=2)]
    return EvidenceAnswerer(FixedRetriever(results), FixedGenerator(relevance, decision), HashEmbedder().encode)


def test_the_answer_is_the_best_judged_sentence_with_its_span() -> None:
    qa = answerer([0.01, 0.01, 1.0, 0.01, 0.01, 0.01])  # the model outweighs the evidence score
    answer = qa.ask("What is the main cause of HIV-1 infection in children?", k=2)
    assert not answer.abstained and answer.used == [2]
    chosen = answer.evidence[2]
    assert answer.answer == "The study enrolled 197 mothers in Zimbabwe [1]."
    assert COVID[answer.citations[0].start:answer.citations[0].end] == chosen.text
    assert answer.confidence == pytest.approx(1.0, abs=1e-6)
    assert qa.generator.calls == 6


def test_low_confidence_abstains_with_the_reason() -> None:
    answer = answerer([0.1] * 6).ask("What is the main cause of HIV-1 infection in children?", k=2)
    assert answer.abstained and answer.citations == [] and "confidence 0.10" in answer.reason


def test_far_passages_abstain_before_the_model_is_called() -> None:
    qa = answerer([1.0], results=[result("covid", COVID, dense=0.05)])
    answer = qa.ask("Who won the 2018 FIFA World Cup?", k=1)
    assert answer.abstained and qa.generator.calls == 0


def test_a_yes_no_answer_opens_with_the_calibrated_decision() -> None:
    qa = answerer([0.2, 0.2, 0.2, 0.2, 0.8, 0.2], {"yes": 0.2, "no": 0.7, "maybe": 0.1})
    answer = qa.ask("Does tailored print increase mammography use?", k=2)
    assert answer.decision == "no" and answer.answer.startswith("No. ")
    assert qa.generator.calls == 8  # 6 judgements, the draft, the decision


def test_a_second_paper_judged_as_likely_is_stated_too() -> None:
    qa = answerer([0.1, 0.9, 0.1, 0.1, 0.85, 0.1])
    answer = qa.ask("What did the HIV-1 study and the mammography study find?", k=2)
    assert {c.result.document.doc_id for c in answer.citations} == {"covid", "pubmed"}
    assert answerer([0.1, 0.9, 0.1, 0.1, 0.5, 0.1]).ask("What is the main cause of HIV-1?", k=2).citations[0:2] \
        and len(answerer([0.1, 0.9, 0.1, 0.1, 0.5, 0.1]).ask("What is the main cause?", k=2).citations) == 1


def test_names_of_papers_in_a_question_are_found_in_their_documents() -> None:
    assert question_names("Does remdesivir shorten recovery in ACTT-1, as the Adaptive Covid Trial asks?") \
        == ["ACTT-1", "Adaptive Covid Trial"]
    passages = [result("covid", COVID, title="DC-SIGNR in placenta"), result("ml", ML, rank=2)]
    # by title (DC-SIGNR) and by the name the abstract introduces (LU-KV)
    assert named_documents("How do DC-SIGNR and LU-KV each work?", passages) == ["covid", "ml"]
    assert named_documents("How does LU-KV work?", passages) == []  # one paper: nothing more than the best sentence
    assert named_documents("Do DC-SIGNR in placenta and DC-SIGNR differ?", passages) == []  # both call one paper
    assert named_documents("How do LU-KV and MTCT relate?", passages) == []  # MTCT is only mentioned by its paper


def test_a_question_naming_two_papers_states_the_best_sentence_of_each() -> None:
    # the model judges only the HIV study's sentences likely; LU-KV is named, so its best sentence is stated too
    results = [result("covid", COVID, title="DC-SIGNR in placenta"), result("ml", ML, rank=2)]
    qa = answerer([0.1, 0.9, 0.1, 0.1, 0.1, 0.1], results=results)
    answer = qa.ask("What did the DC-SIGNR study and LU-KV each find?", k=2)
    assert [c.result.document.doc_id for c in answer.citations] == ["covid", "ml"]
    assert answer.answer.startswith("DC-SIGNR in placenta: ") and "LU-KV: " in answer.answer


class VocabularyRetriever(FixedRetriever):
    """A FixedRetriever that also says which BM25 terms its passages hold (the texts' own tokens), standing for a
    large corpus (``vocabulary_size``)."""

    vocabulary_size = 50_000

    def unseen_terms(self, terms):
        held = {t for r in self.results for t in tokenize(r.passage.text)}
        return [t for t in terms if t not in held]


def test_content_terms_skip_function_words_and_split_compounds() -> None:
    assert content_terms("How many GPUs were used to train the face-verification model?") == [
        ("GPUs", "gpus"), ("used", "use"), ("train", "train"), ("face", "face"), ("verification", "verif"),
        ("model", "model")]
    assert content_terms("Is the BRCA1 variant found in healthy controls?") == [
        ("BRCA1", "brca1"), ("variant", "variant"), ("healthy", "healthi"), ("controls", "control")]
    assert content_terms("What is it?") == []


def test_a_word_no_passage_holds_needs_the_higher_confidence_except_for_a_decision() -> None:
    results = [result("covid", COVID), result("pubmed", PUBMED, rank=2)]

    def ask(question: str, relevance: float, decision=None):  # noqa: ANN202
        qa = EvidenceAnswerer(VocabularyRetriever(results), FixedGenerator([relevance] * 6, decision),
                              HashEmbedder().encode)
        return qa, qa.ask(question, k=2)

    qa, answer = ask("Which glacier retreat did the HIV-1 mothers study measure?", 0.3)  # 'glacier' is in no passage
    assert qa.unseen_words("Which glacier retreat did the HIV-1 mothers study measure?") == ["glacier", "retreat", "measure"]
    assert answer.abstained and "no indexed passage mentions 'glacier', 'retreat', 'measure'," in answer.reason
    assert "confidence 0.30 < 0.40" in answer.reason
    _, sure = ask("Which glacier retreat did the HIV-1 mothers study measure?", 0.9)
    assert not sure.abstained  # strong evidence makes up for the unseen words (a paraphrase)
    _, seen = ask("What is the main cause of HIV-1 infection in children?", 0.3)
    assert not seen.abstained  # every content word is in a passage: the usual threshold (0.2) applies
    _, yes_no = ask("Can origami crease patterns prevent HIV-1 transmission?", 0.3, {"yes": 0.8, "no": 0.1, "maybe": 0.1})
    assert not yes_no.abstained and yes_no.decision == "yes"  # a decision stands (titles' words, PubMedQA)
    off = EvidenceAnswerer(VocabularyRetriever(results), FixedGenerator([0.3] * 6), HashEmbedder().encode,
                           min_confidence_unseen=0.0)
    assert not off.ask("Which glacier retreat did the HIV-1 mothers study measure?", k=2).abstained
    small = VocabularyRetriever(results)
    small.vocabulary_size = 1_608  # the 38 shipped abstracts: an ordinary word's absence means nothing
    qa = EvidenceAnswerer(small, FixedGenerator([0.3] * 6), HashEmbedder().encode)
    assert qa.unseen_words("Which glacier retreat did the study measure?") == []
    assert not qa.ask("Which glacier retreat did the HIV-1 mothers study measure?", k=2).abstained
