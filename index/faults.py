"""Crash points for fault-injection tests (the "failpoints" of TiKV/FoundationDB, reduced to one).

``CITERAG_CRASH_AT=<name>`` makes the process kill itself with SIGKILL when it reaches :func:`point` ``name``, as a
power cut or ``kill -9`` would at that step. Unset (always, outside tests) a point costs one dict lookup. The points,
in the order a write reaches them: ``before-log-append``, ``after-log-append``, ``mid-version`` (some files of the
new version written), ``before-current`` (the version complete, ``CURRENT`` not yet moved), ``after-current``; a
write of the Milvus backend (:mod:`citerag.index.milvus`) reaches the first two, the second before Milvus sees it.
A backup (:mod:`citerag.index.backup`) reaches ``backup-mid-copy`` (one file of the version copied) and
``backup-before-rename`` (complete and fsynced, not yet renamed to DEST); a restore ``restore-mid-install`` (the
version renamed into place, the old versions, the log and ``CURRENT`` not yet replaced).
"""

from __future__ import annotations

import os
import signal

ENV = "CITERAG_CRASH_AT"


def point(name: str) -> None:
    """SIGKILL this process when ``CITERAG_CRASH_AT`` equals ``name``; otherwise do nothing."""
    if os.environ.get(ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)
