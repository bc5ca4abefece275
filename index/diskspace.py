"""A full disk: recognising it, saying what to free, and remembering it until a write succeeds again.

A write that meets ``ENOSPC`` (no space left on the device) or ``EDQUOT`` (the disk quota is used up) fails in
different shapes depending on who wrote: an ``OSError`` with that ``errno`` from Python, numpy and pyarrow, a
``RuntimeError`` whose message ends in ``strerror`` (``"No space left on device"``) from FAISS, or either one as the
cause of another error. :func:`is_disk_full` recognises them all; :func:`disk_space` turns one raised in its block
into :class:`DiskFull`, which says which file system is full, how much is free and what to free, and records the
condition (:data:`WATCH`) so that ``/health`` shows it until a write to the same place succeeds
(:meth:`DiskWatch.clear`).

The index's writes (:func:`citerag.index.build.write_index`: the write-ahead log, the Arrow tables, BM25, FAISS, the
manifest, ``CURRENT``) fail with :class:`DiskFull` and leave the live version as it was; the caches (embedding cache,
paper-state cache) skip the write with a warning and record the condition (a cache only saves time). The HTTP API
answers :class:`DiskFull` with ``507 Insufficient Storage`` (:mod:`citerag.service.errors`), the CLI exits 2 with its
one line.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from citerag.index.errors import CiteragError

log = logging.getLogger(__name__)

#: The errno values of a full disk: no space left on the device, or the user's disk quota used up.
FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
# What FAISS (and other C++ code reporting ``strerror(errno)``) puts in its message; the English texts too, in case
# the C library's messages are translated in another language than this process's.
_FULL_TEXTS = tuple({os.strerror(errno.ENOSPC), os.strerror(errno.EDQUOT), "No space left on device",
                     "Disk quota exceeded"})
_QUOTA_TEXTS = tuple({os.strerror(errno.EDQUOT), "Disk quota exceeded"})

#: What a part of citerag's data tells the reader to free (after "free space on <file system> (<n> free): ").
ADVICE = {
    "index": "remove damaged versions (versions/damaged/), versions a restore replaced (versions/replaced/), other "
             "files or old cache entries there, or raise the disk quota, then retry; nothing was written and the "
             "live version goes on serving",
    "embedding cache": "remove files there, lower CITERAG_EMBEDDING_CACHE_MB or raise the disk quota; the cache is "
                       "skipped meanwhile (texts are embedded again)",
    "paper-state cache": "remove files there, lower CITERAG_STATE_CACHE_MB or raise the disk quota; the cache is "
                         "skipped meanwhile (papers are read in full)",
    "backup": "choose a destination with room for the live version and its log, or free space there, then retry",
}
_DEFAULT_ADVICE = "remove files there or raise the disk quota, then retry"


def size_text(n: int) -> str:
    """``n`` bytes for a reader: exact bytes below 1 MB (``12,345 B``), else MB or GB of 1024² / 1024³ bytes with one
    or two decimals (``95.4 MB``, ``1.04 GB``)."""
    mb = 1024**2
    if n < mb:
        return f"{n:,} B"
    if n < 1024 * mb:
        return f"{n / mb:,.1f} MB"
    return f"{n / (1024 * mb):,.2f} GB"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and the errors it was raised from or while handling (each once)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` (or an error it was raised from) is a write refused for space: an ``OSError`` whose
    ``errno`` is ``ENOSPC`` or ``EDQUOT`` (Python, numpy, pyarrow), or an ``OSError`` / ``RuntimeError`` whose
    message says so (FAISS: ``write error in ...: 8147 != 25600 (No space left on device)``)."""
    for error in _chain(exc):
        if isinstance(error, DiskFull):
            return True
        if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
            return True
        if isinstance(error, (OSError, RuntimeError)) and any(text in str(error) for text in _FULL_TEXTS):
            return True
    return False


def _is_quota(exc: BaseException) -> bool:
    return any((isinstance(e, OSError) and e.errno == errno.EDQUOT) or any(t in str(e) for t in _QUOTA_TEXTS)
               for e in _chain(exc))


def mount_point(path: Path) -> Path:
    """The mount point of the file system holding ``path`` (its nearest existing ancestor when it is missing)."""
    current = Path(os.path.abspath(path))
    while not current.exists() and current != current.parent:
        current = current.parent
    while not os.path.ismount(current) and current != current.parent:
        current = current.parent
    return current


def free_bytes(path: Path) -> int:
    """The bytes an unprivileged writer may still use on the file system holding ``path`` (``statvfs``'s
    ``f_bavail``; a disk quota is not seen here); ``-1`` when it cannot be read."""
    try:
        return shutil.disk_usage(mount_point(path)).free
    except OSError:
        return -1


class DiskFull(CiteragError, OSError):
    """A write was refused for space (``ENOSPC``) or quota (``EDQUOT``); nothing half-written is visible.

    Also an ``OSError`` (its ``errno`` the original one), so code that handles a failed write as ``OSError`` goes on
    handling it.

    Attributes:
        part: what was being written: ``index``, ``embedding cache``, ``paper-state cache`` or ``backup``.
        path: the directory written to (the index directory, the cache directory, the backup's parent).
        filesystem: the mount point of the file system holding it.
        free_bytes: what was free there when the write failed (``-1``: unknown).
        quota: the disk quota, not the device, ran out.
        advice: what to free (the message's tail).
    """

    def __init__(self, part: str, path: Path, filesystem: Path, free: int, quota: bool = False) -> None:
        self.part = part
        self.path = str(path)
        self.filesystem = str(filesystem)
        self.free_bytes = free
        self.quota = quota
        self.advice = ADVICE.get(part, _DEFAULT_ADVICE)
        cause = "the disk quota is used up" if quota else "no space left on device"
        free_text = size_text(free) if free >= 0 else "unknown"
        self.message = (f"{part} write to {path} failed, {cause}: free space on {filesystem} ({free_text} free): "
                        f"{self.advice}")
        super().__init__(errno.EDQUOT if quota else errno.ENOSPC, self.message)

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[object, ...]:
        return (DiskFull, (self.part, Path(self.path), Path(self.filesystem), self.free_bytes, self.quota))

    @classmethod
    def of(cls, exc: BaseException, part: str, path: Path) -> DiskFull:
        """The error for ``exc`` (recognised by :func:`is_disk_full`) met while writing ``part`` under ``path``."""
        if isinstance(exc, DiskFull):
            return exc
        return cls(part, Path(os.path.abspath(path)), mount_point(path), free_bytes(path), _is_quota(exc))

    def as_dict(self) -> dict[str, object]:
        """The fields an HTTP 507 body and ``/health`` carry (besides the message)."""
        return {"part": self.part, "path": self.path, "filesystem": self.filesystem, "free_bytes": self.free_bytes,
                "quota": self.quota}


@dataclass(frozen=True, slots=True)
class DiskCondition:
    """A place where a write failed for space and none has succeeded since (:class:`DiskWatch`).

    Attributes:
        error: the first failure's error (its fields: part, path, file system, free bytes then).
        since: when it was first seen (seconds since the epoch).
        failures: how many writes failed there since.
    """

    error: DiskFull
    since: float
    failures: int


class DiskWatch:
    """The places (part, directory) whose last write failed for space, for ``/health``; thread-safe. A condition
    is recorded by :func:`disk_space` (or :meth:`report`) and removed by :meth:`clear` when a write there succeeds."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._conditions: dict[tuple[str, str], DiskCondition] = {}

    def report(self, error: DiskFull) -> None:
        """Record ``error``'s place as full (kept with the time it was first seen)."""
        key = (error.part, error.path)
        with self._lock:
            known = self._conditions.get(key)
            self._conditions[key] = (DiskCondition(error, time.time(), 1) if known is None
                                     else DiskCondition(known.error, known.since, known.failures + 1))

    def clear(self, part: str, path: Path | str) -> None:
        """A write of ``part`` under ``path`` succeeded: its place is no longer reported full."""
        key = (part, os.path.abspath(path))
        with self._lock:
            gone = self._conditions.pop(key, None)
        if gone is not None:
            log.info("%s at %s: writes succeed again (full since %s)", part, key[1],
                     time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(gone.since)))

    def conditions(self) -> list[DiskCondition]:
        """The places reported full, the oldest first."""
        with self._lock:
            return sorted(self._conditions.values(), key=lambda c: c.since)

    def reset(self) -> None:
        """Forget every condition (tests)."""
        with self._lock:
            self._conditions.clear()


#: The process's record of full places (the service's ``/health`` reads it).
WATCH = DiskWatch()


@contextmanager
def disk_space(part: str, path: Path, record: bool = True) -> Iterator[None]:
    """Turn a write refused for space in the block (:func:`is_disk_full`) into :class:`DiskFull` for ``part``
    under ``path`` (the original error as its cause), recorded in :data:`WATCH` when ``record``; other errors pass
    unchanged."""
    try:
        yield
    except DiskFull:  # an inner block recorded it
        raise
    except (OSError, RuntimeError) as exc:
        if not is_disk_full(exc):
            raise
        full = DiskFull.of(exc, part, path)
        log.error("%s", full)
        if record:
            WATCH.report(full)
        raise full from exc


def skipped_for_space(exc: BaseException, part: str, path: Path) -> DiskFull | None:
    """For an optional write (a cache) that failed with ``exc``: when it failed for space, record the condition,
    log a warning saying what to free and return the :class:`DiskFull`; else ``None`` (the caller logs it its own
    way)."""
    if not is_disk_full(exc):
        return None
    full = DiskFull.of(exc, part, path)
    WATCH.report(full)
    log.warning("%s", full)
    return full
