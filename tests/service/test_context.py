"""Context selection and citation spans, on fixed inputs (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from citerag.index.search import SearchResult
from citerag.index.types import Document, Passage
from citerag.service.answer import check_citations, claims_by_citation, name_references, supporting_span
from citerag.service.context import coined_name, merge_same_document, select_sentences

TEXT_A = "Alpha one. Alpha two has 28 billion parameters. Alpha three. Alpha four."
DOC_A = Document("a", "", TEXT_A, "Alpha")
DOC_B = Document("b", "", "Beta only.", "Beta")


def _result(doc: Document, ordinal: int, start: int, end: int, rank: int, dense: float | None) -> SearchResult:
    passage = Passage(f"{doc.doc_id}#{ordinal}", doc.doc_id, ordinal, start, end, doc.text[start:end], 10)
    return SearchResult(rank, passage, doc, score=1.0 / rank, bm25_rank=rank, dense_rank=None, dense_score=dense)


def test_overlapping_passages_of_one_document_merge_in_position_order() -> None:
    results = [
        _result(DOC_A, 1, 11, 60, rank=1, dense=0.4),  # "Alpha two ... Alpha three."
        _result(DOC_B, 0, 0, 10, rank=2, dense=0.5),
        _result(DOC_A, 0, 0, 47, rank=3, dense=0.7),  # "Alpha one. Alpha two ..." overlaps A#1
    ]
    merged = merge_same_document(results)
    assert [(r.rank, r.passage.chunk_id) for r in merged] == [(1, "a#0+1"), (2, "b#0")]
    block = merged[0]
    assert (block.passage.start, block.passage.end) == (0, 60)
    assert block.passage.text == TEXT_A[0:60] == block.document.text[block.passage.start : block.passage.end]
    assert block.bm25_rank == 1 and block.dense_score == 0.7


def test_distant_passages_of_one_document_stay_apart_but_adjacent() -> None:
    results = [_result(DOC_A, 3, 61, 72, rank=1, dense=None), _result(DOC_B, 0, 0, 10, 2, None), _result(DOC_A, 0, 0, 10, 3, None)]
    assert [r.passage.chunk_id for r in merge_same_document(results)] == ["a#0", "a#3", "b#0"]


def test_a_citation_span_is_the_supporting_sentence() -> None:
    claims = claims_by_citation("Alpha two has 28 billion parameters [1]. Beta exists [2][1].")
    assert claims == {1: ["Alpha two has 28 billion parameters.", "Beta exists."], 2: ["Beta exists."]}
    start, end = supporting_span(TEXT_A, claims[1])
    assert TEXT_A[start:end] == "Alpha two has 28 billion parameters."
    assert supporting_span(TEXT_A, ["Gamma"]) == (0, len(TEXT_A))  # nothing shared: the whole passage


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Long contexts are costly. We propose LU-KV, a KV cache eviction method.", "LU-KV"),
        ("We introduce Parameter-Masked Decoupled Optimization (PMDO) for CD-CIL.", "PMDO"),
        ("In this work we present \\textbf{GP-EquiFlow}, a flow matching model.", "GP-EquiFlow"),
        ("Our method, called V₁, verifies pairs.", "V1"),  # folded: subscripts become digits
        ("To overcome this, we propose Faire (Functional alignment for reasoning).", "Faire"),
        ("We introduce Polaris, a polar hyperspherical embedding framework.", "Polaris"),
        ("We improve evaluation validity by introducing ReVSI, a benchmark.", "ReVSI"),
        ("We introduce The method below.", None),  # a capitalised word not set off as a name
        ("We propose an LLM-free approach to KV caching.", None),  # only the field's common acronyms
        ("Conformal prediction provides distribution-free prediction sets.", None),  # nothing coined
    ],
)
def test_coined_name(text: str, name: str | None) -> None:
    assert coined_name(text) == name


def test_passage_references_are_rewritten_with_coined_names() -> None:
    named = _result(Document("a", "", "We propose ASMC, a sampler.", "a"), 0, 0, 26, 1, 0.5)
    unnamed = _result(Document("b", "", "Sequential Monte Carlo for data assimilation.", "b"), 0, 0, 44, 2, 0.4)
    text = "Passage [1] and passage [2] use Sequential Monte Carlo; Passage [7] does not exist."
    assert name_references(text, [named, unnamed]) == (
        "ASMC [1] and passage [2] use Sequential Monte Carlo; Passage [7] does not exist."
    )


def test_bare_markers_standing_for_papers_are_named_for_which_papers_questions() -> None:
    unnamed = _result(Document("b", "", "Sequential Monte Carlo for data assimilation.", "b"), 0, 0, 44, 1, 0.4)
    named = _result(Document("a", "", "We propose ASMC, a sampler.", "a"), 0, 0, 26, 2, 0.5)
    other = _result(Document("c", "", "We introduce Polaris, an embedding.", "c"), 0, 0, 34, 3, 0.5)
    titled = _result(Document("d", "SMC samplers for BNNs", "Samplers for networks.", "d"), 0, 0, 22, 4, 0.5)
    passages = [unnamed, named, other, titled]
    cases = {
        "Sequential Monte Carlo is used in [1] and [2].": "Sequential Monte Carlo is used in [1] and ASMC [2].",
        "Used by [2], [3] or [4].": 'Used by ASMC [2], Polaris [3] or "SMC samplers for BNNs" [4].',
        "Results from [2, 3] and [2][3].": "Results from ASMC [2] and Polaris [3] and [2][3].",  # named once only
        "ASMC, proposed in [2], resamples.": "ASMC, proposed in [2], resamples.",  # already named: left alone
        "A built-in [2] sampler.": "A built-in [2] sampler.",  # "-in" is not "in"
        "ASMC resamples particles [2].": "ASMC resamples particles [2].",  # a claim's citation
        "Used in [9].": "Used in [9].",  # out of range
    }
    for text, expected in cases.items():
        assert name_references(text, passages, bare=True) == expected, text
    assert name_references("Used in [1] and [2].", passages) == "Used in [1] and [2]."  # only when asked


def test_names_are_inserted_after_citations_are_checked() -> None:
    smc = _result(Document("a", "", "We propose ASMC, a Sequential Monte Carlo sampler.", "a"), 0, 0, 50, 1, 0.5)
    kv = _result(Document("b", "", "We propose LU-KV, a KV cache eviction method.", "b"), 0, 0, 45, 2, 0.5)
    raw = "Sequential Monte Carlo is used in [1] and [2]."
    clean, cited = check_citations(raw, [smc.passage.text, kv.passage.text], "Which papers use Sequential Monte Carlo?")
    assert (clean, cited) == ("Sequential Monte Carlo is used in [1].", [1])  # LU-KV shares no term: [2] goes
    assert name_references(clean, [smc, kv], bare=True) == "Sequential Monte Carlo is used in ASMC [1]."
    # a paper named by its marker and not supported: taken out of its list, or the sentence dropped (editing the
    # sentence would change what it says)
    texts = [smc.passage.text, kv.passage.text, "We propose Polaris, a Sequential Monte Carlo embedding."]
    question = "Which papers use Sequential Monte Carlo?"
    cases = {
        "Sequential Monte Carlo is used in [2] and [1].": "Sequential Monte Carlo is used in [1].",
        "Sequential Monte Carlo is used by [1], [2] or [3].": "Sequential Monte Carlo is used by [1] or [3].",
        "Passage [2] and Passage [1] use Sequential Monte Carlo.": "Passage [1] use Sequential Monte Carlo.",
        "Passage [2] uses Sequential Monte Carlo. ASMC resamples [1].": "ASMC resamples [1].",
        "Sequential Monte Carlo is not used in [2]. ASMC is a Sequential Monte Carlo sampler [1].": (
            "ASMC is a Sequential Monte Carlo sampler [1]."
        ),
        "In [2], Sequential Monte Carlo is used.": "",
        "Users log in. Sequential Monte Carlo is used by [1].": "Users log in. Sequential Monte Carlo is used by [1].",
    }
    for raw, expected in cases.items():
        assert check_citations(raw, texts, question)[0] == expected, raw
    described = check_citations("It is called momentum [1]. This concept is described in Passage [2].",
                                ["Momentum SGD uses a momentum coefficient.", "We propose LU-KV."], "What is it called?")
    assert described == ("It is called momentum [1].", [1])


def test_attribution_needs_the_names_the_sentence_states() -> None:
    texts = ["We propose ASMC, a sequential Monte Carlo sampler. ASMC reaches 90% accuracy.",
             "We introduce LU-KV, a KV cache eviction method. It cuts memory by 40%."]
    # the number is in ASMC's passage, but the sentence is about LU-KV: no passage supports it
    assert check_citations("LU-KV reaches 90% accuracy [2].", texts, "What accuracy does LU-KV reach?") == (
        "LU-KV reaches 90% accuracy.", []
    )
    assert check_citations("ASMC reaches 90% accuracy.", texts, "What accuracy does ASMC reach?") == (
        "ASMC reaches 90% accuracy [1].", [1]
    )


def test_odd_markers() -> None:
    texts = ["We propose ASMC, a sequential Monte Carlo sampler.", "We introduce LU-KV. It cuts memory by 40%.",
             "Graph attention networks aggregate neighbours."]
    cases = {
        # a marker opening the next sentence is its subject, not the previous sentence's citation
        "ASMC is a Monte Carlo sampler [1]. [2] cuts memory by 40%.": "ASMC is a Monte Carlo sampler [1]. [2] cuts memory by 40%.",
        "ASMC is a Monte Carlo sampler. [1]": "ASMC is a Monte Carlo sampler [1].",
        "ASMC is a Monte Carlo sampler [1-2].": "ASMC is a Monte Carlo sampler [1].",  # a range is checked per passage
        "Sampling is used [" + "9" * 5000 + "].": "Sampling is used [" + "9" * 5000 + "].",  # not a marker: no error
        "ASMC is a Monte Carlo sampler, unlike [3].": "",  # "unlike [3]" names a paper: not deleted alone
        "Passages [3] and [1] are Monte Carlo samplers.": "Passages [1] are Monte Carlo samplers.",
    }
    for raw, expected in cases.items():
        assert check_citations(raw, texts, "Which papers use Monte Carlo?")[0] == expected, raw


def test_listed_passages_of_one_paper_are_named_once() -> None:
    first = _result(Document("k", "", "We propose LU-KV, a KV cache eviction method.", "k"), 0, 0, 45, 1, 0.5)
    second = _result(Document("k", "", "We propose LU-KV, a KV cache eviction method.", "k"), 0, 0, 45, 2, 0.4)
    other = _result(Document("m", "", "We present Sequential Monte Carlo for all.", "m"), 0, 0, 40, 3, 0.3)
    assert name_references("Passage [1] and Passage [2] study KV caches.", [first, second]) == "LU-KV [1][2] study KV caches."
    assert name_references("Used in [1], [2] and [3].", [first, second, other], bare=True) == "Used in LU-KV [1][2] and [3]."
    v1 = _result(Document("v", "", "We propose V1, a verifier.", "v"), 0, 0, 26, 1, 0.5)
    # a name inside another name is not the paper's name: "V1" in "V1-Infer" does not count as naming V1
    assert name_references("V1-Infer is used in [1].", [v1], bare=True) == "V1-Infer is used in V1 [1]."
    bracketed = _result(Document("t", "Results [1] revisited", "Plain text.", "t"), 0, 0, 11, 1, 0.5)
    assert name_references("Passage [1] says so.", [bracketed]) == '"Results (1) revisited" [1] says so.'


def test_which_papers_questions_are_recognised() -> None:
    from citerag.service.answer import asks_which_papers

    assert asks_which_papers("Which papers use flow matching?")
    assert asks_which_papers("which abstracts are about genome language models?")
    assert not asks_which_papers("How many GPUs were used to train XR-1?")
    assert not asks_which_papers("What does GGF stand for?")
    assert asks_which_papers("In which papers is SMC used?") and asks_which_papers("Which of the papers use SMC?")
    assert asks_which_papers("Which study uses SMC?") and asks_which_papers("What papers use SMC?")
    assert not asks_which_papers("What method does ASMC use for tempering?")  # asks for a technique


def _keyword_embed(texts: list[str]) -> np.ndarray:
    """A deterministic stand-in encoder (the model is not the subject here): one axis per keyword, L2-normalised."""
    keywords = ["speed", "memory", "license"]
    vectors = np.array([[t.lower().count(k) for k in keywords] + [0.1] for t in texts], dtype=np.float32)
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)


def test_selected_sentences_keep_the_most_similar_in_text_order() -> None:
    text = "A is a new index. Its speed is 40x that of Faiss. It needs little memory. It has an open license."
    [one] = select_sentences("What speed does A reach?", [text], _keyword_embed, keep=1)
    assert one == "Its speed is 40x that of Faiss."
    [two] = select_sentences("speed and license?", [text], _keyword_embed, keep=2)
    assert two == "Its speed is 40x that of Faiss. … It has an open license."  # a gap between non-adjacent sentences
    [adjacent] = select_sentences("speed and memory?", [text], _keyword_embed, keep=2)
    assert adjacent == "Its speed is 40x that of Faiss. It needs little memory."
    short = "One sentence only."
    assert select_sentences("speed?", [short, text], _keyword_embed, keep=1) == [short, one]
    with pytest.raises(ValueError, match="keep must be >= 1"):
        select_sentences("speed?", [text], _keyword_embed, keep=0)


def test_the_prompt_shows_the_selected_sentences_in_place_of_the_passage() -> None:
    from citerag.service.answer import Answerer, build_messages

    doc = Document(doc_id="a", title="", text="A is new. Its speed is 40x. It is open.", label="a.txt")
    result = _result(doc, 0, 0, len(doc.text), 1, 0.5)
    whole = build_messages("How fast is A?", [result])[1]["content"]
    assert "<<<A is new. Its speed is 40x. It is open.>>>" in whole
    cut = build_messages("How fast is A?", [result], ["Its speed is 40x."])[1]["content"]
    assert "<<<Its speed is 40x.>>>" in cut and "A is new" not in cut
    with pytest.raises(ValueError, match="needs embed"):
        Answerer(retriever=None, generator=None, sentences_per_passage=2)  # type: ignore[arg-type]
