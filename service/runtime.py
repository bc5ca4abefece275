"""How the server process runs the interpreter, for steady search latency while answers are written and index
versions committed in other threads of the same process.

- **GIL switch interval** (:data:`SWITCH_INTERVAL_S`): a thread that wants the GIL waits at most this long for
  a thread running Python code to hand it over (CPython's default is 5 ms). A search needs the GIL many times;
  with a commit running Python code beside it, each wait costs up to the interval, so a shorter one shortens the
  searches' tail (``bench/soak.py``: search p99 per minute under mixed load 133-228 ms at 5 ms, 46-110 ms at 0.5 ms,
  on 2 cores over 60,691 passages).
- **The garbage collector's permanent generation** (:func:`freeze_heap`): a full (generation 2) collection walks
  every tracked object, pausing every thread (70-85 ms during a commit over 22,981 documents); the objects made while
  loading the index and the model live as long as the process, so they are moved out of the collector's reach once
  loaded (``gc.freeze``, which CPython added for long-lived servers: 11-23 ms then; at most 4 ms once an update
  also kept its documents as Arrow rows, :func:`citerag.index.build.write_index`). Objects that become
  garbage afterwards are still freed by their reference counts; only a reference cycle alive at the freeze and
  dropped later is never collected, which is why the freeze is for the server process, not for every app a test
  builds.
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

#: The server's GIL switch interval (seconds; CPython's default 0.005): see the module docstring.
SWITCH_INTERVAL_S = 0.0005


def tune_interpreter() -> None:
    """Set the server process's GIL switch interval (:data:`SWITCH_INTERVAL_S`)."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def freeze_heap() -> int:
    """Collect garbage, then move every object the collector tracks into its permanent generation (``gc.freeze``);
    returns how many objects are frozen in all."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def freeze_heap_when(loaded: Callable[[], bool], name: str = "citerag-freeze-heap") -> threading.Thread:
    """:func:`freeze_heap` now, and again in a background thread once ``loaded()`` returns ``True`` (e.g. once the
    answering model is loaded: :meth:`~citerag.service.state.AnswererLoader.wait`); returns the started thread."""
    freeze_heap()

    def run() -> None:
        if loaded():
            log.info("garbage collector: %d long-lived objects frozen", freeze_heap())

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
