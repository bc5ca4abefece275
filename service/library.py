"""The Python API: one :class:`Library` over an index, which a notebook uses as ``citerag.open(...)`` and which the
HTTP routes (:mod:`citerag.service.routes`) and the CLI (:mod:`citerag.service.cli`) call for every search, answer,
document read and write. ``import citerag`` exposes it (the top-level package, ``library/``).

Every method takes plain Python values, checks them with the HTTP API's own request schemas
(:mod:`citerag.service.schemas`) and returns the HTTP API's response objects (pydantic models: ``.model_dump()`` is
the JSON the API sends). Bad input raises :class:`~citerag.service.errors.InvalidRequest` with the messages of the
HTTP 422 bodies; an unknown document raises :class:`~citerag.index.errors.DocumentNotFound` with the 404's message.
Writes go through the backend's one write path (:meth:`~citerag.index.backend.SearchBackend.write`), as
``POST /documents`` does.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal, overload

from pydantic import Field, TypeAdapter, ValidationError

from citerag.index.errors import DocumentNotFound, IndexNotFound
from citerag.index.types import Document, RetrievalMode
from citerag.service.conversation import Turn, check_history
from citerag.service.errors import InvalidRequest
from citerag.service.schemas import (
    MAX_DOCUMENTS_PER_REQUEST,
    AskRequest,
    AskResponse,
    DocumentIn,
    DocumentOut,
    DocumentsPage,
    DocumentSummary,
    EvidenceOut,
    HistoryTurn,
    PassageOut,
    SearchRequest,
    WriteReportOut,
)

if TYPE_CHECKING:
    from citerag.index.backend import SearchBackend
    from citerag.service.answering import Answer
    from citerag.service.answering.runner import AnswerPipeline
    from citerag.service.settings import Settings

#: What :meth:`Library.ask` takes as a conversation's earlier turns: ``{"role", "content", "doc_ids"}`` mappings (as
#: in ``/ask``), :class:`~citerag.service.schemas.HistoryTurn` or :class:`~citerag.service.conversation.Turn`
#: objects, or earlier answers
#: (:class:`~citerag.service.schemas.AskResponse`: its question and its answer, with the documents it cited).
HistoryItem = Mapping[str, Any] | HistoryTurn | Turn | AskResponse
StreamKind = Literal["passages", "evidence", "token", "answer"]
_DOCUMENTS = TypeAdapter(Annotated[list[DocumentIn], Field(min_length=1, max_length=MAX_DOCUMENTS_PER_REQUEST)])


@dataclass(frozen=True, slots=True)
class StreamEvent:
    """One event of an answer's stream, in the order of ``POST /ask``'s server-sent events: ``passages`` (list of
    :class:`~citerag.service.schemas.PassageOut`), ``evidence`` (list of
    :class:`~citerag.service.schemas.EvidenceOut`, as soon as it is chosen), ``token`` (str, a piece of the answer as
    it is written), then ``answer`` (the checked :class:`~citerag.service.schemas.AskResponse`)."""

    kind: StreamKind
    data: list[PassageOut] | list[EvidenceOut] | str | AskResponse

    def json(self) -> dict[str, Any]:
        """The event's ``data`` as the HTTP stream sends it (JSON types: lists, not tuples)."""
        if isinstance(self.data, AskResponse):
            return self.data.model_dump(mode="json")
        if isinstance(self.data, str):
            return {"text": self.data}
        return {self.kind: [item.model_dump(mode="json") for item in self.data]}


@dataclass
class Library:
    """An index of abstracts to search and ask (module docstring). Make one with :meth:`open` or :meth:`build`.

    Attributes:
        backend: the search backend (the embedded index or Milvus).
        answerer: returns the answering pipeline, loading the model the first time (a call that waits).
        default_k: passages an answer reads when ``ask`` gives no ``k``.
        history_max_turns, history_max_chars: the bounds of an ``ask`` history (more: :class:`InvalidRequest`).
        observe: receives every finished answer (the service counts them in its metrics).
        built: what :meth:`build` changed (``None`` for a library that was opened).
    """

    backend: SearchBackend | None
    answerer: Callable[[], AnswerPipeline] | None = None
    default_k: int = 8
    history_max_turns: int = 20
    history_max_chars: int = 16_000
    observe: Callable[[Answer], None] | None = None
    built: WriteReportOut | None = None

    # -- opening and building ------------------------------------------------------------------------------------

    @classmethod
    def open(cls, index_dir: str | Path | None = None, settings: Settings | None = None) -> Library:
        """The index in ``index_dir`` (default: ``settings.index_dir``, ``.citerag/`` or ``$CITERAG_INDEX_DIR``),
        recovered as every command does, never built (:meth:`build` builds).

        Raises:
            IndexNotFound: there is no index in ``index_dir``.
            IndexUnrecoverable: the index and its write log cannot account for an acknowledged write.
        """
        from citerag.index.lifecycle import recover_index
        from citerag.service.pipeline import index_setup, open_backend, open_milvus_backend

        settings = _settings(index_dir, settings)
        if settings.backend == "milvus":
            return cls.of(settings, open_milvus_backend(settings, show_progress=False))
        index = recover_index(index_setup(settings), show_progress=False)
        if index is None:
            raise IndexNotFound(f"no index in {settings.index_dir}: run `citerag index` (or `make serve`) to build one")
        return cls.of(settings, open_backend(settings, index))

    @classmethod
    def build(
        cls, index_dir: str | Path | None, sources: Iterable[str | Path], *, add: bool = False, progress: bool = True,
        settings: Settings | None = None,
    ) -> Library:
        """Index ``sources`` (files or directories of ``*.jsonl``, ``*.jsonl.gz`` or the seed format's ``*.txt``)
        into ``index_dir`` and open it: exactly their documents (unchanged ones keep their vectors), or with
        ``add`` added to the live index (documents replaced by id). ``progress`` shows progress bars (reading,
        chunking, embedding) on stderr. What changed is :attr:`built`.

        Raises:
            IngestError: a source is bad (``file:line: reason``); nothing is written.
        """
        from citerag.index.ingest import load_documents
        from citerag.index.lifecycle import add_sources, rebuild_sources
        from citerag.service.pipeline import index_setup, open_backend, open_milvus_backend

        settings = _settings(index_dir, settings)
        paths = [Path(source) for source in sources]
        if settings.backend == "milvus":
            backend: SearchBackend = open_milvus_backend(settings, show_progress=progress)
            report = backend.write(load_documents(paths))
        else:
            index, report = (add_sources if add else rebuild_sources)(index_setup(settings), paths,
                                                                       show_progress=progress)
            backend = open_backend(settings, index)
        library = cls.of(settings, backend)
        library.built = WriteReportOut.of(report)
        return library

    @classmethod
    def of(cls, settings: Settings, backend: SearchBackend) -> Library:
        """A library over ``backend`` configured by ``settings``; the answering model loads at the first
        :meth:`ask` (:func:`citerag.service.pipeline.open_answerer`)."""
        from citerag.service import pipeline

        return cls(backend, _once(lambda: pipeline.open_answerer(settings, backend)), settings.ask_k,
                   settings.history_max_turns, settings.history_max_chars)

    # -- reading -------------------------------------------------------------------------------------------------

    def search(
        self, query: str, k: int = 10, mode: RetrievalMode = "hybrid", filters: Mapping[str, Any] | None = None,
        one_per_doc: bool = False,
    ) -> list[PassageOut]:
        """The top-``k`` passages for ``query`` (``POST /search``): ``mode`` ``"hybrid"`` (BM25 and dense fused),
        ``"bm25"`` or ``"dense"``; ``filters`` on metadata (``{"year": {"gte": 2025}}``); with ``one_per_doc`` the
        best passage of each document only.

        Raises:
            InvalidRequest: a blank or over-long query, ``k`` outside 1-100, an unknown mode or filter operator.
        """
        request = _valid(SearchRequest, query=query, k=k, mode=mode, one_per_doc=one_per_doc,
                         filters=dict(filters) if filters is not None else None)
        results = self._backend().search(request.query, k=request.k, mode=request.mode,
                                         one_per_doc=request.one_per_doc, filters=request.filters)
        return [PassageOut.of(result) for result in results]

    @overload
    def ask(self, question: str, k: int | None = None, filters: Mapping[str, Any] | None = None,
            history: Sequence[HistoryItem] | None = None, stream: Literal[False] = False) -> AskResponse: ...

    @overload
    def ask(self, question: str, k: int | None = None, filters: Mapping[str, Any] | None = None,
            history: Sequence[HistoryItem] | None = None, *, stream: Literal[True]) -> Iterator[StreamEvent]: ...

    def ask(
        self, question: str, k: int | None = None, filters: Mapping[str, Any] | None = None,
        history: Sequence[HistoryItem] | None = None, stream: bool = False,
    ) -> AskResponse | Iterator[StreamEvent]:
        """Answer ``question`` from the top-``k`` passages with checked ``[n]`` citations, or abstain
        (``POST /ask``). With ``history`` (earlier turns, oldest first) a follow-up is made standalone first
        (``question_used``). With ``stream=True``, the events of ``/ask``'s stream as they come
        (:class:`StreamEvent`: ``passages``, ``evidence``, ``token``..., ``answer``); closing the iterator stops the
        model at its next token. The first call loads the answering model.

        Raises:
            InvalidRequest: a blank or over-long question, ``k`` outside 1-20, a bad filter, a history over the
                bounds (checked at the call, also with ``stream=True``).
            ModelNotFound: the answering model is not installed.
        """
        request = _valid(AskRequest, question=question, k=k, filters=dict(filters) if filters is not None else None)
        turns = self._turns(history or ())
        pipeline = self._pipeline()
        k = request.k or self.default_k
        if stream:
            return self._stream(pipeline, request, k, turns)
        answer = pipeline.ask(request.question, k=k, filters=request.filters, history=turns)
        if self.observe is not None:
            self.observe(answer)
        return AskResponse.of(answer)

    def document(self, doc_id: str) -> DocumentOut:
        """One document: its text, display form, metadata and passage spans (``GET /documents/{doc_id}``).

        Raises:
            DocumentNotFound: no document has ``doc_id``.
        """
        backend = self._backend()
        doc = backend.get(doc_id)
        if doc is None:
            raise DocumentNotFound(f"no document with id {doc_id!r}; list ids with GET /documents")
        spans = [{"chunk_id": p.chunk_id, "ordinal": p.ordinal, "start": p.start, "end": p.end}
                 for p in backend.passages_of(doc_id)]
        return DocumentOut.with_text(doc, spans)

    def documents(self, offset: int = 0, limit: int = 100) -> DocumentsPage:
        """Documents in index order, ``limit`` from ``offset`` (``GET /documents``).

        Raises:
            InvalidRequest: ``offset`` below 0 or ``limit`` below 1.
        """
        for name, value, least in (("offset", offset, 0), ("limit", limit, 1)):
            if value < least:
                raise InvalidRequest([{"loc": [name], "msg": f"Input should be greater than or equal to {least}",
                                       "type": "greater_than_equal"}])
        backend = self._backend()
        page = [DocumentSummary.of(d) for d in backend.documents(offset, limit)]
        return DocumentsPage(total=backend.count(), offset=offset, limit=limit, documents=page)

    def stats(self) -> dict[str, int | str]:
        """The backend's counts and version (``documents``, ``passages``, ``version``, ...), as ``/health`` reads
        them."""
        return self._backend().stats()

    def notes(self) -> list[str]:
        """What an operator should know about the live index: records skipped at ingest, an empty index (the
        embedded backend; ``[]`` for Milvus)."""
        from citerag.index.lifecycle import index_notes

        index = getattr(self._backend(), "index", None)
        return index_notes(index) if index is not None else []

    @property
    def path(self) -> Path | None:
        """The live index version's directory (the embedded backend; ``None`` for Milvus)."""
        index = getattr(self.backend, "index", None)
        return index.path if index is not None else None

    # -- writing -------------------------------------------------------------------------------------------------

    def add(self, documents: Iterable[Mapping[str, Any] | DocumentIn]) -> WriteReportOut:
        """Add documents, or replace them by id (``POST /documents``): each ``{"id", "title", "text", "venue",
        "year", "url", "authors"}`` (``text`` required). Only new and changed passages are embedded; the write is
        committed as a new index version.

        Raises:
            InvalidRequest: no document or more than 1000, a document the API would refuse, one id for two
                different documents.
            IngestError: a document the backend cannot store; nothing is written.
        """
        try:
            valid = _DOCUMENTS.validate_python(list(documents))
        except ValidationError as exc:
            raise InvalidRequest.of(exc) from None
        docs = distinct([item.to_document() for item in valid])
        return WriteReportOut.of(self._backend().write(docs))

    def delete(self, doc_ids: str | Sequence[str]) -> WriteReportOut:
        """Remove documents and all their passages (``DELETE /documents/{doc_id}``), as one write.

        Raises:
            DocumentNotFound: an id is not stored; nothing is written.
        """
        return WriteReportOut.of(self._backend().delete([doc_ids] if isinstance(doc_ids, str) else list(doc_ids)))

    # -- internals -----------------------------------------------------------------------------------------------

    def _backend(self) -> SearchBackend:
        if self.backend is None:
            raise IndexNotFound("this library has no index: open one with citerag.open(index_dir)")
        return self.backend

    def _pipeline(self) -> AnswerPipeline:
        if self.answerer is None:
            raise IndexNotFound("this library has no answerer: open one with citerag.open(index_dir)")
        return self.answerer()

    def _turns(self, history: Sequence[HistoryItem]) -> list[Turn]:
        """``history`` as turns, checked like ``/ask``'s ``history`` and against this library's bounds."""
        turns: list[Turn] = []
        for position, item in enumerate(history):
            if isinstance(item, AskResponse):
                turns += [Turn("user", item.question),
                          Turn("assistant", item.answer, tuple(dict.fromkeys(c.doc_id for c in item.citations)))]
                continue
            if isinstance(item, Turn):
                turns.append(item)
                continue
            try:
                turn = item if isinstance(item, HistoryTurn) else HistoryTurn.model_validate(dict(item))
            except ValidationError as exc:
                raise InvalidRequest.of(exc, ("history", position)) from None
            turns.append(turn.to_turn())
        try:
            check_history(turns, self.history_max_turns, self.history_max_chars)
        except ValueError as exc:
            raise InvalidRequest.at(["history"], str(exc)) from None
        return turns

    def _stream(self, pipeline: AnswerPipeline, request: AskRequest, k: int, turns: list[Turn]) -> Iterator[StreamEvent]:
        """The answer's events (:meth:`ask` with ``stream=True``): the pipeline runs in a worker thread; closing
        the iterator tells it to stop at the model's next token. An answering failure is raised here."""
        pieces: queue.Queue[tuple[str, Any]] = queue.Queue()
        stop = threading.Event()

        def on_event(kind: str, payload: Any) -> bool:
            pieces.put((kind, payload))
            return stop.is_set()

        def work() -> None:
            try:
                pieces.put(("answer", pipeline.ask(request.question, k=k, filters=request.filters, history=turns,
                                                   on_event=on_event)))
            except Exception as exc:  # noqa: BLE001 - raised in the reader's thread
                pieces.put(("error", exc))

        threading.Thread(target=work, name="citerag-answer", daemon=True).start()
        try:
            while True:
                kind, payload = pieces.get()
                if kind == "passages":
                    yield StreamEvent("passages", [PassageOut.of(p) for p in payload])
                elif kind == "evidence":
                    yield StreamEvent("evidence", [EvidenceOut.of(e) for e in payload])
                elif kind == "token":
                    yield StreamEvent("token", payload)
                elif kind == "answer":
                    if self.observe is not None:
                        self.observe(payload)
                    yield StreamEvent("answer", AskResponse.of(payload))
                    return
                elif kind == "error":
                    raise payload
                # "question" (the standalone question): the answer's question_used says it
        finally:
            stop.set()  # also when the reader stops early: the model stops at its next token


def distinct(docs: list[Document]) -> list[Document]:
    """``docs`` with repeats of the same document dropped (the first place of each id kept).

    Raises:
        InvalidRequest: an id stands for two different documents (at the second one's ``id``).
    """
    first: dict[str, int] = {}
    for position, doc in enumerate(docs):
        if doc.doc_id in first and docs[first[doc.doc_id]] != doc:
            raise InvalidRequest.at(
                [position, "id"], f"id {doc.doc_id!r} is also item {first[doc.doc_id]} with other content; ids must be unique"
            )
        first.setdefault(doc.doc_id, position)
    return list({d.doc_id: d for d in docs}.values())


def _valid(model: type[SearchRequest] | type[AskRequest], **fields: Any) -> Any:
    """``model`` made from ``fields`` (None values left to their defaults).

    Raises:
        InvalidRequest: a field the HTTP API would refuse, with its message.
    """
    try:
        return model(**{name: value for name, value in fields.items() if value is not None})
    except ValidationError as exc:
        raise InvalidRequest.of(exc) from None


def _settings(index_dir: str | Path | None, settings: Settings | None) -> Settings:
    from citerag.service.settings import Settings

    if settings is None:
        return Settings(index_dir=Path(index_dir)) if index_dir is not None else Settings()
    return settings.model_copy(update={"index_dir": Path(index_dir)}) if index_dir is not None else settings


def _once(load: Callable[[], AnswerPipeline]) -> Callable[[], AnswerPipeline]:
    """``load``, called at most once (the first caller loads, the others wait for it)."""
    lock = threading.Lock()
    loaded: list[AnswerPipeline] = []

    def get() -> AnswerPipeline:
        with lock:
            if not loaded:
                loaded.append(load())
            return loaded[0]

    return get
