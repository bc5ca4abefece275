"""CPU priority of background work: the threads that generate answers and commit index versions run at a higher
nice value than the threads that serve searches, so that on a busy machine a search waits for little besides other
searches, while on an idle one the background work has every core.

Linux keeps a nice value per thread, and a thread starts with its creator's (``clone(2)``): lowering the priority of
the thread that starts a native library's workers (llama.cpp's compute threads) lowers theirs too. Raising a
priority again needs ``CAP_SYS_NICE`` (``setpriority(2)``), so this is only applied to threads that run background
work for their whole life.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The default nice increment of background threads: at nice 10 the Linux scheduler (CFS) gives a thread about a
#: tenth of a nice-0 thread's share of a contended core (weights 110 vs 1024, ``sched_prio_to_weight``).
BACKGROUND_NICE = 10


def lower_thread_priority(nice: int) -> bool:
    """Add ``nice`` (0-19) to the calling thread's nice value, for the rest of its life and for the threads it starts.

    Returns:
        ``True`` when the priority was lowered; ``False`` when ``nice`` is 0 or the platform has no per-thread nice
        value (not Linux), or the system refused it (logged at WARNING).
    """
    if nice <= 0 or not hasattr(os, "setpriority") or not os.path.isdir("/proc/self/task"):
        return False
    tid = threading.get_native_id()
    try:
        current = os.getpriority(os.PRIO_PROCESS, tid)
        os.setpriority(os.PRIO_PROCESS, tid, min(current + nice, 19))
    except OSError as exc:
        log.warning("could not lower the priority of thread %s: %s", threading.current_thread().name, exc)
        return False
    return True


def started_at_lower_priority(start: Callable[[], T], nice: int, name: str = "citerag-start") -> T:
    """``start()`` run in a new thread whose priority is lowered by ``nice`` (:func:`lower_thread_priority`), so
    that the threads it starts (a native library's workers) run at that priority while the caller's keeps its own;
    its result, once the thread ends. ``nice`` 0 runs ``start()`` in the calling thread.

    Raises:
        Whatever ``start()`` raises.
    """
    if nice <= 0:
        return start()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=name, initializer=lower_thread_priority,
                            initargs=(nice,)) as pool:
        return pool.submit(start).result()
