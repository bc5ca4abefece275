"""Group commit: the writes waiting for the index writer are committed together, as one index version.

A write to the embedded index costs one new version, and most of that cost does not depend on the write's size
(1.4 s for one document on 60,691 passages, 2 cores: the BM25 arrays, the tables and the FAISS file are written
again and every file is hashed). Writes that arrive while another commits therefore wait in a queue, and the
writer commits all of them at once (group commit: DeWitt et al. 1984, "Implementation techniques for main memory
database systems"; Gray & Reuter 1993, 9.4.7): a burst of writes costs one version, not one each.

What a client sees is unchanged: each call returns when its documents are committed (and durable: the commit's
write-ahead log entry is fsynced first), with the report of its own documents. Writes of one batch touch disjoint
document ids (a write that touches an id of the batch waits for the next commit), so committing them together gives
the index that committing them one by one, in any order, gives. A batch that fails is committed again one write at
a time, so each write gets its own result or error (a malformed document fails only the write that carries it).

The writer is one thread per backend, started by the first write and ended when the queue is empty. It runs at a
lowered CPU priority (:func:`~citerag.index.priority.lower_thread_priority`), so that searches served meanwhile are
not slowed by the commit.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field

from citerag.index.priority import lower_thread_priority
from citerag.index.types import Document
from citerag.index.writes import WriteReport

log = logging.getLogger(__name__)

#: The most documents (upserted plus deleted) one commit takes from the queue: a bound on the memory a commit holds;
#: a write larger than it is still committed, alone.
MAX_BATCH_DOCUMENTS = 5000

#: ``commit(upserts, deletes, show_progress)``: one write as one version (e.g. the embedded backend's own commit).
Commit = Callable[[list[Document], list[str], bool], WriteReport]


@dataclass(slots=True)
class _Pending:
    """One caller's write, waiting for its commit."""

    upserts: list[Document]
    deletes: list[str]
    show_progress: bool
    ids: frozenset[str]
    outcome: Future[WriteReport] = field(default_factory=Future)

    @property
    def size(self) -> int:
        return len(self.upserts) + len(self.deletes)


class GroupCommit:
    """The queue of writes in front of ``commit``, drained by one writer thread (module docstring).

    Args:
        commit: commits one write as one version, raising what the write raises.
        nice: the writer thread's nice increment (0: the caller's priority).
        name: the writer thread's name.
    """

    def __init__(self, commit: Commit, nice: int = 0, name: str = "citerag-writer") -> None:
        self._commit = commit
        self._nice = nice
        self._name = name
        self._queue: deque[_Pending] = deque()
        self._lock = threading.Lock()
        self._writer: threading.Thread | None = None
        self.commits = 0
        """Versions committed so far (a batch committed again one write at a time counts each write)."""

    def submit(self, upserts: Sequence[Document], deletes: Sequence[str], show_progress: bool = False) -> WriteReport:
        """Queue one write and wait until it is committed.

        Returns:
            The report of this write's documents (:func:`share`): ``passages_embedded`` and ``version`` are the
            commit's, which may hold other callers' documents too.

        Raises:
            Whatever ``commit`` raises for this write alone (e.g. ``DocumentNotFound``, ``IngestError``,
            ``DiskFull``).
        """
        upserts, deletes = list(upserts), list(deletes)
        pending = _Pending(upserts, deletes, show_progress, frozenset([d.doc_id for d in upserts] + deletes))
        with self._lock:
            self._queue.append(pending)
            if self._writer is None:
                self._writer = threading.Thread(target=self._drain, name=self._name, daemon=True)
                self._writer.start()
        return pending.outcome.result()

    def _drain(self) -> None:
        lower_thread_priority(self._nice)
        while True:
            with self._lock:
                batch = self._next_batch()
                if not batch:
                    self._writer = None
                    return
            self._run(batch)

    def _next_batch(self) -> list[_Pending]:
        """The writes at the head of the queue that one commit takes: in order, up to the first that touches an id
        of those before it or would pass :data:`MAX_BATCH_DOCUMENTS` (the head is always taken). Called under the
        lock."""
        batch: list[_Pending] = []
        ids: set[str] = set()
        size = 0
        while self._queue:
            head = self._queue[0]
            if batch and (not ids.isdisjoint(head.ids) or size + head.size > MAX_BATCH_DOCUMENTS):
                break
            batch.append(self._queue.popleft())
            ids |= head.ids
            size += head.size
        return batch

    def _run(self, batch: list[_Pending]) -> None:
        """Commit ``batch`` as one version; when that fails, each write of it alone."""
        if len(batch) > 1:
            upserts = [doc for pending in batch for doc in pending.upserts]
            deletes = [doc_id for pending in batch for doc_id in pending.deletes]
            try:
                report = self._commit(upserts, deletes, any(p.show_progress for p in batch))
            except BaseException as exc:  # noqa: BLE001 - each write is committed again alone, for its own outcome
                log.info("a commit of %d writes failed (%s: %s); committing them one at a time",
                         len(batch), type(exc).__name__, exc)
            else:
                self.commits += 1
                for pending in batch:
                    pending.outcome.set_result(share(report, pending.upserts, pending.deletes))
                return
        for pending in batch:
            try:
                pending.outcome.set_result(self._commit(pending.upserts, pending.deletes, pending.show_progress))
                self.commits += 1
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                pending.outcome.set_exception(exc)


def share(report: WriteReport, upserts: Sequence[Document], deletes: Sequence[str]) -> WriteReport:
    """The part of a commit's ``report`` about one write's documents: each id list kept to ``upserts``' ids (and
    ``deletes`` for ``deleted``); ``passages_embedded`` and ``version`` are the commit's.

    >>> report = WriteReport(added=["a", "b"], deleted=["c", "d"], passages_embedded=3, version="v2")
    >>> share(report, [Document("b", "B", "text", "B")], ["d"])
    WriteReport(added=['b'], replaced=[], updated=[], unchanged=[], deleted=['d'], skipped=[], passages_embedded=3, version='v2')
    """
    mine = {doc.doc_id for doc in upserts}
    gone = set(deletes)
    return WriteReport(
        added=[i for i in report.added if i in mine],
        replaced=[i for i in report.replaced if i in mine],
        updated=[i for i in report.updated if i in mine],
        unchanged=[i for i in report.unchanged if i in mine],
        deleted=[i for i in report.deleted if i in gone],
        skipped=[(i, why) for i, why in report.skipped if i in mine],
        passages_embedded=report.passages_embedded,
        version=report.version,
    )
