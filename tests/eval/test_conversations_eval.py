"""The conversational evaluation's bookkeeping (eval/conversations.py) over a stand-in answerer, and the set's
integrity against the shipped corpus."""

from __future__ import annotations

from citerag.eval.conversations import CONVERSATIONS, load_threads, report, run_threads, summarise
from citerag.index.ingest import read_corpus
from citerag.index.text import fold
from citerag.service.answering import Answer, Citation
from citerag.service.settings import PROJECT_ROOT
from tests.service.answering.fixed import result

THREADS = [{"id": "gp", "corpus": "icml2026", "turns": [
    {"question": "What does GP-EquiFlow do?", "doc_id": "gp", "expected": ["trajectories"]},
    {"question": "What does it use to build its priors?", "doc_id": "gp", "expected": ["Gaussian processes"],
     "standalone": "What does GP-EquiFlow use to build its prior distributions?"},
]}]


def stand_in(question: str, keep: tuple[str, ...]) -> Answer:
    """Answers from the GP-EquiFlow abstract only when the question names it (as retrieval would)."""
    doc = "gp" if "GP-EquiFlow" in question or "gp" in keep else "other"
    text = "GP-EquiFlow predicts trajectories with Gaussian processes."
    passage = result(doc, text)
    return Answer(question, text + " [1]", False, "", [Citation(1, passage, 0, len(text))], [passage],
                  timings_ms={"total": 100.0})


def test_follow_ups_are_scored_against_the_written_questions() -> None:
    asked: list[tuple[str, tuple]] = []
    records = run_threads(lambda q, keep: asked.append((q, keep)) or stand_in(q, keep),
                          lambda q, keep: ["gp"] if "GP-EquiFlow" in q else ["other"], THREADS)
    assert asked == [("What does GP-EquiFlow do?", ()), ("What does GP-EquiFlow use to build its priors?", ("gp",)),
                     ("What does GP-EquiFlow use to build its prior distributions?", ())]
    summaries = summarise(records)
    assert summaries["followup"].accuracy == summaries["written"].accuracy == 1.0
    assert summaries["followup"].cited_precision == 1.0 and summaries["followup"].extra["rewritten"] == 1
    assert summaries["alone"].retrieval_hit == 0.0 and summaries["openai"].retrieval_hit == 1.0
    assert "| written standalone | 1 | 1.000 | 1.000 | 1.000 | 1.000 | 100 |" in report(records, 1)


def test_retrieval_only_runs_record_retrieval_hits() -> None:
    records = run_threads(None, lambda q, keep: ["gp"] if "GP-EquiFlow" in q else ["other"], THREADS)
    summaries = summarise(records)
    assert summaries["followup"].retrieval_hit == summaries["written"].retrieval_hit == 1.0
    assert summaries["alone"].retrieval_hit == 0.0 and all(not r.answer for r in records)
    assert "| written standalone | 1 | - | - | - | 1.000 | - |" in report(records, 1)


def test_the_set_has_twenty_threads_whose_answers_are_in_their_documents() -> None:
    threads = [t for t in load_threads(CONVERSATIONS) if t["corpus"] == "icml2026"]
    documents = {d.doc_id: fold(d.text).casefold() for d in read_corpus([PROJECT_ROOT / "data" / "icml2026"]).documents}
    assert len(threads) >= 20 and all(2 <= len(t["turns"]) <= 3 for t in threads)
    for thread in threads:
        for i, turn in enumerate(thread["turns"]):
            assert any(e.casefold() in documents[turn["doc_id"]] for e in turn["expected"]), (thread["id"], i)
            assert i == 0 or turn["standalone"]
