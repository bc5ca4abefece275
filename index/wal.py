"""The write-ahead log of acknowledged index writes (``<index_dir>/wal.jsonl``).

Every write through :func:`citerag.index.build.write_index` (``POST`` / ``DELETE /documents``, ``citerag index --add``)
and every full build from sources (``citerag index PATHS``) is appended here, fsynced, before it is applied, and
each index version records in its manifest the last log sequence number it holds (``wal_seq``). The Milvus backend keeps a log
of its own in the same format (:mod:`citerag.index.milvus`: written the same way, replayed into Milvus at its start). The log is cut
only up to the ``wal_seq`` of the oldest version kept on disk, so any one version that later fails verification can
be replaced by an older verified one plus the log (:func:`citerag.index.recovery.recover`). The design follows the
translog of Lucene/Elasticsearch: an operation is durable once it is in the log, not once a segment holds it.

One JSON object per line::

    {"base": 12}                                        first line after a cut: entries up to 12 were removed
    {"seq": 13, "op": "write", "documents": [...], "doc_ids": ["a"], "sha256": "..."}  delete ids, then upsert
    {"seq": 14, "op": "reset", "sources": ["data/x.jsonl"], "sha256": "..."}   a full build from these files
    {"seq": 15, "op": "abort", "target": 13, "sha256": "..."}                     entry 13 failed and was not applied

``sha256`` covers the entry without itself. A torn last line (no final newline: the process died during the append,
so the write was never acknowledged) is ignored, and cut off before the next append; any other unreadable line,
the last complete one included, raises :class:`WriteLogDamaged`.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from citerag.index import faults
from citerag.index.errors import CiteragError
from citerag.index.files import atomic_write_text, fsync_path, json_sha256, record_fields
from citerag.index.types import Document

log = logging.getLogger(__name__)

Op = Literal["write", "reset", "abort"]


class WriteLogDamaged(CiteragError):
    """A line of the write-ahead log other than the last is unreadable or fails its checksum."""


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One logged write.

    Attributes:
        seq: its sequence number (1, 2, ...; never reused, also across cuts).
        op: ``write`` (remove ``doc_ids``, then insert or replace ``documents``), ``reset`` (the index becomes
            ``sources``' documents: a full build) or ``abort`` (entry ``target`` failed and was not applied).
    """

    seq: int
    op: Op
    documents: tuple[Document, ...] = ()
    doc_ids: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    target: int = 0


@dataclass(slots=True)
class LogState:
    """What the log file holds: ``base`` (entries up to it were cut) and the entries after it, in order."""

    base: int = 0
    entries: list[LogEntry] = field(default_factory=list)

    @property
    def last(self) -> int:
        """The highest sequence number ever logged (``base`` when no entry follows it)."""
        return self.entries[-1].seq if self.entries else self.base


class WriteLog:
    """The log file ``path`` (created on the first append). Callers hold the index's write lock."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)

    def read(self) -> LogState:
        """Parse the log.

        Raises:
            WriteLogDamaged: a line before the last is not a valid entry.
        """
        state = LogState()
        if not self.path.is_file():
            return state
        lines = self.path.read_bytes().split(b"\n")
        torn_tail = lines[-1] != b""  # every complete append ends with a newline
        if not torn_tail:
            lines.pop()
        for number, raw in enumerate(lines, start=1):
            last = number == len(lines)
            try:
                row = json.loads(raw)
                if number == 1 and set(row) == {"base"}:
                    state.base = int(row["base"])
                    continue
                entry = _entry(row)
            except (ValueError, KeyError, TypeError) as exc:
                if last and torn_tail:  # a complete line (newline-terminated) was acknowledged: damage, not a tear
                    log.warning("%s: ignoring a torn last entry (a write that was never acknowledged): %s",
                                self.path, exc)
                    break
                raise WriteLogDamaged(
                    f"{self.path}:{number}: unreadable log entry ({exc}); acknowledged writes after it cannot be "
                    "restored from the log: run `citerag doctor`"
                ) from exc
            state.entries.append(entry)
        return state

    def append(self, op: Op, *, after: int = 0, documents: Iterable[Document] = (), doc_ids: Iterable[str] = (),
               sources: Iterable[str] = (), target: int = 0) -> int:
        """Append one entry and fsync it; returns its sequence number (greater than ``after``, the live version's
        ``wal_seq``, and than every number logged before).

        Raises:
            OSError: the log cannot be written (the write must then not be acknowledged); the log is cut back to
                what it held, so no part of the entry stays.
        """
        state = self.read()
        seq = max(state.last, after) + 1
        entry = LogEntry(seq, op, tuple(documents), tuple(doc_ids), tuple(sources), target)
        line = json.dumps(_body(entry), ensure_ascii=False) + "\n"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        new_file = not self.path.exists()
        self._drop_torn_tail()
        faults.point("before-log-append")
        size = 0 if new_file else self.path.stat().st_size
        try:
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line)
                handle.flush()
                os.fsync(handle.fileno())
            if new_file:
                fsync_path(self.path.parent)
        except OSError:
            # a failed append (a full disk) leaves no part of its line: the log stays parseable and the write,
            # never acknowledged, is not replayed (truncating needs no space)
            self._truncate(size, remove=new_file)
            raise
        faults.point("after-log-append")
        return seq

    def _truncate(self, size: int, remove: bool = False) -> None:
        """Cut the log back to its first ``size`` bytes (or remove it, ``remove``: it did not exist before), fsynced;
        a failure is logged (the torn line it leaves is ignored by :meth:`read` and dropped by the next append)."""
        try:
            if remove:
                self.path.unlink(missing_ok=True)
                return
            with self.path.open("r+b") as handle:
                handle.truncate(size)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            log.warning("%s: cannot cut a failed append back to %d bytes (%s)", self.path, size, exc)

    def withdraw(self, seq: int) -> None:
        """Mark entry ``seq``, just appended, as not applied (its write failed): append an ``abort`` for it; when
        that cannot be written either (a full disk), cut the entry itself off the end of the log, so no start
        replays a write that was never acknowledged.

        Raises:
            OSError: neither could be done (the next writer aborts the entry: :meth:`drop_abandoned`).
        """
        try:
            self.append("abort", target=seq)
        except OSError as exc:
            if not self._cut_last(seq):
                raise
            log.warning("%s: entry %d withdrawn by cutting it off the log (an abort could not be appended: %s)",
                        self.path, seq, exc)

    def _cut_last(self, seq: int) -> bool:
        """Remove the log's last complete line when it is entry ``seq`` (and a torn line after it); ``False`` when
        it is not (then nothing changes)."""
        try:
            data = self.path.read_bytes()
        except OSError:
            return False
        end = data.rfind(b"\n") + 1  # past the last complete line
        start = data.rfind(b"\n", 0, max(end - 1, 0)) + 1
        try:
            row = json.loads(data[start:end])
        except ValueError:
            return False
        if not isinstance(row, dict) or row.get("seq") != seq:
            return False
        self._truncate(start)
        return self.path.stat().st_size == start

    def _drop_torn_tail(self) -> None:
        """Truncate an unterminated last line (an append cut short), so the next entry starts on its own line."""
        if not self.path.is_file():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as handle:
                handle.truncate(data.rfind(b"\n") + 1)
                handle.flush()
                os.fsync(handle.fileno())

    def drop_abandoned(self, after: int) -> None:
        """Abort the entries past ``after`` (the live version's ``wal_seq``) that are neither applied nor aborted:
        writers append and apply under one lock, which the caller holds, so such an entry was left by a writer that
        died before committing, and was never acknowledged."""
        state = self.read()
        aborted = {e.target for e in state.entries if e.op == "abort"}
        for entry in state.entries:
            if entry.seq > after and entry.op != "abort" and entry.seq not in aborted:
                log.warning("%s: entry %d (%s) was logged by a writer that died before applying it; it was never "
                            "acknowledged and is dropped", self.path, entry.seq, entry.op)
                self.append("abort", target=entry.seq)

    @contextmanager
    def pending(self, op: Op, *, after: int = 0, **fields: Any) -> Iterator[int]:
        """Append an entry (:meth:`append`) and yield its number for the block that applies it; when the block
        raises, the entry is withdrawn (:meth:`withdraw`: an ``abort`` entry for it, so a replay skips it, or on a
        full disk the entry cut off) and the error goes on.

        ``after`` is the live version's ``wal_seq``; entries past it left by a dead writer are aborted first
        (:meth:`drop_abandoned`), so the new version's ``wal_seq`` never claims them."""
        self.drop_abandoned(after)
        with self.applying(op, after=after, **fields) as seq:
            yield seq

    @contextmanager
    def applying(self, op: Op, *, after: int = 0, **fields: Any) -> Iterator[int]:
        """Append an entry (:meth:`append`) and yield its number for the block that applies it; when the block
        raises, an ``abort`` entry for it is appended (so a replay skips it) and the error goes on. Unlike
        :meth:`pending`, entries already logged are left as they are: the Milvus backend
        (:mod:`citerag.index.milvus`) applies each entry before it returns, but records only at its next flush that
        Milvus holds it, so an entry past ``after`` there is applied, or replayed at the next start."""
        seq = self.append(op, after=after, **fields)
        try:
            yield seq
        except BaseException:
            self.withdraw(seq)
            raise

    def cut(self, through: int) -> None:
        """Remove the entries with ``seq <= through`` (atomic rewrite); later entries stay."""
        state = self.read()
        if through <= state.base or not state.entries or state.entries[0].seq > through:
            return
        kept = [e for e in state.entries if e.seq > through]
        raw = [json.dumps({"base": through})] + [json.dumps(_body(e), ensure_ascii=False) for e in kept]
        atomic_write_text(self.path, "\n".join(raw) + "\n")
        log.debug("write log cut through %d (%d entries kept)", through, len(kept))


def _entry(row: dict[str, Any]) -> LogEntry:
    digest = row.pop("sha256")
    if _digest(row) != digest:
        raise ValueError("checksum differs")
    return LogEntry(
        seq=int(row["seq"]),
        op=row["op"],
        documents=tuple(Document(**d) for d in row.get("documents", ())),
        doc_ids=tuple(row.get("doc_ids", ())),
        sources=tuple(row.get("sources", ())),
        target=int(row.get("target", 0)),
    )


def _body(entry: LogEntry) -> dict[str, Any]:
    """The entry as its log line holds it, with its checksum."""
    body: dict[str, Any] = {"seq": entry.seq, "op": entry.op}
    if entry.op == "write":
        body["documents"] = [record_fields(d) for d in entry.documents]
        body["doc_ids"] = list(entry.doc_ids)
    elif entry.op == "reset":
        body["sources"] = list(entry.sources)
    else:
        body["target"] = entry.target
    body["sha256"] = _digest(body)
    return body


def _digest(body: dict[str, Any]) -> str:
    return json_sha256(body)
