"""The index lifecycle (:mod:`citerag.index.lifecycle`) as `serve` sees it: built on first start, reused, rebuilt
when its sources change."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from citerag.index.lifecycle import ensure_index
from citerag.index.sources import SourceState, SourceStates
from citerag.index.store import LoadedIndex
from citerag.service.pipeline import index_setup
from tests.conftest import SEEDS

pytestmark = pytest.mark.slow


def state(index: LoadedIndex) -> SourceState:
    """The source state recorded for ``index``'s version (``<index_dir>/sources.json``)."""
    return SourceStates(index.path.parent.parent).of(index.path)


def test_built_once_reused_and_rebuilt_when_the_corpus_changes(settings_factory, seed_corpus: Path) -> None:
    corpus = seed_corpus
    seed = next(corpus.glob("*.txt"))
    settings = settings_factory(corpus=[corpus])

    first = ensure_index(index_setup(settings), show_progress=False)
    assert len(first.documents) == 19
    assert state(first)["sources"] == [str(corpus.resolve())]
    assert ensure_index(index_setup(settings), show_progress=False).path == first.path  # unchanged: reused

    with (corpus / seed.name).open("a", encoding="utf-8") as handle:
        handle.write("\n\nA new abstract about retrieval-augmented generation with citations.\n")
    second = ensure_index(index_setup(settings), show_progress=False)
    assert second.path != first.path and len(second.documents) == 20

    changed = settings.model_copy(update={"chunk_tokens": 96, "chunk_overlap": 32})
    third = ensure_index(index_setup(changed), show_progress=False)
    assert third.path != second.path and third.config.target_tokens == 96

    shutil.rmtree(corpus)  # sources gone: the index is served as built
    assert ensure_index(index_setup(changed), show_progress=False).path == third.path


def test_a_pointer_to_a_missing_version_falls_back_to_the_newest_verified_one(settings_factory) -> None:
    settings = settings_factory(corpus=[SEEDS])
    first = ensure_index(index_setup(settings), show_progress=False)
    (settings.index_dir / "CURRENT").write_text("v999999-gone\n")
    served = ensure_index(index_setup(settings), show_progress=False)
    assert served.path == first.path and len(served.documents) == 38  # nothing rebuilt
    assert (settings.index_dir / "CURRENT").read_text().strip() == first.path.name


def test_start_up_applies_source_changes_as_an_update_and_keeps_api_documents(settings_factory, seed_corpus: Path) -> None:
    from citerag.index.ingest import load_documents, make_document
    from citerag.service.pipeline import open_backend

    corpus = seed_corpus
    seed = next(corpus.glob("*.txt"))
    settings = settings_factory(corpus=[corpus])
    first = ensure_index(index_setup(settings), show_progress=False)
    api_doc = make_document("Zorblax quantisation halves memory.", "Zorblax", "zx-1", {"source": "api"})
    open_backend(settings, first).write([api_doc])

    docs = load_documents([corpus])
    dropped, kept = docs[0], docs[1:]
    (corpus / seed.name).write_text("header\n\n" + "\n\n".join(d.text for d in kept) + "\n\nA new abstract on RAG.\n")
    updated = ensure_index(index_setup(settings), show_progress=False)
    assert dropped.doc_id not in updated.documents  # left the source: removed
    assert "zx-1" in updated.documents  # added through the API: kept
    assert len(updated.documents) == 19 + 1  # 18 kept + 1 new from the file + the API document
    assert state(updated)["source_signatures"] != state(first)["source_signatures"]
    assert ensure_index(index_setup(settings), show_progress=False).path == updated.path  # unchanged stat: no re-read
def _jsonl(path: Path, records: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in records), encoding="utf-8")
    return path


def test_a_touched_or_edited_source_keeps_api_writes_and_later_adds(settings_factory, tmp_path: Path) -> None:
    from citerag.index.ingest import make_document
    from citerag.index.lifecycle import add_sources
    from citerag.service.pipeline import open_backend

    a = _jsonl(tmp_path / "a.jsonl", [("X", "Xylofoam v1 compresses caches."), ("Z", "Zebrawire routes packets."),
                                      ("W", "Wombatnet prunes graphs.")])
    settings = settings_factory(corpus=[a])
    ensure_index(index_setup(settings), show_progress=False)
    b = _jsonl(tmp_path / "b.jsonl", [("X", "Xylofoam v2 compresses caches twice as well.")])
    add_sources(index_setup(settings), [b], show_progress=False)  # a documented replacement by a later source
    backend = open_backend(settings, ensure_index(index_setup(settings), show_progress=False))
    backend.write([make_document("Zebrawire, as revised through the API, routes flows.", "", "Z")])
    backend.delete(["W"])
    served = ensure_index(index_setup(settings), show_progress=False)

    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))  # touched: same records, new mtime
    touched = ensure_index(index_setup(settings), show_progress=False)  # used to fail: X appeared in two sources
    assert touched.path == served.path  # nothing re-applied
    assert "v2" in touched.documents["X"].text and "API" in touched.documents["Z"].text and "W" not in touched.documents

    _jsonl(a, [("X", "Xylofoam v1 compresses caches."), ("Z", "Zebrawire routes packets."),
               ("W", "Wombatnet v2 prunes graphs faster."), ("V", "Vortexdb shards vectors.")])
    edited = ensure_index(index_setup(settings), show_progress=False)
    assert "v2 prunes" in edited.documents["W"].text and "V" in edited.documents  # what the file changed applies
    assert "v2" in edited.documents["X"].text  # b.jsonl, added later, still wins for X
    assert "API" in edited.documents["Z"].text  # Z's record in a.jsonl did not change: the API's text stays

    # W deleted through the API, then dropped from the file (nothing to apply: only the records are refreshed),
    # then put back in the file: indexed again
    open_backend(settings, edited).delete(["W"])
    _jsonl(a, [("X", "Xylofoam v1 compresses caches."), ("Z", "Zebrawire routes packets."),
               ("V", "Vortexdb shards vectors.")])
    dropped = ensure_index(index_setup(settings), show_progress=False)
    assert "W" not in dropped.documents and "W" not in state(dropped)["source_records"][str(a.resolve())]
    # signature refreshed: no re-read
    assert ensure_index(index_setup(settings), show_progress=False).path == dropped.path
    _jsonl(a, [("X", "Xylofoam v1 compresses caches."), ("Z", "Zebrawire routes packets."),
               ("V", "Vortexdb shards vectors."), ("W", "Wombatnet v2 prunes graphs faster.")])
    assert "W" in ensure_index(index_setup(settings), show_progress=False).documents

    # a settings change rebuilds the live documents: the API's edit of Z stays, API-deleted documents stay deleted
    open_backend(settings, ensure_index(index_setup(settings), show_progress=False)).delete(["V"])
    changed = settings.model_copy(update={"chunk_tokens": 96, "chunk_overlap": 32})
    rebuilt = ensure_index(index_setup(changed), show_progress=False)
    assert rebuilt.config.target_tokens == 96 and "V" not in rebuilt.documents
    assert "API" in rebuilt.documents["Z"].text and "v2" in rebuilt.documents["X"].text


def test_a_re_added_source_replaces_its_records(settings_factory, tmp_path: Path) -> None:
    from citerag.index.lifecycle import add_sources

    a = _jsonl(tmp_path / "a.jsonl", [("A", "Aardvarkdb stores tensors.")])
    settings = settings_factory(corpus=[a])
    ensure_index(index_setup(settings), show_progress=False)
    t = _jsonl(tmp_path / "t.jsonl", [("Y", "Yakshave v1 trims logs.")])
    _, report = add_sources(index_setup(settings), [t], show_progress=False)
    assert (report.added, report.replaced, report.unchanged) == (["Y"], [], [])
    _jsonl(t, [("Y2", "Yakshave v2 trims logs faster.")])
    added, report = add_sources(index_setup(settings), [t], show_progress=False)
    assert (report.added, report.passages_embedded) == (["Y2"], 1)
    assert {"Y", "Y2"} <= set(added.documents)  # --add adds; it does not remove Y
    assert state(added)["source_records"][str(t.resolve())].keys() == {"Y2"}
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))  # an unrelated touch deletes nothing
    assert {"A", "Y", "Y2"} <= set(ensure_index(index_setup(settings), show_progress=False).documents)


def test_an_index_from_before_record_fingerprints_keeps_api_edits(tmp_path: Path) -> None:
    from citerag.index.ingest import make_document, read_corpus
    from citerag.index.sources import records_by_source, source_changes

    a = _jsonl(tmp_path / "a.jsonl", [("X", "Xylofoam compresses caches."), ("N", "Newt is new in the file.")])
    api_x = make_document("Xylofoam as edited through the API.", "", "X")
    legacy = {"source_documents": ["X", "Z"]}  # the state of an index written before record fingerprints
    corpus = read_corpus([a], later_wins=True)
    upserts, deletes = source_changes(legacy, {"X": api_x, "Z": api_x}, [a], corpus, records_by_source([a], corpus))
    assert [d.doc_id for d in upserts] == ["N"] and deletes == ["Z"]  # X's record: unknown, so left as the API made it


def test_an_empty_index_is_built_once_and_reused(settings_factory, tmp_path: Path) -> None:
    from citerag.index.lifecycle import EMPTY_INDEX, index_notes

    blank = tmp_path / "blank.jsonl"
    blank.write_text('{"text": "  "}\n')
    for corpus in ([], [blank]):
        settings = settings_factory(corpus=corpus)
        first = ensure_index(index_setup(settings), show_progress=False)
        assert (len(first.documents), len(first.passages)) == (0, 0)
        assert index_notes(first)[-1] == EMPTY_INDEX
        assert ensure_index(index_setup(settings), show_progress=False).path == first.path  # not rebuilt at every start


def test_adds_record_sources_without_hiding_other_pending_edits(settings_factory, tmp_path: Path) -> None:
    from citerag.index.ingest import make_document
    from citerag.index.lifecycle import add_sources
    from citerag.service.pipeline import open_backend

    (tmp_path / "s").mkdir()
    a = _jsonl(tmp_path / "s" / "a.jsonl", [("X", "Xenopus text one."), ("P", "Pangolin prunes.")])
    settings = settings_factory(corpus=[tmp_path / "s"])
    ensure_index(index_setup(settings), show_progress=False)
    # an edit of a, then an --add of another file before any restart: the edit stays pending, then applies
    _jsonl(a, [("X", "Xenopus text one, edited."), ("P", "Pangolin prunes.")])
    add_sources(index_setup(settings), [_jsonl(tmp_path / "q.jsonl", [("Q", "Quagga queues.")])], show_progress=False)
    assert "edited" in ensure_index(index_setup(settings), show_progress=False).documents["X"].text

    # a record a later source overrides stays recorded for its own source: touches never flip it back
    b = _jsonl(tmp_path / "b.jsonl", [("X", "Xenopus text two.")])
    add_sources(index_setup(settings), [b], show_progress=False)
    _jsonl(b, [("Z", "Zorilla zips.")])
    # b no longer holds X; X keeps b's text (adds never remove)
    add_sources(index_setup(settings), [b], show_progress=False)
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))
    assert "two" in ensure_index(index_setup(settings), show_progress=False).documents["X"].text

    # an --add that changes no document still records its source, which is then followed
    copy = _jsonl(tmp_path / "copy.jsonl", [("Q", "Quagga queues.")])
    added, _ = add_sources(index_setup(settings), [copy], show_progress=False)
    assert state(added)["sources"][-1] == str(copy.resolve())
    _jsonl(copy, [("Q", "Quagga queues, edited.")])
    assert "edited" in ensure_index(index_setup(settings), show_progress=False).documents["Q"].text

    # a source gone and a settings change: the live documents are rebuilt with the new settings, writes work
    copy.unlink()
    changed = settings.model_copy(update={"chunk_tokens": 96, "chunk_overlap": 32})
    rebuilt = ensure_index(index_setup(changed), show_progress=False)
    assert rebuilt.config.target_tokens == 96 and "edited" in rebuilt.documents["Q"].text
    open_backend(changed, rebuilt).write([make_document("Okapi ostriches.", "", "O")])


def test_duplicates_across_paths_edits_during_a_read_and_an_emptied_source(
    settings_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import citerag.index.lifecycle as lifecycle

    a = tmp_path / "a.jsonl"
    a.write_text(json.dumps({"id": "X", "title": "TitleA", "text": "Xerus digs."}) + "\n", encoding="utf-8")
    b = tmp_path / "b.jsonl"
    b.write_text(json.dumps({"id": "X", "title": "TitleB", "text": "Xerus digs."}) + "\n", encoding="utf-8")
    settings = settings_factory(corpus=[a, b])
    first = ensure_index(index_setup(settings), show_progress=False)
    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 10**9))
    # one id in two paths: a touch is no edit
    assert ensure_index(index_setup(settings), show_progress=False).path == first.path

    # an edit made while the sources are being read is applied at the next start, not recorded as seen
    real_read = lifecycle.read_sources

    def read_then_edit(paths, progress, later_wins=False):  # noqa: ANN001, ANN202
        corpus = real_read(paths, progress, later_wins)
        b.write_text(json.dumps({"id": "X", "title": "TitleB", "text": "Xerus digs deeper."}) + "\n", encoding="utf-8")
        return corpus

    with monkeypatch.context() as patch:
        patch.setattr(lifecycle, "read_sources", read_then_edit)
        os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 2 * 10**9))
        ensure_index(index_setup(settings), show_progress=False)
    assert "deeper" in ensure_index(index_setup(settings), show_progress=False).documents["X"].text

    a.write_text("", encoding="utf-8")  # an emptied source: served as it is, no failed start
    served = ensure_index(index_setup(settings), show_progress=False)
    assert "deeper" in served.documents["X"].text
