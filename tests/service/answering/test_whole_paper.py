"""The read-paper step with fixed model outputs: which questions read their paper whole, what the model then reads,
and how the paper's saved prompt state is used (the real model: ``test_answering_e2e.py``)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from citerag.service.answering.evidence import SelectEvidence, sentence_spans
from citerag.service.answering.compose import Compose
from citerag.service.answering.judge import Judge
from citerag.service.answering.prompts import evidence_prefix, judge_messages, writer_messages
from citerag.service.answering.question import analyse
from citerag.service.answering.runner import evidence_pipeline
from citerag.service.answering.state import AnswerState
from citerag.service.answering.verify import Verify
from citerag.service.answering.whole_paper import MIN_CONFIDENCE_WHOLE, ReadPaper, paper_evidence
from tests.conftest import HashEmbedder
from tests.service.answering.fixed import COVID, ML, ML2, FixedGenerator, FixedSearcher, result


class StateGenerator(FixedGenerator):
    """A fixed generator that keeps prompt states by name (what llama.cpp's slot files do) and records their use."""

    def __init__(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.state_dir = Path("states")
        self.state_identity = "fixed.gguf:1:test:f16"
        self.saved: dict[str, list[dict[str, str]]] = {}
        self.slots: dict[str, tuple[int, int | None]] = {}  # each state's slot and pinned messages
        self.uses: list[tuple[str, str]] = []

    def has_state(self, name: str) -> bool:
        return name in self.saved

    def read_and_save(self, messages, name, slot=0, fixed=None) -> None:  # noqa: ANN001
        self.saved[name] = messages
        self.slots[name] = (slot, fixed)
        self.uses.append(("read", name))

    def restore_state(self, name, slot=0) -> bool:  # noqa: ANN001
        self.uses.append(("restore", name))
        return True


class CountingSearcher(FixedSearcher):
    def __init__(self, results, documents: int) -> None:  # noqa: ANN001
        super().__init__(results)
        self.documents = documents

    def count(self) -> int:
        return self.documents


def _chosen(question: str) -> AnswerState:
    state = AnswerState(question=question, info=analyse(question), passages=[result("ml", ML), result("gp", ML2, 2)])
    SelectEvidence(HashEmbedder().encode, sentences=2).run(state)
    return state


def test_a_question_about_one_paper_reads_it_whole_in_its_order_and_saves_its_state_once() -> None:
    generator = StateGenerator()
    step = ReadPaper(generator, CountingSearcher([], documents=38))
    first = _chosen("What share of memory does LU-KV keep?")
    chosen = {(e.doc_id, e.start, e.end): e.score for e in first.evidence}
    step.run(first)
    assert first.read_whole
    assert [e.text for e in first.evidence] == [
        "Long contexts are costly.", "We propose LU-KV, a KV cache eviction method.",
        "LU-KV keeps 90% accuracy at 10\\% memory, a $4\\times$ saving."]
    # the chosen sentences keep their scores (the judge's close rule, verify's fallbacks); the others score 0
    assert all(e.score == chosen.get((e.doc_id, e.start, e.end), 0.0) for e in first.evidence)
    (name,) = generator.saved
    assert generator.saved[name] == evidence_prefix(first.evidence) and generator.uses == [("read", name)]

    second = _chosen("How much memory does LU-KV use?")
    step.run(second)
    assert generator.uses == [("read", name), ("restore", name)]  # the same paper: its state, not read again


def test_every_prompt_over_the_paper_starts_with_its_saved_prefix() -> None:
    state = _chosen("What share of memory does LU-KV keep?")
    ReadPaper(StateGenerator(), CountingSearcher([], 38)).run(state)
    prefix = evidence_prefix(state.evidence)[-1]["content"]
    for messages in (judge_messages(state.info, state.evidence), writer_messages(state.info, state.evidence)[:-1]):
        assert messages[:-1] == evidence_prefix(state.evidence)[:-1]
        user = messages[-1]["content"]
        assert user.startswith(prefix) and "Question: What share of memory" in user


@pytest.mark.parametrize(
    ("question", "documents", "why"),
    [
        ("Which papers propose a new method?", 38, "which-papers questions read each paper's best sentences"),
        ("What share of memory does LU-KV keep?", 65, "a corpus above MAX_DOCUMENTS"),
    ],
)
def test_other_questions_and_large_corpora_keep_the_chosen_sentences(question: str, documents: int, why: str) -> None:
    generator = StateGenerator()
    state = _chosen(question)
    before = list(state.evidence)
    ReadPaper(generator, CountingSearcher([], documents)).run(state)
    assert state.evidence == before and not state.read_whole and generator.uses == [], why


def test_a_yes_no_question_reads_its_paper_whole_in_its_own_conversation() -> None:
    from citerag.service.answering.prompts import DECISION_SLOT, conclusion_messages, conclusion_prefix
    from citerag.service.answering.write import Write

    written = "LU-KV, a KV cache eviction method, keeps 90% accuracy at 10% memory."
    generator = StateGenerator(written=written, decision={"yes": 0.9, "no": 0.1, "maybe": 0.0})
    state = _chosen("Does LU-KV keep 90% accuracy?")
    ReadPaper(generator, CountingSearcher([], 38)).run(state)
    assert state.read_whole and [e.text for e in state.evidence][0] == "Long contexts are costly."
    (name,) = generator.saved
    assert generator.saved[name] == conclusion_prefix(state.evidence) and generator.slots[name] == (DECISION_SLOT, 1)
    Write(generator).run(state)
    conclusion = generator.calls[0]
    assert conclusion["messages"] == conclusion_messages(state.info, state.evidence)  # starts with the saved prefix
    assert conclusion["messages"][-1]["content"].startswith(generator.saved[name][-1]["content"])
    assert (conclusion["slot"], conclusion["fixed"]) == (DECISION_SLOT, 1) and state.decision == "yes"
    Verify().run(state)
    Compose().run(state)
    # the conclusion rests on two sentences of the paper together: it cites those two, not the whole abstract
    assert state.answer == "Yes. LU-KV, a KV cache eviction method, keeps 90% accuracy at 10% memory [1]."
    assert [ML[c.start:c.end] for c in state.citations] == [
        "We propose LU-KV, a KV cache eviction method.", "LU-KV keeps 90% accuracy at 10\\% memory, a $4\\times$ saving."]


class TwoReadings(StateGenerator):
    """A state generator whose successive yes/no decisions have the probabilities ``tables``, in order."""

    def __init__(self, tables: list[dict[str, float]], texts: list[str] | None = None,
                 **kwargs) -> None:  # noqa: ANN003
        super().__init__(**kwargs)
        self.tables, self.texts = list(tables), list(texts or [])

    def chat(self, messages, max_tokens, on_delta=None, grammar=None, **kwargs):  # noqa: ANN001, ANN003, ANN201
        if grammar is not None and "maybe" in grammar:
            self.decision = self.tables.pop(0)
        elif grammar is None and self.texts:
            self.written = self.texts.pop(0)
        return super().chat(messages, max_tokens, on_delta=on_delta, grammar=grammar, **kwargs)


def test_over_a_large_corpus_a_yes_no_decision_averages_the_chosen_sentences_and_the_paper_read_whole() -> None:
    from citerag.service.answering.prompts import DECISION_SLOT, conclusion_messages, conclusion_prefix
    from citerag.service.answering.write import Write

    written = "LU-KV keeps 90% accuracy at 10% memory [2]."
    chosen_reading, whole_reading = {"yes": 0.40, "no": 0.55, "maybe": 0.05}, {"yes": 0.96, "no": 0.03, "maybe": 0.01}
    generator = TwoReadings([chosen_reading, whole_reading], written=written)
    step = ReadPaper(generator, CountingSearcher([], documents=65))  # above MAX_DOCUMENTS: not read whole up front
    events: list[str] = []
    state = _chosen("Does LU-KV keep 90% accuracy?")
    state.on_event = lambda kind, payload: events.append(kind) and False
    chosen = list(state.evidence)
    step.run(state)
    assert state.evidence == chosen and not state.read_whole
    Write(generator, second_reading=step.second_reading).run(state)
    conclusions = [call for call in generator.calls if call["grammar"] is None]
    whole = paper_evidence(state.passages[0].document, [(1, state.passages[0])])
    assert [call["messages"] for call in conclusions] == [conclusion_messages(state.info, chosen),
                                                          conclusion_messages(state.info, whole)]
    (name,) = generator.saved  # the paper's yes/no conversation, saved in its slot as over a small corpus
    assert generator.saved[name] == conclusion_prefix(whole) and generator.slots[name] == (DECISION_SLOT, 1)
    # the mean of the two readings decides (P(yes) 0.68 >= 0.65); the chosen sentences' reading alone said "no"
    assert state.decision == "yes" and state.decision_probabilities == pytest.approx(
        {"yes": 0.68, "no": 0.29, "maybe": 0.03})
    # only the first reading is the answer: streamed once, over the evidence shown, which stays the chosen sentences
    assert events.count("token") == len(range(0, len(written), 3)) and state.evidence == chosen
    assert state.written == written


def test_a_second_reading_whose_conclusion_denies_the_question_makes_the_answer_no() -> None:
    from citerag.service.answering.write import Write

    first, second = "LU-KV keeps 90% accuracy at 10% memory [2].", "LU-KV does not keep 90% accuracy."
    sure = {"yes": 0.9, "no": 0.08, "maybe": 0.02}
    generator = TwoReadings([sure, sure], texts=[first, second])
    step = ReadPaper(generator, CountingSearcher([], documents=65))
    state = _chosen("Does LU-KV keep 90% accuracy?")
    Write(generator, second_reading=step.second_reading).run(state)
    assert state.decision == "no" and state.written == first  # the shown conclusion is the first reading's


def test_the_second_reading_runs_in_the_yes_no_slot_and_a_mean_under_the_yes_bar_is_not_yes() -> None:
    from citerag.service.answering.prompts import DECISION_SLOT
    from citerag.service.answering.write import Write

    # the whole paper says yes, the chosen sentences no: mean P(yes) 0.575 < 0.65, and no conclusion restates the
    # question as true, so the likelier of no and maybe
    generator = TwoReadings([{"yes": 0.3, "no": 0.6, "maybe": 0.1}, {"yes": 0.85, "no": 0.1, "maybe": 0.05}],
                            written="LU-KV loses little at 10% memory [2].")
    step = ReadPaper(generator, CountingSearcher([], documents=65))
    state = _chosen("Does LU-KV keep 90% accuracy?")
    Write(generator, second_reading=step.second_reading).run(state)
    assert state.decision == "no" and state.decision_probabilities["yes"] == pytest.approx(0.575)
    # conclusion (kept cached), decision (pinned after), then the same over the paper read whole, all in one slot
    assert [(c["slot"], c["fixed"], c["pin"]) for c in generator.calls] == [(DECISION_SLOT, 1, False),
                                                                          (DECISION_SLOT, 1, True)] * 2


def test_the_whole_papers_evidence_denying_the_question_makes_the_answer_no() -> None:
    from citerag.service.answering.write import Write

    # the chosen sentences do not hold the denial; the paper read whole does (its first sentence, replaced here)
    sure = {"yes": 0.9, "no": 0.08, "maybe": 0.02}
    generator = TwoReadings([sure, sure], written="LU-KV keeps 90% accuracy [2].")
    step = ReadPaper(generator, CountingSearcher([], documents=65))
    state = _chosen("Does LU-KV keep 90% accuracy at 10% memory?")
    whole = step.second_reading(state)
    assert whole is not None
    question = "Does LU-KV keep 90% accuracy at 10% memory?"
    denial = "LU-KV does not keep 90% accuracy at 10% memory."
    assert Write._denying(state, state.evidence) is None  # noqa: SLF001
    denied = [replace(whole[0], text=denial), *whole[1:]]
    Write(generator, second_reading=lambda _: denied).run(state)
    assert state.info.text == question and state.decision == "no" and state.written == "LU-KV keeps 90% accuracy [2]."


def test_no_second_reading_once_the_listener_has_stopped_or_without_a_state_directory() -> None:
    from citerag.service.answering.write import Write

    sure = {"yes": 0.9, "no": 0.08, "maybe": 0.02}
    generator = TwoReadings([sure], written="LU-KV keeps 90% accuracy [2].")
    asked: list[AnswerState] = []
    state = _chosen("Does LU-KV keep 90% accuracy?")
    state.stopped = True
    Write(generator, second_reading=lambda s: asked.append(s) or None).run(state)
    assert asked == [] and len(generator.calls) == 2
    assert ReadPaper(FixedGenerator(), CountingSearcher([], 65)).second_reading(_chosen("Does LU-KV keep 90%?")) is None


def test_over_a_small_corpus_one_reading_of_the_paper_read_whole_decides() -> None:
    from citerag.service.answering.write import Write

    generator = TwoReadings([{"yes": 0.9, "no": 0.1, "maybe": 0.0}], written="LU-KV keeps 90% accuracy [2].")
    step = ReadPaper(generator, CountingSearcher([], documents=38))
    state = _chosen("Does LU-KV keep 90% accuracy?")
    step.run(state)
    assert state.read_whole and step.second_reading(state) is None
    Write(generator, second_reading=step.second_reading).run(state)
    assert [call["grammar"] is None for call in generator.calls] == [True, False] and state.decision == "yes"


def test_without_a_state_directory_nothing_is_read_whole() -> None:
    state = _chosen("What share of memory does LU-KV keep?")
    before = list(state.evidence)
    ReadPaper(FixedGenerator(), CountingSearcher([], 38)).run(state)  # FixedGenerator has no state_dir
    assert state.evidence == before and not state.read_whole


def test_a_paper_llama_cpp_cannot_save_is_answered_from_the_chosen_sentences() -> None:
    class FullDisk(StateGenerator):
        def read_and_save(self, messages, name, slot=0, fixed=None) -> None:  # noqa: ANN001
            self.uses.append(("read", name))
            raise RuntimeError("llama.cpp could not save the prompt state: no space left on device")

    generator = FullDisk()
    step = ReadPaper(generator, CountingSearcher([], 38))
    for _ in range(2):
        state = _chosen("What share of memory does LU-KV keep?")
        before = list(state.evidence)
        step.run(state)
        assert state.evidence == before and not state.read_whole
    assert len(generator.uses) == 1  # the failure is remembered: the paper is not read again on every question


def test_a_paper_the_question_did_not_read_whole_is_not_read_whole() -> None:
    full = result("ml", ML)
    half = full.replace(passage=full.passage.__class__(
        "ml#0", "ml", 0, 0, 40, ML[:40], 10))  # only the first 40 characters were retrieved
    assert paper_evidence(full.document, [(1, half)]) is None
    assert [ML[a:b] for a, b in sentence_spans(ML)] == [e.text for e in paper_evidence(full.document, [(1, full)])]


def test_the_judge_holds_a_paper_read_whole_to_its_own_bar() -> None:
    p_yes = (MIN_CONFIDENCE_WHOLE + 0.65) / 2  # between the whole-paper bar and the chosen sentences' bar
    for read_whole, abstains in ((True, False), (False, True)):
        state = _chosen("What share of memory does LU-KV keep?")
        state.read_whole, state.reserve = read_whole, []
        for item in state.evidence:  # no close evidence: the model decides
            object.__setattr__(item, "dense", 0.1)
        Judge(FixedGenerator(judge=p_yes), close_cosine=1.0).run(state)
        assert state.abstained is abstains


def test_the_pipeline_answers_from_the_whole_paper_and_cites_its_sentences_as_exact_spans() -> None:
    searcher = CountingSearcher([result("covid", COVID), result("ml", ML, rank=2)], documents=2)
    generator = StateGenerator("LU-KV keeps 90% accuracy at 10% memory [3].")
    answer = evidence_pipeline(searcher, generator, HashEmbedder().encode, default_k=2).ask(
        "What share of memory does LU-KV keep?")
    assert not answer.abstained and answer.answer == "LU-KV keeps 90% accuracy at 10% memory [2]."
    (citation,) = answer.citations
    assert ML[citation.start:citation.end].startswith("LU-KV keeps 90% accuracy")
    assert "read_paper" in answer.timings_ms and [use for use, _ in generator.uses] == ["read"]


class Backend:
    """The two backend calls reading ahead uses: documents in pages, each one's passages."""

    def __init__(self, documents) -> None:  # noqa: ANN001
        self.docs = documents

    def count(self) -> int:
        return len(self.docs)

    def documents(self, offset: int = 0, limit: int = 100):  # noqa: ANN201
        return self.docs[offset:offset + limit]

    def passages_of(self, doc_id: str):  # noqa: ANN201
        return [r.passage for r in (result(d.doc_id, d.text) for d in self.docs if d.doc_id == doc_id)]


def test_reading_ahead_reads_each_abstract_once_and_says_when_it_is_done() -> None:
    long_paper = result("long", "A full paper. " * 400).document  # over WHOLE_DOCUMENT_CHARS: left to retrieval
    backend = Backend([result("ml", ML).document, result("gp", ML2).document, long_paper])
    generator = StateGenerator()
    step = ReadPaper(generator, backend)
    assert step.ahead == "not started"
    # each abstract in both conversations: the answer's (slot 0) and the yes/no one's (slot 1, its system prompt pinned)
    assert step.read_all(backend) == 4 and step.ahead == "done" and len(generator.saved) == 4
    assert sorted(generator.slots.values(), key=str) == [(0, None), (0, None), (1, 1), (1, 1)]
    assert step.read_all(backend) == 0 and len(generator.uses) == 4  # already saved: nothing read again
    # a question about a paper read ahead restores it
    state = _chosen("What share of memory does LU-KV keep?")
    step.run(state)
    assert generator.uses[-1][0] == "restore" and state.read_whole
    off = ReadPaper(generator, backend, max_documents=0)
    assert off.ahead == "off" and off.read_all(backend) == 0 and off.ahead == "off"


def test_the_state_directory_keeps_the_most_recently_used_states(tmp_path: Path) -> None:
    import os

    class OnDisk(StateGenerator):
        def __init__(self) -> None:
            super().__init__()
            self.state_dir = tmp_path

        def has_state(self, name: str) -> bool:
            return (tmp_path / name).is_file()

        def read_and_save(self, messages, name, slot=0, fixed=None) -> None:  # noqa: ANN001
            (tmp_path / name).write_bytes(b"state")
            self.uses.append(("read", name))

    for i, old in enumerate(["paper-a.bin", "paper-b.bin", "paper-c.bin"]):  # states of papers no longer indexed
        (tmp_path / old).write_bytes(b"old")
        os.utime(tmp_path / old, (1_000_000 + i, 1_000_000 + i))
    (tmp_path / "notes.txt").write_text("not a paper state")
    for kept_or_not in ("paper-a.bin", "paper-c.bin"):  # the records of their sizes (Generator.has_state)
        (tmp_path / f"{kept_or_not}.size").write_text("3")
    generator = OnDisk()
    step = ReadPaper(generator, CountingSearcher([], 38), keep_states=2)
    state = _chosen("What share of memory does LU-KV keep?")
    step.run(state)
    (name,) = {n for _, n in generator.uses}
    # the newest states stay, with their size records; a pruned state's record goes with it
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "paper-c.bin", "paper-c.bin.size", "notes.txt"])


class StoredSearcher(CountingSearcher):
    """A backend's view of a small corpus: its documents' stored passages (one a document, holding all of it)."""

    def __init__(self, results, documents: int) -> None:  # noqa: ANN001
        super().__init__(results, documents)
        self.stored = {r.document.doc_id: [r.passage] for r in results}

    def passages_of(self, doc_id: str):  # noqa: ANN201
        return self.stored[doc_id]


def test_a_which_papers_candidate_that_passes_is_judged_again_over_the_paper_read_whole() -> None:
    from citerag.service.answering.judge import MIN_PAPER_SCORE_WHOLE, JudgePapers
    from citerag.service.answering.prompts import DECISION_SYSTEM, SYSTEM, paper_whole_messages

    question = "Which papers propose a method with a lower error or less memory?"
    passages = [result("ml", ML), result("ml2", ML2, rank=2), result("covid", COVID, rank=3)]
    generator = StateGenerator(judge=lambda messages: (
        0.05 if "HIV-1" in messages[-1]["content"]  # covid: no, over its sentences
        else 0.1 if messages[0]["content"] == SYSTEM and "LU-KV" in messages[-1]["content"]  # ml: no, read whole
        else 0.9))
    state = AnswerState(question=question, info=analyse(question), passages=passages)
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(state)
    read_paper = ReadPaper(generator, StoredSearcher(passages, documents=38))
    JudgePapers(generator, read_paper=read_paper).run(state)
    whole = [c for c in generator.calls if c["messages"][0]["content"] == SYSTEM]
    sentences = [c for c in generator.calls if c["messages"][0]["content"] == DECISION_SYSTEM]
    assert len(sentences) == 3  # every candidate, over its sentences (covid stops there: 0.05 < MIN_PAPER_SCORE_WHOLE)
    assert [c["slot"] for c in whole] == [0, 0] and len(generator.saved) == 2  # ml and ml2, each read and saved once
    polar = state.info.polar
    assert whole[1]["messages"] == paper_whole_messages(polar, read_paper.read_document(passages[1].document))
    assert whole[1]["messages"][-1]["content"].endswith(f"Question: {polar}\n\nReply yes or no.")
    # ml passed over its sentences (score >= 0.24) but not over its whole abstract (x 0.1 < MIN_PAPER_SCORE_WHOLE)
    assert [e.doc_id for e in state.evidence] == ["ml2"] and MIN_PAPER_SCORE_WHOLE < 0.9 * 0.9
    # the same question over a corpus too large to read whole: one judgement a paper, both ML papers named
    generator.calls.clear()
    large = AnswerState(question=question, info=analyse(question), passages=passages)
    SelectEvidence(HashEmbedder().encode, judged_papers=True).run(large)
    JudgePapers(generator, read_paper=ReadPaper(generator, StoredSearcher(passages, documents=65))).run(large)
    assert len(generator.calls) == 3 and [e.doc_id for e in large.evidence] == ["ml", "ml2"]
