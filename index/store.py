"""The index directory: versioned, atomically switched, verified on load.

Layout::

    <root>/                     default .citerag/ (CITERAG_INDEX_DIR)
      CURRENT                   name of the live version, replaced atomically (write temp, fsync, rename)
      versions/v<seq>-<time>-<rand>/
        manifest.json           settings, corpus fingerprint, counts, file checksums and stats, library versions
        manifest.sha256         the manifest's own checksum (a flipped byte in it is refused too)
        documents.arrow         the documents, an Arrow IPC file opened memory-mapped (:mod:`citerag.index.tables`)
        passages.arrow          the passages, the same way (row i == BM25 row i == FAISS row i)
        bm25/                   bm25s arrays (.npy) + params, and every passage's tokens (tokens.*)
        dense.faiss             FAISS index
      versions/damaged/         versions that failed verification, moved aside with REASON.txt
      versions/replaced/<time>/ the versions and the log a restore replaced (:mod:`citerag.index.backup`; kept,
                                never served or pruned)
      versions/.tmp-v<seq>-...  a version being written; one a killed write left is removed at the next start
                                (:meth:`IndexStore.remove_temporaries`)
      wal.jsonl                 write-ahead log of acknowledged writes (:mod:`citerag.index.wal`)

A build writes a new version directory under a temporary name, fsyncs it, renames it into place and only then
switches ``CURRENT``; a crash at any point leaves the previous version live. After each write the versions
beyond ``keep_versions`` (default :data:`KEEP_VERSIONS`) are removed and the write log is cut up to what the oldest
kept one holds. Loading re-checks counts and checksums against the manifest and refuses a mismatch
(:class:`IndexMismatch`).

Checksums without reading gigabytes at start: the writer hashes every file (sha256) and records, beside each hash,
the file's size and modification time (ns) once written. Loading with ``verify="stat"`` (the default) accepts a
file whose size and mtime are as recorded (its hash was checked when it was written) and hashes in full any other
one; ``verify="full"`` hashes every file (``citerag doctor --verify``, and the service's background check after
start, :func:`verify_files`). Versions written as JSONL (``documents.jsonl``, ``passages.jsonl``, before the Arrow
tables) still load, parsed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pyarrow as pa
from filelock import FileLock, Timeout

from citerag.index import faults
from citerag.index.files import atomic_write_text, fsync_path, sha256_file, tree_bytes
from citerag.index.bm25 import BM25Index
from citerag.index.dense import DenseIndex
from citerag.index.diskspace import WATCH
from citerag.index.errors import IndexMismatch, IndexNotFound
from citerag.index.sources import SourceState, SourceStates
from citerag.index.tables import DOCUMENTS_FILE, PASSAGES_FILE, DocumentTable, PassageTable, write_table
from citerag.index.tokenize import TOKENIZER_VERSION
from citerag.index.types import BM25Method, Document, Passage
from citerag.index.wal import WriteLog

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
#: Versions kept on disk by default (``keep_versions``): the live one and the one before, so a live version found
#: damaged has a verified predecessor to fall back to (the write log holds every write since that predecessor).
KEEP_VERSIONS = 2
#: The fewest versions a store may keep: the log is cut only up to what the oldest kept version holds, so with two
#: kept either one plus the log restores every acknowledged write; with one, a damaged live version would lose them.
MIN_KEEP_VERSIONS = 2
#: Folder under ``versions/`` holding versions that failed verification.
DAMAGED = "damaged"
# What a refused version's message tells the user to do (index/recovery.py does it at the next start).
_RECOVERS = "a start recovers from the newest verified version and the write log (`citerag doctor` shows it)"
_LIBRARIES = ("faiss-cpu", "bm25s", "sentence-transformers", "transformers", "torch", "citerag")


@dataclass(frozen=True, slots=True)
class IndexConfig:
    """Settings that shape a built index; a change to any of them requires a rebuild.

    Attributes:
        embedding_model: encoder name (e.g. ``all-MiniLM-L6-v2``).
        embedding_dim: vector dimension.
        max_seq_length: encoder limit in word pieces (passages never exceed it).
        target_tokens, overlap_tokens: chunker settings, in word pieces.
        bm25_k1, bm25_b, bm25_method: BM25 variant and parameters.
        tokenizer_version: :data:`citerag.index.tokenize.TOKENIZER_VERSION` of the BM25 tokens (a manifest written before
            the field existed reads as 1).
    """

    embedding_model: str
    embedding_dim: int
    max_seq_length: int
    target_tokens: int
    overlap_tokens: int
    bm25_k1: float = 1.5
    bm25_b: float = 0.75
    bm25_method: BM25Method = "lucene"
    tokenizer_version: int = TOKENIZER_VERSION

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


#: How a load checks file checksums: ``"stat"`` (size and mtime as written, else a full hash) or ``"full"``.
Verify = Literal["stat", "full"]


def corpus_fingerprint(documents: Iterable[Document] | DocumentTable) -> str:
    """sha256 over the sorted ``(doc_id, sha256(title + text))`` pairs: independent of file and document order (a
    :class:`~citerag.index.tables.DocumentTable` is read by column, without building its documents)."""
    if isinstance(documents, DocumentTable):
        fields: Iterable[tuple[str, str, str]] = documents.id_title_text()
    else:
        fields = ((doc.doc_id, doc.title, doc.text) for doc in documents)
    pairs = sorted((doc_id, hashlib.sha256(f"{title}\x00{text}".encode()).hexdigest()) for doc_id, title, text in fields)
    return hashlib.sha256(json.dumps(pairs).encode()).hexdigest()


@dataclass(slots=True)
class LoadedIndex:
    """A verified index version: documents and passages as memory-mapped tables (:mod:`citerag.index.tables`), BM25
    arrays and (where the FAISS index type allows) the FAISS index memory-mapped too.

    Attributes:
        documents: ``doc_id -> Document`` in index order (rows decoded when read).
        passages: row ``i`` == BM25 row ``i`` == FAISS row ``i``.
    """

    path: Path
    manifest: dict[str, Any]
    config: IndexConfig
    documents: DocumentTable
    passages: PassageTable
    bm25: BM25Index
    dense: DenseIndex

    def passages_of(self, doc_id: str) -> list[Passage]:
        """The passages of one document in order (``[]`` for an unknown id); one vectorised scan of the rows."""
        row = self.documents.rows.get(doc_id)
        if row is None:
            return []
        return [self.passages[int(r)] for r in np.flatnonzero(self.passages.doc_rows == row)]

    def rows_of(self, doc_ids: Iterable[str]) -> np.ndarray:
        """``(m,)`` int64: the passage rows of ``doc_ids`` (unknown ids ignored), ascending."""
        wanted = [self.documents.rows[d] for d in doc_ids if d in self.documents.rows]
        return np.flatnonzero(np.isin(self.passages.doc_rows, np.asarray(wanted, dtype=np.int32)))

    @property
    def wal_seq(self) -> int:
        """The last write-log entry this version holds (0 for a version written before the log existed)."""
        return int(self.manifest.get("wal_seq", 0))


@dataclass(frozen=True, slots=True)
class DiskUse:
    """What an index directory holds on disk, in bytes (plain sums of file sizes).

    Attributes:
        live: the live version's directory (0 when none).
        old, old_versions: the other committed versions (at most ``keep_versions - 1`` after a write).
        damaged, damaged_versions: versions set aside under ``versions/damaged/`` (kept until removed by hand).
        temporary, temporary_versions: ``versions/.tmp-*`` directories of writes not finished (or killed).
        wal: the write-ahead log.
        total: everything under the index directory (source records, ``CURRENT`` and the lock included).
    """

    live: int
    old: int
    old_versions: int
    damaged: int
    damaged_versions: int
    temporary: int
    temporary_versions: int
    wal: int
    total: int


class IndexStore:
    """The versioned index directory rooted at ``root``, keeping ``keep_versions`` committed versions (the live one
    included; at least :data:`MIN_KEEP_VERSIONS`).

    Raises:
        ValueError: ``keep_versions`` is below :data:`MIN_KEEP_VERSIONS`.
    """

    def __init__(self, root: Path, keep_versions: int = KEEP_VERSIONS) -> None:
        if keep_versions < MIN_KEEP_VERSIONS:
            raise ValueError(f"keep_versions is {keep_versions}; it must be at least {MIN_KEEP_VERSIONS} (either kept "
                             "version plus the write log restores every write): set CITERAG_KEEP_VERSIONS to 2 or more")
        self.root = Path(root)
        self.keep_versions = keep_versions
        self.versions = self.root / "versions"
        # one lock object per path in the process (filelock's singleton), so the lock is reentrant in one thread
        # across IndexStore objects of one root (a replay that calls a build); the file is made on first acquire
        self._lock = FileLock(str((self.root / "write.lock").absolute()), is_singleton=True)
        self.log = WriteLog(self.root / "wal.jsonl")

    @contextmanager
    def writing(self, wait: bool = True) -> Iterator[None]:
        """Hold the index's write lock (``root/write.lock``, an OS file lock: ``filelock``) for a read-modify-write
        of the live version, so writers in other processes (``citerag index --add`` beside a running service) and
        other threads wait for it instead of committing over each other's changes. Reentrant in one thread for one
        store; released when the block ends or the process dies. Logs once when it has to wait.

        Raises:
            filelock.Timeout: with ``wait=False``, another writer holds the lock (``citerag restore`` refuses then).
        """
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            if not wait:
                raise
            log.warning("waiting for another writer of %s to finish", self.root)
            self._lock.acquire()
        try:
            yield
        finally:
            self._lock.release()

    def current(self) -> Path | None:
        """The live version directory, or ``None`` when nothing was ever committed.

        Raises:
            IndexMismatch: ``CURRENT`` names a version that is not there.
        """
        pointer = self.root / "CURRENT"
        if not pointer.is_file():
            return None
        path = self.versions / pointer.read_text().strip()
        if not path.is_dir():
            raise IndexMismatch(f"{pointer} names {path.name}, which is missing; {_RECOVERS}")
        return path

    def live_or_none(self) -> Path | None:
        """:meth:`current`, or ``None`` also when ``CURRENT`` names a version that is missing."""
        try:
            return self.current()
        except IndexMismatch:
            return None

    def manifest(self) -> dict[str, Any]:
        """The live version's manifest, read without loading or verifying the version.

        Raises:
            IndexNotFound: nothing committed yet.
            IndexMismatch: the manifest is unreadable.
        """
        return _read_manifest(self._live())

    def ensure_writable(self) -> None:
        """Create the directory now, so an unusable path fails before a long build (raises ``OSError``)."""
        self.versions.mkdir(parents=True, exist_ok=True)

    def write(
        self,
        config: IndexConfig,
        documents: list[Document] | DocumentTable,
        passages: list[Passage] | PassageTable,
        bm25: BM25Index,
        dense: DenseIndex,
        extra: dict[str, Any] | None = None,
        before_current: Callable[[], None] | None = None,
        sources: SourceState | None = None,
    ) -> Path:
        """Write a complete new version and make it live atomically. Returns the new version directory.

        ``sources`` is the new version's source state (:class:`~citerag.index.sources.SourceStates`; default: the live
        version's), recorded once the version is complete and in place. ``before_current`` runs after that, just
        before ``CURRENT`` moves (a full build logs itself there); if either raises, the version is removed and
        nothing changes. ``documents`` and ``passages`` may be lists or tables (a table is written as it is; a list's
        passages must belong to its documents).

        Any failure (a full disk included) removes the temporary directory and the version, and leaves ``CURRENT``
        as it was; :func:`~citerag.index.build.write_index` turns one for space into
        :class:`~citerag.index.diskspace.DiskFull`."""
        self.versions.mkdir(parents=True, exist_ok=True)
        name = f"v{self._next_sequence():06d}-{time.strftime('%Y%m%dT%H%M%S')}-{uuid.uuid4().hex[:6]}"
        tmp = self.versions / f".tmp-{name}"
        tmp.mkdir()
        try:
            doc_table = documents if isinstance(documents, DocumentTable) else DocumentTable.build(documents)
            passages = PassageTable.assemble([passages.arrow if isinstance(passages, PassageTable) else passages],
                                             doc_table.rows)
            write_table(tmp / DOCUMENTS_FILE, doc_table.arrow)
            write_table(tmp / PASSAGES_FILE, passages.arrow)
            faults.point("mid-version")
            bm25.save(tmp / "bm25")
            dense.save(tmp)
            manifest = {
                "format_version": FORMAT_VERSION,
                "created_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "config": config.as_dict(),
                "corpus_fingerprint": corpus_fingerprint(doc_table),
                "counts": {"documents": len(doc_table), "passages": len(passages)},
                **_file_records(tmp),
                "libraries": _library_versions(),
                **(extra or {}),
            }
            _write_manifest(tmp, manifest)
            _fsync_tree(tmp)
            final = self.versions / name
            os.replace(tmp, final)
            SourceStates(self.root).put(final, sources, inherit=self.live_or_none())
            if before_current is not None:
                before_current()
            faults.point("before-current")
            atomic_write_text(self.root / "CURRENT", name + "\n")
            faults.point("after-current")
            WATCH.clear("index", self.root)  # a write succeeded: the index's file system has room again
        except BaseException:
            # a version that did not become live must not be found later as the newest one (its write failed)
            shutil.rmtree(tmp, ignore_errors=True)
            pointer = self.root / "CURRENT"
            if not pointer.is_file() or pointer.read_text().strip() != name:
                shutil.rmtree(self.versions / name, ignore_errors=True)
            raise
        try:  # the version is live: housekeeping must not turn a committed write into a failed one
            self._prune(keep=name)
        except OSError as exc:
            log.warning("pruning old index versions failed (%s); they stay until the next write", exc)
        return final

    def load(self, mmap: bool = True, verify: Verify = "stat") -> LoadedIndex:
        """Load and verify the live version (``verify``: see the module docstring).

        Raises:
            IndexNotFound: nothing committed yet (run ``citerag index``).
            IndexMismatch: the manifest's counts or checksums disagree with the files.
        """
        return load_version(self._live(), mmap=mmap, verify=verify)

    def _live(self) -> Path:
        """:meth:`current`, or :class:`IndexNotFound` when nothing was committed yet."""
        path = self.current()
        if path is None:
            raise IndexNotFound(f"no index in {self.root}: run `citerag index` (or `make serve`) to build one")
        return path

    def version_dirs(self) -> list[Path]:
        """The committed version directories, newest first (neither temporary nor moved aside)."""
        if not self.versions.is_dir():
            return []
        return sorted((p for p in self.versions.glob("v[0-9][0-9][0-9][0-9][0-9][0-9]-*") if p.is_dir()),
                      key=lambda p: p.name, reverse=True)

    def set_current(self, path: Path) -> None:
        """Make the committed version ``path`` live (atomic replace of ``CURRENT``). Call under :meth:`writing`."""
        atomic_write_text(self.root / "CURRENT", path.name + "\n")

    def quarantine(self, path: Path, reason: str) -> Path:
        """Move a version that failed verification to ``versions/damaged/`` (kept for inspection, never served or
        pruned), with ``REASON.txt`` saying why. Call under :meth:`writing`. Returns its new path."""
        aside = self.versions / DAMAGED
        aside.mkdir(parents=True, exist_ok=True)
        target = aside / path.name
        if target.exists():
            target = aside / f"{path.name}-{uuid.uuid4().hex[:6]}"
        os.replace(path, target)
        (target / "REASON.txt").write_text(reason + "\n")
        log.warning("index version %s failed verification and was moved to %s: %s", path.name, target, reason)
        return target

    def _next_sequence(self) -> int:
        numbers = [int(p.name[1:7]) for p in self.versions.glob("v[0-9][0-9][0-9][0-9][0-9][0-9]-*")]
        return max(numbers, default=0) + 1

    def remove_temporaries(self) -> list[Path]:
        """Remove the ``versions/.tmp-*`` directories that writes killed mid-version left (a start calls it), when
        no writer holds the write lock: a writer in another process or thread may be filling its own, so while the
        lock is held nothing is removed (:meth:`_prune` removes those an hour old after the next write). Never
        waits; returns the directories removed."""
        if not self.versions.is_dir() or not any(self.versions.glob(".tmp-*")):
            return []
        try:
            self._lock.acquire(timeout=0)  # reentrant: a start already holding it (ensure_index) is no writer
        except Timeout:
            return []
        try:
            stale = sorted(p for p in self.versions.glob(".tmp-*") if p.is_dir())
            for path in stale:
                shutil.rmtree(path, ignore_errors=True)
                log.info("removed %s, left by an index write that did not finish", path)
            return stale
        finally:
            self._lock.release()

    def disk_usage(self) -> DiskUse:
        """What the index directory holds on disk, by part (:class:`DiskUse`); reads only file sizes."""
        live = self.live_or_none()
        committed = self.version_dirs()
        old = [p for p in committed if p != live]
        aside = [p for p in (self.versions / DAMAGED).iterdir() if p.is_dir()] if (self.versions / DAMAGED).is_dir() \
            else []
        temporary = [p for p in self.versions.glob(".tmp-*") if p.is_dir()] if self.versions.is_dir() else []
        return DiskUse(
            live=tree_bytes(live) if live is not None else 0,
            old=sum(map(tree_bytes, old)), old_versions=len(old),
            damaged=sum(map(tree_bytes, aside)), damaged_versions=len(aside),
            temporary=sum(map(tree_bytes, temporary)), temporary_versions=len(temporary),
            wal=tree_bytes(self.log.path), total=tree_bytes(self.root),
        )

    def _prune(self, keep: str) -> None:
        """Remove all but the :attr:`keep_versions` newest versions (``keep``, the new live one, always stays; the
        damaged ones are aside and not counted), then cut the write log up to what the oldest kept version holds,
        so that any kept version plus the log restores every acknowledged write (with one version, nothing is
        cut: the log's full build then stands in for the missing predecessor)."""
        names = sorted(p.name for p in self.version_dirs())
        removed = [n for n in names if n != keep][: max(0, len(names) - self.keep_versions)]
        for old in removed:
            shutil.rmtree(self.versions / old, ignore_errors=True)
        kept = [n for n in names if n not in removed]
        if len(kept) >= 2:  # with one version, the log (from its full build) is its only fallback
            self.log.cut(min(wal_seq(self.versions / name) for name in kept))
        for stale in self.versions.glob(".tmp-*"):
            if stale.stat().st_mtime < time.time() - 3600:  # left by a crashed build long ago
                shutil.rmtree(stale, ignore_errors=True)


def wal_seq(path: Path) -> int:
    """The last write-log sequence number the version ``path`` holds (0 when its manifest is unreadable or predates
    the log, so nothing is cut on its account)."""
    try:
        return int(_read_manifest(path).get("wal_seq", 0))
    except (IndexMismatch, TypeError, ValueError):
        return 0


def load_version(path: Path, mmap: bool = True, verify: Verify = "stat") -> LoadedIndex:
    """Load one version directory and verify it against its manifest (see :meth:`IndexStore.load`)."""
    manifest = _read_manifest(path)
    verify_files(path, manifest, full=verify == "full")
    config = IndexConfig(**{"tokenizer_version": 1, **manifest["config"]})
    try:
        documents, passages = _tables(path)
    except (ValueError, pa.ArrowInvalid) as exc:  # an OSError (EACCES, EIO) is the machine's, not the version's
        raise IndexMismatch(f"{path}: the document or passage table is unreadable ({exc}); {_RECOVERS}") from exc
    counts = manifest["counts"]
    bm25 = BM25Index.load(
        path / "bm25", len(passages), config.bm25_k1, config.bm25_b, config.bm25_method, mmap=mmap
    )
    dense = DenseIndex.load(path, mmap=mmap)
    found = {"documents": len(documents), "passages": len(passages), "dense": dense.size}
    if found != {"documents": counts["documents"], "passages": counts["passages"], "dense": counts["passages"]}:
        raise IndexMismatch(f"{path}: counts {found} differ from the manifest's {counts}; {_RECOVERS}")
    return LoadedIndex(path, manifest, config, documents, passages, bm25, dense)


def verify_files(path: Path, manifest: dict[str, Any] | None = None, full: bool = True) -> None:
    """Check the version ``path``'s files against its manifest's checksums: every file hashed (sha256) when
    ``full``, else only those whose size or mtime differ from what the writer recorded (see the module docstring).

    Raises:
        IndexMismatch: a file is missing or its hash differs (or the manifest is unreadable).
    """
    manifest = _read_manifest(path) if manifest is None else manifest
    stats = manifest.get("file_stats", {})
    for rel, expected in manifest["checksums"].items():
        file = path / rel
        if not file.is_file():
            raise IndexMismatch(f"{file}: missing (the manifest lists it); {_RECOVERS}")
        if not full and rel in stats and _stat(file) == tuple(stats[rel]):
            continue  # hashed when written, unchanged since (size and mtime)
        if sha256_file(file) != expected:
            raise IndexMismatch(f"{file}: checksum differs from the manifest; {_RECOVERS}")


def _stat(file: Path) -> tuple[int, int]:
    info = file.stat()
    return info.st_size, info.st_mtime_ns


def _file_records(directory: Path) -> dict[str, dict[str, Any]]:
    """The manifest's ``checksums`` (sha256 of every data file) and ``file_stats`` (``[size, mtime_ns]``)."""
    files = _data_files(directory)
    return {
        "checksums": {rel: sha256_file(directory / rel) for rel in files},
        "file_stats": {rel: list(_stat(directory / rel)) for rel in files},
    }


def _tables(path: Path) -> tuple[DocumentTable, PassageTable]:
    """The version's tables: mapped Arrow files, or the JSONL files of a version written before them (parsed)."""
    if (path / DOCUMENTS_FILE).is_file() or not (path / "documents.jsonl").is_file():
        documents = DocumentTable.open(path / DOCUMENTS_FILE)
        return documents, PassageTable.open(path / PASSAGES_FILE)
    documents = DocumentTable.build(Document(**row) for row in _read_jsonl(path / "documents.jsonl"))
    passages = PassageTable.build((Passage(**row) for row in _read_jsonl(path / "passages.jsonl")), documents.rows)
    return documents, passages


def read_sealed_manifest(path: Path) -> Any:
    """The version directory ``path``'s ``manifest.json`` parsed, checked against its seal ``manifest.sha256``
    (versions written before the seal existed have none).

    Raises:
        OSError: the manifest cannot be read.
        ValueError: it differs from its seal, or is not JSON.
    """
    raw = (path / "manifest.json").read_bytes()
    seal = path / "manifest.sha256"
    if seal.is_file() and seal.read_text().strip() != hashlib.sha256(raw).hexdigest():
        raise ValueError("its checksum differs from manifest.sha256")
    return json.loads(raw)


def _read_manifest(path: Path) -> dict[str, Any]:
    """The manifest (:func:`read_sealed_manifest`) of this format."""
    try:
        manifest = read_sealed_manifest(path)
        if not isinstance(manifest, dict) or manifest.get("format_version") != FORMAT_VERSION:
            raise ValueError(f"not a format {FORMAT_VERSION} manifest")
        return manifest
    except (OSError, ValueError) as exc:
        raise IndexMismatch(f"{path}: manifest unreadable ({exc}); {_RECOVERS}") from exc


def _write_manifest(path: Path, manifest: dict[str, Any], atomic: bool = False) -> None:
    """Write ``manifest.json`` and its seal ``manifest.sha256`` (each replaced atomically when ``atomic``)."""
    text = json.dumps(manifest, indent=2, ensure_ascii=False)
    seal = hashlib.sha256(text.encode()).hexdigest() + "\n"
    if atomic:  # the seal goes first: a crash between the two leaves a mismatch, which refuses the version
        atomic_write_text(path / "manifest.sha256", seal)  # (and a refused version is recovered from the log)
        atomic_write_text(path / "manifest.json", text)
    else:
        (path / "manifest.json").write_text(text)
        (path / "manifest.sha256").write_text(seal)


def _data_files(directory: Path) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())



def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _fsync_tree(directory: Path) -> None:
    for path in [*directory.rglob("*"), directory]:
        fsync_path(path)


def _library_versions() -> dict[str, str]:
    versions = {}
    for name in _LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions
