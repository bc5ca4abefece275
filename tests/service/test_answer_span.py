"""The part of an evidence sentence that answers (:mod:`citerag.service.answering.span`) and how the answer states
and cites it. Sentences are real text of three domains: COVID-19 papers (COVID-QA's corpus), PubMed abstracts
(PubMedQA's labelled sections) and the shipped ML abstracts; the questions are written for these tests."""

from __future__ import annotations

import pytest

from citerag.index.text import fold
from citerag.service.answering.compose import compose
from citerag.service.answering.evidence import select_evidence
from citerag.service.answering.span import answer_span
from tests.conftest import HashEmbedder
from tests.service.test_answering import COVID, PUBMED, FixedGenerator, FixedRetriever, result
from citerag.service.answering import EvidenceAnswerer


def part(question: str, text: str) -> str:
    start, end = answer_span(question, text)
    assert 0 <= start < end <= len(text)
    return text[start:end]


@pytest.mark.parametrize(
    ("question", "sentence", "expected"),
    [
        # the restated subject and verb off the left edge
        ("What is the population of Shandong province?",
         "Shandong province has a population of 94 million.", "94 million."),
        # ... and off the right edge, the document's own reference with it
        ("What is the main cause of death in the neonatal period of calves?",
         "Calf septicemia is the main cause of death in the neonatal period [1] .", "Calf septicemia"),
        # a leading run of function words up to a comma goes; the restatement after it too
        ("What regulates the broad, but less specific, virus-cell interaction?",
         "Among others, the heparan sulfates in the membrane proteins mediate the broad, but less specific, "
         "virus-cell interaction.", "the heparan sulfates in the membrane proteins mediate"),
        # function words that lead into the first content word stay ("On average")
        ("Are children in high-income countries affected by pneumonia?",
         "On average, 1 in 66 children in high-income countries is affected by pneumonia per year, compared to 1 in 5 "
         "children in low-and middle-income countries.",
         "On average, 1 in 66 children in high-income countries is affected by pneumonia per year, compared to 1 in 5 "
         "children in low-and middle-income"),
        # a negation is never trimmed
        ("Is NTCP sufficient to allow HBV infection?",
         "NTCP itself is not sufficient to allow HBV infection, as the majority of HepaRG cells were found to express "
         "NPCT but not to be infected [8] .",
         "not sufficient to allow HBV infection, as the majority of HepaRG cells were found to express NPCT but not"),
        # an author-year citation at the end is a reference too
        ("What is the primary antibody response against the phage?",
         "Primary antibody responses against the phage appear to be composed of a mixture of IgM and IgG2b isotypes "
         "in C57BL/6 mice, while secondary antibody responses are composed primarily of IgG1 and IgG2b isotypes, with "
         "a lesser contribution of IgG2c and IgG3 isotypes (Hashiguchi et al., 2010) .",
         "appear to be composed of a mixture of IgM and IgG2b isotypes in C57BL/6 mice, while secondary antibody "
         "responses are composed primarily of IgG1 and IgG2b isotypes, with a lesser contribution of IgG2c and IgG3 "
         "isotypes"),
        # a section label (PubMedQA) goes; nothing else restates "what increased"
        ("What increased mammography use?",
         "RESULTS: Telephone counseling increased mammography use by 12% compared to usual care.",
         "Telephone counseling increased mammography use by 12% compared to usual care."),
        # ML abstracts: the restated lead-in off, the LaTeX kept whole
        ("What does XR-1 introduce at its core?",
         r"At its core, XR-1 introduces the \emph{Unified Vision-Motion Codes (UVMC)}, a discrete latent "
         r"representation learned via a dual-branch VQ-VAE that jointly encodes visual dynamics and robotic motion.",
         r"\emph{Unified Vision-Motion Codes (UVMC)}, a discrete latent representation learned via a dual-branch "
         r"VQ-VAE that jointly encodes visual dynamics and robotic motion."),
        # nothing restates the question: the whole sentence
        ("Who won the 2018 FIFA World Cup?",
         "Long contexts are costly.", "Long contexts are costly."),
        # a sentence that only restates the question stays whole rather than becoming empty
        ("Is mammography use low among HMO women?",
         "Mammography use is low among HMO women.", "Mammography use is low among HMO women."),
    ],
)
def test_the_restated_part_is_cut_off(question: str, sentence: str, expected: str) -> None:
    assert part(question, sentence) == expected


@pytest.mark.parametrize(
    ("question", "sentence", "expected"),
    [
        # a label off, then the percentage phrase with its lead word
        ("What is the rate of mother-to-child transmission of HIV-1 without intervention?",
         "Text: Without specific interventions, the rate of HIV-1 mother-tochild transmission (MTCT) is approximately "
         "15-45% [1] .", "approximately 15-45%"),
        ("How much did telephone counseling increase mammography use?",
         "RESULTS: Telephone counseling increased mammography use by 12% compared to usual care.", "12%"),
        # the question's own number (65) is not its answer
        ("How many tuberculosis patients in Shandong were over 65 years old?",
         "The survey revealed that over half of the TB patients were 65 years and older in Shandong, while the over "
         "65's were more likely to present with abnormal CXRAY and persistent cough.", "over half"),
        # nor its date (17); the unit the question names is kept
        ("As of January 17, how many people were tested for body temperature?",
         "As of January 17, a total of nearly 0.3 million people had been tested for body temperature [23] .",
         "nearly 0.3 million people"),
        ("When did the Chinese authorities share the sequence of a novel coronavirus?",
         "On 12 January 2020, Chinese authorities shared the sequence of a novel coronavirus termed severe acute "
         "respiratory syndrome coronavirus 2 (SARS-CoV-2) isolated from some clustered cases.", "12 January 2020"),
        # ML abstract, a LaTeX-escaped percentage
        ("By how much does LU-KV reduce the KV cache size?",
         r"Evaluations on LongBench and RULER benchmarks demonstrate that LU-KV reduces KV cache size by 80\% with "
         r"minimal performance degradation, while also decreasing inference latency and GPU memory footprint.",
         r"80\%"),
        # a range joined by "to", with the unit the question names
        ("How many people were in a community cluster?",
         "A cluster was defined as a community with a population of 1250 to 1750 adults.", "1250 to 1750"),
    ],
)
def test_a_quantity_question_is_answered_by_its_number_phrase(question: str, sentence: str, expected: str) -> None:
    assert part(question, sentence) == expected


def test_several_number_phrases_leave_the_trimmed_sentence() -> None:
    sentence = (r"In this work, we present the machine learning methodology behind EDEN, a family of metagenomic "
                r"foundation models scaled up to 28 billion parameters and trained on 9.7 trillion nucleotide tokens.")
    got = part("How many parameters do the EDEN models have?", sentence)
    assert "28 billion" in got and "9.7 trillion" in got
    # a year is no count: the only count left answers
    assert part("How many deaths did the pandemic cause?", "The 2009 pandemic caused 18,449 deaths.") \
        == "18,449 deaths."


def test_inline_formulas_are_never_cut() -> None:
    sentence = r"We prove a regret bound of $O(\sqrt{T \log K})$ for bandits."
    assert part("What regret bound do we prove for bandits?", sentence) == r"$O(\sqrt{T \log K})$"


def test_compose_states_the_part_and_cites_its_exact_span() -> None:
    question = "How much did telephone counseling increase mammography use?"
    passages = [result("pubmed", PUBMED, title="Can tailored interventions increase mammography use?")]
    evidence = select_evidence(question, passages, HashEmbedder().encode, keep=3)
    best = next(i for i, e in enumerate(evidence) if "Telephone" in e.text)
    text, citations = compose(evidence, [best], question=question)
    assert text == "12% [1]."
    start, end = citations[0].start, citations[0].end
    assert PUBMED[start:end] == "12%" and PUBMED.index("12%") == start
    assert evidence[best].text.startswith("RESULTS: Telephone")  # the evidence keeps the whole sentence
    # a decision, a named paper or several sentences: whole sentences
    assert compose(evidence, [best], decision="yes", question=question)[0].startswith("Yes. RESULTS: Telephone")
    assert compose(evidence, [best], name_papers=True, question=question)[1][0].end == evidence[best].end
    assert compose(evidence, [best])[0] == fold(evidence[best].text)[:-1] + " [1]."


def test_the_answerer_states_the_part_unless_set_to_sentences() -> None:
    results = [result("covid", COVID), result("pubmed", PUBMED, rank=2)]
    question = "How many mothers did the study enroll?"
    for mode, stated in (("part", "197 mothers"), ("sentence", "The study enrolled 197 mothers in Zimbabwe.")):
        qa = EvidenceAnswerer(FixedRetriever(results), FixedGenerator([0.01, 0.01, 1.0, 0.01, 0.01, 0.01]),
                              HashEmbedder().encode, answer_span=mode)
        answer = qa.ask(question, k=2)
        assert answer.used == [2] and answer.evidence[2].text == "The study enrolled 197 mothers in Zimbabwe."
        citation = answer.citations[0]
        assert COVID[citation.start:citation.end] == stated
        assert answer.answer == stated.rstrip(".") + " [1]."
    with pytest.raises(ValueError):
        EvidenceAnswerer(FixedRetriever(results), FixedGenerator([]), HashEmbedder().encode, answer_span="clause")


def test_a_colon_inside_the_sentence_is_no_leading_label() -> None:
    # COVID-QA test question q3028: "CI:" is part of a confidence interval, not a section label
    sentence = ("The crude prevalence rate in Shandong in 2010 of sputum positive cases was 22.1 (95% CI: 9.6-34.6), "
                "bacteriologically confirmed cases was 36.8 (95% CI: 17.8-55.8), and all cases were 337.1 (95% CI: "
                "254.1-420.0) per 100,000 in adult population.")
    got = part("What was the prevalence rate in Shandong in 2010 for sputum positive cases of tuberculosis?", sentence)
    assert got.startswith("The crude prevalence rate") and "22.1 (95% CI: 9.6-34.6)" in got  # three rates: all kept
    # a label of several upper-case words still goes
    assert part("Is double balloon enteroscopy useful?", "BACKGROUND AND AIM: There are few data on emergency "
                "double-balloon enteroscopy.").startswith("There are few data")
