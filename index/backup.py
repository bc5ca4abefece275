"""Backups of the live index version, and their restore (``citerag backup DEST``, ``POST /admin/backup``,
``citerag restore SRC``).

A backup directory::

    DEST/
      BACKUP.json     format, created_at, citerag_version, index_dir, version (the live version's name),
                      wal_seq (the last write-log entry that version holds), wal_last (the last entry of the
                      copied log), documents, passages, and files: every other file's path (relative to DEST)
                      -> {"sha256", "size", "mtime_ns"}
      version/        the live version directory's files as they are (manifest.json, manifest.sha256, tables, ...)
      wal.jsonl       the write-ahead log as it was when the version was picked (absent when the index had none)
      sources.json    the version's source state (:mod:`citerag.index.sources`), so a start follows the same files

**Backup** (:func:`backup`) takes the store's write lock only to pick a consistent pair: the live version and the
log as of that moment. Under the lock it opens every file of the version and the log and notes the log's size; it
copies from those open files after releasing it, so writes go on meanwhile (a version is never rewritten once
committed, the log is only appended to or replaced by a new file, and an open file outlives its removal when a write
prunes the version). Everything goes into ``.DEST.tmp-<pid>-<random>`` beside DEST, is hashed and checked against
the version's own manifest, fsynced, and only then renamed to DEST: a backup killed midway leaves no DEST and never
changes the index (the next backup removes the temporary directory of a process that is gone).

**Restore** (:func:`restore`) verifies every file against ``BACKUP.json`` before installing anything, then refuses
(:class:`IndexBusy`) rather than waits while another writer holds the write lock. Holding it, it copies the version
into ``versions/.tmp-restore-*`` (fsynced), writes the marker ``RESTORING``, renames the copy into place under a new
version name (numbered after every version there, so a start's newest-first recovery picks it), moves the versions
that were there and the old log to ``versions/replaced/<time>/`` (kept, never served or pruned: their log belongs to
another history), records the source state, installs the backed-up log, switches ``CURRENT`` and removes the
marker. A restore killed after the marker leaves it; every start then refuses with a line saying to run the same
restore again (:func:`interrupted_restore`, checked by :func:`citerag.index.recovery.recover`), which finishes it.
The log entries past the version's ``wal_seq`` (writes logged by a writer that died before committing them) are
replayed by the next start, as after any crash.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import IO, Any

from filelock import Timeout

from citerag.index import faults
from citerag.index.errors import CiteragError, IndexMismatch, IndexNotFound
from citerag.index.diskspace import DiskFull, disk_space, is_disk_full
from citerag.index.files import READ_BLOCK, atomic_write_text, fsync_path, process_exists, sha256_file
from citerag.index.sources import SourceStates
from citerag.index.store import IndexStore, read_sealed_manifest
from citerag.index.wal import LogState, WriteLog, WriteLogDamaged

log = logging.getLogger(__name__)

FORMAT = 1
#: The backup's own manifest, in the backup directory.
MANIFEST = "BACKUP.json"
#: Folder of the backup holding the version's files; the log and the source state sit beside it.
VERSION_DIR = "version"
WAL_FILE = "wal.jsonl"
SOURCES_FILE = "sources.json"
#: Marker in the index directory while a restore installs (JSON: ``source``, ``started_at``).
RESTORING = "RESTORING"
#: Folder under ``versions/`` holding, per restore, the versions and the log it replaced.
REPLACED = "replaced"
_TMP_RESTORE = ".tmp-restore-"


class BackupError(CiteragError):
    """A backup cannot be taken, or restored; the message says why and what to do."""


class BadDestination(BackupError):
    """DEST cannot receive a backup: it exists, lies inside the index directory, or cannot be created."""


class BadBackup(BackupError):
    """SRC fails verification (``BACKUP.json`` unreadable, a file missing, or a size or sha256 differing from it);
    the message names the file. Nothing was installed."""


class IndexBusy(BackupError):
    """Another writer holds the index's write lock; a restore refuses rather than waits."""


@dataclass(frozen=True, slots=True)
class BackupReport:
    """What :func:`backup` wrote.

    Attributes:
        path: the backup directory (DEST, absolute).
        version: the name of the version backed up (live when it was picked).
        wal_seq: the last write-log entry the version holds.
        wal_last: the last entry of the copied log (past ``wal_seq``: replayed after a restore).
        documents, passages: the version's counts.
        files: files listed in ``BACKUP.json``.
        bytes: their total size.
        created_at: ISO 8601 local time with offset.
    """

    path: Path
    version: str
    wal_seq: int
    wal_last: int
    documents: int
    passages: int
    files: int
    bytes: int
    created_at: str


@dataclass(frozen=True, slots=True)
class RestoreReport:
    """What :func:`restore` installed.

    Attributes:
        version: the restored version directory, now live.
        backup_of: the name the version had in the index it was backed up from.
        documents, passages: its counts.
        wal_seq: the last write-log entry it holds.
        to_replay: log entries past ``wal_seq`` that the next start replays.
        replaced: where the versions and the log that were there went (``None``: there were none).
    """

    version: Path
    backup_of: str
    documents: int
    passages: int
    wal_seq: int
    to_replay: int
    replaced: Path | None


# --- backup --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Snapshot:
    """A consistent (version, log) pair, picked under the write lock: open files, copied after it is released."""

    version: Path
    files: dict[str, IO[bytes]]  # path in the version (posix) -> the file, open
    wal: IO[bytes] | None
    wal_size: int
    sources: dict[str, Any]


def backup(store: IndexStore, dest: Path) -> BackupReport:
    """Back up the live version of ``store`` and its write log into the new directory ``dest`` (layout and
    consistency: module docstring). Safe while the service serves and writes; the write lock is held only while the
    files are opened.

    Raises:
        BadDestination: ``dest`` exists, is inside the index directory, or cannot be created.
        IndexNotFound: nothing committed yet.
        IndexMismatch: the live version's files disagree with its manifest (a start sets it aside and recovers;
            back up after that), or ``CURRENT`` names a missing version.
        BackupError: the write log is damaged.
        DiskFull: no space left (or the quota used up) where ``dest`` is; nothing is left at ``dest``.
        OSError: a file cannot be read or written; nothing is left at ``dest``.
    """
    dest = Path(dest).absolute()
    if not (store.root / "CURRENT").is_file():
        raise IndexNotFound(f"no index in {store.root}: nothing to back up (run `citerag index` first)")
    _check_destination(store, dest)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned(dest)
        tmp = dest.parent / f".{dest.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
    except OSError as exc:
        if is_disk_full(exc):
            raise DiskFull.of(exc, "backup", dest.parent) from exc
        raise BadDestination(f"{dest}: cannot write beside it ({exc.strerror or exc}); choose a writable path") from exc
    try:
        with disk_space("backup", dest.parent, record=False), ExitStack() as opened:
            snapshot = _snapshot(store, opened)
            report = _write(store, snapshot, tmp, dest)
        _fsync_tree(tmp)
        faults.point("backup-before-rename")
        if dest.exists():  # another backup took the name meanwhile
            raise BadDestination(f"{dest}: already exists; choose a new directory (a backup never overwrites one)")
        os.rename(tmp, dest)
        fsync_path(dest.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    log.info("backed up %s (write log through %d) to %s", report.version, report.wal_last, dest)
    return report


def _check_destination(store: IndexStore, dest: Path) -> None:
    if dest.exists() or dest.is_symlink():
        raise BadDestination(f"{dest}: already exists; choose a new directory (a backup never overwrites one)")
    root = store.root.absolute()
    if dest == root or root in dest.parents:
        raise BadDestination(f"{dest}: inside the index directory {root}; choose a path outside it")


def _remove_abandoned(dest: Path) -> None:
    """Remove the temporary directories of backups to ``dest`` whose process is gone (killed midway)."""
    for tmp in dest.parent.glob(f".{dest.name}.tmp-*"):
        pid = tmp.name[len(f".{dest.name}.tmp-"):].split("-")[0]
        if tmp.is_dir() and pid.isdigit() and not process_exists(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)
            log.info("removed %s, left by a backup that did not finish", tmp)


def _snapshot(store: IndexStore, opened: ExitStack) -> _Snapshot:
    """Under the write lock: the live version's files and the log, opened (closed by ``opened``)."""
    with store.writing():
        version = store.current()
        if version is None:
            raise IndexNotFound(f"no index in {store.root}: nothing to back up (run `citerag index` first)")
        files: dict[str, IO[bytes]] = {p.relative_to(version).as_posix(): opened.enter_context(p.open("rb"))
                                       for p in sorted(version.rglob("*")) if p.is_file()}
        wal, wal_size = None, 0
        if store.log.path.is_file():
            wal = opened.enter_context(store.log.path.open("rb"))
            wal_size = os.fstat(wal.fileno()).st_size  # appends after the lock is released lie past it
        sources = SourceStates(store.root).of(version)
    return _Snapshot(version, files, wal, wal_size, sources)


def _write(store: IndexStore, snapshot: _Snapshot, tmp: Path, dest: Path) -> BackupReport:
    """Copy the snapshot into ``tmp``, check it and write ``BACKUP.json``."""
    records: dict[str, dict[str, Any]] = {}
    for number, (rel, handle) in enumerate(snapshot.files.items()):
        records[f"{VERSION_DIR}/{rel}"] = _copy(handle, tmp / VERSION_DIR / rel, os.fstat(handle.fileno()).st_size)
        if number == 0:
            faults.point("backup-mid-copy")
    name = snapshot.version.name
    manifest = _sealed_manifest(tmp / VERSION_DIR, f"the live version {name}", IndexMismatch,
                                "a start recovers (`citerag doctor` shows it): back up after that")
    for rel, expected in manifest["checksums"].items():
        if records.get(f"{VERSION_DIR}/{rel}", {}).get("sha256") != expected:
            raise IndexMismatch(f"the live version {name}: {rel} is missing or differs from its manifest; a start sets "
                                "the version aside and recovers (`citerag doctor` shows it): back up after that")
    wal_seq = int(manifest.get("wal_seq", 0))
    wal_last = wal_seq
    if snapshot.wal is not None:
        records[WAL_FILE] = _copy(snapshot.wal, tmp / WAL_FILE, snapshot.wal_size)
        state = _read_log(tmp / WAL_FILE, BackupError, f"the index's write log {store.log.path}")
        if state.base > wal_seq:
            raise BackupError(f"the write log was cut through entry {state.base}, past the {wal_seq} the live version "
                              "holds: start the service once (it recovers) and back up again")
        wal_last = max(state.last, wal_seq)
    (tmp / SOURCES_FILE).write_text(json.dumps(snapshot.sources, ensure_ascii=False), encoding="utf-8")
    records[SOURCES_FILE] = _record(tmp / SOURCES_FILE)
    created_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    counts = manifest.get("counts", {})
    documents, passages = int(counts.get("documents", 0)), int(counts.get("passages", 0))
    info = {
        "format": FORMAT,
        "created_at": created_at,
        "citerag_version": _citerag_version(),
        "index_dir": str(store.root.absolute()),
        "version": name,
        "wal_seq": wal_seq,
        "wal_last": wal_last,
        "documents": documents,
        "passages": passages,
        "files": records,
    }
    (tmp / MANIFEST).write_text(json.dumps(info, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return BackupReport(dest, name, wal_seq, wal_last, documents, passages, len(records),
                        sum(r["size"] for r in records.values()), created_at)


def _copy(handle: IO[bytes], target: Path, size: int) -> dict[str, Any]:
    """Copy the first ``size`` bytes of the open file ``handle`` to the new file ``target`` (fsynced, with the
    source's mtime); returns its record (sha256 of the copy, size, mtime_ns)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle.seek(0)
    left = size
    with target.open("xb") as out:
        while left > 0 and (block := handle.read(min(READ_BLOCK, left))):
            out.write(block)
            left -= len(block)
        out.flush()
        os.fsync(out.fileno())
    mtime = os.fstat(handle.fileno()).st_mtime_ns
    os.utime(target, ns=(mtime, mtime))
    return _record(target)


def _record(path: Path) -> dict[str, Any]:
    info = path.stat()
    return {"sha256": sha256_file(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns}


def _citerag_version() -> str:
    try:
        return metadata.version("citerag")
    except metadata.PackageNotFoundError:
        return "unknown"


# --- restore -------------------------------------------------------------------------------------------------


def verify_backup(src: Path) -> dict[str, Any]:
    """Check the backup directory ``src`` without changing anything: ``BACKUP.json`` readable, every file it lists
    present with its size and sha256, the version's manifest sealed and agreeing with it, the log readable and not
    cut past the version. Returns ``BACKUP.json``'s content.

    Raises:
        BadBackup: the first check that fails, naming the file.
        OSError: a file cannot be read (permissions, I/O error).
    """
    src = Path(src)
    path = src / MANIFEST
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise BadBackup(f"{path}: missing; {src} is not a complete citerag backup (use another one)") from exc
    except (UnicodeDecodeError, ValueError) as exc:
        raise BadBackup(f"{path}: unreadable ({exc}); the backup is damaged: use another one") from exc
    try:
        if not isinstance(info, dict) or info.get("format") != FORMAT:
            raise ValueError(f"not a format {FORMAT} backup manifest")
        files: dict[str, Any] = info["files"]
        wal_seq = int(info["wal_seq"])
        str(info["version"])
        for rel, record in files.items():
            _check_relative(rel)
            int(record["size"]), str(record["sha256"]), int(record["mtime_ns"])
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadBackup(f"{path}: malformed ({exc}); the backup is damaged: use another one") from exc
    if f"{VERSION_DIR}/manifest.json" not in files:
        raise BadBackup(f"{path}: lists no {VERSION_DIR}/manifest.json; the backup is damaged: use another one")
    for rel, record in files.items():
        file = src / rel
        if not file.is_file():
            raise BadBackup(f"{file}: missing (BACKUP.json lists it); the backup is incomplete: use another one")
        if file.stat().st_size != record["size"] or sha256_file(file) != record["sha256"]:
            raise BadBackup(f"{file}: sha256 differs from BACKUP.json (the file is damaged); nothing was restored: "
                            "use another backup")
    manifest = _sealed_manifest(src / VERSION_DIR, str(src / VERSION_DIR), BadBackup, "use another backup")
    for rel, expected in manifest["checksums"].items():
        if files.get(f"{VERSION_DIR}/{rel}", {}).get("sha256") != expected:
            raise BadBackup(f"{src / VERSION_DIR / rel}: missing or differs from the version's manifest; the backup "
                            "is damaged: use another one")
    if WAL_FILE in files:
        state = _read_log(src / WAL_FILE, BadBackup, str(src / WAL_FILE))
        if state.base > wal_seq:
            raise BadBackup(f"{src / WAL_FILE}: cut through entry {state.base}, past the {wal_seq} the version holds; "
                            "use another backup")
    if SOURCES_FILE in files:
        try:
            if not isinstance(json.loads((src / SOURCES_FILE).read_text(encoding="utf-8")), dict):
                raise TypeError("not an object")
        except (TypeError, ValueError) as exc:
            raise BadBackup(f"{src / SOURCES_FILE}: unreadable ({exc}); use another backup") from exc
    return info


def restore(store: IndexStore, src: Path) -> RestoreReport:
    """Install the backup ``src`` as the live version of ``store`` (steps: module docstring), after verifying it
    in full (:func:`verify_backup`). The versions and the log that were there are kept in
    ``versions/replaced/<time>/``. Writes acknowledged after the backup was taken are not in the restored index.
    Stop the service first: a running one serves the version it loaded until its next write.

    Raises:
        BadBackup: ``src`` fails verification, or a file changed while it was copied (nothing installed).
        IndexBusy: another writer holds the write lock (nothing installed; retry when it is done).
        OSError: a file cannot be read or written. Before the marker is written nothing has changed; after it,
            every start refuses until the restore is run again.
    """
    src = Path(src).absolute()
    info = verify_backup(src)
    store.ensure_writable()
    with ExitStack() as held:
        try:
            held.enter_context(store.writing(wait=False))
        except Timeout as exc:
            raise IndexBusy(f"another writer holds {store.root / 'write.lock'} (a write through the service or a "
                            "`citerag index`): nothing was restored; retry when it is done") from exc
        return _install(store, src, info)


def _install(store: IndexStore, src: Path, info: dict[str, Any]) -> RestoreReport:
    """The restore's steps under the write lock (module docstring)."""
    for stale in store.versions.glob(f"{_TMP_RESTORE}*"):  # left by a restore killed before the marker
        shutil.rmtree(stale, ignore_errors=True)
    numbers = [int(p.name[1:7]) for p in store.version_dirs()]
    name = f"v{max(numbers, default=0) + 1:06d}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    tmp = store.versions / f"{_TMP_RESTORE}{name}"
    tmp.mkdir()
    try:
        for rel, record in info["files"].items():
            if not rel.startswith(f"{VERSION_DIR}/"):
                continue
            target = tmp / rel[len(VERSION_DIR) + 1:]
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / rel, target)
            if sha256_file(target) != record["sha256"]:
                raise BadBackup(f"{src / rel}: changed while it was restored; nothing was restored: run it again")
            os.utime(target, ns=(record["mtime_ns"], record["mtime_ns"]))  # as the manifest's file_stats record
        _fsync_tree(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    # from here on the index changes: the marker makes every start refuse until a restore finishes
    marker = store.root / RESTORING
    atomic_write_text(marker, json.dumps({"source": str(src), "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}))
    if not store.log.path.exists():  # so a start into a fresh directory looks for recovery, and finds the marker
        store.log.path.touch()
        fsync_path(store.root)
    final = store.versions / name
    os.replace(tmp, final)
    fsync_path(store.versions)
    faults.point("restore-mid-install")
    replaced = _move_aside(store, final)
    state = json.loads((src / SOURCES_FILE).read_text(encoding="utf-8")) if SOURCES_FILE in info["files"] else {}
    SourceStates(store.root).put(final, state)
    if WAL_FILE in info["files"]:
        _install_file(src / WAL_FILE, store.log.path)
    store.set_current(final)
    marker.unlink()
    fsync_path(store.root)
    wal_seq = int(info["wal_seq"])
    logged = WriteLog(store.log.path).read()
    aborted = {e.target for e in logged.entries if e.op == "abort"}
    to_replay = sum(1 for e in logged.entries if e.seq > wal_seq and e.op != "abort" and e.seq not in aborted)
    log.warning("restored %s from %s as %s (%d log entries to replay at the next start)", info["version"], src,
                name, to_replay)
    return RestoreReport(final, str(info["version"]), int(info.get("documents", 0)), int(info.get("passages", 0)),
                         wal_seq, to_replay, replaced)


def interrupted_restore(root: Path) -> str | None:
    """The message for an index directory where a restore was killed after it began to install (the ``RESTORING``
    marker is there), or ``None``. A start refuses to serve while it is there."""
    marker = Path(root) / RESTORING
    if not marker.is_file():
        return None
    try:
        source = str(json.loads(marker.read_text(encoding="utf-8"))["source"])
    except (OSError, ValueError, KeyError, TypeError):
        source = "SRC"
    return (f"a restore from {source} into {root} did not finish; nothing is served until it does: run "
            f"`citerag restore {source} --index-dir {root}` again")


def _move_aside(store: IndexStore, keep: Path) -> Path | None:
    """Move every committed version but ``keep``, the log and the source states to ``versions/replaced/<time>/``;
    returns that folder (``None`` when there was nothing to move)."""
    others = [p for p in store.version_dirs() if p != keep]
    wal = store.log.path if store.log.path.is_file() and store.log.path.stat().st_size else None
    if not others and wal is None:
        return None
    aside = store.versions / REPLACED / f"{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
    aside.mkdir(parents=True)
    states = store.root / SourceStates.FILE
    if states.is_file():
        shutil.copy2(states, aside / SourceStates.FILE)
    for path in others:
        os.replace(path, aside / path.name)
    if wal is not None:
        os.replace(wal, aside / WAL_FILE)
    for folder in (aside, aside.parent, store.versions, store.root):
        fsync_path(folder)
    return aside


def _install_file(source: Path, target: Path) -> None:
    """Replace ``target`` with a copy of ``source`` atomically (temporary sibling, fsync, rename, fsync)."""
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:8]}")
    try:
        shutil.copyfile(source, tmp)
        fsync_path(tmp)
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(target.parent)


# --- shared --------------------------------------------------------------------------------------------------


def _sealed_manifest(directory: Path, what: str, error: type[CiteragError], advice: str) -> dict[str, Any]:
    """A version's ``manifest.json``, checked against ``manifest.sha256``; raises ``error`` naming ``what``, with
    ``advice``."""
    try:
        manifest = read_sealed_manifest(directory)
        if not isinstance(manifest, dict) or not isinstance(manifest.get("checksums"), dict):
            raise TypeError("not a version manifest")
        return manifest
    except (OSError, TypeError, ValueError) as exc:
        raise error(f"{what}: manifest.json unreadable ({exc}); {advice}") from exc


def _read_log(path: Path, error: type[CiteragError], what: str) -> LogState:
    try:
        return WriteLog(path).read()
    except WriteLogDamaged as exc:
        detail = str(exc).split(": ", 1)[-1]
        raise error(f"{what} is damaged ({detail.split(';')[0]}); run `citerag doctor`") from exc


def _check_relative(rel: str) -> None:
    """A path ``BACKUP.json`` lists: relative, inside the backup, one of its parts."""
    parts = PurePosixPath(rel).parts
    if (not parts or PurePosixPath(rel).is_absolute() or ".." in parts
            or not (rel in (WAL_FILE, SOURCES_FILE) or (parts[0] == VERSION_DIR and len(parts) > 1))):
        raise ValueError(f"{rel!r} is not a file of a backup")


def _fsync_tree(directory: Path) -> None:
    for path in [*directory.rglob("*"), directory]:
        fsync_path(path)
