"""The paper-state cache: llama.cpp's state after reading a paper, kept on disk so that the next question about
the paper reads only itself (cache-augmented generation: Chan et al. 2024, "Don't Do RAG: When Cache-Augmented
Generation is All You Need for Knowledge Tasks").

Every prompt over some papers starts the same way, whatever the question and whatever the kind of answer asked
for (:func:`~citerag.service.answering.prompts.paper_prefix`: the system prompt, then the papers' numbered
sentences): the judge, the writer and a yes/no question's conclusion and decision share it. llama.cpp reads that
start once and saves its slot's state (~28 KB a token for the 1.5B model at f16: ~8 MB for an abstract); a later
question restores it (a few ms) and reads only its question and request. A state is named by a digest of the model
(:attr:`~citerag.service.generator.Generator.state_identity`) and the prefix's text, so a changed paper, prompt or
model reads afresh.

The cache is bounded in bytes (:attr:`~citerag.service.answering.config.AnswerConfig.state_cache_bytes`): the least
recently used states go first. Papers of a small corpus are read ahead when the service starts
(:meth:`PaperStates.read_ahead`); beyond it, a paper is read on its first question.

A state that cannot be saved for space (a full disk or quota) is skipped with a warning saying what to free, and the
condition is recorded for ``/health`` (:mod:`citerag.index.diskspace`) until a state is saved again; the question is
answered all the same, and the state is tried again once more room is free (:data:`RETRY_ROOM`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from citerag.index.diskspace import WATCH, DiskFull, free_bytes, is_disk_full
from citerag.service.generator import STATE_SIZE_SUFFIX, Generator

log = logging.getLogger(__name__)

Messages = list[dict[str, str]]
#: A state file's name starts so (the cache directory may hold other files).
PREFIX = "paper-"
#: A save that fails while less than this is free on the cache's file system is taken as failed for space
#: (llama.cpp's short write of a state reports no errno); an abstract's state is ~8 MB.
STATE_ROOM = 64 * 1024**2
#: A state not saved for space is tried again once this much more is free than when it failed.
RETRY_ROOM = 8 * 1024**2


class PaperStates:
    """The paper-state cache (module docstring) of one generator.

    Args:
        generator: the loaded chat model; states are kept only when it has a ``state_dir``.
        max_bytes: the cache's bound on disk (bytes).
        slot: the llama.cpp slot prompts over papers run in.
        fixed: how many leading messages the slot keeps pinned.
    """

    def __init__(self, generator: Generator, max_bytes: int, slot: int = 0, fixed: int = 1) -> None:
        self.generator = generator
        self.max_bytes = max_bytes
        self.slot = slot
        self.fixed = fixed
        self.ahead = "not started"
        #: States llama.cpp could not read or save in this process: not tried again.
        self._failed: set[str] = set()
        #: States not saved for space, with the bytes free then: tried again once :data:`RETRY_ROOM` more is free.
        self._full: dict[str, int] = {}

    @property
    def enabled(self) -> bool:
        """Whether states can be kept (the generator has a ``state_dir``)."""
        return getattr(self.generator, "state_dir", None) is not None

    def name(self, prefix: Messages) -> str:
        """The state file of ``prefix`` (module docstring)."""
        key = json.dumps([self.generator.state_identity, prefix])
        return f"{PREFIX}{hashlib.sha256(key.encode()).hexdigest()[:40]}.bin"

    def has(self, prefix: Messages) -> bool:
        """Whether ``prefix``'s state is saved whole."""
        return self.enabled and self.generator.has_state(self.name(prefix))

    def ready(self, prefix: Messages) -> bool:
        """Leave the slot holding ``prefix``'s state: restored when saved, else read and saved (then the cache is
        pruned to its bound). ``False`` when states are off or llama.cpp could not read or save it (now or before
        in this process); the prompt is then read in full by the call that needs it."""
        if not self.enabled:
            return False
        name = self.name(prefix)
        if name in self._failed:
            return False
        if self.generator.has_state(name) and self.generator.restore_state(name, self.slot):
            self._touch(name)
            return True
        directory = Path(self.generator.state_dir)  # type: ignore[arg-type]
        if name in self._full and free_bytes(directory) < self._full[name] + RETRY_ROOM:
            return False  # failed for space, and no room was made since
        try:
            self.generator.read_and_save(prefix, name, self.slot, self.fixed)
        except (RuntimeError, OSError) as exc:
            if is_disk_full(exc) or 0 <= free_bytes(directory) < STATE_ROOM:
                # a cache is optional: the question goes on, /health shows the condition, and the state is tried
                # again once there is room (llama.cpp's own short write names no errno: a nearly full disk is taken
                # for the cause)
                full = DiskFull.of(exc, "paper-state cache", directory)
                self._full[name] = full.free_bytes
                WATCH.report(full)
                log.warning("%s", full)
                return False
            self._failed.add(name)
            log.warning("keeping the state of a paper failed; its prompts are read in full", exc_info=True)
            return False
        self._full.pop(name, None)
        WATCH.clear("paper-state cache", directory)
        self.prune()
        return True

    def read_ahead(self, prefixes: Iterable[Messages], on_read: Callable[[], None] | None = None) -> int:
        """Read and save each of ``prefixes`` not saved yet (``citerag serve``'s start, in a background thread;
        each holds the model for one paper's reading, so a question asked meanwhile waits at most that long);
        returns how many were read."""
        if not self.enabled:
            self.ahead = "off"
            return 0
        self.ahead = "reading"
        read = 0
        try:
            for prefix in prefixes:
                if not self.has(prefix) and self.name(prefix) not in self._failed:
                    read += self.ready(prefix)
                    if on_read is not None:
                        on_read()
                    if self.name(prefix) in self._full:  # no room for states: reading on would only cost time
                        self.ahead = "failed"
                        log.warning("reading papers ahead stopped: the paper-state cache's disk is full; a question "
                                    "about a paper not read reads it")
                        return read
        except Exception:
            self.ahead = "failed"
            log.exception("reading papers ahead stopped; a question about a paper not read reads it")
            raise
        self.ahead = "done"
        return read

    def usage(self) -> tuple[int, int]:
        """``(states, bytes)`` the cache holds on disk."""
        files = self._files()
        return len(files), sum(size for _, size, _ in files)

    def _files(self) -> list[tuple[Path, int, float]]:
        """``(path, size, last use)`` of every saved state."""
        directory = getattr(self.generator, "state_dir", None)
        out = []
        for path in Path(directory).glob(f"{PREFIX}*.bin") if directory is not None else ():
            try:
                stat = path.stat()
            except OSError:
                continue
            out.append((path, stat.st_size, stat.st_mtime))
        return out

    def prune(self) -> None:
        """Remove the least recently used states until the cache holds at most :attr:`max_bytes`."""
        files = sorted(self._files(), key=lambda item: item[2], reverse=True)
        total = 0
        for path, size, _ in files:
            total += size
            if total > self.max_bytes:
                path.unlink(missing_ok=True)
                path.with_name(path.name + STATE_SIZE_SUFFIX).unlink(missing_ok=True)

    def _touch(self, name: str) -> None:
        """Mark the state ``name`` as just used (its file's modification time)."""
        try:
            os.utime(Path(self.generator.state_dir) / name)  # type: ignore[arg-type]
        except (OSError, TypeError):
            pass
