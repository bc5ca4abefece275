"""Answer metrics on fixed answers (no model)."""

from __future__ import annotations

import pytest

from citerag.index.search import SearchResult
from citerag.index.types import Document, Passage
from citerag.service.answering import Answer, Citation
from citerag.eval.answers import judge, summarise
from citerag.eval.retrieval import DevQuestion


def _result(doc_id: str, rank: int = 1) -> SearchResult:
    doc = Document(doc_id, "", "text", "label")
    return SearchResult(rank, Passage(f"{doc_id}#0", doc_id, 0, 0, 4, "text", 3), doc, 1.0, 1, 1)


def _answer(text: str, cited: list[str], abstained: bool = False, passages: int = 5) -> Answer:
    results = [_result(f"d{i}", i) for i in range(1, passages + 1)]
    by_id = {r.passage.doc_id: (n, r) for n, r in enumerate(results, start=1)}
    citations = [Citation(by_id[d][0], by_id[d][1], 0, 4) for d in cited]
    return Answer("q", text, abstained, "", citations, results, text, {"retrieve": 10.0, "generate": 100.0})


QUESTIONS = [
    DevQuestion("q1", "How many?", "number", {"d1": 2}, ["28 billion"]),
    DevQuestion("q2", "What?", "lexical", {"d2": 2}, ["Gaussian process"]),
    DevQuestion("q3", "Football?", "no_answer", {}, []),
]


def test_metrics_on_fixed_answers() -> None:
    records = [
        judge(QUESTIONS[0], _answer("EDEN has ２８ Billion parameters [1].", ["d1"])),  # NFKC: ２８ -> 28
        judge(QUESTIONS[1], _answer("It uses splines [3] and [9].", ["d3"])),  # wrong, irrelevant, out of range
        judge(QUESTIONS[2], _answer("Not found in the indexed abstracts.", [], abstained=True)),
    ]
    assert [r.correct for r in records] == [True, False, None]
    summary = summarise(records, QUESTIONS)
    assert summary["answer_accuracy"] == pytest.approx(0.5)
    assert summary["citation_precision"] == pytest.approx(0.5)  # d1 relevant, d3 not
    assert summary["citation_recall"] == pytest.approx(0.5)
    assert summary["out_of_range_citations"] == 1.0  # the [9]
    assert summary["abstention_accuracy"] == 1.0
    assert summary["false_abstentions"] == 0.0
    assert summary["median_generate_ms"] == 100.0


def test_readability_rules_one_by_one() -> None:
    from types import SimpleNamespace

    from citerag.eval.readability import readability_problems

    assert readability_problems("EDEN has 28 billion parameters [1].") == []
    assert readability_problems("We perform SMC over trajectories [1].")[0].startswith("opens with a pronoun")
    assert readability_problems("same budget, ASMC attains 80.6% [1].") == ["starts mid-sentence"]
    assert readability_problems("ASMC keeps the cost of a [1].")[0].startswith("ends mid-sentence")
    # rule 4: an answer about several papers names each cited paper, by its title or by the name it coins
    paper = Document("d1", "Extremely Greedy Equivalence Search", "We propose XGES, a search for causal graphs.", "")
    cited = [SimpleNamespace(result=SimpleNamespace(document=paper))]
    assert readability_problems("XGES deletes edges early [1].", cited, name_papers=True) == []
    assert readability_problems("Extremely Greedy Equivalence Search deletes edges [1].", cited, name_papers=True) == []
    assert readability_problems("It deletes edges early [1].", cited, name_papers=True)[-1].startswith("does not name")
    # ... or by the name the question calls it: a run of its title's words
    asked = "How do Greedy Equivalence Search and Harmonic-NAS each search?"
    assert readability_problems("Greedy Equivalence Search deletes edges [1].", cited, True, asked) == []
    assert readability_problems("Greedy Equivalence Search deletes edges [1].", cited, True)[-1].startswith(
        "does not name")
    # ... or by its title's head before a colon
    titled = Document("d2", "Harmonic-NAS: Hardware-Aware Search", "Searching on devices is costly.", "")
    cited = [SimpleNamespace(result=SimpleNamespace(document=titled))]
    assert readability_problems("Harmonic-NAS optimises the backbones [1].", cited, name_papers=True) == []
