"""Reading papers for the model (papers.py) and keeping their states (states.py), over invented documents and a
stand-in generator that writes state files (the real llama.cpp states are exercised end to end)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from citerag.index.search import SearchResult
from citerag.index.types import Passage
from citerag.service.answering.config import AnswerConfig
from citerag.service.answering.papers import Reader
from citerag.service.answering.prompts import paper_block, paper_prefix
from citerag.service.answering.states import PaperStates
from citerag.service.generator import STATE_SIZE_SUFFIX
from tests.service.answering.fixed import SEEDS, FixedSearcher, document, result


def _passages(doc_id: str, text: str, cuts: list[int]) -> list[Passage]:
    """``text`` cut at ``cuts`` into passages (no overlap)."""
    bounds = [0, *cuts, len(text)]
    return [Passage(f"{doc_id}#{i}", doc_id, i, a, b, text[a:b], 20) for i, (a, b) in enumerate(zip(bounds, bounds[1:]))]


class TestReader:
    def test_an_abstract_is_read_whole_and_its_unretrieved_passages_join_the_answer(self) -> None:
        second = SEEDS.index("FrostVault keeps")
        stored = _passages("seeds", SEEDS, [second])
        retrieved = [SearchResult(1, stored[1], document("seeds", SEEDS), 1.0, 1, 1, 1.0, 0.5)]
        passages, [paper] = Reader(FixedSearcher(retrieved, {"seeds": stored}), AnswerConfig()).read(
            retrieved, ["seeds"])
        assert paper.whole and [p.passage.chunk_id for p in passages] == ["seeds#1", "seeds#0"]
        assert [s.text for s in paper.sentences] == [
            "Seed banks preserve crop diversity.",
            "We propose FrostVault, a protocol that stores seeds at -20 C in sealed foil.",
            "FrostVault keeps 94.5% of seeds viable after 30 years, against 61% for paper envelopes."]
        assert [s.n for s in paper.sentences] == [2, 2, 1]  # each sentence cites the passage that holds it
        assert all(SEEDS[s.start:s.end] == s.text for s in paper.sentences)

    def test_a_long_paper_is_read_as_its_retrieved_passages_within_the_budget(self) -> None:
        text = " ".join(f"Section {i} reports that plot {i} yields {i * 10} kilograms of grain." for i in range(100))
        cuts = list(range(400, len(text), 400))
        stored = _passages("long", text, cuts)
        doc = document("long", text)
        retrieved = [SearchResult(rank, stored[i], doc, 1.0 / rank, rank, rank, 1.0, 0.5)
                     for rank, i in enumerate((5, 2, 9), start=1)]
        config = AnswerConfig(read_tokens=200)  # 800 characters: two passages of 400
        _, [paper] = Reader(FixedSearcher(retrieved), config).read(retrieved, ["long"])
        assert not paper.whole and paper.chars <= 800
        starts = [s.start for s in paper.sentences]
        assert starts == sorted(starts)  # in the document's order
        assert {s.n for s in paper.sentences} == {1, 2}  # the two best passages, not the third
        assert paper_block([paper]).startswith("Title: ") and " ... " in paper_block([paper])

    def test_a_second_paper_is_read_only_within_the_budget(self) -> None:
        results = [result("seeds", SEEDS), result("more", SEEDS.replace("Seed", "Grain"), rank=2)]
        config = AnswerConfig(read_tokens=60)  # 240 characters: one abstract
        _, papers = Reader(FixedSearcher(results), config).read(results, ["seeds", "more"])
        assert [p.doc_id for p in papers] == ["seeds"]


class StateWriter:
    """A generator stand-in that keeps states as llama.cpp does: ``read_and_save`` writes a file of ``size`` bytes
    and its size record, ``restore_state`` succeeds for a whole file."""

    def __init__(self, state_dir: Path, size: int) -> None:
        self.state_dir, self.size = state_dir, size
        self.state_identity = "model:1:test:f16"
        self.read: list[str] = []
        self.restored: list[str] = []

    def has_state(self, name: str) -> bool:
        record = self.state_dir / f"{name}{STATE_SIZE_SUFFIX}"
        return record.is_file() and (self.state_dir / name).stat().st_size == int(record.read_text())

    def read_and_save(self, messages, name: str, slot: int = 0, fixed=None) -> None:  # noqa: ANN001
        self.read.append(name)
        (self.state_dir / name).write_bytes(b"x" * self.size)
        (self.state_dir / f"{name}{STATE_SIZE_SUFFIX}").write_text(str(self.size))

    def restore_state(self, name: str, slot: int = 0) -> bool:
        self.restored.append(name)
        return True


class TestPaperStates:
    def _prefix(self, i: int):  # noqa: ANN202
        return paper_prefix([])[:1] + [{"role": "user", "content": f"Title: Paper {i}\nAbstract: Seeds {i}.\n\n"}]

    def test_a_paper_is_read_once_then_restored(self, tmp_path: Path) -> None:
        generator = StateWriter(tmp_path, 100)
        states = PaperStates(generator, max_bytes=10_000)
        assert states.ready(self._prefix(1)) and states.ready(self._prefix(1))
        assert len(generator.read) == 1 and generator.restored == generator.read

    def test_the_cache_keeps_the_most_recently_used_states_within_its_bound(self, tmp_path: Path) -> None:
        generator = StateWriter(tmp_path, 100)
        states = PaperStates(generator, max_bytes=250)  # two states fit
        for i in (1, 2):
            states.ready(self._prefix(i))
        os.utime(tmp_path / states.name(self._prefix(1)), (time.time() - 60, time.time() - 60))
        states.ready(self._prefix(2))  # used again: paper 1 is now the least recently used
        states.ready(self._prefix(3))
        assert states.usage() == (2, 200)
        assert not states.has(self._prefix(1)) and states.has(self._prefix(2)) and states.has(self._prefix(3))
        assert not (tmp_path / f"{states.name(self._prefix(1))}{STATE_SIZE_SUFFIX}").exists()

    def test_without_a_state_directory_nothing_is_kept(self) -> None:
        generator = StateWriter(Path("."), 100)
        generator.state_dir = None
        states = PaperStates(generator, max_bytes=1000)
        assert not states.enabled and not states.ready(self._prefix(1)) and generator.read == []
        assert states.read_ahead([self._prefix(1)]) == 0 and states.ahead == "off"

    def test_a_state_that_cannot_be_saved_is_not_tried_again(self, tmp_path: Path) -> None:
        generator = StateWriter(tmp_path, 100)

        def full_disk(messages, name, slot=0, fixed=None):  # noqa: ANN001, ANN202
            generator.read.append(name)
            raise RuntimeError("no space left on device")

        generator.read_and_save = full_disk
        states = PaperStates(generator, max_bytes=1000)
        assert not states.ready(self._prefix(1)) and not states.ready(self._prefix(1))
        assert len(generator.read) == 1
