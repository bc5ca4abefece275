"""Question analysis (kinds, names, content terms, follow-ups) and the names papers coin."""

from __future__ import annotations

import pytest

from citerag.service.answering.names import coined_name, named_documents, names_in, paper_label, question_names
from citerag.service.answering.question import analyse, asks_which_papers, content_terms, is_yes_no, question_kind
from citerag.service.conversation import Turn
from tests.service.answering.fixed import COVID, ML, result


@pytest.mark.parametrize(
    ("question", "yes_no"),
    [("Does telephone counseling increase mammography use?", True), ("Is DC-SIGNR expressed in placenta?", True),
     ("Double balloon enteroscopy: is it efficacious and safe in a community setting?", True),
     ("Metered-dose inhalers. Do health care providers know what to teach?", True),
     ("Very high serum CA 19-9 levels: a contraindication to pancreaticoduodenectomy?", True),  # verbless
     ("Has use by U.S. adults changed since 2010?", True),  # "U.S." is no clause boundary
     ("When filters are removed, are sparse libraries needed?", True),
     ("Is A or B faster?", False), ("What cells are infected by PEDV?", False), ("Why do levels drop?", False),
     # a relative wh-word in the main clause; "or" inside the question joins parts of it
     ("For ReLU networks, are local minima points where the loss is differentiable?", True),
     ("Does surgery or radiation therapy impact survival in small cell cancers?", True),
     ("Is repair justified for patients aged 80 or older?", True), ("Is the drug safe or not?", True),
     ("Are the groups the same or different?", False), ("Is method A or method B more accurate on ImageNet?", False),
     # an "or" inside a list of examples joins examples, not alternatives; "like" after a verb compares
     ("Do the models use activation functions like ReLU or GELU?", True),
     ("Does the method need labels such as boxes or masks?", True), ("Does it behave like A or B?", False),
     ("With X fixed, what were the costs, were they high?", False),
     ("List the trials of remdesivir?", False)],
)
def test_yes_no_questions(question: str, yes_no: bool) -> None:
    assert is_yes_no(question) is yes_no


@pytest.mark.parametrize(
    ("question", "kind"),
    [("Does ASMC beat best-of-n?", "yes_no"),
     ("Which papers use Sequential Monte Carlo, and for what?", "which_papers"),
     ("Which studies measured viral load in children?", "which_papers"),
     ("How do SV2P and Error Encoding Networks differ in modelling uncertainty?", "comparison"),
     ("What speed-up does LU-KV reach on OLMoE and DeepSeek-V2?", "comparison"),  # names joined: each is asked for
     ("What speed-up does LU-KV reach on OLMoE?", "number"),
     ("How does telephone counseling compare with tailored print?", "comparison"),
     ("How many parameters does the largest model have?", "number"),
     ("What percentage of mothers were enrolled?", "number"),
     ("When was the study conducted?", "number"),
     ("What is the Platonic Transformer?", "definition"),
     ("What is the Platonic Transformer and what symmetry does it respect?", "fact"),
     ("What is HELIX and what does it assign to each feature?", "fact"),  # "each" of one thing: no comparison
     ("How do HELIX and Polaris each assign features?", "comparison"),
     ("Which virus causes COVID-19?", "fact")],
)
def test_question_kinds(question: str, kind: str) -> None:
    assert question_kind(question, question_names(question)) == kind


def test_what_is_x_and_more_asks_what_x_is_and_the_rest() -> None:
    info = analyse("What is the Platonic Transformer, and what symmetry does it respect?")
    assert (info.kind, info.subject) == ("fact", "Platonic Transformer")
    # a second "what" inside the thing asked about, with no clause of its own, is one question
    assert analyse("What is the gap between XR-1 and what GP-EquiFlow reports?").subject is None
    info = analyse("What is Polaris and is it supervised?")  # a yes/no question asked of it
    assert (info.kind, info.subject) == ("fact", "Polaris")


def test_which_papers_is_a_question_about_papers_not_any_which() -> None:
    assert asks_which_papers("Which papers use Sequential Monte Carlo, and for what?")
    assert not asks_which_papers("Which virus causes COVID-19?")


def test_content_terms_skip_function_words_and_split_compounds() -> None:
    assert content_terms("How many GPUs were used to train the face-verification model?") == [
        ("GPUs", "gpus"), ("used", "use"), ("train", "train"), ("face", "face"), ("verification", "verif"),
        ("model", "model")]
    assert content_terms("What is it?") == []


def test_only_a_question_that_counts_has_counted_terms() -> None:
    assert analyse("How many GPUs were used to train XR-1?").counted == ("gpus",)
    # a definition question's embedded "how many" is part of how it names the paper, not what it asks
    info = analyse("What does BAPO stand for in the work on how many chain-of-thought tokens a problem needs?")
    assert info.kind == "definition" and info.counted == ()


def test_analysis_is_done_once_with_the_conversation() -> None:
    info = analyse("Which benchmarks was it evaluated on?", [Turn("user", "What is GP-EquiFlow?")])
    assert info.text == "Which benchmarks was GP-EquiFlow evaluated on?" and info.rewritten
    assert info.follow_up == "refers back: 'it'" and info.names == ("GP-EquiFlow",)
    assert analyse("What is GP-EquiFlow?").follow_up == ""


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("Long contexts are costly. We propose LU-KV, a KV cache eviction method.", "LU-KV"),
        ("We introduce Parameter-Masked Decoupled Optimization (PMDO) for CD-CIL.", "PMDO"),
        ("In this work we present \\textbf{GP-EquiFlow}, a flow matching model.", "GP-EquiFlow"),
        ("Our method, called V₁, verifies pairs.", "V1"),  # folded: subscripts become digits
        ("To overcome this, we propose Faire (Functional alignment for reasoning).", "Faire"),
        ("We introduce a VLA model, XR-1, trained on many robots.", "XR-1"),  # "VLA model": a modifier
        ("We design alternatives for three primitives (MLPs, convolutions, and attention).", None),  # plural acronym
        ("We introduce The method below.", None),  # a capitalised word not set off as a name
        # an abbreviation of something the paper uses (its long form after a preposition) is not its name
        ("This paper introduces Regret Pre-training, a framework grounded in the Learning Using Privileged "
         "Information (LUPI) paradigm.", "Regret Pre-training"),
        ("We propose a method that trains with Stochastic Gradient Descent (SGD) in closed form.", None),
    ],
)
def test_coined_name(text: str, name: str | None) -> None:
    assert coined_name(text) == name


def test_names_and_the_documents_a_question_names() -> None:
    assert names_in("Does LU-KV beat an LLM-free baseline on GPT-4 outputs?") == ["LU-KV", "GPT-4"]
    assert question_names("Does remdesivir shorten recovery in ACTT-1, as the Adaptive Covid Trial asks?") \
        == ["ACTT-1", "Adaptive Covid Trial"]
    # quoted titles are names, whatever their case; a capitalised run ends at a full stop or a quote
    assert question_names("Papers 'Dissecting Adam' and \u201cOn the Convergence of Adam and Beyond\u201d. What does "
                          "each blame?") == ["Dissecting Adam", "On the Convergence of Adam and Beyond"]
    assert question_names("Is Adam's step size like Error Encoding Networks?") == ["Error Encoding Networks"]
    passages = [result("covid", COVID, title="DC-SIGNR in placenta"), result("ml", ML, rank=2)]
    assert named_documents(["DC-SIGNR", "LU-KV"], passages) == ["covid", "ml"]  # by title and by coined name
    assert named_documents(["MTCT"], passages) == []  # only mentioned by its paper
    assert paper_label(passages[0].document) == "DC-SIGNR in placenta" and paper_label(passages[1].document) == "LU-KV"
    assert paper_label(result("x", "Mothers were enrolled in 2010.").document) is None
