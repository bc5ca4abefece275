"""Group commit (index/group_commit.py): writes that wait for the writer are committed together as one version,
each caller gets its own documents' report or its own error, and a write touching an id of the batch waits for the
next commit. The unit tests drive the queue with a stand-in commit that records its calls; the last test writes
through the embedded backend with a counting stand-in embedder (storage is the subject, not the model)."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from citerag.index.build import build_index
from citerag.index.chunking import Chunker
from citerag.index.embedded import EmbeddedBackend
from citerag.index.errors import DocumentNotFound
from citerag.index.group_commit import GroupCommit
from citerag.index.ingest import load_documents, make_document
from citerag.index.priority import lower_thread_priority
from citerag.index.retrieve import Retriever
from citerag.index.store import IndexConfig, IndexStore
from citerag.index.types import Document
from citerag.index.writes import WriteReport
from tests.conftest import SEEDS, CountingEmbedder
from tests.index.conftest import write_lock_held_elsewhere


def doc(doc_id: str) -> Document:
    return make_document(f"Text of {doc_id}.", doc_id, doc_id)


class Recorder:
    """A stand-in commit: the first call waits for :attr:`release` (so later writes queue up behind it); every call
    is recorded as ``(upserted ids, deleted ids)``; a delete of an id named ``missing*`` fails like a real one."""

    def __init__(self) -> None:
        self.calls: list[tuple[list[str], list[str]]] = []
        self.entered, self.release = threading.Event(), threading.Event()
        self.nice: list[int] = []

    def __call__(self, upserts: list[Document], deletes: list[str], show_progress: bool) -> WriteReport:
        self.nice.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        self.calls.append(([d.doc_id for d in upserts], list(deletes)))
        if len(self.calls) == 1:
            self.entered.set()
            self.release.wait(10)
        if any(d.startswith("missing") for d in deletes):
            raise DocumentNotFound(f"no document {deletes[0]!r}")
        return WriteReport(added=[d.doc_id for d in upserts], deleted=list(deletes), passages_embedded=len(upserts),
                           version=f"v{len(self.calls)}")


def queued(commits: GroupCommit, recorder: Recorder, writes: list[tuple[list[Document], list[str]]]) -> list:
    """Submit a first write, hold its commit, queue ``writes`` behind it, release; each write's report or error."""
    with ThreadPoolExecutor(len(writes) + 1) as pool:
        first = pool.submit(commits.submit, [doc("first")], [])
        assert recorder.entered.wait(10)
        futures = []
        for upserts, deletes in writes:
            futures.append(pool.submit(commits.submit, upserts, deletes))
            while len(commits._queue) < len(futures):  # each is queued before the next is sent: a known order
                threading.Event().wait(0.001)
        recorder.release.set()
        assert first.result().added == ["first"]
        return [f.exception() or f.result() for f in futures]


def test_writes_that_wait_together_are_committed_as_one_version_each_with_its_own_report() -> None:
    recorder = Recorder()
    outcomes = queued(GroupCommit(recorder), recorder, [([doc("a")], []), ([doc("b"), doc("c")], ["old"])])
    assert recorder.calls == [(["first"], []), (["a", "b", "c"], ["old"])]
    a, bc = outcomes
    assert (a.added, a.deleted, a.version) == (["a"], [], "v2")
    assert (bc.added, bc.deleted, bc.version) == (["b", "c"], ["old"], "v2")
    assert a.passages_embedded == bc.passages_embedded == 3  # the commit's, as documented


def test_a_write_touching_an_id_of_the_batch_waits_for_the_next_commit() -> None:
    recorder = Recorder()
    queued(GroupCommit(recorder), recorder, [([doc("a")], []), ([], ["a"]), ([doc("b")], [])])
    assert recorder.calls == [(["first"], []), (["a"], []), (["b"], ["a"])]


def test_a_failing_batch_is_committed_again_one_write_at_a_time_so_only_the_bad_write_fails() -> None:
    recorder = Recorder()
    good, bad, other = queued(GroupCommit(recorder), recorder, [([doc("a")], []), ([], ["missing-1"]),
                                                               ([doc("b")], [])])
    assert recorder.calls == [(["first"], []), (["a", "b"], ["missing-1"]), (["a"], []), ([], ["missing-1"]),
                              (["b"], [])]
    assert isinstance(bad, DocumentNotFound) and "missing-1" in str(bad)
    assert good.added == ["a"] and other.added == ["b"]


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="per-thread nice values are Linux's")
def test_the_writer_thread_runs_at_the_lowered_priority_and_the_caller_keeps_its_own() -> None:
    recorder = Recorder()
    recorder.release.set()
    caller = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    GroupCommit(recorder, nice=5).submit([doc("a")], [])
    assert recorder.nice == [min(caller + 5, 19)]
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == caller
    assert lower_thread_priority(0) is False


@pytest.fixture()
def backend(tokenizer, tmp_path: Path) -> EmbeddedBackend:
    embedder = CountingEmbedder()
    chunker = Chunker(tokenizer, 256, 128, 64)
    config = IndexConfig(embedder.name, embedder.dim, 256, 128, 64)
    store = IndexStore(tmp_path / "idx")
    build_index(load_documents([SEEDS]), store, embedder, chunker, config, show_progress=False)
    return EmbeddedBackend(store, store.load(), lambda i: Retriever(i, embedder), embedder, chunker, config)


def test_writes_through_the_embedded_backend_that_wait_together_land_in_one_version(backend) -> None:
    store = backend.store
    docs = [make_document(f"Group commit test document number {i} about quokkas.", f"Quokka {i}", f"gc-{i}")
            for i in range(12)]
    before = len(store.version_dirs())
    with write_lock_held_elsewhere(store.root), ThreadPoolExecutor(12) as pool:
        futures = [pool.submit(backend.write, docs[:1])]
        while backend.commits._writer is None or backend.commits._queue:  # taken by the writer, which waits
            threading.Event().wait(0.001)                                   # for the lock
        futures += [pool.submit(backend.write, [d]) for d in docs[1:]]
        while len(backend.commits._queue) < 11:
            threading.Event().wait(0.001)
    reports = [f.result() for f in futures]
    assert [r.added for r in reports] == [[d.doc_id] for d in docs]
    assert backend.commits.commits == 2 and len({r.version for r in reports}) == 2
    assert len(store.version_dirs()) == min(before + 2, store.keep_versions)
    live = store.load()
    assert all(d.doc_id in live.documents for d in docs) and backend.stats()["documents"] == 38 + 12
    with pytest.raises(DocumentNotFound):
        backend.delete(["gc-missing"])
    assert backend.stats()["documents"] == 50
