"""An unnamed paper's topic phrase (``service/answering/topics.py``) and the answers about several papers that call
papers by it; the model's phrase is fixed here (the real model writes it in ``test_answering_e2e.py``)."""

from __future__ import annotations

from pathlib import Path

from citerag.service.answering.compose import Compose
from citerag.service.answering.evidence import SelectEvidence
from citerag.service.answering.judge import JudgePapers
from citerag.service.answering.prompts import DECISION_SLOT
from citerag.service.answering.question import analyse
from citerag.service.answering.state import AnswerState
from citerag.service.answering.topics import Topics
from citerag.service.answering.verify import Verify

from tests.conftest import HashEmbedder
from tests.service.answering.fixed import ML, FixedGenerator, result

SMC = ("Data assimilation estimates latent states from noisy observations. We perform Sequential Monte Carlo over "
       "diffusion trajectories.")
CELLS = "Cell tracking in microscopy is noisy. We use Sequential Monte Carlo to track cells in microscopy videos."


def test_the_phrase_is_checked_against_the_abstract_and_kept_on_disk(tmp_path: Path) -> None:
    generator = FixedGenerator(written="Data Assimilation With Sequential Monte Carlo.")
    document = result("smc", SMC).document
    topics = Topics(generator, tmp_path)  # type: ignore[arg-type]
    assert topics(document) == "data assimilation with Sequential Monte Carlo"
    call = generator.calls[0]
    assert (call["slot"], call["fixed"], call["max_tokens"]) == (DECISION_SLOT, 1, 16)
    assert "Data assimilation estimates" in call["messages"][-1]["content"]  # the abstract's opening
    assert len(list(tmp_path.glob("*.txt"))) == 1
    again = FixedGenerator(written="never asked")
    assert Topics(again, tmp_path)(document) == "data assimilation with Sequential Monte Carlo"  # type: ignore[arg-type]
    assert again.calls == []  # read from disk
    # a phrase with a word the abstract does not have is no label, and is not asked for again
    weather = FixedGenerator(written="Weather forecasting with diffusion")
    other = Topics(weather, tmp_path)  # type: ignore[arg-type]
    cells = result("cells", CELLS).document
    assert other(cells) is None and other(cells) is None and len(weather.calls) == 1
    assert Topics(FixedGenerator(written="never asked"), tmp_path)(cells) is None  # type: ignore[arg-type]


def test_a_which_papers_answer_calls_an_unnamed_paper_by_its_topic() -> None:
    question = "Which papers use Sequential Monte Carlo?"
    state = AnswerState(question=question, info=analyse(question),
                        passages=[result("smc", SMC), result("cells", CELLS, rank=2), result("ml", ML, rank=3)])
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(state)
    described: list[str] = []

    def describe(document):  # noqa: ANN001, ANN202 - the Topics stand-in: one paper has a phrase, the other none
        described.append(document.doc_id)
        return {"smc": "data assimilation"}.get(document.doc_id)

    in_evidence = lambda messages: "Monte Carlo" in messages[-1]["content"].split("Question:")[0]  # noqa: E731
    tokens: list[str] = []
    state.on_event = lambda kind, payload: tokens.append(payload) if kind == "token" else None
    JudgePapers(FixedGenerator(judge=lambda m: 0.9 if in_evidence(m) else 0.05), min_score=0.1,
                describe=describe).run(state)
    Verify(describe=describe).run(state)
    Compose().run(state)
    assert state.answer == ("One paper uses Sequential Monte Carlo to track cells in microscopy videos [2]. "
                            "The paper on data assimilation performs Sequential Monte Carlo over diffusion "
                            "trajectories [1].")
    assert "".join(tokens) == state.answer
    assert "ml" not in described  # a paper with a name is called by it


def test_two_papers_with_the_same_topic_are_still_told_apart() -> None:
    question = "Which papers use Sequential Monte Carlo?"
    state = AnswerState(question=question, info=analyse(question),
                        passages=[result("smc", SMC), result("cells", CELLS, rank=2)])
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(state)
    JudgePapers(FixedGenerator(judge=0.9), min_score=0.1).run(state)
    Verify(describe=lambda document: "Sequential Monte Carlo methods").run(state)
    Compose().run(state)
    assert state.answer == ("The paper on Sequential Monte Carlo methods uses Sequential Monte Carlo to track cells "
                            "in microscopy videos [2]. One paper performs Sequential Monte Carlo over diffusion "
                            "trajectories [1].")


def test_an_answer_about_one_unnamed_paper_says_which_paper() -> None:
    # "Between the paper on X and the paper on Y, which one develops an ADMM algorithm?" is answered about one paper:
    # "The paper develops ..." would not say which
    question = "Which one performs Sequential Monte Carlo over diffusion trajectories?"
    state = AnswerState(question=question, info=analyse(question), passages=[result("smc", SMC)])
    SelectEvidence(HashEmbedder().encode).run(state)
    state.written = "We perform Sequential Monte Carlo over diffusion trajectories [2]."
    Verify(describe=lambda document: "data assimilation").run(state)
    Compose().run(state)
    assert state.answer == "The paper on data assimilation performs Sequential Monte Carlo over diffusion trajectories [1]."
    without = AnswerState(question=question, info=analyse(question), passages=[result("smc", SMC)])
    SelectEvidence(HashEmbedder().encode).run(without)
    without.written = state.written
    Verify().run(without)
    assert [s.text for s in without.statements] == ["The paper performs Sequential Monte Carlo over diffusion trajectories"]


def test_a_topic_is_asked_for_only_where_the_answer_uses_it() -> None:
    # a sentence that already names its subject keeps it: no model call for a phrase it would not show
    question = "What is run over diffusion trajectories?"
    state = AnswerState(question=question, info=analyse(question), passages=[result("smc", SMC)])
    SelectEvidence(HashEmbedder().encode).run(state)
    state.written = "Sequential Monte Carlo is performed over diffusion trajectories [2]."
    asked: list[str] = []
    Verify(describe=lambda document: asked.append(document.doc_id) or "data assimilation").run(state)
    assert [s.text for s in state.statements] == ["Sequential Monte Carlo is performed over diffusion trajectories"]
    assert asked == []
