"""Index lifecycle as `serve` sees it: built on first start, reused, rebuilt when its sources change."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from service.pipeline import ensure_index
from tests.conftest import SEEDS

pytestmark = pytest.mark.slow


def test_built_once_reused_and_rebuilt_when_the_corpus_changes(settings_factory, tmp_path: Path) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    seed = sorted(SEEDS.glob("*.txt"))[0]
    shutil.copy(seed, corpus / seed.name)
    settings = settings_factory(corpus=[corpus])

    first = ensure_index(settings, show_progress=False)
    assert len(first.documents) == 19
    assert first.manifest["sources"] == [str(corpus.resolve())]
    assert ensure_index(settings, show_progress=False).path == first.path  # unchanged: reused

    with (corpus / seed.name).open("a", encoding="utf-8") as handle:
        handle.write("\n\nA new abstract about retrieval-augmented generation with citations.\n")
    second = ensure_index(settings, show_progress=False)
    assert second.path != first.path and len(second.documents) == 20

    changed = settings.model_copy(update={"chunk_tokens": 96, "chunk_overlap": 32})
    third = ensure_index(changed, show_progress=False)
    assert third.path != second.path and third.config.target_tokens == 96

    shutil.rmtree(corpus)  # sources gone: the index is served as built
    assert ensure_index(changed, show_progress=False).path == third.path


def test_a_pointer_to_a_missing_version_is_rebuilt(settings_factory) -> None:
    settings = settings_factory(corpus=[SEEDS])
    first = ensure_index(settings, show_progress=False)
    (settings.index_dir / "CURRENT").write_text("v999999-gone\n")
    rebuilt = ensure_index(settings, show_progress=False)
    assert rebuilt.path != first.path and len(rebuilt.documents) == 38


def test_an_empty_index_is_built_once_and_reused(settings_factory, tmp_path: Path) -> None:
    from service.pipeline import EMPTY_INDEX, index_notes

    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"text": "  "}\n')
    for corpus in ([], [blank]):
        settings = settings_factory(corpus=corpus)
        first = ensure_index(settings, show_progress=False)
        assert (len(first.documents), len(first.passages)) == (0, 0)
        assert index_notes(first)[-1] == EMPTY_INDEX
        assert ensure_index(settings, show_progress=False).path == first.path  # not rebuilt at every start
