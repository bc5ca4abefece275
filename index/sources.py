"""Source-file tracking: which files an index was built from, whether they changed since, and which of their
records changed.

An index remembers its sources (``citerag index PATHS``, then ``--add PATHS``, in the order added), a cheap
signature of each source's files (sizes and modification times: :func:`source_signature`) and a fingerprint of each
record each source held (:func:`records_by_source`). At start-up an unchanged signature means nothing is read; a
changed one re-reads the sources and applies only the records that changed (:func:`source_changes`), so a document
replaced or deleted through the API stays so while its record in the files is as it was.

That state (a :data:`SourceState`: ``sources``, ``source_signatures``, ``source_records``, ``skipped``) is kept per
index version in its own file, ``<index_dir>/sources.json`` (:class:`SourceStates`), written atomically: a version
directory is never rewritten once committed. The record tables, the large part (about 40 bytes a document), are
stored once per distinct table under ``<index_dir>/sources/<sha256>.json`` and named by digest in ``sources.json``,
so versions that share one share the file, and a start whose sources did not change reads none of them. A new version gets its state just before it becomes live (the state
the writer gives, else the live version's), so a version recovered after a crash comes with the state that matches
its documents. Indexes written before the file existed keep their state in their manifest, read as a fallback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from citerag.index.errors import IngestError
from citerag.index.files import atomic_write_text, json_sha256
from citerag.index.ingest import Corpus, source_files
from citerag.index.types import Document, document_fingerprint

log = logging.getLogger(__name__)

SourceState = dict[str, Any]
"""One version's source state: ``sources`` (resolved paths, in the order added), ``source_signatures`` (path ->
:func:`source_signature`), ``source_records`` (:data:`Records`) and ``skipped`` (``{"records": n, "first": ids}``);
``{}`` for an index that was never tied to files (Milvus, an index built in code)."""

#: The state keys an index written before ``sources.json`` kept in its manifest.
LEGACY_KEYS = frozenset(
    {"sources", "source_signatures", "source_signature", "source_records", "source_documents", "skipped"}
)

#: Skipped records named in the index's source state and the CLI output.
SKIPPED_LISTED = 20


class SourceStates:
    """The per-version source states of one index directory: ``<root>/sources.json``, ``{version name: state}``.

    Args:
        root: the index directory (:class:`~citerag.index.store.IndexStore` root).

    Writes (:meth:`put`) replace the file atomically; call them under the store's write lock.
    """

    FILE = "sources.json"
    RECORDS = "sources"
    _DIGEST = "source_records_digest"

    def __init__(self, root: Path) -> None:
        self.path = Path(root) / self.FILE
        self.records_dir = Path(root) / self.RECORDS

    def _read(self) -> dict[str, SourceState]:
        try:
            states = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:  # the state only saves work: lost, the sources are re-read
            log.warning("%s unreadable (%s); the index's sources are taken from its manifests", self.path, exc)
            return {}
        return states if isinstance(states, dict) else {}

    def of(self, version: Path | None, records: bool = True) -> SourceState:
        """The state of the version directory ``version`` (``{}`` for ``None``): its entry in the file, else the
        source keys of its manifest (an index written before the file existed), else ``{}``. Without ``records``
        the state lacks ``source_records`` (enough for :func:`sources_unchanged`; no record table is read).

        A record table that cannot be read counts as none (the state only saves work: the sources are re-read, and
        every record counts as new)."""
        state = dict(self._state_in(self._read(), version))
        digest = state.pop(self._DIGEST, None)
        if not records:
            state.pop("source_records", None)
        elif digest is not None:
            try:
                state["source_records"] = json.loads((self.records_dir / f"{digest}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                log.warning("source record table %s unreadable (%s); every record counts as new", digest, exc)
        return state

    @staticmethod
    def _state_in(states: dict[str, SourceState], version: Path | None) -> SourceState:
        """:meth:`of`, over the file's entries already read."""
        if version is None:
            return {}
        state = states.get(version.name)
        if isinstance(state, dict):
            return state
        try:
            manifest = json.loads((version / "manifest.json").read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        return {key: manifest[key] for key in LEGACY_KEYS if isinstance(manifest, dict) and key in manifest}

    def put(self, version: Path, state: SourceState | None, inherit: Path | None = None) -> None:
        """Record ``state`` as the state of the version directory ``version`` (``None``: the state of ``inherit``,
        as :meth:`of` gives it; the file is read once); entries of versions no longer on disk (pruned; kept if
        moved to ``versions/damaged/``) are dropped.

        Raises:
            OSError: the file cannot be written.
        """
        current = self._read()
        new = dict(state) if state is not None else dict(self._state_in(current, inherit))
        if "source_records" in new:
            new[self._DIGEST] = self._store_records(new.pop("source_records"))
        versions = version.parent
        states = {
            name: value for name, value in current.items()
            if (versions / name).is_dir() or (versions / "damaged" / name).is_dir()
        }
        states[version.name] = new
        atomic_write_text(self.path, json.dumps(states, ensure_ascii=False, indent=1) + "\n")
        used = {value.get(self._DIGEST) for value in states.values() if isinstance(value, dict)}
        for table in self.records_dir.glob("*.json") if self.records_dir.is_dir() else []:
            if table.stem not in used:  # no kept version names it any more
                table.unlink(missing_ok=True)

    def _store_records(self, records: Records) -> str:
        """Write one record table under its digest (once: an equal table is already there). Returns the digest."""
        digest = json_sha256(records)
        path = self.records_dir / f"{digest}.json"
        if not path.is_file():
            self.records_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(path, json.dumps(records, ensure_ascii=False, separators=(",", ":")))
        return digest


def source_signature(paths: list[Path]) -> str:
    """sha256 over ``(file, size, mtime_ns)`` of every source file under ``paths``: a cheap change detector that
    reads no file content (a start-up over an unchanged 23k-abstract corpus costs a few ``stat`` calls).

    Raises:
        IngestError: a path is missing or a directory holds no source file.
    """
    return json_sha256([(str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in source_files(paths)])


def record_fingerprint(doc: Document) -> str:
    """sha256 (16 hex digits) of a source record's title, text and metadata (its file and line excluded): what
    tells, when a source file changed, which of its records changed."""
    return document_fingerprint(doc)[:16]


Records = dict[str, dict[str, str | None]]
"""Source records by source: ``{resolved source path: {doc_id: record_fingerprint}}``."""


def records_by_source(paths: list[Path], corpus: Corpus) -> Records:
    """The records ``corpus`` (read from ``paths`` by :func:`~citerag.index.ingest.read_corpus`) read from each path,
    those a later path overrides included."""
    keys = [str(Path(p).resolve()) for p in paths]
    out: Records = {key: {} for key in keys}
    for position, doc in corpus.shadowed:  # a record a later source overrides is still its own source's record
        out[keys[position]][doc.doc_id] = record_fingerprint(doc)
    for doc in corpus.documents:
        out[keys[corpus.origins[doc.doc_id]]][doc.doc_id] = record_fingerprint(doc)
    return out


def recorded_sources(state: SourceState) -> Records:
    """The source records a state holds. An index written before records were kept by source lists them under
    the pseudo-source ``""``: flat fingerprints, or ids alone (``source_documents``) with ``None`` (unknown)."""
    records = state.get("source_records")
    if isinstance(records, dict) and all(isinstance(v, dict) for v in records.values()):
        return {key: dict(value) for key, value in records.items()}
    if isinstance(records, dict):
        return {"": dict(records)}
    return {"": dict.fromkeys(state.get("source_documents", []))}


def _flatten(records: Records, order: list[str]) -> dict[str, str | None]:
    """One record per id, a later source (in ``order``, after any source not in it) winning."""
    flat: dict[str, str | None] = {}
    for key in [*(k for k in records if k not in order), *order]:
        flat.update(records.get(key, {}))
    return flat


def source_signatures(paths: list[Path]) -> dict[str, str]:
    """:func:`source_signature` of each source, by resolved path. Take them *before* reading the sources: an edit
    made while they are read then shows as a change at the next start instead of being recorded as seen.

    Raises:
        IngestError: as :func:`source_signature`.
    """
    return {str(Path(p).resolve()): source_signature([Path(p)]) for p in paths}


def source_state(
    paths: list[Path], records: Records, skipped: Sequence[str] = (), signatures: dict[str, str] | None = None
) -> dict[str, object]:
    """The :data:`SourceState` that ties an index to its source files: the sources (in the order they were added), the
    :func:`source_signature` of each (``signatures``, taken before the read; default: computed now), the records
    read from each (:func:`records_by_source`) and the records skipped."""
    keys = [str(Path(p).resolve()) for p in paths]
    if signatures is None:
        signatures = source_signatures([Path(key) for key in keys])
    return {
        "sources": keys,
        "source_signatures": {key: signatures.get(key, "") for key in keys},
        "source_records": records,
        "skipped": {"records": len(skipped), "first": list(skipped[:SKIPPED_LISTED])},
    }


def sources_unchanged(state: SourceState, paths: list[Path]) -> bool:
    """True when every source's files have the sizes and modification times recorded (``source_signatures``, or
    the single ``source_signature`` of an index written before signatures were kept by source); False too when a
    source is gone or cannot be listed."""
    try:
        if not all(p.exists() for p in paths):
            return False
        if "source_signatures" not in state:
            return state.get("source_signature") == source_signature(paths)
        recorded = state["source_signatures"]
        return all(recorded.get(str(Path(p).resolve())) == source_signature([p]) for p in paths)
    except IngestError:
        return False


def source_changes(
    state: SourceState, indexed: Mapping[str, Document], paths: list[Path], corpus: Corpus, records: Records
) -> tuple[list[Document], list[str]]:
    """What re-reading the sources changes: ``(upserts, deletes)``; ``state`` is the live version's source state,
    ``indexed`` its documents by id, ``records`` :func:`records_by_source` of ``corpus``.

    Only records that changed in the files since they were recorded count: new ids, and records whose fingerprint
    differs, are upserted; recorded ids that left the files (and are still indexed) are deleted. A document the API
    replaced or deleted therefore stays so while its record is unchanged. A record of unknown fingerprint (an index
    written by an older citerag) counts as unchanged.
    """
    order = [str(Path(p).resolve()) for p in paths]
    known = "source_records" in state or "source_documents" in state
    recorded = _flatten(recorded_sources(state) if known else {"": dict.fromkeys(indexed)}, order)
    current = _flatten(records, order)
    upserts = [
        doc for doc in corpus.documents
        if doc.doc_id not in recorded or recorded[doc.doc_id] not in (None, current[doc.doc_id])
    ]
    deletes = [doc_id for doc_id in recorded if doc_id not in current and doc_id in indexed]
    return upserts, deletes
