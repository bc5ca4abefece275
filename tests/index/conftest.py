"""Helpers shared by the index tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from citerag.index.store import IndexStore


@contextmanager
def write_lock_held_elsewhere(root: Path, timeout_s: float = 60.0) -> Iterator[None]:
    """Hold the index ``root``'s write lock from another thread (as another writer would) for the block; released,
    and the thread joined, when the block ends."""
    held, release = threading.Event(), threading.Event()

    def writer() -> None:
        with IndexStore(root).writing():
            held.set()
            release.wait(timeout_s)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        assert held.wait(timeout_s)
        yield
    finally:
        release.set()
        thread.join(timeout_s)
