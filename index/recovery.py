"""Start-up recovery: serve the newest verified version plus every acknowledged write the write log holds.

:func:`recover` (under the index's write lock) verifies versions newest first. Versions that fail verification are
moved to ``versions/damaged/`` (:meth:`~citerag.index.store.IndexStore.quarantine`), the newest verified one is made live,
and the log entries it does not hold are returned as :class:`ReplayStep` s for the caller to apply
(:mod:`citerag.index.lifecycle` applies a ``write`` step with :func:`citerag.index.build.write_index` and a ``reset`` step by
building from its sources). When no version verifies, the base is the log's last ``reset`` (a full build from
recorded sources); when the log cannot account for a write a damaged version held, :class:`IndexUnrecoverable`
says so and nothing is served.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from citerag.index.backup import interrupted_restore
from citerag.index.build import WriteOptions, write_index
from citerag.index.chunking import Chunker
from citerag.index.embed import Embedder
from citerag.index.errors import CiteragError, IndexMismatch, IndexNotFound
from citerag.index.sources import SourceStates
from citerag.index.store import DAMAGED, IndexStore, LoadedIndex, Verify, load_version
from citerag.index.types import DenseSetting, Document
from citerag.index.wal import LogEntry, LogState, WriteLogDamaged


class IndexUnrecoverable(CiteragError):
    """Acknowledged writes cannot all be restored (the versions holding them are damaged and the log was cut)."""


@dataclass(frozen=True, slots=True)
class ReplayStep:
    """Logged writes to apply, in order: a full build from ``sources`` (``reset``), or deletions and upserts.

    Attributes:
        seq: the last log sequence number this step applies (recorded as the new version's ``wal_seq``).
        sources: for a reset, the files the index is rebuilt from (``None``: not a reset).
        upserts: documents to insert or replace (the last logged content of each id).
        deletes: ids whose last logged write removed them.
    """

    seq: int
    sources: tuple[str, ...] | None = None
    upserts: tuple[Document, ...] = ()
    deletes: tuple[str, ...] = ()


@dataclass(slots=True)
class Recovery:
    """What :func:`recover` found.

    Attributes:
        index: the newest verified version, now live (``None`` when none verified: the first step is a reset).
        damaged: ``(version name, reason)`` of each version moved aside.
        steps: the logged writes the live version does not hold, folded (:func:`fold`).
    """

    index: LoadedIndex | None
    damaged: list[tuple[str, str]] = field(default_factory=list)
    steps: list[ReplayStep] = field(default_factory=list)


def fold(entries: list[LogEntry]) -> list[ReplayStep]:
    """Group ``entries`` into replay steps: aborted entries dropped, consecutive ``write`` entries merged (the last
    write of an id wins), each ``reset`` a step of its own. A step's upserts come in the order the writes left the
    documents in (:meth:`~citerag.index.backend.SearchBackend.documents`): one added or replaced after the others, one
    whose metadata alone changed in its place; so a replay into a store that lacks them all orders them as the
    writes did.

    >>> from index.wal import LogEntry
    >>> d = Document("a", "", "x", "x")
    >>> fold([LogEntry(1, "write", (d,)), LogEntry(2, "write", doc_ids=("a",)), LogEntry(3, "write", doc_ids=("b",))])
    [ReplayStep(seq=3, sources=None, upserts=(), deletes=('a', 'b'))]
    >>> [(s.seq, s.sources) for s in fold([LogEntry(1, "reset", sources=("x",)), LogEntry(2, "write", (d,))])]
    [(1, ('x',)), (2, None)]
    """
    aborted = {e.target for e in entries if e.op == "abort"}
    steps: list[ReplayStep] = []
    state: dict[str, Document | None] = {}  # the writes since the last step: doc id -> last content (None: deleted)
    seq = 0

    def close() -> None:
        if state:
            steps.append(ReplayStep(seq, None, tuple(d for d in state.values() if d is not None),
                                    tuple(i for i, d in state.items() if d is None)))
            state.clear()

    for entry in entries:
        if entry.seq in aborted or entry.op == "abort":
            continue
        if entry.op == "reset":  # a step of its own: a rebuild records only the reset's number, so a crash
            close()              # between it and the writes after it cannot claim those writes are held
            steps.append(ReplayStep(entry.seq, entry.sources))
            continue
        for doc_id in entry.doc_ids:
            state[doc_id] = None
        for doc in entry.documents:
            before = state.get(doc.doc_id)
            if before is None or (before.title, before.text) != (doc.title, doc.text):
                state.pop(doc.doc_id, None)  # added or replaced: it moves to the end, as the write moved it
            state[doc.doc_id] = doc
        seq = entry.seq
    close()
    return steps


def steps_after(logged: LogState, held: int) -> list[ReplayStep]:
    """What a store holding the log's entries up to ``held`` lacks: the entries after it, folded (:func:`fold`).
    Shared by the embedded start-up (:func:`recover`) and the Milvus backend's
    (:meth:`citerag.index.milvus.MilvusBackend.recover`)."""
    return fold([e for e in logged.entries if e.seq > held])


def recover(store: IndexStore, mmap: bool = True, verify: Verify = "stat") -> Recovery:
    """Verify, quarantine, choose the base and list what to replay (module docstring). Call under
    :meth:`~citerag.index.store.IndexStore.writing`; returns ``Recovery(index=None)`` with no steps for an empty directory.
    ``verify``: how each version's files are checked (:mod:`citerag.index.store`; ``"full"`` after a live version
    failed its full check, so its predecessor is not trusted on its sizes and mtimes alone).

    Raises:
        IndexUnrecoverable: the log is damaged, or a needed part of it was cut, or a restore did not finish
            (:func:`~citerag.index.backup.interrupted_restore`); the message says how to recover.
    """
    unfinished = interrupted_restore(store.root)
    if unfinished is not None:
        raise IndexUnrecoverable(unfinished)
    damaged: list[tuple[str, str]] = []
    aside: list[Path] = []
    index = None
    pointer = store.live_or_none()
    for path in store.version_dirs():  # newest first; one newer than CURRENT (a crash before CURRENT moved) is
        try:                           # complete and holds writes up to its own wal_seq, like any other
            index = load_version(path, mmap=mmap, verify=verify)
            break
        except OSError as exc:  # EACCES, EMFILE, EIO: the machine's trouble, not the version's; never set it aside
            raise IndexUnrecoverable(f"{path}: cannot be read ({exc}); fix the cause and start again") from exc
        except Exception as exc:  # noqa: BLE001 - checksum, count or format failures: the version is damaged
            damaged.append((path.name, str(exc)))
            aside.append(store.quarantine(path, str(exc)))
    try:
        logged = store.log.read()
    except WriteLogDamaged as exc:
        raise IndexUnrecoverable(f"{exc}. {_HOW}") from exc
    held = index.wal_seq if index is not None else 0
    steps = steps_after(logged, held)
    if index is not None:
        if logged.base > held:
            raise IndexUnrecoverable(
                f"the newest verified version {index.path.name} holds writes up to log entry {held}, but the log "
                f"was cut through {logged.base}: entries {held + 1}-{logged.base} are only in damaged versions. {_HOW}"
            )
        if pointer is None or pointer != index.path:
            store.set_current(index.path)
    elif damaged or logged.entries or (store.root / "CURRENT").is_file():  # something was indexed here
        set_aside = sorted((store.versions / DAMAGED).glob("v*"), key=lambda p: p.name, reverse=True)
        recorded = _recorded_sources(SourceStates(store.root), aside + set_aside)
        if (not steps or steps[0].sources is None) and logged.base == 0 and recorded is not None:
            steps.insert(0, ReplayStep(0, tuple(recorded)))  # an index older than the log: its recorded sources
        if not steps or steps[0].sources is None:
            raise IndexUnrecoverable(
                f"no index version verifies ({', '.join(n for n, _ in damaged) or 'none on disk'}) and the write "
                "log holds no full build to start from. " + _HOW
            )
    return Recovery(index, damaged, steps)


def replay(
    store: IndexStore,
    recovery: Recovery,
    embedder: Embedder,
    chunker: Chunker,
    rebuild: Callable[[list[str], int], None],
    dense_kind: DenseSetting = "auto",
) -> LoadedIndex | None:
    """Apply ``recovery.steps`` in order, each new version recording the step's log sequence number: a reset
    through ``rebuild(sources, seq)`` (the caller reads the files and builds with ``logged_as=seq``), writes through
    :func:`~citerag.index.build.write_index` (deletes of ids that are not indexed are dropped: the write that added them
    was itself lost with its version, or a reset superseded it). Call under the write lock.

    Returns:
        The live index afterwards (``recovery.index`` when there was nothing to replay).
    """
    for step in recovery.steps:
        if step.sources is not None:
            rebuild(list(step.sources), step.seq)
        if step.sources is None or step.upserts or step.deletes:  # even a step left empty is recorded as held
            live = store.load()
            write_index(
                store, embedder, chunker, live.config, step.upserts,
                [doc_id for doc_id in step.deletes if doc_id in live.documents],
                options=WriteOptions(dense_kind=dense_kind, logged_as=step.seq),
            )
    return store.load() if recovery.steps else recovery.index


def health(store: IndexStore, verify: Verify = "stat") -> str:
    """A read-only check of what a start would do (for ``citerag doctor``): each version verified or not, the log's
    state, the versions set aside. Returns one line. ``verify="full"`` hashes every file of every version
    (``citerag doctor --verify``), as the service's background check does, instead of trusting unchanged sizes and
    mtimes.

    Raises:
        IndexMismatch: a version fails verification; the message says what the next start will do.
        IndexNotFound: no version on disk.
        IndexUnrecoverable: the log is damaged, or a restore did not finish.
    """
    unfinished = interrupted_restore(store.root)
    if unfinished is not None:
        raise IndexUnrecoverable(unfinished)
    try:
        logged = store.log.read()
    except WriteLogDamaged as exc:
        raise IndexUnrecoverable(str(exc)) from exc
    aside = sorted(p.name for p in (store.versions / DAMAGED).glob("v*")) if store.versions.is_dir() else []
    verified, failed = [], []
    for path in store.version_dirs():
        try:
            verified.append(load_version(path, verify=verify))
        except Exception as exc:  # noqa: BLE001 - reported
            failed.append(f"{path.name}: {str(exc).splitlines()[0]}")
    if failed:
        base = verified[0].path.name if verified else "the log's full build"
        raise IndexMismatch(
            f"{len(failed)} version(s) fail verification ({'; '.join(failed)}); the next start moves them to "
            f"versions/damaged/ and serves {base} plus the write log"
        )
    if not verified:
        raise IndexNotFound(f"no index in {store.root}: run `citerag index` (or `make serve`) to build one")
    live = verified[0]
    pending = [e for e in logged.entries if e.seq > live.wal_seq and e.op != "abort"]
    return (f"{live.path} ({len(live.documents)} documents, {len(live.passages)} passages, verified); "
            f"{len(verified)} version(s) verified, write log through {logged.last} ({len(pending)} to replay)"
            + (f", {len(aside)} damaged version(s) kept aside: {', '.join(aside)}" if aside else ""))


def _recorded_sources(states: SourceStates, versions: list[Path]) -> list[str] | None:
    """The ``sources`` of the newest of ``versions`` whose source state (or, for an older index, manifest) still
    reads."""
    for path in versions:
        sources = states.of(path).get("sources")
        if isinstance(sources, list) and all(isinstance(p, str) for p in sources):
            return sources
    return None


_HOW = (
    "Nothing was served. Inspect with `citerag doctor`; the damaged versions are kept in versions/damaged/. To "
    "start over from the source files, accepting the loss of documents written through the API since, run "
    "`citerag index PATHS`."
)
