"""A persistent cache of passage embeddings, keyed by the model and the exact text, so re-indexing an unchanged or
replicated corpus embeds nothing new.

Layout (one directory per model, under ``<cache_dir>/embeddings/``)::

    <model name>/
      <sha256 of the file>.npy    one shard: a structured array of (key: uint8[32], vector: float32[dim])
      .<sha256>.npy.<random>      a shard being written (never read; one a killed writer left is removed by the next
                                  process to use the cache once it is :data:`STALE_SECONDS` old)

``key = sha256(model name + "\\0" + text)``; the model name names the backend too (``all-MiniLM-L6-v2`` is torch,
``all-MiniLM-L6-v2+onnx-int8`` the int8 ONNX model), so two backends never share vectors.

Shards are append-only and written atomically (temporary file, fsync, rename to the hash of its bytes), so any
number of processes may write at once, and a reader sees only complete shards. On first use every shard is
verified against its name; a truncated or corrupt one is skipped with a warning (its texts are embedded again).

The cache may be bounded (``max_bytes``; the service's ``embedding_cache_mb``, default :data:`DEFAULT_MAX_MB`): each
time a shard is written, the least recently used shards of every model go until the shards' bytes are within the
bound (:func:`prune_cache`). A shard's modification time is its last use: written, or touched when it served a hit.
A shard holds 1,568 bytes a passage at 384-d (32-byte key + 1,536-byte vector).
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import re
import time
from pathlib import Path
from types import TracebackType

import numpy as np

from citerag.index.diskspace import WATCH, skipped_for_space
from citerag.index.embed import Embedder
from citerag.index.files import atomic_write_bytes

log = logging.getLogger(__name__)

KEY_BYTES = 32  # sha256 digest
#: Misses are written as one shard once this many are pending (about 6 MB at 384-d), and at :meth:`close`.
FLUSH_ROWS = 4096
#: The service's default bound (MB): ~680,000 passages at 384-d, room for the evaluation corpora under both
#: backends (docs/operations.md, "Disk use and its bounds").
DEFAULT_MAX_MB = 1024
#: A shard's temporary file this old (seconds) is left by a killed writer (a shard takes well under a second).
STALE_SECONDS = 600
#: A shard's file name: the sha256 of its bytes.
SHARD_GLOB = "[0-9a-f]*.npy"


def cache_key(model: str, text: str) -> bytes:
    """``sha256(model + "\\0" + text)``, 32 bytes: the cache key of ``text`` embedded by ``model``."""
    return hashlib.sha256(f"{model}\x00{text}".encode()).digest()


def _shard_dtype(dim: int) -> np.dtype:
    return np.dtype([("key", np.uint8, (KEY_BYTES,)), ("vector", np.float32, (dim,))])


def _shards(root: Path) -> list[tuple[Path, int, float]]:
    """``(path, bytes, last use)`` of every shard of every model under ``root``."""
    out = []
    for path in root.glob(f"*/{SHARD_GLOB}") if root.is_dir() else ():
        try:
            stat = path.stat()
        except OSError:  # removed meanwhile by another process's pruning
            continue
        out.append((path, stat.st_size, stat.st_mtime))
    return out


def cache_usage(root: Path) -> tuple[int, int]:
    """``(shards, bytes)``: the complete shards of every model under the cache root ``root`` and their bytes (what
    ``max_bytes`` bounds; temporary files not counted)."""
    shards = _shards(root)
    return len(shards), sum(size for _, size, _ in shards)


def prune_cache(root: Path, max_bytes: int) -> list[Path]:
    """Remove the least recently used shards (oldest modification time first) of every model under ``root`` until
    the rest hold at most ``max_bytes`` bytes. A process that mapped a removed shard keeps reading it (POSIX); others
    embed its texts again. Returns the shards removed (one that cannot be removed is logged and kept)."""
    removed = []
    total = 0
    for path, size, _ in sorted(_shards(root), key=lambda item: (item[2], item[0].name), reverse=True):
        total += size
        if total <= max_bytes:
            continue
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("embedding cache: cannot remove %s to keep the cache within its bound (%s)", path, exc)
            continue
        removed.append(path)
    if removed:
        log.info("embedding cache %s: removed %d least recently used shard(s) to stay within %d bytes", root,
                 len(removed), max_bytes)
    return removed


def remove_stale_temporaries(directory: Path, older_than: float = STALE_SECONDS) -> list[Path]:
    """Remove the temporary files (``.<shard>.npy.<random>``) in the model directory ``directory`` last written
    more than ``older_than`` seconds ago: a writer killed mid-shard left them (a live one writes a shard in well under
    a second). Returns the files removed."""
    removed = []
    now = time.time()
    for path in directory.glob(".*.npy.*") if directory.is_dir() else ():
        try:
            if path.stat().st_mtime < now - older_than:
                path.unlink()
                removed.append(path)
        except OSError:  # removed meanwhile, or not ours to remove: it is never read either way
            continue
    if removed:
        log.info("embedding cache: removed %d temporary file(s) left by killed writers in %s", len(removed), directory)
    return removed


class CachedEmbedder:
    """Wraps any :class:`~citerag.index.embed.Embedder`: texts embedded before by the same model are read from the cache,
    the rest are embedded (each distinct text once per call) and stored.

    Use it as a context manager, or call :meth:`close`, so the last pending vectors are written.

    Memory: shards stay memory-mapped; the key index is a dict of about 200 bytes per cached vector (200 MB at 1M
    passages), built on the first ``encode``.

    Args:
        embedder: the encoder; its ``name`` and ``dim`` identify the cache.
        root: the cache root (``settings.cache_dir / "embeddings"``); the model's shards go in ``root/<name>/``.
        flush_rows: pending misses that trigger writing a shard.
        max_bytes: the bound of the whole cache root's shards (bytes; every model's), applied each time a shard
            is written (:func:`prune_cache`); ``None``: unbounded.

    Attributes:
        name, dim: the wrapped embedder's.
        hits, misses: texts served from the cache / embedded, since construction (duplicates in one call count as
            hits after the first).
    """

    def __init__(
        self, embedder: Embedder, root: Path, flush_rows: int = FLUSH_ROWS, max_bytes: int | None = None
    ) -> None:
        self.embedder = embedder
        self.name = embedder.name
        self.dim = embedder.dim
        self.root = root
        self.directory = root / re.sub(r"[^A-Za-z0-9._+-]", "_", embedder.name)
        self.flush_rows = flush_rows
        self.max_bytes = max_bytes
        self.hits = 0
        self.misses = 0
        self._dtype = _shard_dtype(self.dim)
        self._index: dict[bytes, tuple[int, int]] | None = None  # key -> (shard, row); loaded on first use
        self._shards: list[np.ndarray] = []  # slots: memory-mapped shards, or rows embedded here and not yet written
        self._pending: list[int] = []  # slots not yet written
        self._files: dict[int, Path] = {}  # slot -> its shard file (slots read from or written to disk)
        self._touched: set[Path] = set()  # shards marked as used by this object (once each)

    def encode(self, texts: list[str], *, show_progress: bool = False) -> np.ndarray:
        """Embed ``texts``, from the cache where possible.

        Returns:
            float32 array, shape ``(len(texts), dim)``, L2-normalised rows; a cached row is bit-identical to the
            vector first computed for that text.
        """
        index = self._load()
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        keys = [cache_key(self.name, text) for text in texts]
        first_of: dict[bytes, int] = {}  # distinct missing key -> its first position
        repeats: list[tuple[int, int]] = []  # (position, first position of the same key)
        used: set[int] = set()  # slots that served a hit
        for i, key in enumerate(keys):
            found = index.get(key)
            if found is not None:
                out[i] = self._shards[found[0]][found[1]]["vector"]
                used.add(found[0])
            elif key in first_of:
                repeats.append((i, first_of[key]))
            else:
                first_of[key] = i
        if first_of:
            positions = list(first_of.values())
            vectors = np.asarray(self.embedder.encode([texts[i] for i in positions], show_progress=show_progress))
            out[positions] = vectors
            self._remember([keys[i] for i in positions], out[positions])
        for i, first in repeats:
            out[i] = out[first]
        self._touch(used)
        self.misses += len(first_of)
        self.hits += len(texts) - len(first_of)
        return out

    def close(self) -> None:
        """Write the pending vectors as one shard (nothing when none are pending); they are then read back
        memory-mapped, so a long build does not hold them twice."""
        if not self._pending:
            return
        slots, self._pending = self._pending, []
        path = self._write_shard(np.concatenate([self._shards[slot] for slot in slots]))
        if path is None:
            return
        written = np.load(path, mmap_mode="r", allow_pickle=False)
        offset = 0
        for slot in slots:
            size = len(self._shards[slot])
            self._shards[slot] = written[offset : offset + size]
            self._files[slot] = path
            offset += size
        if self.max_bytes is not None:
            prune_cache(self.root, self.max_bytes)

    def __enter__(self) -> CachedEmbedder:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()  # also after an error: the vectors computed so far are kept for the next build

    def _touch(self, slots: set[int]) -> None:
        """Mark the shards of ``slots`` as just used (their modification time: the cache's LRU order), each once per
        object; a shard removed meanwhile or a read-only cache is left as it is."""
        for path in {self._files[slot] for slot in slots if slot in self._files} - self._touched:
            self._touched.add(path)
            try:
                os.utime(path)
            except OSError:
                pass

    def _remember(self, keys: list[bytes], vectors: np.ndarray) -> None:
        rows = np.empty(len(keys), dtype=self._dtype)
        rows["key"] = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(-1, KEY_BYTES)
        rows["vector"] = vectors
        slot = len(self._shards)
        self._shards.append(rows)
        assert self._index is not None
        for row, key in enumerate(keys):
            self._index.setdefault(key, (slot, row))
        self._pending.append(slot)
        if sum(len(self._shards[p]) for p in self._pending) >= self.flush_rows:
            self.close()

    def _write_shard(self, rows: np.ndarray) -> Path | None:
        """Write ``rows`` to ``<sha256>.npy`` atomically and return its path. A failure (disk full, read-only cache)
        is logged and gives ``None``: the cache only saves time. A failure for space is also recorded
        (:data:`~citerag.index.diskspace.WATCH`: ``/health`` shows it) until a shard is written again."""
        buffer = io.BytesIO()
        np.save(buffer, rows, allow_pickle=False)
        data = buffer.getvalue()
        path = self.directory / f"{hashlib.sha256(data).hexdigest()}.npy"
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, data)
        except OSError as exc:
            if skipped_for_space(exc, "embedding cache", self.root) is None:
                log.warning("embedding cache: cannot write a shard to %s (%s); continuing without it", self.directory,
                            exc)
            return None
        WATCH.clear("embedding cache", self.root)
        return path

    def _load(self) -> dict[bytes, tuple[int, int]]:
        """Read every valid shard of this model (memory-mapped) into the key index, once."""
        if self._index is not None:
            return self._index
        self._index = {}
        remove_stale_temporaries(self.directory)
        paths = sorted(self.directory.glob(SHARD_GLOB)) if self.directory.is_dir() else []
        for path in paths:
            shard = self._read_shard(path)
            if shard is None:
                continue
            number = len(self._shards)
            self._shards.append(shard)
            self._files[number] = path
            for row, key in enumerate(shard["key"]):
                self._index.setdefault(key.tobytes(), (number, row))
        if paths:
            log.info("embedding cache %s: %d vectors in %d shards", self.directory, len(self._index), len(paths))
        return self._index

    def _read_shard(self, path: Path) -> np.ndarray | None:
        try:
            if hashlib.sha256(path.read_bytes()).hexdigest() != path.stem:
                raise ValueError("content does not match its name (truncated or corrupt)")
            shard = np.load(path, mmap_mode="r", allow_pickle=False)
            if shard.dtype != self._dtype or shard.ndim != 1:
                raise ValueError(f"holds {shard.dtype} {shard.shape}, expected {self._dtype} rows")
        except (OSError, ValueError) as exc:
            log.warning("embedding cache: ignoring shard %s: %s", path, exc)
            return None
        return shard
