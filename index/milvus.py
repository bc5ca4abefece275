"""The Milvus retrieval backend: passages, BM25 and dense vectors in Milvus, through pymilvus's ``MilvusClient``.

One code path serves Milvus Lite (a local file URI ending in ``.db``, run in-process by the ``milvus-lite``
package) and a Milvus server or cluster (``http://host:19530`` plus a token).

Collections (prefix ``collection``, default ``citerag``):

``<prefix>_passages``, one row per passage (primary key ``chunk_id``):
    ``doc_id``, ``ordinal``, ``char_start``/``char_end`` (its span), ``n_tokens``, ``text``;
    ``bm25_text`` (VARCHAR with an analyzer) -> a Milvus BM25 function -> ``sparse`` (SPARSE_FLOAT_VECTOR, index
    ``SPARSE_INVERTED_INDEX``, metric ``BM25``, k1/b from the settings);
    ``dense`` (FLOAT_VECTOR, the citerag embedder's L2-normalised vector, index HNSW, metric IP == cosine);
    ``venue`` (VARCHAR), ``year`` (INT64) and ``meta_folded`` (JSON), the filterable copy of the document's
    metadata (:mod:`citerag.index.milvus_filters`).
``<prefix>_documents``, one row per document (primary key ``doc_id``):
    ``title``, ``text``, ``label``, ``meta`` (JSON), ``fingerprint`` (sha256 of title, text and metadata),
    ``seq`` (insertion order), ``n_passages``, and a 2-d placeholder vector (Milvus requires a vector field in
    every collection).

Both carry the :class:`MilvusLayout` they were created for in the collection property ``citerag_layout``.

Passages come from citerag's own chunker and vectors from the same embedder as the embedded backend, so the
dense side is identical up to HNSW's approximation. BM25 is computed by Milvus (IDF, term frequencies, length
normalisation) over ``bm25_text``; what reaches the analyzer depends on ``analyzer``:

``"citerag"`` (default)
    the passage's BM25 tokens from :func:`citerag.index.tokenize.tokenize` (folded, compounds, Snowball stemming, bm25s's
    English stop words), joined by spaces, analysed by Milvus's ``whitespace`` tokenizer on a server and
    ``standard`` (``\\w+`` + lower-case) on Milvus Lite, which split such text identically. Queries go through the
    same tokenizer. The terms are exactly the embedded backend's.
``"milvus"``
    the raw model-facing text (:func:`citerag.index.chunking.model_text`), analysed by Milvus itself: the built-in
    ``english`` analyzer on a server (standard tokenizer, lower-case, English stemmer, English stop words); on
    Milvus Lite 3.x, which has neither the ``english`` analyzer nor a stemmer filter, the ``standard`` tokenizer
    with citerag's stop-word list (no stemming). The documentation's Milvus page says what each gives.

Scores: Milvus Lite returns BM25 scores negated (as distances); a server returns them positive. The backend
reports the magnitude, so ``bm25_score`` is positive on both, but BM25 scores are not comparable across backends:
Milvus multiplies by ``(k1 + 1)``, and Milvus Lite computes IDF and average length per segment (the in-memory
buffer and each flushed segment separately; deleted rows count until compaction).

Consistency: every collection is created with ``Strong`` consistency, so a search sees every write acknowledged
before it. Within one process a readers-writer lock makes a write atomic for searches (before or after, never a
mix); across processes sharing a server, a search running during a replace may briefly see a document with no
passages or with both old and new ones.

Durability: Milvus makes a write durable only when it flushes (seals) it, and Milvus Lite does not fsync what it has
not flushed; a flush per write would be slow on a server. So every write is appended to a write-ahead log
(:mod:`citerag.index.wal`, the embedded index's format and code) and fsynced before it is applied and acknowledged.
The log lives in ``wal_dir``: ``wal.jsonl``, ``held.json`` and ``write.lock``. ``held.json`` records the last log
entry Milvus is known to hold (``held``: every write up to it applied and the collections flushed after it) and the
log's id (``wal_id``), which the documents collection also carries (property ``citerag_wal_id``). A checkpoint
(:meth:`MilvusBackend.checkpoint`: flush, record ``held``, cut the log through it) follows a write of at least
:data:`FLUSH_AFTER` passages, every :data:`CHECKPOINT_ENTRIES` logged writes and :meth:`MilvusBackend.close`. At
each open (:meth:`MilvusBackend.recover`) the entries after ``held`` are replayed into Milvus, folded as the
embedded start-up folds them (:func:`citerag.index.recovery.steps_after`: the last logged content of each id is
upserted, passages by their ids; ids whose last logged write removed them are deleted when stored), then a
checkpoint follows. Replaying an entry Milvus already holds changes nothing, so a crash during a replay is
repaired by the next. A log whose ``wal_id`` is not the collections' (they were dropped and created again, or
``wal_dir`` was used with another Milvus) is moved to ``wal_dir/set-aside/`` with a warning, not replayed.
"""

from __future__ import annotations

import functools
import json
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
from filelock import FileLock
from pymilvus import AnnSearchRequest, DataType, Function, FunctionType, MilvusClient, MilvusException, RRFRanker

from citerag.index.backend import BackendBase, WriteReport, check_page
from citerag.index.chunking import Chunker, model_text
from citerag.index.embed import Embedder
from citerag.index.errors import BackendUnavailable, IndexMismatch, IngestError
from citerag.index.files import atomic_write_text
from citerag.index.filters import Filters, fold_value
from citerag.index.fusion import RRF_K
from citerag.index.ids import MAX_ID_BYTES
from citerag.index.milvus_filters import JSON_FIELD, Unsatisfiable, milvus_expression, typed_columns
from citerag.index.recovery import IndexUnrecoverable, ReplayStep, steps_after
from citerag.index.search import (
    SearchResult, candidate_depth, check_fusion, check_search, fusion_depth, rank_candidates, search_results,
    select_top,
)
from citerag.index.text import fold
from citerag.index.tokenize import STOPWORDS, tokenize
from citerag.index.types import Document, FusionMethod, Hit, Passage, Ranking, RetrievalMode, document_fingerprint
from citerag.index.wal import WriteLog, WriteLogDamaged
from citerag.index.writes import WritePlan, check_documents, classify, vectors_for

log = logging.getLogger(__name__)


class _NoLiteIteratorWarning(logging.Filter):
    """Milvus Lite returns no MVCC timestamp to iterators, and pymilvus warns on every scan; with Strong
    consistency the client-side timestamp it falls back to is correct, so the warning is dropped."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "failed to get mvccTs" not in record.getMessage()


logging.getLogger("pymilvus.client.iterator.query_iterator").addFilter(_NoLiteIteratorWarning())

Analyzer = Literal["citerag", "milvus"]
VARCHAR_MAX = 65_535  # Milvus's largest VARCHAR, in bytes (UTF-8)
ID_MAX = MAX_ID_BYTES  # width of the doc_id columns, in bytes (the id rule: index.ids)
WRITE_BATCH = 512  # rows per insert/upsert request (well under gRPC's 64 MiB message limit at 384-d)
FLUSH_AFTER = 1_000  # a write of at least this many passages is flushed (sealed and indexed) at once
#: A checkpoint (flush, then the write log cut) follows at the latest this many logged writes after the last one.
CHECKPOINT_ENTRIES = 64
LAYOUT_PROPERTY = "citerag_layout"  # collection property holding the MilvusLayout as JSON
WAL_ID_PROPERTY = "citerag_wal_id"  # documents collection property: the id of the write log that goes with it
HELD_FILE = "held.json"  # in wal_dir: {"wal_id", "held"}, the last log entry Milvus holds flushed
HNSW = {"M": 16, "efConstruction": 200}  # Malkov & Yashunin (2018)'s usual build parameters
#: Fusion methods Milvus cannot run, with the reason (see :func:`citerag.index.search.check_fusion`).
UNSUPPORTED_FUSION = {
    "bounded": "needs BM25 document frequencies, which Milvus does not expose; use 'rrf' or 'weighted' with the "
    "Milvus backend",
}
_PASSAGE_FIELDS = ["chunk_id", "doc_id", "ordinal", "char_start", "char_end", "text", "n_tokens"]
_DOCUMENT_FIELDS = ["doc_id", "title", "text", "label", "meta"]


@dataclass(frozen=True, slots=True)
class MilvusLayout:
    """What the collections were created for; a mismatch at open is refused (:class:`IndexMismatch`).

    Attributes:
        embedding_model, embedding_dim: the encoder of the ``dense`` vectors.
        analyzer: what the BM25 field holds (module docstring).
        bm25_k1, bm25_b: BM25 parameters of the sparse index.
        target_tokens, overlap_tokens: the chunker's settings, in word pieces.
    """

    embedding_model: str
    embedding_dim: int
    analyzer: Analyzer
    bm25_k1: float
    bm25_b: float
    target_tokens: int
    overlap_tokens: int


class _ReadWriteLock:
    """Many readers or one writer; a waiting writer blocks new readers (no writer starvation)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False
        self._writers_waiting = 0

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and not self._writers_waiting)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._writers_waiting += 1
            self._cond.wait_for(lambda: not self._writing and not self._readers)
            self._writers_waiting -= 1
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


F = TypeVar("F", bound=Callable[..., Any])


def engine_errors(method: F) -> F:
    """Re-raise pymilvus's errors as :class:`BackendUnavailable` naming the URI (the API and CLI report
    ``CiteragError`` subclasses; a bare ``MilvusException`` would be a 500 with a gRPC message)."""

    @functools.wraps(method)
    def wrapper(self: MilvusBackend, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except MilvusException as exc:
            raise BackendUnavailable(
                f"Milvus at {self.uri} failed: {exc.message} (code {exc.code}); check that it is running and "
                "CITERAG_MILVUS_URI / CITERAG_MILVUS_TOKEN"
            ) from exc

    return wrapper  # type: ignore[return-value]


def is_lite_uri(uri: str) -> bool:
    """True for a Milvus Lite file URI (pymilvus runs Milvus Lite for a path ending in ``.db``)."""
    return not uri.startswith(("http://", "https://", "tcp://", "unix:"))


class MilvusBackend(BackendBase):
    """A :class:`~citerag.index.backend.SearchBackend` over Milvus (module docstring for the layout).

    Args:
        uri: a path ending in ``.db`` (Milvus Lite, created if missing) or ``http://host:19530``.
        embedder: the passage/query encoder (the same as the embedded backend's for identical vectors).
        chunker: citerag's chunker (the same settings as the embedded backend's for identical passages).
        token: the server's token (``"user:password"`` or an API key); ignored by Milvus Lite.
        collection: prefix of the two collections.
        analyzer: ``"citerag"`` or ``"milvus"`` (module docstring).
        bm25_k1: BM25's k1 (Lucene's default, as the embedded backend's).
        bm25_b: BM25's b (Lucene's default, as the embedded backend's).
        candidates: top-N taken from each retriever before fusion (as :class:`~citerag.index.retrieve.Retriever`).
        rrf_k: the RRF constant (Cormack et al. 2009: 60), in both the client-side and the in-engine fusion.
        fusion: the default hybrid fusion, ``"rrf"`` or ``"weighted"`` (min-max). The embedded default,
            ``"bounded"``, divides BM25 by the query's largest possible score, which needs document frequencies
            that Milvus does not expose: asked for here (e.g. by the default ``CITERAG_FUSION``), the backend falls
            back to ``"rrf"``, logs a WARNING and reports it in :meth:`stats` (``fusion: "rrf"``,
            ``fusion_fallback``). Asked for per query (``search(fusion="bounded")``) it is a ``ValueError``.
        weights: ``(bm25, dense)`` weights of the weighted fusion.
        rrf_in_engine: run hybrid RRF in Milvus (``hybrid_search`` with ``RRFRanker(rrf_k)``, one request)
            instead of two searches fused here. The engine returns only the fused score, so results then carry
            no ``bm25_rank``/``dense_rank``/scores, and the answerer (which abstains on the best cosine
            similarity) cannot use them; the default, ``False``, is what the service uses.
        hnsw_ef: HNSW search breadth (``ef``); raised to the number of candidates asked for when smaller.
        wal_dir: the directory of the write-ahead log (module docstring); default, for Milvus Lite, ``<uri>.wal``
            beside its file. Required for a server: a local directory of this service's (one per collection
            prefix and server).

    Opening replays the logged writes Milvus may not hold (:meth:`recover`; ``replayed`` says how many).

    Raises:
        ValueError: a setting is out of range, ``uri`` is neither ``*.db`` nor ``http(s)://``, or a server is
            given no ``wal_dir``.
        IndexMismatch: the collections exist with another embedder, analyzer, BM25 or chunker setting.
        WriteLogDamaged: a line of the write log, or ``held.json``, is unreadable (nothing is replayed).
        BackendUnavailable: Milvus cannot be reached or refuses a request (this and every method).
    """

    name = "milvus"

    @engine_errors
    def __init__(
        self,
        uri: str,
        embedder: Embedder,
        chunker: Chunker,
        *,
        token: str = "",
        collection: str = "citerag",
        analyzer: Analyzer = "citerag",
        bm25_k1: float = 1.5,
        bm25_b: float = 0.75,
        candidates: int = 100,
        rrf_k: int = RRF_K,
        fusion: FusionMethod = "rrf",
        weights: tuple[float, float] = (0.5, 0.5),
        rrf_in_engine: bool = False,
        hnsw_ef: int = 128,
        wal_dir: str | Path | None = None,
    ) -> None:
        uri = str(uri)
        if is_lite_uri(uri) and not uri.endswith(".db"):
            raise ValueError(f"milvus_uri {uri!r}: give a file path ending in .db (Milvus Lite) or http://host:19530")
        if wal_dir is None and not is_lite_uri(uri):
            raise ValueError(f"Milvus server {uri}: give wal_dir, the local directory of the write-ahead log")
        if analyzer not in ("citerag", "milvus"):
            raise ValueError(f"analyzer must be 'citerag' or 'milvus', got {analyzer!r}")
        if candidates < 1 or rrf_k < 0 or hnsw_ef < 1:
            raise ValueError(f"need candidates >= 1, rrf_k >= 0, hnsw_ef >= 1; got {candidates}, {rrf_k}, {hnsw_ef}")
        self.fusion_fallback = ""
        if fusion in UNSUPPORTED_FUSION:
            self.fusion_fallback = f"{fusion} -> rrf: {fusion} {UNSUPPORTED_FUSION[fusion]}"
            log.warning("Milvus backend: fusion %s", self.fusion_fallback)
            fusion = "rrf"
        self.uri = uri
        self.lite = is_lite_uri(uri)
        self.embedder = embedder
        self.chunker = chunker
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.fusion = check_fusion(fusion, UNSUPPORTED_FUSION)
        self.weights = weights
        self.rrf_in_engine = rrf_in_engine
        self.hnsw_ef = hnsw_ef
        self.layout = MilvusLayout(
            embedding_model=embedder.name,
            embedding_dim=embedder.dim,
            analyzer=analyzer,
            bm25_k1=bm25_k1,
            bm25_b=bm25_b,
            target_tokens=chunker.target_tokens,
            overlap_tokens=chunker.overlap_tokens,
        )
        self.passages_collection = f"{collection}_passages"
        self.documents_collection = f"{collection}_documents"
        self._lock = _ReadWriteLock()
        if self.lite:
            Path(uri).parent.mkdir(parents=True, exist_ok=True)
        self.wal_dir = Path(wal_dir) if wal_dir is not None else Path(f"{uri}.wal")
        self.wal_dir.mkdir(parents=True, exist_ok=True)
        self.log = WriteLog(self.wal_dir / "wal.jsonl")
        self._wal_lock = FileLock(str((self.wal_dir / "write.lock").absolute()), is_singleton=True)
        self._held = 0  # the last log entry Milvus holds flushed (held.json)
        self.client = MilvusClient(uri=uri, token=token) if token else MilvusClient(uri=uri)
        self.wal_id = self._ensure_collections()
        self._next_seq = self._max_seq() + 1
        self.replayed = self.recover()
        """How many logged writes the open replayed into Milvus."""

    # -- setup ---------------------------------------------------------------------------------------------------

    def _analyzer_params(self) -> dict[str, Any]:
        if self.layout.analyzer == "citerag":
            # Pre-tokenised text: any tokenizer that splits on spaces and keeps [^\W_]+ runs whole gives its terms.
            return {"tokenizer": "standard"} if self.lite else {"tokenizer": "whitespace"}
        if self.lite:  # Milvus Lite 3.x: tokenizers 'standard' and 'jieba' only, no stemmer filter
            return {"tokenizer": "standard", "filter": [{"type": "stop", "stop_words": sorted(STOPWORDS)}]}
        return {"type": "english"}

    def _ensure_collections(self) -> str:
        """Create what is missing, check the layout of what exists, load both; returns the write log's id (a new one
        when a collection was created: a log written for the collections before is not theirs)."""
        layout = json.dumps(_layout_dict(self.layout), sort_keys=True)
        for name in (self.passages_collection, self.documents_collection):
            if self.client.has_collection(name):
                found = self.client.describe_collection(name).get("properties", {}).get(LAYOUT_PROPERTY)
                if found != layout:
                    raise IndexMismatch(
                        f"Milvus collection {name!r} at {self.uri} holds {found or 'data citerag did not write'}, "
                        f"but the settings ask for {layout}; drop it (or point CITERAG_MILVUS_URI elsewhere) and "
                        "re-ingest"
                    )
        created = False
        if not self.client.has_collection(self.passages_collection):
            self._create_passages(layout)
            created = True
        if not self.client.has_collection(self.documents_collection):
            self._create_documents(layout)
            created = True
        for name in (self.passages_collection, self.documents_collection):
            self.client.load_collection(name)
        found = self.client.describe_collection(self.documents_collection).get("properties", {}).get(WAL_ID_PROPERTY)
        if found and not created:
            return str(found)
        wal_id = uuid.uuid4().hex
        self.client.alter_collection_properties(self.documents_collection, {WAL_ID_PROPERTY: wal_id})
        return wal_id

    def _create_passages(self, layout: str) -> None:
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("chunk_id", DataType.VARCHAR, is_primary=True, max_length=ID_MAX + 16)
        schema.add_field("doc_id", DataType.VARCHAR, max_length=ID_MAX)
        for name in ("ordinal", "char_start", "char_end", "n_tokens"):
            schema.add_field(name, DataType.INT64)
        schema.add_field("text", DataType.VARCHAR, max_length=VARCHAR_MAX)
        schema.add_field(
            "bm25_text", DataType.VARCHAR, max_length=VARCHAR_MAX, enable_analyzer=True,
            analyzer_params=self._analyzer_params(),
        )
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_field("dense", DataType.FLOAT_VECTOR, dim=self.layout.embedding_dim)
        schema.add_field("venue", DataType.VARCHAR, max_length=VARCHAR_MAX, nullable=True)
        schema.add_field("year", DataType.INT64, nullable=True)
        schema.add_field(JSON_FIELD, DataType.JSON)
        schema.add_function(
            Function(name="bm25", function_type=FunctionType.BM25, input_field_names=["bm25_text"],
                     output_field_names=["sparse"])
        )
        index = self.client.prepare_index_params()
        index.add_index(field_name="dense", index_type="HNSW", metric_type="IP", params=HNSW)
        index.add_index(
            field_name="sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25",
            params={"bm25_k1": self.layout.bm25_k1, "bm25_b": self.layout.bm25_b},
        )
        self.client.create_collection(
            self.passages_collection, schema=schema, index_params=index, consistency_level="Strong",
            properties={LAYOUT_PROPERTY: layout},
        )

    def _create_documents(self, layout: str) -> None:
        schema = self.client.create_schema(auto_id=False, enable_dynamic_field=False)
        schema.add_field("doc_id", DataType.VARCHAR, is_primary=True, max_length=ID_MAX)
        for name in ("title", "text", "label"):
            schema.add_field(name, DataType.VARCHAR, max_length=VARCHAR_MAX)
        schema.add_field("meta", DataType.JSON)
        schema.add_field("fingerprint", DataType.VARCHAR, max_length=64)
        schema.add_field("seq", DataType.INT64)
        schema.add_field("n_passages", DataType.INT64)
        schema.add_field("placeholder", DataType.FLOAT_VECTOR, dim=2)  # Milvus requires a vector field
        index = self.client.prepare_index_params()
        index.add_index(field_name="placeholder", index_type="FLAT", metric_type="L2")
        self.client.create_collection(
            self.documents_collection, schema=schema, index_params=index, consistency_level="Strong",
            properties={LAYOUT_PROPERTY: layout},
        )

    def _max_seq(self) -> int:
        seqs = [row["seq"] for row in self._scan(self.documents_collection, ["seq"])]
        return max(seqs, default=0)

    @engine_errors
    def close(self) -> None:
        """Checkpoint (:meth:`checkpoint`: flush, cut the write log), close the client and, for Milvus Lite, stop the
        in-process server of this file (so another process, or a new backend here, opens it from disk)."""
        with self._lock.writing(), self._wal_lock:
            self._checkpoint(self.log.read().last)
            self.client.close()
            if self.lite:
                from milvus_lite import server_manager_instance

                server_manager_instance.release_server(self.uri)

    # -- search --------------------------------------------------------------------------------------------------

    @engine_errors
    def search(
        self,
        query: str,
        k: int = 10,
        mode: RetrievalMode = "hybrid",
        one_per_doc: bool = False,
        fusion: FusionMethod | None = None,
        filters: Filters | None = None,
    ) -> list[SearchResult]:
        """Top-``k`` passages for ``query``, as :meth:`citerag.index.retrieve.Retriever.search`; filters are evaluated by
        Milvus inside both searches (before top-k).

        Raises:
            ValueError: unknown mode, ``k < 1``, malformed filters, or a fusion Milvus cannot do (``"bounded"``).
        """
        check_search(mode, k)
        fusion = check_fusion(fusion, UNSUPPORTED_FUSION) if fusion else self.fusion
        try:
            expression = milvus_expression(filters)
        except Unsatisfiable:
            return []
        depth = candidate_depth(self.candidates, k, one_per_doc, mode)
        top_k = fusion_depth(k, depth, one_per_doc)
        with self._lock.reading():
            if mode == "hybrid" and fusion == "rrf" and self.rrf_in_engine:
                rows = self._hybrid_in_engine(query, depth, expression, top_k)
                ranked = Ranking.of([Hit(i, score) for i, (score, _) in enumerate(rows)])
                passages = [p for _, p in rows]
                bm25 = dense = Ranking.empty()
            else:
                passages, bm25, dense = self._two_searches(query, depth, expression, mode)
                ranked = rank_candidates(mode, bm25, dense, fusion, top_k, rrf_k=self.rrf_k, weights=self.weights)
            chosen = select_top(ranked, passages, k, one_per_doc)
            documents = self._documents_by_id([passages[row].doc_id for row in chosen.rows.tolist()])
        return search_results(chosen, bm25, dense, passages, documents)

    def bm25_query(self, query: str) -> str:
        """What is sent to the BM25 field for ``query`` (``""`` when it has no term)."""
        return " ".join(tokenize(query)) if self.layout.analyzer == "citerag" else fold(query)

    def _two_searches(
        self, query: str, depth: int, expression: str, mode: RetrievalMode
    ) -> tuple[list[Passage], Ranking, Ranking]:
        """BM25 and dense candidates as rankings whose rows index the returned passage list (local to this query:
        BM25's passages first, then dense's new ones)."""
        passages: list[Passage] = []
        row_of: dict[str, int] = {}

        def hits(found: list[dict[str, Any]]) -> Ranking:
            out = []
            for item in found:
                chunk_id = item["chunk_id"]
                if chunk_id not in row_of:
                    row_of[chunk_id] = len(passages)
                    passages.append(_passage(item["entity"] | {"chunk_id": chunk_id}))
                out.append(Hit(row_of[chunk_id], abs(float(item["distance"]))))
            return Ranking.of(out)

        bm25 = dense = Ranking.empty()
        text = self.bm25_query(query)
        if mode in ("hybrid", "bm25") and text:
            found = self.client.search(
                self.passages_collection, data=[text], anns_field="sparse", limit=depth, filter=expression,
                output_fields=_PASSAGE_FIELDS[1:], search_params={"metric_type": "BM25"},
            )[0]
            bm25 = hits(found)
        if mode in ("hybrid", "dense"):
            found = self.client.search(
                self.passages_collection, data=[self._query_vector(query)], anns_field="dense", limit=depth,
                filter=expression, output_fields=_PASSAGE_FIELDS[1:], search_params=self._dense_params(depth),
            )[0]
            dense = hits(found)
        return passages, bm25, dense

    def _hybrid_in_engine(
        self, query: str, depth: int, expression: str, top_k: int
    ) -> list[tuple[float, Passage]]:
        """Hybrid RRF in Milvus: ``hybrid_search`` over both fields with ``RRFRanker(rrf_k)``; ``(score, passage)``
        best first, ``top_k`` at most (as the client-side fusion keeps)."""
        requests = [
            AnnSearchRequest([self._query_vector(query)], "dense", self._dense_params(depth), depth, expr=expression)
        ]
        text = self.bm25_query(query)
        if text:
            requests.insert(0, AnnSearchRequest([text], "sparse", {"metric_type": "BM25"}, depth, expr=expression))
        found = self.client.hybrid_search(
            self.passages_collection, requests, RRFRanker(self.rrf_k), limit=top_k,
            output_fields=_PASSAGE_FIELDS[1:],
        )[0]
        return [(float(item["distance"]), _passage(item["entity"] | {"chunk_id": item["chunk_id"]})) for item in found]

    def _query_vector(self, query: str) -> list[float]:
        return self.embedder.encode([fold(query)])[0].tolist()

    def _dense_params(self, depth: int) -> dict[str, Any]:
        return {"metric_type": "IP", "params": {"ef": max(self.hnsw_ef, depth)}}

    # -- documents -----------------------------------------------------------------------------------------------

    @engine_errors
    def get(self, doc_id: str) -> Document | None:
        """One document by id, or ``None``."""
        with self._lock.reading():
            return self._documents_by_id([doc_id]).get(doc_id)

    @engine_errors
    def count(self) -> int:
        """How many documents the collections hold."""
        with self._lock.reading():
            return self._count(self.documents_collection)

    @engine_errors
    def documents(self, offset: int = 0, limit: int = 100) -> list[Document]:
        """Documents in insertion order (a replaced document moves to the end, a metadata-only change keeps its
        place), ``limit`` from ``offset``.

        Milvus has no ordered query, so this reads every ``(doc_id, seq)`` pair (a few MB per million documents)
        and then fetches the page.

        Raises:
            ValueError: ``offset < 0`` or ``limit < 0``.
        """
        check_page(offset, limit)
        with self._lock.reading():
            rows = self._scan(self.documents_collection, ["doc_id", "seq"])
            order = sorted(rows, key=lambda r: (r["seq"], r["doc_id"]))
            page = [row["doc_id"] for row in order[offset : offset + limit]]
            found = self._documents_by_id(page)
        return [found[doc_id] for doc_id in page if doc_id in found]

    @engine_errors
    def passages_of(self, doc_id: str) -> list[Passage]:
        """The passages of one document in order (``[]`` for an unknown id)."""
        with self._lock.reading():
            rows = self.client.query(
                self.passages_collection, filter=f"doc_id == {json.dumps(doc_id, ensure_ascii=False)}",
                output_fields=_PASSAGE_FIELDS,
            )
        return sorted((_passage(row) for row in rows), key=lambda p: p.ordinal)

    @engine_errors
    def stats(self) -> dict[str, int | str]:
        """``documents`` and ``passages`` (counts), ``version`` (``milvus-<last seq>-<documents>``: changes with
        every write), ``backend``, ``uri``, ``analyzer``, ``fusion`` (the hybrid default in use) and, when the
        fusion asked for could not be run, ``fusion_fallback`` (e.g. ``"bounded -> rrf: bounded needs ..."``)."""
        with self._lock.reading():
            stats: dict[str, int | str] = {
                "backend": self.name,
                "uri": self.uri,
                "analyzer": self.layout.analyzer,
                "fusion": self.fusion,
                "documents": self._count(self.documents_collection),
                "passages": self._count(self.passages_collection),
                "version": self._version(),
            }
        if self.fusion_fallback:
            stats["fusion_fallback"] = self.fusion_fallback
        return stats

    def _version(self) -> str:
        """``milvus-<last seq>-<documents>``: every add or replace takes a new seq, every delete lowers the count."""
        return f"milvus-{self._next_seq - 1}-{self._count(self.documents_collection)}"

    def _count(self, collection: str) -> int:
        return int(self.client.query(collection, filter="", output_fields=["count(*)"])[0]["count(*)"])

    def _scan(self, collection: str, fields: list[str], expression: str = "") -> list[dict[str, Any]]:
        """Every row matching ``expression`` (all rows for ``""``), ``fields`` only, read in batches."""
        iterator = self.client.query_iterator(collection, batch_size=4096, filter=expression, output_fields=fields)
        rows: list[dict[str, Any]] = []
        try:
            while batch := iterator.next():
                rows.extend(batch)
        finally:
            iterator.close()
        return rows

    def _documents_by_id(self, doc_ids: Sequence[str]) -> dict[str, Document]:
        unique = list(dict.fromkeys(doc_ids))
        if not unique:
            return {}
        rows = self._get_documents(unique, _DOCUMENT_FIELDS)
        return {
            row["doc_id"]: Document(row["doc_id"], row["title"], row["text"], row["label"], dict(row["meta"] or {}))
            for row in rows
        }

    # -- writes --------------------------------------------------------------------------------------------------

    @engine_errors
    def write(
        self, upserts: Sequence[Document] = (), deletes: Sequence[str] = (), *, show_progress: bool = False
    ) -> WriteReport:
        """Insert or replace ``upserts`` by ``doc_id`` and remove ``deletes`` (rules and report: :mod:`citerag.index.writes`,
        the same as the embedded backend's): chunk and embed what is new or changed, write.

        A replaced document's old passages are deleted (those whose embedded text did not change keep their
        vectors); a metadata-only change rewrites the document's row and its passages' filter columns with their
        stored vectors (nothing embedded, the document keeps its place and ``version`` stays); an identical document
        is left as it is; a document with no text is skipped (a stored one with that id is kept).

        Args:
            show_progress: show the encoder's progress bar (first-run ingest).

        Raises:
            IngestError: a document is malformed (the id rule of :mod:`citerag.index.ids`, an id with ``"`` or ``\\``, text
                over Milvus's 65,535-byte VARCHAR, the same id twice with different content, a title too long to
                chunk); nothing is written.
            DocumentNotFound: an id of ``deletes`` is not stored; nothing is written.

        Durability: a write that changes something is appended to the write-ahead log (fsynced) before anything is
        embedded or written to Milvus (module docstring); one that then fails is logged as aborted (never replayed;
        what Milvus had already applied of it stays, as without the log).
        """
        batch = _validated(list(upserts))
        deletes = list(dict.fromkeys(deletes))
        embedded = 0
        with self._lock.writing(), self._wal_lock:
            existing = self._documents_by_id([doc.doc_id for doc in batch] + deletes)
            plan = classify(batch, existing, deletes, chunk=self.chunker.chunk)
            if not plan.writes_nothing:  # logged (fsynced) before anything is embedded or written to Milvus
                entry = {"documents": [*plan.changed.values(), *plan.updated.values()], "doc_ids": plan.deleted}
                with self.log.applying("write", after=self._held, **entry) as seq:
                    embedded = self._carry_out(plan, existing, show_progress)
                self._checkpoint_when_due(seq, len(plan.new_passages))
            version = self._version()
        return plan.report(embedded, version)

    def _carry_out(self, plan: WritePlan, existing: dict[str, Document], show_progress: bool = False) -> int:
        """Apply ``plan`` (made against ``existing``, the stored versions of its documents) to the collections;
        returns how many passage texts were embedded. Caller holds the write lock."""
        passages = plan.new_passages
        # the stored vectors of re-chunked documents are read before the delete below can remove them
        vectors, embedded = vectors_for(
            [model_text(p.text, plan.changed[p.doc_id].title) for p in passages],
            self._old_vectors([existing[doc_id] for doc_id in plan.changed if doc_id in existing]),
            lambda missing: self.embedder.encode(missing, show_progress=show_progress),
            self.layout.embedding_dim,
        )
        if plan.deleted:
            self._delete_documents(plan.deleted)
        if plan.updated:
            self._rewrite_metadata(list(plan.updated.values()))
        if plan.changed:
            self._write(list(plan.changed.values()), passages, vectors)
        return embedded

    @engine_errors
    def write_passages(self, documents: list[Document], passages: list[Passage], vectors: np.ndarray) -> None:
        """Write already chunked and embedded documents (bulk loads, benchmarks): ``passages`` of ``documents``
        with their ``vectors`` (float32, shape ``(len(passages), dim)``, L2-normalised), replacing those
        documents' old passages.

        Raises:
            ValueError: ``vectors`` has the wrong shape, or a passage belongs to none of ``documents``.
            IngestError: as :meth:`write`.
        """
        if vectors.shape != (len(passages), self.layout.embedding_dim):
            wanted = (len(passages), self.layout.embedding_dim)
            raise ValueError(f"expected vectors of shape {wanted}, got {vectors.shape}")
        ids = {doc.doc_id for doc in _validated(documents)}
        if stray := {p.doc_id for p in passages} - ids:
            raise ValueError(f"passages of documents not given: {sorted(stray)[:5]}")
        with self._lock.writing(), self._wal_lock:
            # logged as the documents alone: a replay chunks and embeds them again (the same chunker and encoder)
            with self.log.applying("write", after=self._held, documents=documents) as seq:
                self._write(documents, passages, vectors)
            self._checkpoint_when_due(seq, len(passages))

    # -- write-ahead log -----------------------------------------------------------------------------------------

    @engine_errors
    def recover(self) -> int:
        """Replay into Milvus the logged writes after the last one it is known to hold (module docstring), then
        checkpoint. Run by every open; running it again changes nothing (a replayed write that Milvus holds is left
        as it is). Returns how many logged writes were replayed.

        Raises:
            WriteLogDamaged: a line of the log (other than a torn last one), or ``held.json``, is unreadable.
            IndexUnrecoverable: the log holds an entry the Milvus backend never writes (a full build).
        """
        with self._lock.writing(), self._wal_lock:
            held, recorded = self._read_held()
            logged = self.log.read()
            held = max(held, logged.base)  # a cut follows the record it was cut to
            steps = steps_after(logged, held)
            aborted = {e.target for e in logged.entries if e.op == "abort"}
            replayed = sum(1 for e in logged.entries if e.seq > held and e.op == "write" and e.seq not in aborted)
            if steps:
                log.warning("%s: replaying %d logged write(s) after entry %d into Milvus at %s", self.log.path,
                            replayed, held, self.uri)
            for step in steps:
                self._replay(step)
            self._held = held
            if logged.last > held:
                self._checkpoint(logged.last)
            elif not recorded:
                self._record_held(held)
        return replayed

    @engine_errors
    def checkpoint(self) -> None:
        """Flush both collections, record that Milvus holds every logged write (``held.json``) and cut the log."""
        with self._lock.writing(), self._wal_lock:
            self._checkpoint(self.log.read().last)

    def _replay(self, step: ReplayStep) -> None:
        """Apply one folded step of logged writes, unlogged: its documents upserted (an identical stored one left as
        it is), its deletes of stored ids carried out (the others are already gone). Caller holds both locks."""
        if step.sources is not None:
            raise IndexUnrecoverable(
                f"{self.log.path}: entry {step.seq} is a full build from files, which the Milvus backend never logs; "
                "this is not a Milvus write log (check CITERAG_MILVUS_URI and the index directory)"
            )
        existing = self._documents_by_id([doc.doc_id for doc in step.upserts] + list(step.deletes))
        deletes = [doc_id for doc_id in step.deletes if doc_id in existing]
        self._carry_out(classify(list(step.upserts), existing, deletes, chunk=self.chunker.chunk), existing)

    def _checkpoint_when_due(self, seq: int, n_passages: int) -> None:
        """Checkpoint after log entry ``seq`` when the write was large (its passages are better sealed and indexed
        now than searched in Milvus's growing buffer) or enough writes were logged since the last checkpoint."""
        if n_passages >= FLUSH_AFTER or seq - self._held >= CHECKPOINT_ENTRIES:
            self._checkpoint(seq)

    def _checkpoint(self, seq: int) -> None:
        """Flush, then record ``seq`` (the log's last entry) as held and cut the log through it. Caller holds both
        locks (no entry is appended meanwhile)."""
        for name in (self.passages_collection, self.documents_collection):
            self.client.flush(name)
        if seq > self._held:
            self._record_held(seq)
            self.log.cut(seq)
            self._held = seq

    def _record_held(self, seq: int) -> None:
        atomic_write_text(self.wal_dir / HELD_FILE, json.dumps(
            {"wal_id": self.wal_id, "held": seq, "uri": self.uri, "documents": self.documents_collection}
        ) + "\n")

    def _read_held(self) -> tuple[int, bool]:
        """``(held, recorded)``: the last log entry Milvus holds flushed, and whether ``held.json`` records it for
        these collections. A log recorded for other collections is moved aside (module docstring).

        Raises:
            WriteLogDamaged: ``held.json`` is unreadable.
        """
        path = self.wal_dir / HELD_FILE
        if not path.is_file():
            return 0, False  # a new log, or one written before citerag recorded this: replayed from its start
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
            wal_id, held = str(recorded["wal_id"]), int(recorded["held"])
        except (ValueError, KeyError, TypeError) as exc:
            raise WriteLogDamaged(f"{path}: unreadable ({exc}); the write log beside it cannot be replayed") from exc
        if wal_id == self.wal_id:
            return held, True
        aside = self.wal_dir / "set-aside" / f"{time.strftime('%Y%m%dT%H%M%S')}-{wal_id}"
        aside.mkdir(parents=True, exist_ok=True)
        for name in (self.log.path.name, HELD_FILE):
            if (self.wal_dir / name).exists():
                shutil.move(str(self.wal_dir / name), str(aside / name))
        log.warning("%s: the write log was kept for other Milvus collections (%s: dropped and created again, or "
                    "another Milvus); moved to %s and not replayed", self.wal_dir, self.documents_collection, aside)
        return 0, False

    def _delete_documents(self, doc_ids: list[str]) -> None:
        """Delete documents and all their passages. Caller holds the write lock."""
        self._delete_passages_of(doc_ids)
        for start in range(0, len(doc_ids), WRITE_BATCH):
            self.client.delete(self.documents_collection, filter=_in("doc_id", doc_ids[start : start + WRITE_BATCH]))

    def _rewrite_metadata(self, documents: list[Document]) -> None:
        """Store new metadata (and label) for ``documents``, whose title and text are unchanged: their rows and
        their passages' filter columns are rewritten with the stored passages and vectors (nothing is embedded);
        each keeps its ``seq`` (its place in :meth:`documents`). Caller holds the write lock."""
        for start in range(0, len(documents), WRITE_BATCH):
            batch = {doc.doc_id: doc for doc in documents[start : start + WRITE_BATCH]}
            stored = {row["doc_id"]: row for row in self._get_documents(list(batch), ["seq", "n_passages"])}
            fields = [*_PASSAGE_FIELDS, "dense"]
            rows = [
                self._passage_row(batch[row["doc_id"]], _passage(row), np.asarray(row["dense"], dtype=np.float32))
                for row in self._scan(self.passages_collection, fields, _in("doc_id", list(batch)))
            ]
            for at in range(0, len(rows), WRITE_BATCH):
                self.client.upsert(self.passages_collection, rows[at : at + WRITE_BATCH])
            self.client.upsert(self.documents_collection, [
                _document_row(doc, stored[doc_id]["seq"], stored[doc_id]["n_passages"]) for doc_id, doc in batch.items()
            ])

    def _get_documents(self, doc_ids: Sequence[str], fields: list[str]) -> list[dict[str, Any]]:
        """Rows of the documents collection by id. A query with :func:`_in`'s escaped literals, not
        ``client.get``/``delete(ids=...)``: pymilvus 3.0 quotes string ids without escaping backslashes."""
        rows: list[dict[str, Any]] = []
        for start in range(0, len(doc_ids), WRITE_BATCH):
            batch = doc_ids[start : start + WRITE_BATCH]
            rows += self.client.query(
                self.documents_collection, filter=_in("doc_id", batch),
                output_fields=list(dict.fromkeys(["doc_id", *fields])),
            )
        return rows

    def _old_vectors(self, documents: list[Document]) -> dict[str, np.ndarray]:
        """The stored vectors of the passages of ``documents`` (their stored versions), keyed by the text they
        embed."""
        out: dict[str, np.ndarray] = {}
        for start in range(0, len(documents), WRITE_BATCH):
            titles = {doc.doc_id: doc.title for doc in documents[start : start + WRITE_BATCH]}
            for row in self._scan(self.passages_collection, ["doc_id", "text", "dense"], _in("doc_id", list(titles))):
                out[model_text(row["text"], titles[row["doc_id"]])] = np.asarray(row["dense"], dtype=np.float32)
        return out

    def _delete_passages_of(self, doc_ids: list[str], keep: set[str] | None = None) -> None:
        """Delete the passages of ``doc_ids`` except the chunk ids in ``keep`` (they are being overwritten)."""
        for start in range(0, len(doc_ids), WRITE_BATCH):
            batch = doc_ids[start : start + WRITE_BATCH]
            rows = self._scan(self.passages_collection, ["chunk_id"], _in("doc_id", batch))
            stale = [row["chunk_id"] for row in rows if not keep or row["chunk_id"] not in keep]
            for at in range(0, len(stale), WRITE_BATCH):
                self.client.delete(self.passages_collection, filter=_in("chunk_id", stale[at : at + WRITE_BATCH]))

    def _write(self, documents: list[Document], passages: list[Passage], vectors: np.ndarray) -> None:
        """Upsert ``documents`` and their ``passages``; delete their passages that no longer exist. Caller holds
        the write lock."""
        by_id = {doc.doc_id: doc for doc in documents}
        self._delete_passages_of(list(by_id), keep={p.chunk_id for p in passages})
        rows = []
        for passage, vector in zip(passages, vectors, strict=True):
            doc = by_id[passage.doc_id]
            rows.append(self._passage_row(doc, passage, vector))
            if len(rows) == WRITE_BATCH:
                self.client.upsert(self.passages_collection, rows)
                rows = []
        if rows:
            self.client.upsert(self.passages_collection, rows)
        counts: dict[str, int] = {}
        for passage in passages:
            counts[passage.doc_id] = counts.get(passage.doc_id, 0) + 1
        doc_rows = []
        for doc in documents:
            doc_rows.append(_document_row(doc, self._next_seq, counts.get(doc.doc_id, 0)))
            self._next_seq += 1
        for start in range(0, len(doc_rows), WRITE_BATCH):
            self.client.upsert(self.documents_collection, doc_rows[start : start + WRITE_BATCH])

    def _passage_row(self, doc: Document, passage: Passage, vector: np.ndarray) -> dict[str, Any]:
        embedded = model_text(passage.text, doc.title)
        return {
            "chunk_id": passage.chunk_id,
            "doc_id": passage.doc_id,
            "ordinal": passage.ordinal,
            "char_start": passage.start,
            "char_end": passage.end,
            "n_tokens": passage.n_tokens,
            "text": passage.text,
            "bm25_text": " ".join(tokenize(embedded)) if self.layout.analyzer == "citerag" else embedded,
            "dense": vector.tolist(),
            JSON_FIELD: {**{k: fold_value(v) for k, v in doc.meta.items()}, "doc_id": doc.doc_id.casefold()},
            **typed_columns(doc.meta),
        }


def _document_row(doc: Document, seq: int, n_passages: int) -> dict[str, Any]:
    """The documents collection's row of ``doc``."""
    return {
        "doc_id": doc.doc_id, "title": doc.title, "text": doc.text, "label": doc.label, "meta": doc.meta,
        "fingerprint": document_fingerprint(doc), "seq": seq, "n_passages": n_passages, "placeholder": [0.0, 0.0],
    }


def _layout_dict(layout: MilvusLayout) -> dict[str, Any]:
    return {name: getattr(layout, name) for name in layout.__slots__}  # type: ignore[attr-defined]


def _in(field: str, values: Sequence[str]) -> str:
    """``field in [...]`` with JSON-escaped string literals (double quotes; ``\\`` and ``\"`` escaped)."""
    return f"{field} in {json.dumps(list(values), ensure_ascii=False)}"


def _passage(row: dict[str, Any]) -> Passage:
    return Passage(
        chunk_id=row["chunk_id"], doc_id=row["doc_id"], ordinal=int(row["ordinal"]), start=int(row["char_start"]),
        end=int(row["char_end"]), text=row["text"], n_tokens=int(row["n_tokens"]),
    )


def _validated(documents: list[Document]) -> list[Document]:
    """``documents`` with exact repeats dropped (:func:`citerag.index.writes.check_documents`), checked for what Milvus
    cannot store.

    Raises:
        IngestError: as :func:`~citerag.index.writes.check_documents` (the id rule, one id with two contents), an id with
            ``"`` or ``\\``, or a field over Milvus's VARCHAR limit.
    """
    for i, doc in enumerate(documents):
        where = f"documents[{i}]"
        if isinstance(doc.doc_id, str) and ('"' in doc.doc_id or "\\" in doc.doc_id):
            # pymilvus 3.0's query iterator pages on the primary key, quoting it without escaping.
            raise IngestError(where, 'doc_id may not contain a double quote or a backslash with the Milvus backend')
        for name in ("title", "text", "label"):
            if len(getattr(doc, name).encode("utf-8")) > VARCHAR_MAX:
                raise IngestError(where, f"{name} is longer than {VARCHAR_MAX:,} bytes (UTF-8), Milvus's VARCHAR limit")
    return check_documents(documents)
