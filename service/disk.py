"""What citerag keeps on disk and each part's bound, as ``citerag doctor`` prints it: the index (live version, old
versions, damaged versions, temporary versions, write log; ``keep_versions``), the embedding cache
(``embedding_cache_mb``), the paper-state cache (``state_cache_mb``) and the model files (no bound: the files the
settings use). Sizes are plain sums of file sizes (:func:`~citerag.index.files.tree_bytes`); MB is 1024² bytes, as in
the settings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from citerag.index.diskspace import size_text
from citerag.index.embed_cache import cache_usage
from citerag.index.files import tree_bytes
from citerag.index.store import IndexStore
from citerag.service.answering.states import PREFIX as STATE_PREFIX
from citerag.service.settings import Settings

MB = 1024**2


def _plural(n: int, noun: str) -> str:
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


def index_usage(settings: Settings) -> str:
    """One line: the index directory's bytes by part, with the versions it keeps (``keep_versions``)."""
    store = IndexStore(settings.index_dir, settings.keep_versions)
    if not store.root.is_dir():
        return f"nothing on disk yet at {store.root}"
    use = store.disk_usage()
    line = (f"{size_text(use.total)} in {store.root}: live version {size_text(use.live)}, "
            f"{_plural(use.old_versions, 'old version')} {size_text(use.old)} "
            f"(bound: keep_versions={settings.keep_versions}, the live one included), "
            f"{_plural(use.damaged_versions, 'damaged version')} {size_text(use.damaged)} "
            "(kept until removed by hand), "
            f"write log {size_text(use.wal)}")
    if use.temporary_versions:
        line += (f", {_plural(use.temporary_versions, 'unfinished version')} {size_text(use.temporary)} (removed at "
                 "the next start when no writer runs)")
    other = use.total - use.live - use.old - use.damaged - use.temporary - use.wal
    return line + f", other files {size_text(other)} (source records, versions a restore replaced)"


def _cache_line(used: int, count: int, noun: str, where: Path, bound: str, bound_mb: int, unused: str) -> str:
    """One cache's line: ``used`` bytes in ``count`` ``noun``s at ``where``, its bound (the setting ``bound``,
    ``bound_mb`` MB), and ``unused`` (why the cache is not used) where that is not empty."""
    line = (f"{size_text(used)} in {_plural(count, noun)} at {where} "
            f"(bound: {bound}={bound_mb}, {size_text(bound_mb * MB)})")
    return line + (f"; not used ({unused})" if unused else "")


def embedding_cache_usage(settings: Settings) -> str:
    """One line: the embedding cache's shards and bytes, with its bound (``embedding_cache_mb``)."""
    root = settings.cache_dir / "embeddings"
    shards, used = cache_usage(root)
    return _cache_line(used, shards, "shard", root, "embedding_cache_mb", settings.embedding_cache_mb,
                       "" if settings.embedding_cache else "embedding_cache=false")


def state_cache_usage(settings: Settings) -> str:
    """One line: the paper-state cache's states and bytes, with its bound (``state_cache_mb``)."""
    directory = settings.cache_dir / "paper-states"
    states = len(list(directory.glob(f"{STATE_PREFIX}*.bin"))) if directory.is_dir() else 0
    return _cache_line(tree_bytes(directory), states, "state", directory, "state_cache_mb", settings.state_cache_mb,
                       "" if settings.state_cache_mb else "state_cache_mb=0")


def model_files_usage(settings: Settings) -> str:
    """One line: the model files assembled or exported into ``cache_dir/models``, each with its bytes (no bound)."""
    directory = settings.cache_dir / "models"
    files = sorted(p for p in directory.iterdir() if p.is_file()) if directory.is_dir() else []
    listed = ", ".join(f"{p.name} {size_text(p.stat().st_size)}" for p in files if p.stat().st_size >= MB)
    return (f"{size_text(tree_bytes(directory))} at {directory}" + (f": {listed}" if listed else "")
            + " (no bound: the files the settings use; leftovers of killed starts are removed at the next start)")


def disk_checks(settings: Settings) -> list[tuple[str, Callable[[], str]]]:
    """``(name, line)`` for each part on disk, in the order ``citerag doctor`` prints them; each ``line()`` returns
    one line (raises ``OSError`` when the part cannot be read)."""
    return [
        ("index", lambda: index_usage(settings)),
        ("embedding cache", lambda: embedding_cache_usage(settings)),
        ("paper-state cache", lambda: state_cache_usage(settings)),
        ("model files", lambda: model_files_usage(settings)),
    ]
